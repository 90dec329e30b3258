//! The read path's premise, checked on the real file system: a shared read-only mapping of a
//! preallocated segment, whose pages were already read (and so cached) as zeros, shows the
//! bytes of a later O_DIRECT write once that write completes.

mod common;

use std::rc::Rc;

use common::*;
use router::{FragmentId, ShardId, ShardRange};
use storage::format::{SegmentHeader, SegmentKind};
use storage::segment::create_preallocated;
use storage::{DmaDisk, Fragment, FragmentOptions, WriteBatch};

/// The header of segment 0 of fragment 1.
fn test_header(salt: u64) -> SegmentHeader {
    SegmentHeader {
        fragment: 1,
        kind: SegmentKind::Normal,
        seq: 0,
        generation: 0,
        salt,
        lsn_through: 0,
    }
}

// Checks the mapping sees direct writes at several offsets, after faulting the zero pages in.
#[test]
fn mapping_sees_direct_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let header = test_header(42);
        let disk = Rc::new(DmaDisk);
        let (seg, file) =
            create_preallocated(&*disk, &path, header, 1 << 20).await.expect("create");
        let before: u64 = seg.bytes().iter().map(|&b| u64::from(b)).sum();
        assert_eq!(before, u64::from(seg.bytes()[..64].iter().map(|&b| u32::from(b)).sum::<u32>()));
        for (fill, offset) in [(0xA1u8, 4096u64), (0xA2, 8192), (0xA3, 65536), (0xA4, 1 << 19)] {
            let mut buf = file.alloc(4096);
            buf.as_bytes_mut().fill(fill);
            file.write_at(buf, offset).await.expect("write");
            let at = usize::try_from(offset).expect("offset");
            assert!(seg.bytes()[at..at + 4096].iter().all(|&b| b == fill), "offset {offset}");
        }
        file.close().await.expect("close");
    });
}

/// Pages of the segment file at `path` in the page cache from byte `from` on.
fn cached_pages_from(path: &std::path::Path, from: u64) -> usize {
    let file = std::fs::File::open(path).expect("open segment");
    storage::pagecache::cached_pages(&file, from).expect("mincore")
}

fn only_segment(dir: &std::path::Path) -> std::path::PathBuf {
    let segs: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    assert_eq!(segs.len(), 1, "{segs:?}");
    segs[0].clone()
}

// Reads of the active segment must not bring its zeroed blocks ahead of the tail into the page
// cache (a later chunk's direct write over cached pages goes to an io-wq thread and shoots
// down TLBs), and neither may reopening it (recovery reads the file through its mapping). With
// the device's read-ahead (8 MiB on the dev machine) a fault on the file's mapping reads around
// itself, so without the active segment staged in memory and the drop after recovery,
// megabytes past the records would be cached.
#[test]
fn active_segment_reads_leave_the_blocks_ahead_uncached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let options = || FragmentOptions {
            segment_bytes: 16 << 20,
            compact_dead_bytes_min: u64::MAX,
            ..FragmentOptions::default()
        };
        let open = || Fragment::open(&path, FragmentId::new(1), ShardRange::ALL, options());
        let f = open().await.expect("open");
        let ids: Vec<String> = (0..32).map(|i| format!("d{i}")).collect();
        for id in &ids {
            let doc = serde_json::json!({ "id": id, "pad": "p".repeat(1000) });
            let batch = WriteBatch::new().put("c", id, ShardId::from_u64_mod(7), None, doc);
            f.apply(batch).await.expect("apply");
        }
        // 32 chunks of 4 KiB after the 4 KiB header (132 KiB): everything past 256 KiB is zeros.
        for id in &ids {
            assert!(f.get("c", id).is_some(), "{id}");
        }
        let seg = only_segment(&path);
        assert_eq!(cached_pages_from(&seg, 256 << 10), 0, "after reads");
        f.close().await;
        let f = open().await.expect("reopen");
        for id in &ids {
            assert!(f.get("c", id).is_some(), "{id} after reopen");
        }
        assert_eq!(cached_pages_from(&seg, 256 << 10), 0, "after reopen and reads");
        f.close().await;
    });
}

// The active segment's staged copy: a chunk staged is invisible until made readable, then read
// from memory; sealing puts the file's mapping at the same address, so a slice taken before
// the seal still holds the same bytes, which are the file's.
#[test]
fn staged_segment_seals_onto_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let header = test_header(7);
        let (seg, file) =
            create_preallocated(&DmaDisk, &path, header, 1 << 20).await.expect("create");
        assert!(!seg.is_staged());
        seg.stage(4096).expect("stage");
        assert!(seg.is_staged());
        assert_eq!(seg.bytes().len(), 4096, "only the durable prefix is readable");
        let mut buf = file.alloc(8192);
        buf.as_bytes_mut().iter_mut().zip((0..=250u8).cycle()).for_each(|(b, v)| *b = v);
        seg.stage_chunk(4096, buf.as_bytes());
        let staged = buf.as_bytes().to_vec();
        file.write_at(buf, 4096).await.expect("write");
        assert_eq!(seg.bytes().len(), 4096, "staged, not yet readable");
        seg.set_readable(4096 + 8192);
        let before = seg.bytes();
        assert_eq!(&before[4096..], &staged[..]);
        seg.seal();
        assert!(!seg.is_staged());
        assert_eq!(seg.bytes().len(), 1 << 20, "sealed: the whole file");
        assert_eq!(seg.bytes().as_ptr(), before.as_ptr(), "same address");
        assert_eq!(&before[4096..], &staged[..], "a slice from before the seal");
        let on_disk = std::fs::read(seg.path()).expect("read file");
        assert_eq!(&on_disk[..4096 + 8192], &seg.bytes()[..4096 + 8192]);
        assert!(seg.bytes()[4096 + 8192..].iter().all(|&b| b == 0));
        file.close().await.expect("close");
    });
}

/// The `VmFlags` line of the mapping of this process that holds `addr` (`/proc/self/smaps`).
fn vm_flags_at(addr: usize) -> String {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
        if let Some((start, end)) = range
            && let (Ok(start), Ok(end)) =
                (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
        {
            inside = (start..end).contains(&addr);
        } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
            return flags.trim().to_owned();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

// The staged range is advised huge pages (`storage::hugepages`: point reads), the advice moves
// with the pages to the next segment at a roll, and a sealed segment's file mapping has none.
#[test]
fn staged_segments_are_advised_huge_pages() {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        println!("skipped: this kernel has no transparent huge pages, so no advice to check");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let huge = |seg: &storage::segment::Segment| {
            vm_flags_at(seg.bytes().as_ptr() as usize).split(' ').any(|f| f == "hg")
        };
        let (old, old_file) =
            create_preallocated(&DmaDisk, &path, test_header(7), 4 << 20).await.expect("create");
        assert!(!huge(&old), "a file mapping");
        old.stage(4096).expect("stage");
        assert!(huge(&old), "staged");
        let next = SegmentHeader { seq: 1, ..test_header(8) };
        let (new, new_file) =
            create_preallocated(&DmaDisk, &path, next, 4 << 20).await.expect("create");
        assert!(new.take_staging_from(&old), "the pages move on");
        assert!(huge(&new), "staged with the pages handed on");
        assert!(!huge(&old), "sealed onto its file");
        new.seal();
        assert!(!huge(&new), "sealed onto its file");
        old_file.close().await.expect("close");
        new_file.close().await.expect("close");
    });
}

// A staged segment's pages are backed ahead of the log by the stager thread, in 2 MiB steps,
// until 8 MiB past the last chunk staged, and no further (`Segment::populate_ahead`).
#[test]
fn staged_pages_are_backed_ahead_of_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        const MIB: usize = 1 << 20;
        let (seg, file) =
            create_preallocated(&DmaDisk, &path, test_header(7), 16 << 20).await.expect("create");
        seg.stage(4096).expect("stage");
        let buf = file.alloc(4096);
        // Each chunk staged starts at most one job: stage enough to reach the end of the run.
        for k in 1..=8u64 {
            seg.stage_chunk(4096 * k, buf.as_bytes());
            storage::segment::wait_for_stager();
        }
        assert_eq!(seg.populated_through(), 10 * MIB, "the 2 MiB step past 8 MiB ahead");
        let base = seg.bytes().as_ptr();
        assert_eq!(
            storage::pagecache::resident_pages(base, 10 * MIB).expect("mincore"),
            10 * MIB / 4096,
            "backed ahead"
        );
        // SAFETY: 10 MiB is inside the 16 MiB range.
        let rest = unsafe { base.add(10 * MIB) };
        assert_eq!(
            storage::pagecache::resident_pages(rest, 6 * MIB).expect("mincore"),
            0,
            "nothing past that"
        );
        file.close().await.expect("close");
    });
}

/// The `Cpus_allowed_list` of thread `tid` of this process.
fn cpus_allowed(tid: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).expect("cpus line");
    line.split_whitespace().nth(1).unwrap_or_default().to_owned()
}

// The stager thread starts on the executor that first stages a chunk; on a pinned executor it
// still runs on the process's CPUs, not on that executor's one.
#[test]
fn the_stager_is_not_pinned_with_its_executor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(0))
        .io_memory(1 << 20)
        .spawn(move || async move {
            let (seg, file) = create_preallocated(&DmaDisk, &path, test_header(7), 4 << 20)
                .await
                .expect("create");
            seg.stage(4096).expect("stage");
            seg.stage_chunk(4096, file.alloc(4096).as_bytes());
            storage::segment::wait_for_stager();
            file.close().await.expect("close");
        })
        .expect("executor")
        .join()
        .expect("join");
    let tasks = std::fs::read_dir("/proc/self/task").expect("tasks");
    let stager = tasks
        .filter_map(|t| t.ok().map(|t| t.file_name().to_string_lossy().into_owned()))
        .find(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .is_ok_and(|c| c.trim() == "tessera-stager")
        })
        .expect("a stager thread");
    let main = std::process::id().to_string();
    assert_eq!(cpus_allowed(&stager), cpus_allowed(&main));
}

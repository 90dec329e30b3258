//! The read path's premise, checked on the real file system: a shared read-only mapping of a
//! preallocated segment, whose pages were already read (and so cached) as zeros, shows the
//! bytes of a later O_DIRECT write once that write completes.

mod common;

use std::rc::Rc;

use common::*;
use storage::DmaDisk;
use storage::format::{SegmentHeader, SegmentKind};
use storage::segment::create_preallocated;

// Checks the mapping sees direct writes at several offsets, after faulting the zero pages in.
#[test]
fn mapping_sees_direct_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let header = SegmentHeader {
            fragment: 1,
            kind: SegmentKind::Normal,
            seq: 0,
            generation: 0,
            salt: 42,
            lsn_through: 0,
        };
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

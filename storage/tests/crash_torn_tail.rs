//! Torn tails: the last record of the log cut short at every byte offset (the bytes after the
//! cut read as zeros, as an interrupted write into a preallocated segment leaves them).
//! After each cut, reopening must succeed, count one torn tail, drop only the cut record, keep
//! every earlier one, and accept new writes that survive another reopen.

mod common;

use common::*;
use serde_json::json;

const SEGMENT: u64 = 64 << 10;

// Checks every cut position inside the last chunk: header, frame header, payload, padding.
#[test]
fn torn_last_record_at_every_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        for i in 0..4 {
            f.apply(put("c", &format!("d{i}"), json!({"i": i, "s": "abcdefgh"})))
                .await
                .expect("put");
        }
        f.close().await;
        let files = segment_files(&path);
        assert_eq!(files.len(), 1);
        let seg = files[0].clone();
        let pristine = std::fs::read(&seg).expect("read");
        let layout = record_layout(&seg);
        let (chunk, offset, len) = *layout.last().expect("records");
        let end = frame_end(offset, len);
        let mut cuts = 0;
        for cut in chunk..end {
            if pristine[cut..end].iter().all(|&b| b == 0) {
                continue; // Cutting zeros changes nothing.
            }
            let mut bytes = pristine.clone();
            bytes[cut..end].fill(0);
            std::fs::write(&seg, &bytes).expect("write cut");
            let f = open(&path, options(SEGMENT)).await;
            let stats = f.stats();
            assert_eq!(stats.torn_tails, u64::from(cut > chunk), "cut at {cut}");
            assert_eq!(stats.docs, 3, "cut at {cut}");
            assert!(f.get("c", "d3").is_none(), "cut at {cut}");
            for i in 0..3 {
                assert!(f.get("c", &format!("d{i}")).is_some(), "cut at {cut}: d{i} lost");
            }
            f.apply(put("c", "after", json!("new"))).await.expect("write after truncation");
            f.close().await;
            let f = open(&path, options(SEGMENT)).await;
            assert_eq!(f.stats().torn_tails, 0, "the torn window was cleaned");
            assert!(f.get("c", "after").is_some());
            f.close().await;
            cuts += 1;
        }
        assert!(cuts > 40, "the record spans many offsets ({cuts})");
    });
}

// Checks the torn-tail branch is the one taken (cov_mark), exactly for a partial chunk.
#[test]
fn torn_tail_is_counted_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        f.apply(put("c", "a", json!(1))).await.expect("put");
        f.apply(put("c", "b", json!(2))).await.expect("put");
        f.close().await;
        let seg = segment_files(&path)[0].clone();
        let (_, offset, len) = *record_layout(&seg).last().expect("records");
        let mut bytes = std::fs::read(&seg).expect("read");
        bytes[offset + len / 2..frame_end(offset, len)].fill(0);
        std::fs::write(&seg, &bytes).expect("write");
        cov_mark::check!(torn_tail_truncated);
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.stats().torn_tails, 1);
        assert!(f.get("c", "a").is_some());
        assert!(f.get("c", "b").is_none());
        f.close().await;
    });
}

// Two chunks in flight at a crash (the log starts a chunk's write while the previous chunk's
// fdatasync runs): the first is cut at every offset while the second reached the disk whole,
// or is cut too. Both are one torn tail: only the records before them stay, and the cleaned
// window takes new writes that survive another reopen.
#[test]
fn torn_chunk_before_the_last_at_every_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        for i in 0..5 {
            f.apply(put("c", &format!("d{i}"), json!({"i": i, "s": "abcdefgh"})))
                .await
                .expect("put");
        }
        f.close().await;
        let seg = segment_files(&path)[0].clone();
        let pristine = std::fs::read(&seg).expect("read");
        let layout = record_layout(&seg);
        let (chunk, offset, len) = layout[3];
        let end = frame_end(offset, len);
        let (_, last_offset, last_len) = layout[4];
        let mut cuts = 0;
        for cut in chunk..end {
            if pristine[cut..end].iter().all(|&b| b == 0) {
                continue;
            }
            for cut_last_too in [false, true] {
                let mut bytes = pristine.clone();
                bytes[cut..end].fill(0);
                if cut_last_too {
                    bytes[last_offset + last_len / 2..frame_end(last_offset, last_len)].fill(0);
                }
                std::fs::write(&seg, &bytes).expect("write cut");
                let f = open(&path, options(SEGMENT)).await;
                let stats = f.stats();
                let what = format!("cut at {cut}, last cut too: {cut_last_too}");
                assert_eq!(stats.torn_tails, 1, "{what}");
                assert_eq!(stats.docs, 3, "{what}");
                assert!(f.get("c", "d3").is_none() && f.get("c", "d4").is_none(), "{what}");
                for i in 0..3 {
                    assert!(f.get("c", &format!("d{i}")).is_some(), "{what}: d{i} lost");
                }
                f.apply(put("c", "after", json!("new"))).await.expect("write after truncation");
                f.close().await;
                let f = open(&path, options(SEGMENT)).await;
                assert_eq!(f.stats().torn_tails, 0, "{what}: the torn window was cleaned");
                assert_eq!(f.stats().docs, 4, "{what}");
                assert!(f.get("c", "after").is_some(), "{what}");
                f.close().await;
                cuts += 1;
            }
        }
        assert!(cuts > 80, "the record spans many offsets ({cuts})");
    });
}

// A valid chunk further than one maximal chunk after a damaged spot cannot be the second of
// two chunks in flight: open fails with Corruption at the damaged spot, with or without other
// damage there.
#[test]
fn valid_chunk_past_one_chunk_after_the_tail_is_corruption() {
    const BIG_SEGMENT: u64 = 16 << 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(BIG_SEGMENT)).await;
        for i in 0..3 {
            f.apply(put("c", &format!("d{i}"), json!({"i": i}))).await.expect("put");
        }
        f.close().await;
        let seg = segment_files(&path)[0].clone();
        let pristine = std::fs::read(&seg).expect("read");
        let layout = record_layout(&seg);
        let (chunk2, offset2, _) = layout[1];
        let (chunk3, _, _) = layout[2];
        let block = usize::try_from(storage::limits::BLOCK_BYTES).expect("small");
        let far = chunk3 + storage::limits::GROUP_COMMIT_BATCH_BYTES_MAX + 2 * block;
        for damage_before in [false, true] {
            let mut bytes = pristine.clone();
            // Move the last chunk (one block) far away.
            let moved = bytes[chunk3..chunk3 + block].to_vec();
            bytes[chunk3..chunk3 + block].fill(0);
            bytes[far..far + block].copy_from_slice(&moved);
            let at = if damage_before {
                bytes[offset2] ^= 1;
                chunk2
            } else {
                chunk3
            };
            std::fs::write(&seg, &bytes).expect("write");
            let opts = options(BIG_SEGMENT);
            match storage::Fragment::open(&path, FRAGMENT, router::ShardRange::ALL, opts).await {
                Err(storage::OpenError::Corruption { offset, .. }) => {
                    assert_eq!(offset, at as u64, "damage before: {damage_before}");
                }
                Err(e) => panic!("unexpected error {e}"),
                Ok(f) => {
                    f.close().await;
                    panic!("opened despite a chunk past the torn window");
                }
            }
        }
        std::fs::write(&seg, &pristine).expect("restore");
        let f = open(&path, options(BIG_SEGMENT)).await;
        assert_eq!(f.stats().docs, 3);
        f.close().await;
    });
}

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

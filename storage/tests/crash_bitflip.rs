//! Bit flips over every byte of a record's chunk (chunk header, frame header, payload, padding)
//! and of the segment header. A flip before the tail is corruption: open fails naming the
//! segment and the chunk's offset. A flip in the last chunk is indistinguishable from a torn
//! write: that chunk is dropped and counted, earlier records stay.

mod common;

use common::*;
use serde_json::json;
use storage::OpenError;

const SEGMENT: u64 = 64 << 10;

async fn write_five(path: &std::path::Path) {
    let f = open(path, options(SEGMENT)).await;
    for i in 0..5 {
        f.apply(put("c", &format!("d{i}"), json!({"i": i, "tag": "bitflip"}))).await.expect("put");
    }
    f.close().await;
}

// Checks every byte of the middle chunk (through its frame's padding and a little of the zero
// padding after it): each flip makes open fail with Corruption at that chunk.
#[test]
fn flip_before_tail_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        write_five(&path).await;
        let seg = segment_files(&path)[0].clone();
        let pristine = std::fs::read(&seg).expect("read");
        let (chunk, offset, len) = record_layout(&seg)[2];
        for at in chunk..frame_end(offset, len) + 64 {
            let mut bytes = pristine.clone();
            bytes[at] ^= 1 << (at % 8);
            std::fs::write(&seg, &bytes).expect("write");
            let opts = options(SEGMENT);
            match storage::Fragment::open(&path, FRAGMENT, router::ShardRange::ALL, opts).await {
                Err(OpenError::Corruption { segment, offset: off, .. }) => {
                    assert_eq!(segment, seg, "flip at {at}");
                    assert_eq!(off, chunk as u64, "flip at {at}");
                }
                Err(e) => panic!("flip at {at}: unexpected error {e}"),
                Ok(f) => {
                    f.close().await;
                    panic!("flip at {at}: opened despite corruption");
                }
            }
        }
        std::fs::write(&seg, &pristine).expect("restore");
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.stats().docs, 5);
        f.close().await;
    });
}

// Checks every byte of the segment header: a flip in its 64 used bytes is corruption at 0.
#[test]
fn flip_in_segment_header_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        write_five(&path).await;
        let seg = segment_files(&path)[0].clone();
        let pristine = std::fs::read(&seg).expect("read");
        for at in 0..storage::format::SEGMENT_HEADER_USED_BYTES {
            let mut bytes = pristine.clone();
            bytes[at] ^= 0x10;
            std::fs::write(&seg, &bytes).expect("write");
            let opts = options(SEGMENT);
            let r = storage::Fragment::open(&path, FRAGMENT, router::ShardRange::ALL, opts).await;
            assert!(matches!(r, Err(OpenError::Corruption { offset: 0, .. })), "flip at {at}");
        }
        std::fs::write(&seg, &pristine).expect("restore");
    });
}

// Checks every byte of the last chunk: the chunk is dropped as a torn tail, the others stay.
#[test]
fn flip_in_last_chunk_is_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        write_five(&path).await;
        let seg = segment_files(&path)[0].clone();
        let pristine = std::fs::read(&seg).expect("read");
        let (chunk, offset, len) = *record_layout(&seg).last().expect("records");
        for at in chunk..frame_end(offset, len) {
            let mut bytes = pristine.clone();
            bytes[at] ^= 1 << (at % 8);
            std::fs::write(&seg, &bytes).expect("write");
            let f = open(&path, options(SEGMENT)).await;
            assert_eq!(f.stats().torn_tails, 1, "flip at {at}");
            assert_eq!(f.stats().docs, 4, "flip at {at}");
            assert!(f.get("c", "d4").is_none());
            f.close().await;
        }
    });
}

// Checks every byte of the second-to-last chunk (the first of two chunks in flight at a crash,
// the second of which reached the disk whole): both chunks are dropped as one torn tail, the
// earlier ones stay, and writes resume on a cleaned window.
#[test]
fn flip_in_second_to_last_chunk_is_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        write_five(&path).await;
        let seg = segment_files(&path)[0].clone();
        let pristine = std::fs::read(&seg).expect("read");
        let (chunk, offset, len) = record_layout(&seg)[3];
        for at in chunk..frame_end(offset, len) {
            let mut bytes = pristine.clone();
            bytes[at] ^= 1 << (at % 8);
            std::fs::write(&seg, &bytes).expect("write");
            let f = open(&path, options(SEGMENT)).await;
            assert_eq!(f.stats().torn_tails, 1, "flip at {at}");
            assert_eq!(f.stats().docs, 3, "flip at {at}");
            assert!(f.get("c", "d3").is_none() && f.get("c", "d4").is_none(), "flip at {at}");
            f.close().await;
        }
    });
}

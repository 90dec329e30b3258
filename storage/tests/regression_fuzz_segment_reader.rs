//! Replays the `segment_reader` fuzz corpus (seeds and any past findings) through the segment
//! reader, so CI checks it without cargo-fuzz. The valid seeds must read back their records.
//! `TESSERA_WRITE_FUZZ_SEEDS=1` regenerates the seeds from a real fragment.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::json;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/segment_reader")
}

fn write_seeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(64 << 10)).await;
        f.apply(put("c", "a", json!({"x": [1, 2.5, "s", null, true], "y": {"z": -3}})))
            .await
            .expect("put");
        let b = storage::WriteBatch::new().put("c", "b", shard_of("b"), None, json!("two")).delete(
            "c",
            "a",
            shard_of("a"),
            None,
        );
        f.apply(b).await.expect("batch");
        f.prepare(storage::TxId::new(5), put("c", "p", json!(5))).await.expect("prepare");
        f.commit_prepared(storage::TxId::new(5)).await.expect("commit");
        f.close().await;
    });
    let seg = std::fs::read(&segment_files(dir.path())[0]).expect("segment");
    std::fs::create_dir_all(corpus()).expect("corpus dir");
    // Header block plus the four chunks; the rest of the segment is zeros.
    std::fs::write(corpus().join("seed-four-chunks"), &seg[..5 * 4096]).expect("seed");
    std::fs::write(corpus().join("seed-one-chunk"), &seg[..2 * 4096]).expect("seed");
    std::fs::write(corpus().join("seed-header-only"), &seg[..64]).expect("seed");
}

// Checks every corpus file reads without panicking and the valid seeds yield their records.
#[test]
fn corpus_replays() {
    if std::env::var("TESSERA_WRITE_FUZZ_SEEDS").is_ok() {
        write_seeds();
    }
    let mut files = 0;
    for entry in std::fs::read_dir(corpus()).expect("corpus dir") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read");
        let result = storage::format::read_segment_unaligned(&bytes);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if name == "seed-four-chunks" {
            let (records, end) = result.expect("valid seed");
            assert_eq!(records, 4);
            assert!(end.damage.is_none());
        }
        if name == "seed-one-chunk" {
            assert_eq!(result.expect("valid seed").0, 1);
        }
        files += 1;
    }
    assert!(files >= 3, "seeds present");
}

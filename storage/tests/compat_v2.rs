//! Format version 2 fixture: a segment written by this version (a put, an autocommit batch
//! logged in two parts and its Commit record, a prepare and its commit) must keep opening with
//! the same content. `write_version_2_fixture` (ignored) wrote it; a deliberate format change
//! bumps FORMAT_VERSION and adds a new fixture next to this one.

mod common;

use common::*;
use serde_json::json;
use storage::{TxId, WriteBatch};

const SEGMENT: u64 = 64 << 10;
const FILE: &str = "0000000000000000-0000.seg";

fn fixture() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2").join(FILE)
}

fn two_parts() -> WriteBatch {
    // Each document is over half of what one part of a 64 KiB segment holds.
    let mut b = WriteBatch::new();
    for id in ["b1", "b2"] {
        b = b.put("c", id, shard_of(id), None, json!({"id": id, "pad": "p".repeat(16_000)}));
    }
    b
}

// Checks the v2 fixture opens, reads back its documents, and accepts new writes after them.
#[test]
fn reads_version_2_fixture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    std::fs::copy(fixture(), path.join(FILE)).expect("copy fixture");
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        let stats = f.stats();
        assert_eq!(stats.lsn_durable, 6, "put, two parts, commit, prepare, commit");
        assert_eq!(stats.docs, 4);
        assert_eq!(stats.torn_tails, 0);
        assert_eq!(stats.segments, 1);
        assert_eq!(f.get("c", "A").map(|d| d.doc().to_serde()), Some(json!(1)));
        for id in ["b1", "b2"] {
            assert_eq!(f.get("c", id).map(|d| d.doc().to_serde()["id"].clone()), Some(json!(id)));
        }
        assert_eq!(f.get("c", "p").map(|d| d.doc().to_serde()), Some(json!(5)));
        assert!(f.in_doubt().is_empty());
        f.apply(put("c", "new", json!({"after": "fixture"}))).await.expect("write");
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.stats().docs, 5);
        f.close().await;
    });
}

// Writes the fixture (run by hand: `cargo test -p storage --test compat_v2 -- --ignored`),
// trimmed to the blocks in use.
#[test]
#[ignore = "writes tests/fixtures/v2; run by hand after a deliberate format change"]
fn write_version_2_fixture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let used = run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        f.apply(put("c", "a", json!(1))).await.expect("put");
        f.apply(two_parts()).await.expect("batch in parts");
        f.prepare(TxId::new(77), put("c", "p", json!(5))).await.expect("prepare");
        f.commit_prepared(TxId::new(77)).await.expect("commit");
        assert_eq!(f.stats().lsn_durable, 6);
        f.close().await;
        let bytes = std::fs::read(path.join(FILE)).expect("read");
        let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        bytes[..end.next_multiple_of(4096)].to_vec()
    });
    std::fs::create_dir_all(fixture().parent().expect("dir")).expect("mkdir");
    std::fs::write(fixture(), used).expect("write fixture");
}

//! Format version 1 fixture: a segment written by this version (a put, a batch with a delete,
//! a prepare and its commit) must keep opening with the same content, so an accidental change
//! to the archived types or the framing fails here. A deliberate change bumps FORMAT_VERSION
//! and adds a new fixture next to this one.

mod common;

use common::*;
use serde_json::json;

// Checks the v1 fixture opens, reads back its documents, and accepts new writes after them.
#[test]
fn reads_version_1_fixture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v1/0000000000000000-0000.seg");
    std::fs::copy(&fixture, path.join("0000000000000000-0000.seg")).expect("copy fixture");
    run(move || async move {
        let f = open(&path, options(64 << 10)).await;
        let stats = f.stats();
        assert_eq!(stats.lsn_durable, 4);
        assert_eq!(stats.docs, 2);
        assert_eq!(stats.torn_tails, 0);
        assert!(f.get("c", "a").is_none(), "deleted by the batch");
        assert_eq!(f.get("c", "B").map(|d| d.doc().to_serde()), Some(json!("two")));
        assert_eq!(f.get("c", "p").map(|d| d.doc().to_serde()), Some(json!(5)));
        assert!(f.in_doubt().is_empty());
        // The version-1 segment is sealed: new records go to a segment of this version.
        assert_eq!(f.stats().segments, 2);
        f.apply(put("c", "new", json!({"after": "fixture"}))).await.expect("write");
        f.close().await;
        let f = open(&path, options(64 << 10)).await;
        assert_eq!(f.stats().docs, 3);
        assert_eq!(f.stats().segments, 2);
        f.close().await;
        let mut versions: Vec<u32> = std::fs::read_dir(&path)
            .expect("list")
            .filter_map(|e| {
                let p = e.ok()?.path();
                p.extension().is_some_and(|x| x == "seg").then_some(p)
            })
            .map(|p| {
                let bytes = std::fs::read(p).expect("read");
                storage::format::SegmentHeader::decode(&bytes).expect("header");
                storage::format::SegmentHeader::version_of(&bytes).expect("version")
            })
            .collect();
        versions.sort_unstable();
        assert_eq!(versions, vec![1, storage::format::FORMAT_VERSION]);
    });
}

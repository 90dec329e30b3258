//! Compaction behaviour: dead bytes are reclaimed, live documents and in-doubt transactions
//! survive it and a reopen, readers holding a document keep it, writers keep going during it,
//! and the dead-bytes threshold starts it in the background.

mod common;

use std::rc::Rc;

use common::*;
use serde_json::json;
use storage::{FragmentOptions, TxId};

const SEGMENT: u64 = 64 << 10;

async fn overwrite(f: &storage::Fragment, docs: usize, rounds: usize) {
    for r in 0..rounds {
        for d in 0..docs {
            f.apply(put("c", &format!("d{d}"), json!({"r": r, "pad": "q".repeat(200)})))
                .await
                .expect("put");
        }
    }
}

async fn check_latest(f: &storage::Fragment, docs: usize, round: usize) {
    for d in 0..docs {
        let doc = f.get("c", &format!("d{d}")).unwrap_or_else(|| panic!("d{d} missing"));
        assert_eq!(doc.doc().to_serde()["r"], json!(round), "d{d}");
    }
}

// Checks overwritten versions and tombstones go away, live data stays, across a reopen.
#[test]
fn compaction_reclaims_dead_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        overwrite(&f, 50, 6).await;
        f.apply(put("c", "gone", json!(1))).await.expect("put");
        f.apply(storage::WriteBatch::new().delete("c", "gone", shard_of("gone"), None))
            .await
            .expect("delete");
        let before = f.stats();
        assert!(before.segments > 3);
        let stats = f.compact().await.expect("compact");
        assert!(stats.segments_removed >= 3);
        let after = f.stats();
        assert!(after.dead_bytes < before.dead_bytes / 4, "{before:?} -> {after:?}");
        assert_eq!(after.docs, 50);
        assert!(after.live_bytes + after.dead_bytes <= before.live_bytes + before.dead_bytes);
        check_latest(&f, 50, 5).await;
        assert!(f.get("c", "gone").is_none());
        f.close().await;
        assert!(segment_files(&path).len() <= 2, "{:?}", segment_files(&path));
        let f = open(&path, options(SEGMENT)).await;
        check_latest(&f, 50, 5).await;
        assert!(f.get("c", "gone").is_none());
        assert_eq!(f.stats().docs, 50);
        // Writing on and compacting again stacks generations correctly.
        overwrite(&f, 50, 3).await;
        f.compact().await.expect("second compaction");
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        check_latest(&f, 50, 2).await;
        f.close().await;
    });
}

// Checks a DocRef taken before compaction still reads its document after the file is removed.
#[test]
fn docref_survives_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        overwrite(&f, 30, 3).await;
        let held = f.get("c", "d7").expect("present");
        f.compact().await.expect("compact");
        assert_eq!(held.doc().to_serde()["r"], json!(2));
        assert_eq!(held.id(), "d7");
        drop(held);
        f.close().await;
    });
}

// Checks writers running during a compaction lose nothing and win over the compacted copies.
#[test]
fn writers_during_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = Rc::new(open(&path, options(SEGMENT)).await);
        overwrite(&f, 400, 2).await;
        let writer = {
            let f = f.clone();
            glommio::spawn_local(async move {
                for d in 0..400 {
                    f.apply(put("c", &format!("d{d}"), json!({"r": 99}))).await.expect("put");
                }
            })
        };
        let compaction = {
            let f = f.clone();
            glommio::spawn_local(async move { f.compact().await.expect("compact") })
        };
        compaction.await;
        writer.await;
        check_latest(&f, 400, 99).await;
        Rc::try_unwrap(f).expect("sole owner").close().await;
        let f = open(&path, options(SEGMENT)).await;
        check_latest(&f, 400, 99).await;
        f.close().await;
    });
}

// Checks an in-doubt prepared transaction survives compaction and a reopen, then commits.
#[test]
fn prepared_transaction_survives_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        f.prepare(TxId::new(9), put("t", "x", json!("prepared"))).await.expect("prepare");
        f.prepare(TxId::new(10), put("t", "y", json!("committed early"))).await.expect("prepare");
        f.commit_prepared(TxId::new(10)).await.expect("commit");
        overwrite(&f, 50, 4).await;
        f.compact().await.expect("compact");
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.in_doubt(), vec![TxId::new(9)]);
        assert!(f.get("t", "x").is_none());
        assert_eq!(f.get("t", "y").map(|d| d.doc().to_serde()), Some(json!("committed early")));
        f.commit_prepared(TxId::new(9)).await.expect("commit");
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.get("t", "x").map(|d| d.doc().to_serde()), Some(json!("prepared")));
        assert!(f.in_doubt().is_empty());
        f.close().await;
    });
}

// Checks the dead-bytes threshold starts a background compaction that leaves a compacted
// segment behind and the data intact.
#[test]
fn threshold_starts_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let opts = || FragmentOptions {
            segment_bytes: SEGMENT,
            compact_dead_bytes_min: 128 << 10,
            ..FragmentOptions::default()
        };
        let f = open(&path, opts()).await;
        overwrite(&f, 40, 12).await;
        f.close().await;
        let compacted = segment_files(&path).iter().any(|p| {
            !p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("-0000.seg"))
        });
        assert!(compacted, "a compacted segment exists: {:?}", segment_files(&path));
        let f = open(&path, opts()).await;
        check_latest(&f, 40, 11).await;
        f.close().await;
    });
}

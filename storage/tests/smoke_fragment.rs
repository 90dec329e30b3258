//! The fragment's public API end to end on the real disk: write, read in place, scan, conflict,
//! delete, prepare/commit/abort, reopen.

mod common;

use std::ops::ControlFlow;

use common::*;
use router::doc::DocValue;
use router::{ShardId, ShardRange};
use serde_json::json;
use storage::{AppendError, TxId, Version, WriteBatch};

// Checks that a put is readable in place right after `apply` returns, case-insensitively, with
// the original id case, and still after a reopen.
#[test]
fn put_get_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        let info = f
            .apply(put("users", "Users/1", json!({"name": "Ann", "age": 31})))
            .await
            .expect("apply");
        assert_eq!(info.versions.len(), 1);
        let doc = f.get("users", "users/1").expect("present");
        assert_eq!(doc.id(), "Users/1");
        assert_eq!(doc.version(), info.versions[0]);
        assert_eq!(doc.doc().field("name").and_then(|v| v.as_str()), Some("Ann"));
        assert_eq!(doc.doc().field("age").and_then(|v| v.as_i64()), Some(31));
        drop(doc);
        f.close().await;
        let f = open(&path, options(1 << 20)).await;
        let doc = f.get("users", "USERS/1").expect("present after reopen");
        assert_eq!(doc.doc().to_serde(), json!({"name": "Ann", "age": 31}));
        assert_eq!(f.version_of("users", "users/1"), Some(info.versions[0]));
        assert_eq!(f.stats().torn_tails, 0);
        drop(doc);
        f.close().await;
    });
}

// Checks optimistic concurrency: a stale expected version fails with Conflict and writes
// nothing of the batch; ABSENT means "must not exist".
#[test]
fn conflict_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        let v1 = f.apply(put("c", "a", json!(1))).await.expect("a").versions[0];
        let again = WriteBatch::new().put("c", "a", shard_of("a"), Some(Version::ABSENT), json!(2));
        assert!(matches!(f.apply(again).await, Err(AppendError::Conflict { .. })));
        let batch = WriteBatch::new().put("c", "b", shard_of("b"), None, json!("b")).put(
            "c",
            "a",
            shard_of("a"),
            Some(Version::new(v1.get() + 100)),
            json!(3),
        );
        assert!(matches!(f.apply(batch).await, Err(AppendError::Conflict { .. })));
        assert!(f.get("c", "b").is_none(), "no part of a conflicting batch is written");
        let ok = WriteBatch::new().put("c", "a", shard_of("a"), Some(v1), json!(4));
        let v2 = f.apply(ok).await.expect("matching version").versions[0];
        assert!(v2 > v1);
        let del = WriteBatch::new().delete("c", "a", shard_of("a"), Some(v2));
        f.apply(del).await.expect("delete");
        assert!(f.get("c", "a").is_none());
        assert_eq!(f.stats().docs, 0);
        f.close().await;
    });
}

// Checks scans return exactly the documents of the range, in shard order, and stop on Break.
#[test]
fn scan_by_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        for s in 0..20u32 {
            let shard = ShardId::new(s * 1000).expect("shard");
            let b = WriteBatch::new().put("k", &format!("doc{s}"), shard, None, json!({"s": s}));
            f.apply(b).await.expect("put");
        }
        f.apply(put("other", "x", json!(0))).await.expect("other collection");
        let range = ShardRange::new(5000, 10_000).expect("range");
        let mut seen = Vec::new();
        f.scan("k", range, |d| {
            seen.push(d.doc().field("s").and_then(|v| v.as_i64()).expect("s"));
            ControlFlow::Continue(())
        });
        assert_eq!(seen, vec![5, 6, 7, 8, 9]);
        let mut n = 0;
        f.scan("k", ShardRange::ALL, |_| {
            n += 1;
            if n == 3 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        });
        assert_eq!(n, 3);
        assert_eq!(f.collections(), vec!["k".to_owned(), "other".to_owned()]);
        assert_eq!(f.shard_stats(range).len(), 5);
        f.close().await;
    });
}

// Checks two-phase commit records: prepared writes are invisible and lock their documents,
// survive a reopen as in-doubt, then commit (visible) or abort (gone).
#[test]
fn prepare_commit_abort() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        f.prepare(TxId::new(1), put("t", "a", json!("A"))).await.expect("prepare 1");
        f.prepare(TxId::new(2), put("t", "b", json!("B"))).await.expect("prepare 2");
        assert!(f.get("t", "a").is_none());
        assert!(matches!(f.apply(put("t", "a", json!(0))).await, Err(AppendError::Locked { .. })));
        f.close().await;
        let f = open(&path, options(1 << 20)).await;
        assert_eq!(f.in_doubt(), vec![TxId::new(1), TxId::new(2)]);
        f.commit_prepared(TxId::new(1)).await.expect("commit");
        f.abort_prepared(TxId::new(2)).await.expect("abort");
        assert!(matches!(
            f.commit_prepared(TxId::new(2)).await,
            Err(AppendError::TxnUnknown { .. })
        ));
        assert_eq!(f.get("t", "a").map(|d| d.doc().to_serde()), Some(json!("A")));
        assert!(f.get("t", "b").is_none());
        f.apply(put("t", "b", json!("unlocked"))).await.expect("lock released");
        f.close().await;
        let f = open(&path, options(1 << 20)).await;
        assert!(f.in_doubt().is_empty());
        assert_eq!(f.get("t", "a").map(|d| d.doc().to_serde()), Some(json!("A")));
        assert_eq!(f.get("t", "b").map(|d| d.doc().to_serde()), Some(json!("unlocked")));
        f.close().await;
    });
}

// Checks that many concurrent writers on one executor all get acknowledged and share
// fdatasyncs (group commit), and that rolling over small segments loses nothing.
#[test]
fn concurrent_writers_roll_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = std::rc::Rc::new(open(&path, options(64 << 10)).await);
        let mut tasks = Vec::new();
        for w in 0..32 {
            let f = f.clone();
            tasks.push(glommio::spawn_local(async move {
                for i in 0..20 {
                    let id = format!("w{w}-{i}");
                    f.apply(put("c", &id, json!({"w": w, "i": i, "pad": "x".repeat(300)})))
                        .await
                        .expect("apply");
                }
            }));
        }
        for t in tasks {
            t.await;
        }
        let f = std::rc::Rc::try_unwrap(f).expect("sole owner");
        assert_eq!(f.stats().docs, 640);
        assert!(f.stats().segments > 2, "small segments rolled");
        f.close().await;
        // Spare segments prepared ahead of rolls are installed or removed, never left behind.
        let leftovers: Vec<_> = std::fs::read_dir(&path)
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let f = open(&path, options(64 << 10)).await;
        assert_eq!(f.stats().docs, 640);
        for w in 0..32 {
            for i in 0..20 {
                let d = f.get("c", &format!("w{w}-{i}")).expect("present");
                assert_eq!(d.doc().field("i").and_then(|v| v.as_i64()), Some(i));
            }
        }
        f.close().await;
    });
}

// Checks one directory has one owner: a second open fails with Locked until the first closes.
#[test]
fn second_open_is_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        let second =
            storage::Fragment::open(&path, FRAGMENT, router::ShardRange::ALL, options(1 << 20))
                .await;
        assert!(matches!(second, Err(storage::OpenError::Locked { .. })), "{second:?}");
        f.close().await;
        let again = open(&path, options(1 << 20)).await;
        again.close().await;
    });
}

// Checks a resumable scan visits every document of the range exactly once, in slices of 7,
// in the same order as one unbroken scan.
#[test]
fn scan_from_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        for i in 0..60u32 {
            let shard = ShardId::new(i % 9 * 100).expect("shard");
            let b = WriteBatch::new().put("k", &format!("Doc{i}"), shard, None, json!(i));
            f.apply(b).await.expect("put");
        }
        let range = ShardRange::new(100, 700).expect("range");
        let mut whole = Vec::new();
        f.scan("k", range, |d| {
            whole.push(d.id().to_owned());
            ControlFlow::Continue(())
        });
        let mut sliced = Vec::new();
        let mut cursor = None;
        loop {
            let mut n = 0;
            cursor = f.scan_from("k", range, cursor.as_ref(), |d| {
                sliced.push(d.id().to_owned());
                n += 1;
                if n == 7 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
            });
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(whole.len(), (0..60).filter(|i| (1..=6).contains(&(i % 9))).count());
        assert_eq!(sliced, whole);
        f.close().await;
    });
}

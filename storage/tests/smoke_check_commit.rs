//! The transaction pieces of the fragment API: check ops (validate, write nothing, lock in a
//! prepare) and commits that are visible as soon as they are queued.

mod common;

use common::*;
use serde_json::json;
use storage::{AppendError, TxId, Version, WriteBatch};

// Checks that a check op passes on the current version, fails with Conflict on a stale one or
// on a document that appeared, writes nothing either way, and that a checks-only batch logs
// nothing (the durable LSN does not move).
#[test]
fn check_validates_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        let v1 = f.apply(put("c", "a", json!(1))).await.expect("a").versions[0];
        let lsn = f.stats().lsn_durable;
        let ok = WriteBatch::new().check("c", "a", shard_of("a"), v1).check(
            "c",
            "b",
            shard_of("b"),
            Version::ABSENT,
        );
        f.apply(ok).await.expect("current versions pass");
        assert_eq!(f.stats().lsn_durable, lsn, "a checks-only batch is not logged");
        let stale = WriteBatch::new().put("c", "x", shard_of("x"), None, json!("x")).check(
            "c",
            "a",
            shard_of("a"),
            Version::new(v1.get() + 1),
        );
        assert!(matches!(f.apply(stale).await, Err(AppendError::Conflict { .. })));
        assert!(f.get("c", "x").is_none(), "a failed check writes nothing of its batch");
        f.apply(put("c", "b", json!(2))).await.expect("b");
        let absent = WriteBatch::new().check("c", "b", shard_of("b"), Version::ABSENT);
        assert!(matches!(f.apply(absent).await, Err(AppendError::Conflict { .. })));
        // A check next to a write of another document: one record, the write applied.
        let mixed = WriteBatch::new().check("c", "a", shard_of("a"), v1).put(
            "c",
            "y",
            shard_of("y"),
            Some(Version::ABSENT),
            json!("y"),
        );
        let info = f.apply(mixed).await.expect("mixed");
        assert_eq!(f.version_of("c", "y"), Some(Version::new(info.lsn.get())));
        assert_eq!(f.get("c", "a").map(|d| d.version()), Some(v1), "checked doc untouched");
        f.close().await;
        // The checks left nothing in the log: reopen sees a, b, y only.
        let f = open(&path, options(1 << 20)).await;
        assert_eq!(f.stats().docs, 3);
        f.close().await;
    });
}

// Checks that a prepare's checks lock the documents read until commit or abort (writers and
// other checks get Locked), that a check of a locked document fails, and that the read locks
// are released by both outcomes and are not recovered after a restart (only the writes are).
#[test]
fn prepared_checks_hold_read_locks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        let va = f.apply(put("c", "a", json!(1))).await.expect("a").versions[0];
        let tx = WriteBatch::new().check("c", "a", shard_of("a"), va).put(
            "c",
            "b",
            shard_of("b"),
            Some(Version::ABSENT),
            json!("b"),
        );
        f.prepare(TxId::new(1), tx).await.expect("prepare");
        assert!(matches!(f.apply(put("c", "a", json!(2))).await, Err(AppendError::Locked { .. })));
        let check = WriteBatch::new().check("c", "b", shard_of("b"), Version::ABSENT);
        assert!(matches!(f.apply(check).await, Err(AppendError::Locked { .. })));
        f.commit_prepared(TxId::new(1)).await.expect("commit");
        f.apply(put("c", "a", json!(3))).await.expect("read lock released by commit");
        // A prepare of checks only is allowed and logged, and abort releases its locks.
        let va = f.version_of("c", "a").expect("a");
        let reads = WriteBatch::new().check("c", "a", shard_of("a"), va);
        f.prepare(TxId::new(2), reads).await.expect("prepare of checks only");
        assert!(matches!(f.apply(put("c", "a", json!(4))).await, Err(AppendError::Locked { .. })));
        f.abort_prepared(TxId::new(2)).await.expect("abort");
        f.apply(put("c", "a", json!(5))).await.expect("read lock released by abort");
        let va = f.version_of("c", "a").expect("a");
        let reads = WriteBatch::new().check("c", "a", shard_of("a"), va);
        f.prepare(TxId::new(3), reads).await.expect("prepare 3");
        f.close().await;
        let f = open(&path, options(1 << 20)).await;
        assert_eq!(f.in_doubt(), vec![TxId::new(3)]);
        f.apply(put("c", "a", json!(6))).await.expect("read locks are not recovered");
        f.abort_prepared(TxId::new(3)).await.expect("abort after restart");
        f.close().await;
    });
}

// Checks that `commit_prepared_visible` makes the writes readable (and writable on top) before
// the Commit record is durable, that the record becomes durable on `wait`, and that a crash
// before that leaves the transaction in doubt with its writes invisible until it is committed
// again from the decision.
#[test]
fn commit_visible_on_enqueue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        f.prepare(TxId::new(7), put("c", "a", json!("A"))).await.expect("prepare");
        assert!(f.get("c", "a").is_none());
        let durable = f.commit_prepared_visible(TxId::new(7)).await.expect("commit");
        // No await between queueing and this read: nothing can have been flushed yet.
        let version = f.get("c", "a").map(|d| d.version()).expect("visible before durable");
        assert!(f.in_doubt().is_empty());
        assert!(matches!(
            f.commit_prepared(TxId::new(7)).await,
            Err(AppendError::TxnUnknown { .. })
        ));
        let next = WriteBatch::new().put("c", "a", shard_of("a"), Some(version), json!("A2"));
        f.apply(next).await.expect("write on top of the visible commit");
        durable.wait().await.expect("durable");
        f.close().await;
        let f = open(&path, options(1 << 20)).await;
        assert!(f.in_doubt().is_empty());
        assert_eq!(f.get("c", "a").map(|d| d.doc().to_serde()), Some(json!("A2")));
        f.close().await;
    });
}

// Checks `prepared_doc` reads a prepared transaction's document from its durable Prepare
// record, in doubt after a reopen too, and answers `None` for a delete, another document,
// another transaction and once the transaction is committed.
#[test]
fn prepared_doc_reads_an_in_doubt_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        f.apply(put("c", "gone", json!(0))).await.expect("gone");
        let tx = WriteBatch::new()
            .put("c", "A", shard_of("A"), Some(Version::ABSENT), json!({"n": [1, 2]}))
            .delete("c", "gone", shard_of("gone"), None);
        f.prepare(TxId::new(4), tx).await.expect("prepare");
        assert_eq!(f.prepared_doc(TxId::new(4), "c", "a"), Some(json!({"n": [1, 2]})));
        assert_eq!(f.prepared_doc(TxId::new(4), "c", "gone"), None);
        assert_eq!(f.prepared_doc(TxId::new(4), "c", "b"), None);
        assert_eq!(f.prepared_doc(TxId::new(5), "c", "A"), None);
        f.close().await;
        let f = open(&path, options(1 << 20)).await;
        assert_eq!(f.in_doubt(), vec![TxId::new(4)]);
        assert_eq!(f.prepared_doc(TxId::new(4), "c", "A"), Some(json!({"n": [1, 2]})));
        f.commit_prepared(TxId::new(4)).await.expect("commit");
        assert_eq!(f.prepared_doc(TxId::new(4), "c", "A"), None);
        assert!(f.get("c", "a").is_some());
        f.close().await;
    });
}

// Checks `prepared_state_or_fence`: a durable Prepare reads `Durable`; an id never prepared
// reads `Absent` and is refused afterwards (`TxnFenced`, nothing written or locked); a
// committed one reads `Absent` too.
#[test]
fn prepared_state_or_fence_refuses_a_late_prepare() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        f.prepare(TxId::new(1), put("c", "a", json!(1))).await.expect("prepare");
        assert_eq!(f.prepared_state_or_fence(TxId::new(1)), storage::PreparedState::Durable);
        assert_eq!(f.prepared_state_or_fence(TxId::new(2)), storage::PreparedState::Absent);
        let late = f.prepare(TxId::new(2), put("c", "b", json!(2))).await;
        assert!(matches!(late, Err(AppendError::TxnFenced { .. })), "{late:?}");
        f.apply(put("c", "b", json!(3))).await.expect("b is not locked");
        f.commit_prepared(TxId::new(1)).await.expect("commit");
        assert_eq!(f.prepared_state_or_fence(TxId::new(1)), storage::PreparedState::Absent);
        f.close().await;
    });
}

// Checks a commit made visible on enqueue survives compaction of the segment holding its
// Prepare record: compaction copies the committed documents as live puts and drops the
// finished Prepare, before and after the Commit record is durable, across a reopen.
#[test]
fn visible_commit_survives_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(64 << 10)).await;
        let tx = WriteBatch::new()
            .put("c", "a", shard_of("a"), Some(Version::ABSENT), json!({"v": 1}))
            .put("c", "b", shard_of("b"), Some(Version::ABSENT), json!({"v": 2}));
        f.prepare(TxId::new(9), tx).await.expect("prepare");
        // Fill and roll segments so the Prepare record lands in a sealed one.
        for i in 0..300 {
            f.apply(put("c", &format!("pad{}", i % 20), json!({"pad": "p".repeat(300)})))
                .await
                .expect("pad");
        }
        assert!(f.stats().segments > 2);
        let durable = f.commit_prepared_visible(TxId::new(9)).await.expect("commit");
        f.compact().await.expect("compact");
        durable.wait().await.expect("durable");
        assert_eq!(f.get("c", "a").map(|d| d.doc().to_serde()), Some(json!({"v": 1})));
        f.compact().await.expect("compact again");
        f.close().await;
        let f = open(&path, options(64 << 10)).await;
        assert!(f.in_doubt().is_empty());
        assert_eq!(f.get("c", "a").map(|d| d.doc().to_serde()), Some(json!({"v": 1})));
        assert_eq!(f.get("c", "b").map(|d| d.doc().to_serde()), Some(json!({"v": 2})));
        f.close().await;
    });
}

// Checks the record-less hold: it validates its checks (Conflict on a changed version, Locked
// on a document another transaction holds or prepared), logs nothing (the durable LSN and the
// group-commit counters do not move), locks the documents against writers, prepares and other
// holds until `release`, refuses writes and a reused transaction id, is not in doubt, and is
// gone after a restart.
#[test]
fn hold_locks_without_a_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        let va = f.apply(put("c", "a", json!(1))).await.expect("a").versions[0];
        let lsn = f.stats().lsn_durable;
        let syncs = f.io_stats().fdatasyncs;
        let reads = |v| {
            WriteBatch::new().check("c", "a", shard_of("a"), v).check(
                "c",
                "b",
                shard_of("b"),
                Version::ABSENT,
            )
        };
        let stale = reads(Version::new(va.get() + 1));
        assert!(matches!(f.hold(TxId::new(1), stale), Err(AppendError::Conflict { .. })));
        assert!(f.held().is_empty(), "a failed hold holds nothing");
        f.hold(TxId::new(1), reads(va)).expect("hold");
        assert_eq!(f.held(), vec![TxId::new(1)]);
        assert!(f.in_doubt().is_empty(), "a hold is not a prepare");
        assert!(matches!(f.hold(TxId::new(1), reads(va)), Err(AppendError::TxnExists { .. })));
        assert!(matches!(f.hold(TxId::new(2), reads(va)), Err(AppendError::Locked { .. })));
        assert!(matches!(f.apply(put("c", "a", json!(2))).await, Err(AppendError::Locked { .. })));
        assert!(matches!(f.apply(put("c", "b", json!(2))).await, Err(AppendError::Locked { .. })));
        let tx = WriteBatch::new().put("c", "a", shard_of("a"), Some(va), json!(3));
        assert!(matches!(f.prepare(TxId::new(3), tx).await, Err(AppendError::Locked { .. })));
        f.apply(put("c", "other", json!(0))).await.expect("other documents stay writable");
        let writes = WriteBatch::new().put("c", "z", shard_of("z"), None, json!(0));
        assert!(matches!(
            f.hold(TxId::new(4), writes),
            Err(AppendError::Input(storage::InputError::HoldWrites { writes: 1 }))
        ));
        assert!(matches!(f.hold(TxId::new(4), WriteBatch::new()), Err(AppendError::Input(_))));
        assert_eq!(f.stats().lsn_durable, lsn + 1, "only the other document's write was logged");
        assert_eq!(f.io_stats().fdatasyncs, syncs + 1, "the hold cost no fdatasync");
        assert!(f.release(TxId::new(1)));
        assert!(!f.release(TxId::new(1)), "released once");
        assert!(f.held().is_empty());
        f.apply(put("c", "a", json!(4))).await.expect("writable after the release");
        // A prepare's checks lock against a hold too, and a hold survives no restart.
        let va = f.version_of("c", "a").expect("a");
        let tx = WriteBatch::new().check("c", "a", shard_of("a"), va);
        f.prepare(TxId::new(5), tx).await.expect("prepare");
        assert!(matches!(f.hold(TxId::new(6), reads(va)), Err(AppendError::Locked { .. })));
        f.abort_prepared(TxId::new(5)).await.expect("abort");
        f.hold(TxId::new(6), reads(va)).expect("hold after the abort");
        f.close().await;
        let f = open(&path, options(1 << 20)).await;
        assert!(f.held().is_empty(), "holds are memory only");
        assert!(f.in_doubt().is_empty());
        f.apply(put("c", "a", json!(5))).await.expect("no hold after a restart");
        f.close().await;
    });
}

// Checks that phase two's Commit record is lazy: queued alone it starts no chunk while the
// log waits for another record (here the wait is an hour), the next write carries it in one
// chunk (one fdatasync for both), and closing flushes one still waiting, so after a reopen
// the transaction is committed, not in doubt.
#[test]
fn lazy_commit_record_rides_with_the_next_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let lazy = || storage::FragmentOptions {
            lazy_record_wait: std::time::Duration::from_secs(3600),
            ..options(1 << 20)
        };
        let f = open(&path, lazy()).await;
        f.prepare(TxId::new(7), put("c", "a", json!("A"))).await.expect("prepare");
        let synced = f.io_stats().fdatasyncs;
        let durable = f.commit_prepared_visible(TxId::new(7)).await.expect("commit");
        let commit_lsn = f.stats().lsn_durable + 1;
        // Time for the writer to run (not a synchronisation: with the hour's wait nothing
        // may be written however long this is); an eager Commit record would be durable now.
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(f.io_stats().fdatasyncs, synced, "the lazy record started a chunk");
        assert!(f.stats().lsn_durable < commit_lsn);
        f.apply(put("c", "b", json!("B"))).await.expect("write");
        durable.wait().await.expect("durable with the write");
        assert_eq!(f.io_stats().fdatasyncs, synced + 1, "one chunk for both records");
        // Closing flushes a lazy record still waiting.
        f.prepare(TxId::new(8), put("c", "c", json!("C"))).await.expect("prepare 8");
        let _ = f.commit_prepared_visible(TxId::new(8)).await.expect("commit 8");
        f.close().await;
        let f = open(&path, lazy()).await;
        assert!(f.in_doubt().is_empty(), "closing left a Commit record unwritten");
        assert_eq!(f.get("c", "c").map(|d| d.doc().to_serde()), Some(json!("C")));
        f.close().await;
        // With the default wait a lazy record alone becomes durable by itself.
        let f = open(&path, options(1 << 20)).await;
        f.prepare(TxId::new(9), put("c", "d", json!("D"))).await.expect("prepare 9");
        let durable = f.commit_prepared_visible(TxId::new(9)).await.expect("commit 9");
        durable.wait().await.expect("a lazy record alone is written after its wait");
        f.close().await;
    });
}

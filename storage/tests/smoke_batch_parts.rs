//! Batches too large for one log record: logged as several Prepare records (parts) and, for an
//! autocommit batch, a Commit record behind them. Still all or nothing, durable when
//! acknowledged, in doubt as one transaction when prepared, carried by compaction, and
//! dropped whole when a crash cut the log between its parts and its Commit record.

mod common;

use std::rc::Rc;

use common::*;
use serde_json::json;
use storage::limits::RECORD_OPS_MAX;
use storage::{AppendError, CrashMode, FaultyDisk, Fragment, TxId, WriteBatch, verify_dir};

/// Small segments: a part holds about 30 KiB of documents, so a few dozen padded documents
/// make several parts in several chunks and segments.
const SEGMENT: u64 = 64 << 10;

fn wide_batch(tag: &str, n: usize) -> WriteBatch {
    let mut b = WriteBatch::new();
    for i in 0..n {
        let id = format!("{tag}-{i}");
        b = b.put("c", &id, shard_of(&id), None, json!({"i": i, "pad": "w".repeat(3000)}));
    }
    b
}

fn visible(f: &Fragment, tag: &str, n: usize) -> usize {
    (0..n).filter(|i| f.get("c", &format!("{tag}-{i}")).is_some()).count()
}

// Checks a batch of more writes than one record holds, and one of more bytes than a chunk
// holds: both apply whole (the later write of a document twice in the batch wins), stay
// after a reopen, and pass the offline check.
#[test]
fn large_batches_apply_whole_and_durably() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        let lsn_before = f.stats().lsn_durable;
        let count = RECORD_OPS_MAX * 2 + 10;
        let mut many = WriteBatch::new();
        for i in 0..count {
            let id = format!("m-{i}");
            many = many.put("c", &id, shard_of(&id), None, json!(i));
        }
        // The first document again, in the last part.
        many = many.put("c", "m-0", shard_of("m-0"), None, json!("last"));
        f.apply(many).await.expect("many writes");
        assert!(f.stats().lsn_durable - lsn_before >= 4, "three parts and a Commit record");
        f.apply(wide_batch("w", 60)).await.expect("wide writes");
        assert!(f.stats().segments >= 3, "the parts span segments");
        assert_eq!(visible(&f, "w", 60), 60);
        assert_eq!(f.stats().docs, (count + 60) as u64);
        assert_eq!(f.get("c", "m-0").map(|d| d.doc().to_serde()), Some(json!("last")));
        assert!(f.in_doubt().is_empty());
        f.close().await;
        let report = verify_dir(&path, FRAGMENT).expect("verify");
        assert_eq!(report.in_doubt, 0);
        assert_eq!(report.docs, (count + 60) as u64);
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.stats().docs, (count + 60) as u64);
        assert_eq!(visible(&f, "w", 60), 60);
        assert_eq!(f.get("c", "m-0").map(|d| d.doc().to_serde()), Some(json!("last")));
        assert_eq!(f.get("c", "m-8200").map(|d| d.doc().to_serde()), Some(json!(8200)));
        f.close().await;
    });
}

// Checks that a writer meeting a large batch's queued writes conflicts, as against a batch of
// one record: its expected version is no longer the current one.
#[test]
fn large_batch_queued_writes_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        f.apply(put("c", "w-3", json!("old"))).await.expect("first");
        let old = f.version_of("c", "w-3").expect("version");
        let mut big = WriteBatch::new();
        for i in 0..60 {
            let id = format!("w-{i}");
            let expected = (i == 3).then_some(old);
            big = big.put("c", &id, shard_of(&id), expected, json!({"pad": "w".repeat(3000)}));
        }
        let stale = WriteBatch::new().put("c", "w-3", shard_of("w-3"), Some(old), json!("stale"));
        let (big, stale) = futures_lite::future::zip(f.apply(big), async {
            glommio::yield_if_needed().await;
            f.apply(stale).await
        })
        .await;
        big.expect("the large batch");
        assert!(matches!(stale, Err(AppendError::Conflict { .. })), "{stale:?}");
        assert_eq!(
            f.get("c", "w-3").map(|d| d.doc().to_serde()["pad"].as_str().map(str::len)),
            Some(Some(3000))
        );
        f.close().await;
    });
}

// Checks a prepared transaction logged in parts: invisible and locked, in doubt as one after a
// reopen (and after compaction moved its parts), then committed whole; another aborted whole.
#[test]
fn prepared_parts_are_one_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        let (yes, no) = (TxId::new(41), TxId::new(42));
        f.prepare(yes, wide_batch("y", 50)).await.expect("prepare yes");
        f.prepare(no, wide_batch("n", 50)).await.expect("prepare no");
        assert_eq!(visible(&f, "y", 50), 0);
        let blocked = f.apply(put("c", "y-49", json!(1))).await;
        assert!(matches!(blocked, Err(AppendError::Locked { txid, .. }) if txid == yes));
        // Enough later writes that the prepares lie in sealed segments, then compaction.
        for i in 0..40 {
            f.apply(put("c", &format!("later-{i}"), json!({"pad": "l".repeat(3000)})))
                .await
                .expect("later");
        }
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.in_doubt(), vec![yes, no]);
        f.compact().await.expect("compact");
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.in_doubt(), vec![yes, no]);
        assert_eq!(visible(&f, "y", 50) + visible(&f, "n", 50), 0);
        f.commit_prepared(yes).await.expect("commit");
        f.abort_prepared(no).await.expect("abort");
        assert_eq!(visible(&f, "y", 50), 50);
        f.apply(put("c", "n-0", json!("free"))).await.expect("the abort released its locks");
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        assert!(f.in_doubt().is_empty());
        assert_eq!(visible(&f, "y", 50), 50);
        assert_eq!(visible(&f, "n", 50), 1);
        assert_eq!(f.stats().docs, 50 + 40 + 1);
        f.close().await;
    });
}

// Checks a crash at every fdatasync of a large batch: whatever parts reached the disk, after
// the reopen the batch is whole or absent (whole when it was acknowledged), nothing is in
// doubt, and every acknowledged write before it is there.
#[test]
fn crash_between_parts_drops_the_batch() {
    let mut outcomes = Vec::new();
    for fail_after in 0..12 {
        for mode in [CrashMode::DropUnsynced, CrashMode::KeepUnsynced] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().to_path_buf();
            let outcome = run_allowing_warnings(move || async move {
                let disk = FaultyDisk::new();
                let f = open(&path, options_on(SEGMENT, Rc::new(disk.clone()))).await;
                for i in 0..5 {
                    f.apply(put("c", &format!("a-{i}"), json!(i))).await.expect("acknowledged");
                }
                disk.fail_fdatasync_after(fail_after);
                let acked = f.apply(wide_batch("b", 60)).await.is_ok();
                f.close().await;
                disk.crash(mode).expect("crash");
                let cut = verify_dir(&path, FRAGMENT).expect("verify").unfinished_batches;
                let f = open(&path, options(SEGMENT)).await;
                for i in 0..5 {
                    assert!(f.get("c", &format!("a-{i}")).is_some(), "acknowledged write lost");
                }
                let seen = visible(&f, "b", 60);
                assert!(seen == 0 || seen == 60, "batch half visible: {seen} of 60");
                assert!(!acked || seen == 60, "acknowledged batch lost");
                assert!(f.in_doubt().is_empty());
                f.apply(put("c", "b-7", json!("after"))).await.expect("writable after recovery");
                f.close().await;
                assert!(cut == 0 || seen == 0, "a cut-off batch is not applied");
                (acked, seen == 60, cut > 0)
            });
            outcomes.push(outcome);
        }
    }
    // The scenario reached both ends: batches whose parts reached the disk without their
    // Commit record, and batches acknowledged.
    assert!(outcomes.contains(&(false, false, true)), "{outcomes:?}");
    assert!(outcomes.contains(&(true, true, false)), "{outcomes:?}");
}

//! Scanned ranges (`WriteBatch::scan`, phantom protection): a batch carrying one fails unless
//! the range still holds as many documents as when it was scanned, counting queued writes; a
//! prepared write inside it makes it `Locked`; a prepare or hold keeps it locked against
//! documents entering it until the transaction finishes.

mod common;

use common::*;
use router::{ShardId, ShardRange};
use serde_json::json;
use storage::{AppendError, InputError, TxId, Version, WriteBatch};

fn only(shard: ShardId) -> ShardRange {
    ShardRange::single(shard)
}

fn scan(collection: &str, range: ShardRange, docs: u64) -> WriteBatch {
    WriteBatch::new().scan(collection, range, docs)
}

/// A shard that `shard_of` gives none of `ids`.
fn other_shard(ids: &[&str]) -> ShardId {
    (0..64u64)
        .map(ShardId::from_u64_mod)
        .find(|s| ids.iter().all(|id| shard_of(id) != *s))
        .expect("a free shard")
}

// Checks the count: a scans-only batch passes on the documents the range holds (logging
// nothing), fails with Phantom naming both counts after an insert into the range or a delete
// from it, ignores other collections and shards outside the range, and validates before the
// batch's own writes (a transaction inserting into the range it scanned passes).
#[test]
fn scanned_range_counts_documents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        f.apply(put("c", "a", json!(1))).await.expect("a");
        f.apply(put("c", "b", json!(2))).await.expect("b");
        f.apply(put("d", "x", json!(0))).await.expect("other collection");
        let lsn = f.stats().lsn_durable;
        f.apply(scan("c", ShardRange::ALL, 2)).await.expect("two documents");
        assert_eq!(f.stats().lsn_durable, lsn, "a scans-only batch is not logged");
        f.apply(scan("c", only(shard_of("a")), 1)).await.expect("one in a's shard");
        f.apply(scan("c", only(other_shard(&["a", "b"])), 0)).await.expect("an empty shard");
        f.apply(scan("empty", ShardRange::ALL, 0)).await.expect("an empty collection");
        match f.apply(scan("c", ShardRange::ALL, 1)).await {
            Err(AppendError::Phantom { collection, expected: 1, found: 2, .. }) => {
                assert_eq!(collection, "c");
            }
            other => panic!("expected Phantom 1 → 2, got {other:?}"),
        }
        f.apply(put("c", "new", json!(3))).await.expect("new");
        let seen = WriteBatch::new().scan("c", ShardRange::ALL, 2).check(
            "c",
            "a",
            shard_of("a"),
            f.version_of("c", "a").expect("a"),
        );
        assert!(matches!(f.apply(seen).await, Err(AppendError::Phantom { found: 3, .. })));
        // Own writes come after the validation: insert into the range just scanned.
        let own = WriteBatch::new().scan("c", ShardRange::ALL, 3).put(
            "c",
            "own",
            shard_of("own"),
            Some(Version::ABSENT),
            json!(4),
        );
        f.apply(own).await.expect("own insert into the scanned range");
        f.apply(WriteBatch::new().delete("c", "own", shard_of("own"), None)).await.expect("del");
        f.apply(WriteBatch::new().delete("c", "new", shard_of("new"), None)).await.expect("del");
        assert!(matches!(
            f.apply(scan("c", ShardRange::ALL, 3)).await,
            Err(AppendError::Phantom { expected: 3, found: 2, .. })
        ));
        f.close().await;
    });
}

// Checks that writes queued but not yet durable count: a scan validated while an insert into
// its range waits for its fdatasync sees that insert (readers would see it once durable).
#[test]
fn queued_writes_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        f.apply(put("c", "a", json!(1))).await.expect("a");
        // `zip` polls the insert first: its first poll queues it, then it waits for the log.
        let (insert, check) = futures_lite::future::zip(
            f.apply(put("c", "queued", json!(2))),
            f.apply(scan("c", ShardRange::ALL, 1)),
        )
        .await;
        insert.expect("insert");
        assert!(matches!(check, Err(AppendError::Phantom { expected: 1, found: 2, .. })));
        // A queued delete counts too.
        let (delete, check) = futures_lite::future::zip(
            f.apply(WriteBatch::new().delete("c", "a", shard_of("a"), None)),
            f.apply(scan("c", ShardRange::ALL, 2)),
        )
        .await;
        delete.expect("delete");
        assert!(matches!(check, Err(AppendError::Phantom { expected: 2, found: 1, .. })));
        f.close().await;
    });
}

// Checks a document moved into a scanned range (rewritten with another shard, as a content
// change can do) counts there, and no longer counts in the range it left.
#[test]
fn a_document_moved_into_the_range_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        let home = shard_of("m");
        let elsewhere = other_shard(&["m"]);
        f.apply(WriteBatch::new().put("c", "m", home, None, json!(1))).await.expect("m");
        f.apply(scan("c", only(elsewhere), 0)).await.expect("nothing there yet");
        f.apply(WriteBatch::new().put("c", "m", elsewhere, None, json!(2))).await.expect("move");
        assert!(matches!(
            f.apply(scan("c", only(elsewhere), 0)).await,
            Err(AppendError::Phantom { found: 1, .. })
        ));
        f.apply(scan("c", only(home), 0)).await.expect("gone from its old shard");
        f.close().await;
    });
}

// Checks that a prepared write inside a scanned range makes the scan `Locked` (its outcome
// decides the count) naming the preparing transaction, a prepared write elsewhere does not,
// and once the prepare commits the new count passes.
#[test]
fn prepared_writes_lock_a_scan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        f.apply(put("c", "a", json!(1))).await.expect("a");
        let tx = WriteBatch::new().put("c", "p", shard_of("p"), Some(Version::ABSENT), json!(2));
        f.prepare(TxId::new(1), tx).await.expect("prepare");
        match f.apply(scan("c", ShardRange::ALL, 1)).await {
            Err(AppendError::Locked { txid, .. }) => assert_eq!(txid, TxId::new(1)),
            other => panic!("expected Locked, got {other:?}"),
        }
        f.apply(scan("c", only(other_shard(&["p", "a"])), 0)).await.expect("outside the write");
        f.apply(scan("d", ShardRange::ALL, 0)).await.expect("another collection");
        f.commit_prepared(TxId::new(1)).await.expect("commit");
        f.apply(scan("c", ShardRange::ALL, 2)).await.expect("after the commit");
        f.close().await;
    });
}

// Checks the range lock of a prepare: until it commits or aborts, a new document (autocommit
// or another prepare) in the range fails with `Locked`, as does a document moved into it;
// documents outside it, in other collections and updates of documents it read (not locked by
// it here: no check) elsewhere go through; commit and abort both release it; a restart does
// not bring it back (only the prepare's writes are recovered).
#[test]
fn a_prepare_locks_its_scanned_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        let range = only(shard_of("in"));
        let outside = other_shard(&["in"]);
        f.apply(WriteBatch::new().put("c", "out", outside, None, json!(0))).await.expect("out");
        let tx = |n: u64| {
            WriteBatch::new().scan("c", range, 0).put(
                "c",
                &format!("w{n}"),
                outside,
                Some(Version::ABSENT),
                json!(n),
            )
        };
        f.prepare(TxId::new(1), tx(1)).await.expect("prepare");
        match f.apply(put("c", "in", json!(1))).await {
            Err(AppendError::Locked { txid, .. }) => assert_eq!(txid, TxId::new(1)),
            other => panic!("expected Locked, got {other:?}"),
        }
        let other = WriteBatch::new().put("c", "in", shard_of("in"), None, json!(2));
        assert!(matches!(f.prepare(TxId::new(2), other).await, Err(AppendError::Locked { .. })));
        let moved = WriteBatch::new().put("c", "out", shard_of("in"), None, json!(3));
        assert!(matches!(f.apply(moved).await, Err(AppendError::Locked { .. })));
        f.apply(put("d", "in", json!(4))).await.expect("another collection");
        f.apply(WriteBatch::new().put("c", "out", outside, None, json!(5))).await.expect("out");
        f.apply(WriteBatch::new().delete("c", "in", shard_of("in"), None))
            .await
            .expect("deleting nothing adds nothing");
        f.commit_prepared(TxId::new(1)).await.expect("commit");
        f.apply(put("c", "in", json!(6))).await.expect("released by the commit");
        f.apply(WriteBatch::new().delete("c", "in", shard_of("in"), None)).await.expect("del");
        f.prepare(TxId::new(3), tx(3)).await.expect("prepare 3");
        assert!(matches!(f.apply(put("c", "in", json!(7))).await, Err(AppendError::Locked { .. })));
        f.abort_prepared(TxId::new(3)).await.expect("abort");
        f.apply(put("c", "in", json!(8))).await.expect("released by the abort");
        f.apply(WriteBatch::new().delete("c", "in", shard_of("in"), None)).await.expect("del");
        f.prepare(TxId::new(4), tx(4)).await.expect("prepare 4");
        f.close().await;
        let f = open(&path, options(1 << 20)).await;
        assert_eq!(f.in_doubt(), vec![TxId::new(4)]);
        f.apply(put("c", "in", json!(9))).await.expect("range locks are not recovered");
        f.abort_prepared(TxId::new(4)).await.expect("abort after restart");
        f.close().await;
    });
}

// Checks a record-less hold with scanned ranges only: it validates the count (Phantom on a
// changed one, nothing held then), locks the range against new documents until `release`,
// and logs nothing.
#[test]
fn a_hold_locks_its_scanned_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(1 << 20)).await;
        f.apply(put("c", "a", json!(1))).await.expect("a");
        assert!(matches!(
            f.hold(TxId::new(1), scan("c", ShardRange::ALL, 0)),
            Err(AppendError::Phantom { .. })
        ));
        assert!(f.held().is_empty(), "a failed hold holds nothing");
        f.apply(put("c", "b", json!(2))).await.expect("nothing locked after the failed hold");
        let lsn = f.stats().lsn_durable;
        f.hold(TxId::new(2), scan("c", ShardRange::ALL, 2)).expect("hold");
        assert!(matches!(f.apply(put("c", "n", json!(3))).await, Err(AppendError::Locked { .. })));
        assert!(
            f.apply(scan("c", ShardRange::ALL, 2)).await.is_ok(),
            "a hold does not write: other scans of the range pass"
        );
        assert_eq!(f.stats().lsn_durable, lsn, "the hold logged nothing");
        assert!(f.release(TxId::new(2)));
        f.apply(put("c", "n", json!(4))).await.expect("released");
        f.close().await;
    });
}

// Checks the bad inputs of a scanned range: a range reaching outside the fragment is
// WrongShard, an empty or too long collection name is an input error, in `apply` and `hold`.
#[test]
fn bad_scanned_ranges_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let inner = ShardRange::new(100, 200).expect("range");
        let f =
            storage::Fragment::open(&path, FRAGMENT, inner, options(1 << 20)).await.expect("open");
        f.apply(scan("c", ShardRange::new(120, 180).expect("r"), 0)).await.expect("inside");
        for outside in [ShardRange::new(99, 150), ShardRange::new(150, 201), Some(ShardRange::ALL)]
        {
            let outside = outside.expect("range");
            assert!(matches!(
                f.apply(scan("c", outside, 0)).await,
                Err(AppendError::WrongShard { .. })
            ));
            assert!(matches!(
                f.hold(TxId::new(1), scan("c", outside, 0)),
                Err(AppendError::WrongShard { .. })
            ));
        }
        for name in [String::new(), "n".repeat(storage::limits::COLLECTION_BYTES_MAX + 1)] {
            assert!(matches!(
                f.apply(scan(&name, ShardRange::new(120, 180).expect("r"), 0)).await,
                Err(AppendError::Input(InputError::CollectionName { .. }))
            ));
        }
        assert!(f.held().is_empty());
        f.close().await;
    });
}

// Checks how a checks-only batch is cut for validation in parts: the scanned ranges and
// every ABSENT check in the first slice (more than `max` if they are), the versioned checks
// after them in order, at most `max` per slice; a batch of ranges only one slice, an empty
// batch none.
#[test]
fn slices_keep_ranges_and_absences_with_the_first() {
    let mut b = WriteBatch::new().scan("c", ShardRange::ALL, 3);
    for i in 0..5 {
        b = b.check("c", &format!("v{i}"), shard_of("d"), Version::new(i + 1));
        b = b.check("c", &format!("a{i}"), shard_of("d"), Version::ABSENT);
    }
    let slices = b.into_slices(2);
    assert_eq!(slices.iter().map(WriteBatch::len).collect::<Vec<_>>(), [5, 2, 2, 1]);
    assert_eq!(slices.iter().map(|s| s.scans().len()).collect::<Vec<_>>(), [1, 0, 0, 0]);
    assert!(slices[0].ops().iter().all(storage::WriteOp::is_absence_check));
    let versioned: Vec<String> = slices[1..]
        .iter()
        .flat_map(|s| s.ops().iter())
        .map(|op| match op {
            storage::WriteOp::Check { id, expected_version, .. } => {
                assert_ne!(*expected_version, Version::ABSENT);
                id.clone()
            }
            other => panic!("not a check: {other:?}"),
        })
        .collect();
    assert_eq!(versioned, ["v0", "v1", "v2", "v3", "v4"]);
    let few = WriteBatch::new()
        .check("c", "v", shard_of("d"), Version::new(1))
        .check("c", "a", shard_of("d"), Version::ABSENT)
        .into_slices(4);
    assert_eq!((few.len(), few[0].len()), (1, 2), "room left in the first slice is filled");
    let only = scan("c", ShardRange::ALL, 0).into_slices(2);
    assert_eq!((only.len(), only[0].len(), only[0].scans().len()), (1, 0, 1));
    assert!(WriteBatch::new().into_slices(2).is_empty());
}

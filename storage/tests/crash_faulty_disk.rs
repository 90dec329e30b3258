//! Fault injection under the log with `FaultyDisk`: fdatasync fails after N calls, then the
//! "machine crashes" in one of three ways (unsynced writes dropped, the last one torn at many
//! lengths, or kept). After each: the failed write was reported as failed (never as success),
//! the fragment refused further writes and said why, and after reopening every acknowledged
//! write is present and nothing of the failed batch is half-visible.

mod common;

use std::rc::Rc;

use common::*;
use serde_json::json;
use storage::{AppendError, CrashMode, FaultyDisk, WriteBatch};

const SEGMENT: u64 = 64 << 10;

fn batch(n: usize) -> WriteBatch {
    let mut b = WriteBatch::new();
    for k in 0..3 {
        let id = format!("b{n}-{k}");
        b = b.put("c", &id, shard_of(&id), None, json!({"n": n, "k": k, "pad": "p".repeat(100)}));
    }
    b
}

/// Writes `acked` batches, then one more that fails at fdatasync, crashes with `mode`, reopens
/// on the real disk and checks. Returns whether the failed batch is visible after reopen.
async fn scenario(path: &std::path::Path, acked: usize, mode: CrashMode) -> bool {
    let disk = FaultyDisk::new();
    let f = open(path, options_on(SEGMENT, Rc::new(disk.clone()))).await;
    for n in 0..acked {
        f.apply(batch(n)).await.expect("acknowledged write");
    }
    disk.fail_fdatasync_after(0);
    let failed = f.apply(batch(acked)).await;
    assert!(matches!(failed, Err(AppendError::Fatal { .. })), "got {failed:?}");
    assert!(f.fatal().is_some(), "the fragment says why it stopped");
    let after = f.apply(batch(acked + 1)).await;
    assert!(matches!(after, Err(AppendError::Fatal { .. })), "no write accepted after a failure");
    assert_eq!(disk.unsynced_writes(), 1);
    f.close().await;
    disk.crash(mode).expect("crash");
    let f = open(path, options(SEGMENT)).await;
    for n in 0..acked {
        for k in 0..3 {
            let d = f.get("c", &format!("b{n}-{k}")).expect("acknowledged write present");
            assert_eq!(d.doc().to_serde()["n"], json!(n));
        }
    }
    let visible: Vec<bool> =
        (0..3).map(|k| f.get("c", &format!("b{acked}-{k}")).is_some()).collect();
    assert!(visible.iter().all(|v| *v == visible[0]), "batch half visible: {visible:?}");
    assert!(f.get("c", &format!("b{}-0", acked + 1)).is_none());
    let stats = f.stats();
    f.close().await;
    assert!(stats.torn_tails <= 1);
    visible[0]
}

// Checks a dropped unsynced write: the failed batch is gone.
#[test]
fn fdatasync_fails_then_unsynced_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        assert!(!scenario(&path, 5, CrashMode::DropUnsynced).await);
    });
}

// Checks an unsynced write that reached the disk anyway: the batch may then be visible (its
// outcome was reported as unknown), and whole.
#[test]
fn fdatasync_fails_then_unsynced_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        assert!(scenario(&path, 5, CrashMode::KeepUnsynced).await);
    });
}

// Checks the last write torn at many lengths: never half a batch, acknowledged data intact.
#[test]
fn fdatasync_fails_then_last_write_torn() {
    for keep in (0..4096).step_by(97) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_path_buf();
        run_allowing_warnings(move || async move {
            let visible = scenario(&path, 3, CrashMode::TearLast { keep_bytes: keep }).await;
            assert!(!visible || keep >= 500, "a torn chunk of {keep} bytes cannot be whole");
        });
    }
}

// Checks fdatasync failing after N successful calls while many writers are queued: every
// writer gets an answer, acknowledged ones survive, failed ones are all-or-nothing.
#[test]
fn fdatasync_fails_under_concurrent_writers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        let disk = FaultyDisk::new();
        let f = Rc::new(open(&path, options_on(SEGMENT, Rc::new(disk.clone()))).await);
        // Each task writes three batches in a row: the first round shares one chunk, the
        // second waits in the queue meanwhile and meets the failing fdatasync.
        disk.fail_fdatasync_after(1);
        let mut tasks = Vec::new();
        for t in 0..40 {
            let f = f.clone();
            tasks.push(glommio::spawn_local(async move {
                let mut results = Vec::new();
                for round in 0..3 {
                    let n = t + 40 * round;
                    results.push((n, f.apply(batch(n)).await.is_ok()));
                }
                results
            }));
        }
        let mut acked = Vec::new();
        for t in tasks {
            for (n, ok) in t.await {
                if ok {
                    acked.push(n);
                }
            }
        }
        assert!(!acked.is_empty() && acked.len() < 120, "some acked, some failed: {acked:?}");
        Rc::try_unwrap(f).expect("sole owner").close().await;
        disk.crash(CrashMode::DropUnsynced).expect("crash");
        let f = open(&path, options(SEGMENT)).await;
        for n in 0..120 {
            let present: Vec<bool> =
                (0..3).map(|k| f.get("c", &format!("b{n}-{k}")).is_some()).collect();
            assert!(present.iter().all(|p| *p == present[0]), "batch {n} half visible");
            if acked.contains(&n) {
                assert!(present[0], "acknowledged batch {n} lost");
            } else {
                assert!(!present[0], "failed batch {n} visible after its write was dropped");
            }
        }
        f.close().await;
    });
}

/// One round of `two_chunks_in_flight_one_fdatasync_fails`: writer `a` queues a batch, `b`
/// queues one while a's chunk is in flight (a second chunk starts behind it), and exactly one
/// of the two fdatasyncs fails. Returns (a acknowledged, b acknowledged, pipelined).
async fn two_in_flight_round(path: &std::path::Path) -> (bool, bool, bool) {
    let disk = FaultyDisk::new();
    let f = Rc::new(open(path, options_on(SEGMENT, Rc::new(disk.clone()))).await);
    f.apply(batch(0)).await.expect("acknowledged write");
    disk.fail_one_fdatasync_after(0);
    let before = disk.fdatasyncs();
    let mut tasks = Vec::new();
    for (w, n) in [(0, 1), (1, 2)] {
        let f = f.clone();
        tasks.push(glommio::spawn_local(async move {
            if w == 1 {
                // Behind the writer in the task queue: a's chunk is launched first.
                glommio::executor().yield_task_queue_now().await;
            }
            f.apply(batch(n)).await
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await);
    }
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, AppendError::Fatal { .. }), "got {e:?}");
        }
    }
    let (a, b) = (results[0].is_ok(), results[1].is_ok());
    let pipelined = f.io_stats().pipelined > 0;
    if pipelined {
        // Both chunks' (the later one's I/O ends before anyone is answered).
        assert_eq!(disk.fdatasyncs() - before, 2, "both chunks in flight reached fdatasync");
    }
    assert!(f.fatal().is_some(), "one fdatasync failed: the fragment stopped");
    assert!(f.apply(batch(3)).await.is_err(), "no write accepted after a failure");
    // The second fdatasync succeeded (the fault is transient): still nothing after the failed
    // chunk may be acknowledged, as that fdatasync need not cover the failed chunk's data.
    assert!(a || !b, "b acknowledged behind a's failed chunk");
    assert!(!(a && b), "one of the two chunks failed");
    Rc::try_unwrap(f).expect("sole owner").close().await;
    disk.crash(CrashMode::DropUnsynced).expect("crash");
    let f = open(path, options(SEGMENT)).await;
    for (n, acked) in [(0, true), (1, a), (2, b)] {
        let present: Vec<bool> =
            (0..3).map(|k| f.get("c", &format!("b{n}-{k}")).is_some()).collect();
        assert!(present.iter().all(|p| *p == present[0]), "batch {n} half visible");
        if acked {
            assert!(present[0], "acknowledged batch {n} lost");
        }
    }
    f.close().await;
    (a, b, pipelined)
}

// Two chunks in flight (the pipelined group commit) and one failed fdatasync, the next one
// succeeding: every write the failed one might cover fails, nothing later in the log is
// acknowledged, and after a crash every acknowledged batch is whole and nothing is half there.
#[test]
fn two_chunks_in_flight_one_fdatasync_fails() {
    run_allowing_warnings(|| async {
        let mut pipelined = 0;
        for _ in 0..8 {
            let dir = tempfile::tempdir().expect("tempdir");
            let (_, _, p) = two_in_flight_round(dir.path()).await;
            pipelined += u32::from(p);
        }
        assert!(pipelined > 0, "no round had two chunks in flight");
    });
}

//! `Fragment::wait_durable`: a task can wait for a queued (not yet durable) write to become
//! durable and readable, woken by the group commit that covers it, without polling.

mod common;

use std::rc::Rc;

use common::*;
use serde_json::json;
use storage::{AppendError, FaultyDisk, Lsn, Version, WriteBatch};

const SEGMENT: u64 = 1 << 20;

// Checks the conflict case the node needs: a write queued by one task makes a second write
// conflict; the second task waits for the queued write's group commit and then reads its
// version, and the first write is acknowledged with that same LSN.
#[test]
fn conflicting_writer_waits_for_queued_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        f.apply(put("c", "warmup", json!(0))).await.expect("warm-up write");
        let before = f.durable_lsn();
        let mut first = Box::pin(f.apply(put("c", "a", json!(1))));
        assert!(poll_once(first.as_mut()).await.is_pending(), "queued, not yet durable");
        let queued = f.last_queued_lsn();
        assert_eq!(queued.get(), before.get() + 1);
        assert_eq!(f.durable_lsn(), before, "nothing became durable without the writer running");
        assert_eq!(f.version_of("c", "a"), None, "readers see durable writes only");

        let again = WriteBatch::new().put("c", "a", shard_of("a"), Some(Version::ABSENT), json!(2));
        let conflict = f.apply(again).await;
        assert!(matches!(conflict, Err(AppendError::Conflict { .. })), "got {conflict:?}");

        f.wait_durable(f.last_queued_lsn()).await.expect("durable");
        assert!(f.durable_lsn() >= queued);
        assert_eq!(f.version_of("c", "a"), Some(Version::new(queued.get())));
        let info = first.await.expect("first write acknowledged");
        assert_eq!(info.lsn, queued);
        f.close().await;
    });
}

// Checks that several tasks waiting for different LSNs of one group commit are all woken, and
// that an LSN past the last queued write (or one already durable) does not wait.
#[test]
fn waiters_wake_and_future_lsn_does_not_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = Rc::new(open(&path, options(SEGMENT)).await);
        f.wait_durable(Lsn::new(u64::MAX)).await.expect("nothing queued: returns at once");
        f.wait_durable(Lsn::new(0)).await.expect("lsn 0 is always durable");
        let mut writers = Vec::new();
        for n in 0..8 {
            let f = f.clone();
            writers.push(glommio::spawn_local(async move {
                f.apply(put("c", &format!("d{n}"), json!(n))).await.expect("write")
            }));
        }
        // Let every writer queue its record.
        glommio::executor().yield_now().await;
        let last = f.last_queued_lsn();
        let mut waiters = Vec::new();
        for k in 0..4u64 {
            let f = f.clone();
            let lsn = Lsn::new(last.get() - k);
            waiters.push(glommio::spawn_local(async move {
                f.wait_durable(lsn).await.is_ok() && f.durable_lsn() >= lsn
            }));
        }
        for w in waiters {
            assert!(w.await, "woken once durable");
        }
        for w in writers {
            assert!(w.await.lsn <= last);
        }
        for n in 0..8 {
            assert!(f.get("c", &format!("d{n}")).is_some());
        }
        f.wait_durable(Lsn::new(last.get() + 1000)).await.expect("clamped to the last queued");
        Rc::try_unwrap(f).expect("sole owner").close().await;
    });
}

// Checks that a wait ends with the fragment's fatal error when the fdatasync covering the
// awaited write fails, instead of hanging.
#[test]
fn failed_fdatasync_ends_the_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        let disk = FaultyDisk::new();
        let f = open(&path, options_on(SEGMENT, Rc::new(disk.clone()))).await;
        f.apply(put("c", "ok", json!(0))).await.expect("durable before the fault");
        disk.fail_fdatasync_after(0);
        let mut doomed = Box::pin(f.apply(put("c", "doomed", json!(1))));
        assert!(poll_once(doomed.as_mut()).await.is_pending());
        let waited = f.wait_durable(f.last_queued_lsn()).await;
        assert!(matches!(waited, Err(AppendError::Fatal { .. })), "got {waited:?}");
        assert!(matches!(doomed.await, Err(AppendError::Fatal { .. })));
        assert!(f.fatal().is_some());
        f.close().await;
    });
}

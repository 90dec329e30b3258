//! `Fragment::pause_writes`: while a pause lives, no new write of the documents it holds still
//! (a collection's, in some shard ranges) is validated or queued on the fragment (batches, a
//! prepared transaction's commit), so a reader of them that yields between slices sees one
//! instant's state; writes of other documents go on; the pause starts once every write
//! queued before it is readable; one pause at a time, and the writes that waited for one go
//! before the next.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use router::ShardRange;
use serde_json::json;
use storage::{Fragment, TxId};

const SEGMENT: u64 = 1 << 20;

// Checks a pause of collection `c`: it begins only once a write queued before it is durable
// and readable; a write of `c` and a prepared transaction's commit writing `c` asked for
// meanwhile are not even queued (the log and what readers see stay as they were) until it
// is dropped, and then both complete; a write of collection `d`, and a checks-only batch of
// `c`, are queued during the pause.
#[test]
fn pause_holds_off_writes_until_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        let txid = TxId::new(7);
        f.prepare(txid, put("c", "p", json!(0))).await.expect("prepared");
        let mut queued = Box::pin(f.apply(put("c", "a", json!(1))));
        assert!(poll_once(queued.as_mut()).await.is_pending(), "queued, not durable");
        assert_eq!(f.version_of("c", "a"), None);
        let pause = f.pause_writes("c", &[ShardRange::ALL]).await.expect("paused");
        assert!(f.version_of("c", "a").is_some(), "what was queued before is readable");
        let mut other = Box::pin(f.apply(put("d", "x", json!(3))));
        assert!(poll_once(other.as_mut()).await.is_pending());
        let a = f.version_of("c", "a").expect("a");
        let check = storage::WriteBatch::new().check("c", "a", shard_of("a"), a);
        f.apply(check).await.expect("a check of `c` during the pause");
        other.await.expect("a write of another collection during the pause");
        let before = f.last_queued_lsn();
        let mut write = Box::pin(f.apply(put("c", "b", json!(2))));
        assert!(poll_once(write.as_mut()).await.is_pending());
        let mut commit = Box::pin(f.commit_prepared_visible(txid));
        assert!(poll_once(commit.as_mut()).await.is_pending());
        assert_eq!(f.last_queued_lsn(), before, "nothing queued during the pause");
        assert_eq!((f.version_of("c", "b"), f.version_of("c", "p")), (None, None));
        drop(pause);
        write.await.expect("the write once the pause ended");
        commit.await.expect("queued").wait().await.expect("the commit once the pause ended");
        assert!(f.version_of("c", "b").is_some() && f.version_of("c", "p").is_some());
        queued.await.expect("acknowledged");
        f.close().await;
    });
}

// Checks one pause at a time, and that a write waiting for a pause is queued before the next
// pause begins even when that pause asked first: the second pause, once it has begun, sees
// the write readable.
#[test]
fn pauses_take_turns_behind_waiting_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = Rc::new(open(&path, options(SEGMENT)).await);
        let first = f.pause_writes("c", &[ShardRange::ALL]).await.expect("paused");
        let seen: Rc<RefCell<Option<bool>>> = Rc::default();
        let second = {
            let (f, seen) = (Rc::clone(&f), Rc::clone(&seen));
            glommio::spawn_local(async move {
                let pause = f.pause_writes("e", &[ShardRange::ALL]).await.expect("second pause");
                *seen.borrow_mut() = Some(f.version_of("c", "w").is_some());
                drop(pause);
            })
        };
        let writer = {
            let f = Rc::clone(&f);
            glommio::spawn_local(async move { f.apply(put("c", "w", json!(1))).await })
        };
        // Both ran until they waited for the first pause.
        wait_until_waiting(&f).await;
        assert!(seen.borrow().is_none(), "the second pause waits for the first");
        assert_eq!(f.version_of("c", "w"), None);
        drop(first);
        second.await;
        assert_eq!(*seen.borrow(), Some(true), "the waiting write went before the second pause");
        writer.await.expect("write");
        Rc::try_unwrap(f).map_err(|_| "still shared").expect("one owner").close().await;
    });
}

/// Yields until the second pause and the writer of `pauses_take_turns_behind_waiting_writes`
/// have both been polled once (each then waits for the first pause).
async fn wait_until_waiting(f: &Fragment) {
    let start = f.last_queued_lsn();
    for _ in 0..2 {
        glommio::executor().yield_now().await;
    }
    assert_eq!(f.last_queued_lsn(), start, "the writer waited for the pause");
}

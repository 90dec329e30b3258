//! Regression: compaction asking for the log lock while a busy writer holds it. The writer let
//! go of the lock once its chunks in flight had finished and, with records queued, took it
//! back at once (glommio's semaphore hands a free unit to the next `acquire` ahead of the
//! woken waiter), forever and without yielding: one node's executor spun at 100% CPU and
//! answered nothing (seen in session 5's transfer benchmark). Many writers keep records
//! queued behind every chunk while compactions run back to back.

mod common;

use std::cell::Cell;
use std::rc::Rc;

use common::*;
use serde_json::json;

/// Returns after letting every other runnable task of this executor run once.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

const SEGMENT: u64 = 256 << 10;
const WRITERS: usize = 64;
const ROUNDS: usize = 200;

// Checks that every compaction gets the lock from a writer that has records queued, and that
// the writers then finish with every write in place. Before the fix this test never ended:
// its executor spun in the writer (seen with a 30 s timeout, twice in two runs).
#[test]
fn compaction_gets_the_lock_from_a_busy_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = Rc::new(open(&path, options(SEGMENT)).await);
        let done = Rc::new(Cell::new(0usize));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (f, done) = (Rc::clone(&f), Rc::clone(&done));
                glommio::spawn_local(async move {
                    for r in 0..ROUNDS {
                        // Staggered arrivals: records queue while earlier chunks are in
                        // flight, so chunks pipeline as they do under client traffic.
                        for _ in 0..(w + r) % 4 {
                            yield_now().await;
                        }
                        let doc = json!({"r": r, "pad": "w".repeat(300)});
                        f.apply(put("c", &format!("w{w}"), doc)).await.expect("put");
                    }
                    done.set(done.get() + 1);
                })
            })
            .collect();
        let compactions = {
            let (f, done) = (Rc::clone(&f), Rc::clone(&done));
            glommio::spawn_local(async move {
                let mut runs = 0usize;
                while done.get() < WRITERS {
                    f.compact().await.expect("compact");
                    runs += 1;
                    // A compaction with nothing to do may finish without waiting: let the
                    // writers run before the next one, the fragment's writer included, which
                    // runs in a task queue of its own (so yield the queue, not only the task).
                    glommio::executor().yield_task_queue_now().await;
                }
                runs
            })
        };
        for w in writers {
            w.await;
        }
        assert!(compactions.await > 0);
        for w in 0..WRITERS {
            let doc = f.get("c", &format!("w{w}")).unwrap_or_else(|| panic!("w{w} missing"));
            assert_eq!(doc.doc().to_serde()["r"], json!(ROUNDS - 1), "w{w}");
        }
        Rc::try_unwrap(f).expect("sole owner").close().await;
    });
}

//! The pipelined group commit: records queued while a chunk's write and fdatasync are under
//! way start the next chunk at once (at most two chunks in flight), and every write is
//! acknowledged in log order with its data durable and readable.

mod common;

use std::rc::Rc;

use common::*;
use serde_json::json;

const SEGMENT: u64 = 1 << 20;
const ROUNDS: u64 = 60;

// Checks that a second chunk starts behind a syncing one (cov_mark and io_stats), that every
// write gets its own LSN, and that everything acknowledged survives a reopen, across segment
// rolls.
#[test]
fn second_chunk_starts_while_the_first_syncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        cov_mark::check!(chunk_behind_a_sync);
        // Through `FaultyDisk` (no faults asked): its chunks take glommio's io_uring path,
        // whose requests reach the kernel only when the task queues are done, so a's chunk
        // is still in flight when b's record arrives whatever the disk's speed. (`DmaDisk`
        // starts a chunk on its blocking thread at once; it may finish before a slow debug
        // build has queued b's record.)
        let disk = Rc::new(storage::FaultyDisk::new());
        let f = Rc::new(open(&path, options_on(SEGMENT, disk)).await);
        let acks = Rc::new(std::cell::RefCell::new(Vec::new()));
        let pad = "p".repeat(20_000);
        // Each round: `a` queues a record and wakes the writer; `b` first yields (its task
        // queue, which puts it behind the writer task in the same queue), so the writer starts
        // a's chunk; b's record then arrives while that chunk is in flight, and the writer
        // starts b's chunk behind it.
        for round in 0..ROUNDS {
            let mut tasks = Vec::new();
            for w in 0..2u64 {
                let (f, acks, pad) = (f.clone(), acks.clone(), pad.clone());
                tasks.push(glommio::spawn_local(async move {
                    if w == 1 {
                        glommio::executor().yield_task_queue_now().await;
                    }
                    let id = format!("w{w}-{round}");
                    let doc = json!({"w": w, "n": round, "pad": pad});
                    let info = f.apply(put("c", &id, doc)).await.expect("apply");
                    acks.borrow_mut().push(info.lsn.get());
                }));
            }
            for t in tasks {
                t.await;
            }
        }
        let io = f.io_stats();
        // Not every round: a roll waits until no chunk is in flight, and the first round can
        // find the writer not yet waiting.
        assert!(io.pipelined > ROUNDS / 2, "b's chunk starts behind a's: {io:?}");
        assert_eq!(io.writes_synced, 2 * ROUNDS);
        let acks = acks.borrow().clone();
        let mut sorted = acks.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len() as u64, 2 * ROUNDS, "every write has its own LSN");
        let f = Rc::try_unwrap(f).expect("sole owner");
        assert!(f.stats().segments > 1, "the writes rolled segments");
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.stats().docs, 2 * ROUNDS);
        assert_eq!(f.stats().torn_tails, 0);
        for w in 0..2 {
            for n in 0..ROUNDS {
                let d = f.get("c", &format!("w{w}-{n}")).expect("acknowledged write present");
                assert_eq!(d.doc().to_serde()["n"], json!(n));
            }
        }
        f.close().await;
    });
}

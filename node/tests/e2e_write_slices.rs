//! An autocommit UPDATE / DELETE that reads more than one slice (4,096 documents) of a
//! fragment reads in slices, other statements of its executor running between them, and
//! still stands for one instant there: writes of what it reads wait for it
//! (`Fragment::pause_writes`). On one fragment its own batch goes first when the pause ends;
//! over several (a transaction of one) the pause ends with the fragment's read, and an
//! attempt whose commit then conflicts runs again, preparing each fragment's writes before
//! its pause ends.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use bytes::Bytes;
use futures_util::{SinkExt, pin_mut};
use support::{Node, NodeOptions, sqlstate, tx_counter};

/// Documents on fragment 0 (shard 0): `a0` sorts first in the scan, `a8999` last, three
/// slices apart.
const DOCS: usize = 9_000;

/// UPDATEs that must each find exactly one flagged document.
const UPDATES: i64 = 50;

// Checks one instant on a node of one fragment (the UPDATE is that fragment's write,
// `Core::update`): see `one_instant`.
#[tokio::test]
async fn sliced_autocommit_update_reads_one_instant() {
    one_instant(Node::start_with(NodeOptions { fragments: 1, ..NodeOptions::default() })).await;
}

// The same on a node of eight fragments over two executors: the UPDATE and DELETE go to all
// of them, a transaction of one (`Session::autocommit_txn`, `ShareRead::AutocommitPaused`),
// and every document is on the first. A session on the other executor than the fragment's
// commits a cross-executor round trip after its read, so the swapper's writes the pause held
// can go first and fail that attempt; its later attempts prepare as they read
// (`Core::txn_write_prepared`) and the swaps then wait for them. Before those, one run of six
// ended after 419 s with the UPDATEs refused (40001, 16 attempts each) 500 times.
#[tokio::test]
async fn sliced_autocommit_update_over_fragments_reads_one_instant() {
    one_instant(Node::start()).await;
}

/// While another session keeps swapping a flag between the first and the last document of
/// the scan (one atomic UPDATE of both), each of 50 autocommit UPDATEs of the flagged
/// document over all 9,000 that completes finds exactly one (read in slices at several
/// instants, a swap landing between them would make it find none or both; without the
/// pause over eight fragments on one executor, 3 runs of 4 failed, the first at UPDATE 8 to
/// 33). Then a sliced DELETE of every document but the two removes exactly 8,998.
async fn one_instant(node: Node) {
    let client = node.connect().await;
    let input: String = (0..DOCS)
        .map(|i| format!("a{i}$@0\t{{\"m\":{},\"touched\":0}}\n", i32::from(i == 0)))
        .collect();
    let sink = client.copy_in::<_, Bytes>("COPY t FROM STDIN").await.unwrap();
    pin_mut!(sink);
    sink.send(Bytes::from(input)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), DOCS as u64);
    let swapper = node.connect().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swaps = {
        let stop = std::sync::Arc::clone(&stop);
        tokio::spawn(async move {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let swap = "UPDATE t SET m = 1 - m WHERE id() IN ('a0$@0', 'a8999$@0')";
                match swapper.execute(swap, &[]).await {
                    Ok(n) => {
                        assert_eq!(n, 2);
                        swaps += 1;
                    }
                    Err(e) if sqlstate(&e) == "40001" => {}
                    Err(e) => panic!("{e:?}"),
                }
            }
            swaps
        })
    };
    // Each UPDATE writes the document the swapper writes next, and commits: on one fragment
    // its batch goes first when its pause ends; over several an attempt after a conflict
    // prepares as it reads (before those, one run of six was refused 500 times).
    let paused = tx_counter(&client, "paused_reads").await;
    for done in 0..UPDATES {
        let n = client.execute("UPDATE t SET touched = touched + 1 WHERE m = 1", &[]).await;
        assert_eq!(n.unwrap(), 1, "UPDATE {done}: one flagged document at any instant");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(swaps.await.unwrap() > 0);
    // Every UPDATE read its 9,000 documents in slices, each attempt.
    let paused = tx_counter(&client, "paused_reads").await - paused;
    assert!(paused >= UPDATES, "{paused} sliced reads for {UPDATES} UPDATEs");
    let touched: i64 =
        client.query_one("SELECT sum(touched::int8)::int8 FROM t", &[]).await.unwrap().get(0);
    assert_eq!(touched, UPDATES);
    let n = client.execute("DELETE FROM t WHERE id() NOT IN ('a0$@0', 'a8999$@0')", &[]).await;
    assert_eq!(n.unwrap(), DOCS as u64 - 2);
    let left: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(left, 2);
}

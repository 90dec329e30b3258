//! An autocommit UPDATE / DELETE of one fragment that reads more than one slice (4,096
//! documents) reads in slices, other statements of its executor running between them, and
//! still stands for one instant: the fragment's writes wait for it (`Fragment::pause_writes`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use bytes::Bytes;
use futures_util::{SinkExt, pin_mut};
use support::{Node, NodeOptions};

/// Documents on fragment 0 (shard 0): `a0` sorts first in the scan, `a8999` last, three
/// slices apart.
const DOCS: usize = 9_000;

// Checks one instant on a node of one fragment (the UPDATE is that fragment's write,
// `Core::update`): see `one_instant`.
#[tokio::test]
async fn sliced_autocommit_update_of_one_fragment_reads_one_instant() {
    one_instant(Node::start_with(NodeOptions { fragments: 1, ..NodeOptions::default() })).await;
}

// Checks one instant on a node of eight fragments (the UPDATE is a transaction of one over all
// of them, `Session::autocommit_txn`, each fragment's share read by `Core::txn_write`): see
// `one_instant`.
#[tokio::test]
async fn sliced_autocommit_update_over_fragments_reads_one_instant() {
    one_instant(Node::start()).await;
}

/// While another session keeps swapping a flag between the first and the last document of
/// the scan (one atomic UPDATE of both), each of 25 autocommit UPDATEs of the flagged
/// document over all 9,000 finds exactly one (read in slices at several instants, a swap
/// landing between them would make it find none or both). Then a sliced DELETE of every
/// document but the two removes exactly 8,998.
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
                let n = swapper
                    .execute("UPDATE t SET m = 1 - m WHERE id() IN ('a0$@0', 'a8999$@0')", &[])
                    .await
                    .unwrap();
                assert_eq!(n, 2);
                swaps += 1;
            }
            swaps
        })
    };
    for round in 0..25 {
        let n = client.execute("UPDATE t SET touched = touched + 1 WHERE m = 1", &[]).await;
        assert_eq!(n.unwrap(), 1, "round {round}: one flagged document at any instant");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(swaps.await.unwrap() > 0);
    let touched: i64 =
        client.query_one("SELECT sum(touched::int8)::int8 FROM t", &[]).await.unwrap().get(0);
    assert_eq!(touched, 25);
    let n = client.execute("DELETE FROM t WHERE id() NOT IN ('a0$@0', 'a8999$@0')", &[]).await;
    assert_eq!(n.unwrap(), DOCS as u64 - 2);
    let left: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(left, 2);
}

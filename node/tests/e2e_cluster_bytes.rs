//! `--rebalance-load bytes` on two data nodes: the map gives each two of four fragments, so
//! counting fragments nothing moves; once node 1 holds many bytes in its fragments, the
//! coordinator (which asks every member for its fragments' sizes) plans a move from node 1 to
//! node 2. Every wait polls until a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::time::Instant;

use support::cluster::{CLUSTER_DEADLINE, POLL_EVERY, cluster_args, write_retrying};
use support::{Node, NodeOptions, free_loopback_port, simple_rows};

fn options(id: u32, peer: u16, join: Option<u16>) -> NodeOptions {
    let more =
        ["--min-members", "2", "--rebalance-load", "bytes", "--rebalance-threshold", "10000"];
    let extra_args = cluster_args("bytes", id, peer, join, &more);
    NodeOptions { executors: 1, fragments: 4, extra_args, ..NodeOptions::default() }
}

/// Polls until `done` holds, failing with both logs after the deadline.
async fn wait_for(nodes: &[Node], what: &str, done: impl AsyncFn() -> bool) {
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    while !done().await {
        if Instant::now() > deadline {
            let logs: Vec<String> = nodes.iter().map(Node::log_text).collect();
            panic!("{what}: not reached\n{}", logs.join("\n-----\n"));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

// Checks nothing moves while the bytes are even, and a move from node 1 is planned once it
// holds most of them.
#[tokio::test]
async fn bytes_load_plans_a_move_from_the_heavy_node() {
    let ports: Vec<u16> = (0..2).map(|_| free_loopback_port()).collect();
    let mut nodes = vec![
        Node::start_with(options(1, ports[0], None)),
        Node::start_with(options(2, ports[1], Some(ports[0]))),
    ];
    for n in &mut nodes {
        n.expect_log("is unreachable");
    }
    let first = &nodes[0];
    wait_for(&nodes, "a map over two nodes", async || {
        let Ok(m) = first.connect().await.simple_query("SHOW CLUSTER").await else { return false };
        let rows = simple_rows(&m);
        rows.len() == 2
            && rows.iter().all(|r| r[7].as_deref() == Some("1") && r[8].as_deref() == Some("2"))
    })
    .await;
    let planned = |n: &Node| n.log_text().contains("coordinator planned a move");
    assert!(!nodes.iter().any(planned), "empty fragments weigh nothing");

    // Node 1 writes about 200 KiB, spread over every fragment; it owns two of them.
    let c = &nodes[0].connect().await;
    let pad = "x".repeat(1000);
    let all: Vec<&Node> = nodes.iter().collect();
    for batch in 0..10 {
        let values: Vec<String> =
            (0..20).map(|i| format!(r#"('heavy/{batch}-{i}', '{{"pad":"{pad}"}}')"#)).collect();
        let sql = format!("INSERT INTO heavy VALUES {}", values.join(", "));
        // A batch spans every fragment, so it can meet one that a move planned by the earlier
        // batches is handing off: that is 40001 with nothing applied, and a client retries.
        write_retrying(&all, c, &sql).await;
    }
    let nodes_ref = &nodes;
    wait_for(&nodes, "a move planned by bytes", async || nodes_ref.iter().any(planned)).await;
    let log: String = nodes.iter().map(Node::log_text).collect();
    assert!(log.contains("from=1 to=2"), "the heavy node gives: {log}");
}

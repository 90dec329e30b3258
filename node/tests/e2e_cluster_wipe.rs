//! `tessera admin wipe-coordinator` on a three-node cluster: refused while a node holds its
//! data directory and while a recorded member still accepts connections (naming it); after a
//! wipe of the stopped cluster the nodes form a new cluster whose coordinator adopts the map
//! the nodes held, even though node 1 now starts with `--min-members 1` (without the kept map
//! it would allocate every fragment to itself at once), and every document is still readable
//! on the node that wrote it. Every wait polls `SHOW CLUSTER` until a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Instant;

use support::cluster::{CLUSTER_DEADLINE, POLL_EVERY, cluster_args};
use support::{Node, NodeOptions, free_loopback_port, simple_rows};

const FRAGMENTS: u32 = 6;
const DOCS_PER_NODE: usize = 20;

fn args(id: u32, peer: u16, join: Option<u16>, min_members: u32) -> Vec<String> {
    // The whole cluster stops: each node keeps its fragments (no handoff on SIGTERM).
    let min = min_members.to_string();
    let more = ["--min-members", &min, "--handoff-on-shutdown", "false"];
    cluster_args("wipe", id, peer, join, &more)
}

/// `(epoch, node -> fragments)` as `node` shows the cluster, if it answers.
async fn placement(node: &Node) -> Option<(u64, BTreeMap<u32, u64>)> {
    let (client, conn) =
        tokio_postgres::connect(&node.conn_str(), tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let rows = simple_rows(&client.simple_query("SHOW CLUSTER").await.ok()?);
    let epoch = rows.first()?[7].as_deref()?.parse().ok()?;
    let map = rows
        .iter()
        .map(|r| Some((r[0].as_deref()?.parse().ok()?, r[8].as_deref()?.parse().ok()?)))
        .collect::<Option<_>>()?;
    Some((epoch, map))
}

/// Polls until every node shows an allocated map over `members` nodes, the same everywhere.
async fn wait_allocated(nodes: &[Node], members: usize) -> BTreeMap<u32, u64> {
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    let mut last = Vec::new();
    while Instant::now() < deadline {
        last.clear();
        for n in nodes {
            last.push(placement(n).await);
        }
        let first = last[0].clone();
        if let Some((epoch, map)) = first
            && epoch >= 1
            && map.len() == members
            && last.iter().all(|v| v.as_ref() == Some(&(epoch, map.clone())))
        {
            return map;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    let logs: Vec<String> = nodes.iter().map(Node::log_text).collect();
    panic!("no agreed map: last {last:?}\nlogs:\n{}", logs.join("\n-----\n"));
}

fn wipe(nodes: &[&Node]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command.args(["admin", "wipe-coordinator"]);
    for n in nodes {
        command.arg("--data-dir").arg(n.data_dir());
    }
    command.output().expect("run tessera admin")
}

// Checks the refusals, then a wipe and restart that keeps every fragment with the node that
// held it and every document readable where it was written.
#[tokio::test]
async fn wipe_coordinator_refuses_live_nodes_and_keeps_fragments() {
    let ports: Vec<u16> = (0..3).map(|_| free_loopback_port()).collect();
    let options = |i: usize| NodeOptions {
        executors: 1,
        fragments: FRAGMENTS,
        extra_args: args(u32::try_from(i).unwrap() + 1, ports[i], (i > 0).then_some(ports[0]), 3),
        ..NodeOptions::default()
    };
    let mut nodes: Vec<Node> = (0..3).map(|i| Node::start_with(options(i))).collect();
    for n in &mut nodes {
        n.expect_log("is unreachable");
    }
    let before = wait_allocated(&nodes, 3).await;
    assert!(before.values().all(|f| *f == 2), "{before:?}");
    for (i, n) in nodes.iter().enumerate() {
        let values: Vec<String> = (0..DOCS_PER_NODE)
            .map(|d| format!(r#"('docs/n{i}-{d}', '{{"node":{i},"d":{d}}}')"#))
            .collect();
        n.connect()
            .await
            .simple_query(&format!("INSERT INTO docs VALUES {}", values.join(", ")))
            .await
            .unwrap();
    }

    // Refused while node 1 runs: its directory is locked.
    let out = wipe(&[&nodes[0]]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("held by a running node"), "{stderr}");
    // Refused with node 3 stopped while nodes 1 and 2 still accept peer connections.
    nodes[2].stop();
    let out = wipe(&[&nodes[2]]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for (node, port) in [(1, ports[0]), (2, ports[1])] {
        assert!(stderr.contains(&format!("node {node} at 127.0.0.1:{port}")), "{stderr}");
    }
    assert!(nodes[2].data_dir().join("cluster/state.json").exists(), "nothing wiped");

    nodes[1].stop();
    nodes[0].stop();
    let all: Vec<&Node> = nodes.iter().collect();
    let out = wipe(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.matches("kept the shard map").count(), 3, "{stdout}");
    for n in &nodes {
        assert!(!n.data_dir().join("cluster/state.json").exists());
        assert!(n.data_dir().join("cluster/prior-map.json").exists());
    }

    // Node 1 alone would allocate everything to itself with --min-members 1; with the kept
    // map its coordinator waits for nodes 2 and 3 and gives them back their fragments.
    nodes[0].set_extra_args(args(1, ports[0], None, 1));
    nodes[0].expect_log("waits for the nodes that held fragments");
    for n in &mut nodes {
        n.start_again();
    }
    let after = wait_allocated(&nodes, 3).await;
    assert_eq!(after, before, "every node owns what it held");
    let log = nodes[0].log_text();
    assert!(log.contains("adopted the fragments where the nodes held them"), "{log}");
    for (i, n) in nodes.iter().enumerate() {
        let rows = n.connect().await.simple_query("SELECT * FROM docs").await.unwrap();
        let mine = simple_rows(&rows)
            .iter()
            .filter(|r| r[0].as_deref().is_some_and(|id| id.starts_with(&format!("docs/n{i}-"))))
            .count();
        assert_eq!(mine, DOCS_PER_NODE, "node {} reads what it wrote", i + 1);
    }
}

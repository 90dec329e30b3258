//! A three-node cluster on loopback: it forms around a seed, elects a coordinator, allocates
//! fragments only once `--min-members` data nodes joined, every node sees the same map, a
//! SIGKILL of the coordinator leaves a coordinator among the two others, and a restart of all
//! three recovers the same map and epoch. Every wait polls `SHOW CLUSTER` until a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use support::cluster::{CLUSTER_DEADLINE, POLL_EVERY, cluster_args, wait_for_log};
use support::{Node, NodeOptions, free_loopback_port, simple_rows};

const FRAGMENTS: u32 = 6;

/// One row of `SHOW CLUSTER`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    node: u32,
    role: String,
    peer_addr: String,
    reachable: bool,
    voter: bool,
    coordinator: bool,
    epoch: u64,
    fragments: u64,
    this: bool,
}

/// The cluster as one node shows it, or `None` if it cannot be asked right now.
async fn show_cluster(node: &Node) -> Option<Vec<Row>> {
    let (client, conn) =
        tokio_postgres::connect(&node.conn_str(), tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let messages = client.simple_query("SHOW CLUSTER").await.ok()?;
    let b = |v: &Option<String>| v.as_deref() == Some("t");
    Some(
        simple_rows(&messages)
            .iter()
            .map(|r| Row {
                node: r[0].as_deref().unwrap().parse().unwrap(),
                role: r[1].clone().unwrap(),
                peer_addr: r[2].clone().unwrap(),
                reachable: b(&r[4]),
                voter: b(&r[5]),
                coordinator: b(&r[6]),
                epoch: r[7].as_deref().unwrap().parse().unwrap(),
                fragments: r[8].as_deref().unwrap().parse().unwrap(),
                this: b(&r[9]),
            })
            .collect(),
    )
}

/// What must agree across nodes: who is in the cluster and the map (epoch, fragments per node).
fn map_of(rows: &[Row]) -> (u64, BTreeMap<u32, (String, u64)>) {
    let epoch = rows.first().map_or(0, |r| r.epoch);
    (epoch, rows.iter().map(|r| (r.node, (r.role.clone(), r.fragments))).collect())
}

/// Polls every node in `nodes` until `done` holds for all their views; fails with the last
/// views and every log after the deadline.
async fn wait_until(
    nodes: &[&Node],
    what: &str,
    done: impl Fn(&[Vec<Row>]) -> bool,
) -> Vec<Vec<Row>> {
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    loop {
        let mut views = Vec::new();
        for n in nodes {
            match show_cluster(n).await {
                Some(v) => views.push(v),
                None => break,
            }
        }
        if views.len() == nodes.len() && done(&views) {
            return views;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = nodes.iter().map(|n| n.log_text()).collect();
            panic!(
                "{what}: not reached in {CLUSTER_DEADLINE:?}; last views {views:#?}\nlogs:\n{}",
                logs.join("\n-----\n")
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

fn options(id: u32, peer: u16, join: Option<u16>) -> NodeOptions {
    // The whole cluster stops and starts again: nodes leave with their fragments (a graceful
    // stop would otherwise hand them to the nodes still running).
    options_with(id, peer, join, &["--min-members", "3", "--handoff-on-shutdown", "false"])
}

fn options_with(id: u32, peer: u16, join: Option<u16>, more: &[&str]) -> NodeOptions {
    let extra_args = cluster_args("e2e", id, peer, join, more);
    NodeOptions { executors: 1, fragments: FRAGMENTS, extra_args, ..NodeOptions::default() }
}

/// The single coordinator every view agrees on, if they agree on one.
fn agreed_leader(views: &[Vec<Row>]) -> Option<u32> {
    let leaders: Vec<Option<u32>> =
        views.iter().map(|v| v.iter().find(|r| r.coordinator).map(|r| r.node)).collect();
    let first = *leaders.first()?;
    leaders.iter().all(|l| *l == first).then_some(first).flatten()
}

// Checks the whole life of a small cluster: formation around a seed, no allocation before
// min-members (3) data nodes, an identical map and one coordinator on every node, a
// coordinator again after the leader's SIGKILL, and the same map and epoch after every node
// restarted.
#[tokio::test]
async fn cluster_forms_allocates_survives_and_recovers() {
    let ports: Vec<u16> = (0..3).map(|_| free_loopback_port()).collect();
    let mut nodes = vec![Node::start_with(options(1, ports[0], None))];
    for n in nodes.iter_mut() {
        // Expected whenever a member stops: the others notice once.
        n.expect_log("is unreachable");
    }
    let seed = wait_until(&[&nodes[0]], "the seed leads", |v| {
        v[0].len() == 1 && v[0][0].coordinator && v[0][0].this
    })
    .await;
    assert_eq!(seed[0][0].epoch, 0, "nothing allocated with one of three members");
    assert_eq!(seed[0][0].fragments, 0);

    let mut second = Node::start_with(options(2, ports[1], Some(ports[0])));
    second.expect_log("is unreachable");
    nodes.push(second);
    let two = wait_until(&[&nodes[0], &nodes[1]], "two members", |v| {
        v.iter().all(|rows| rows.len() == 2 && rows.iter().all(|r| r.voter))
    })
    .await;
    for view in &two {
        assert!(view.iter().all(|r| r.epoch == 0 && r.fragments == 0), "allocated early: {view:?}");
    }

    let mut third = Node::start_with(options(3, ports[2], Some(ports[0])));
    third.expect_log("is unreachable");
    nodes.push(third);
    let all: Vec<&Node> = nodes.iter().collect();
    let formed = wait_until(&all, "three members and a map", |v| {
        let first = map_of(&v[0]);
        first.0 == 1
            && first.1.len() == 3
            && v.iter().all(|rows| map_of(rows) == first && rows.iter().all(|r| r.reachable))
            && agreed_leader(v).is_some()
    })
    .await;
    let (epoch, placement) = map_of(&formed[0]);
    assert_eq!(epoch, 1);
    assert_eq!(placement.values().map(|(_, f)| *f).sum::<u64>(), u64::from(FRAGMENTS));
    assert!(placement.values().all(|(role, f)| role == "data" && *f == 2), "{placement:?}");
    for (i, view) in formed.iter().enumerate() {
        let me: Vec<u32> = view.iter().filter(|r| r.this).map(|r| r.node).collect();
        assert_eq!(me, [u32::try_from(i).unwrap() + 1], "each node knows itself");
    }

    // SIGKILL the coordinator: the two others elect one of themselves and keep the map.
    let leader = agreed_leader(&formed).unwrap();
    let victim = usize::try_from(leader - 1).unwrap();
    nodes[victim].kill9();
    let survivors: Vec<&Node> =
        nodes.iter().enumerate().filter(|(i, _)| *i != victim).map(|(_, n)| n).collect();
    let after = wait_until(&survivors, "a new coordinator", |v| {
        agreed_leader(v).is_some_and(|l| l != leader)
            && v.iter().all(|rows| rows.iter().any(|r| r.node == leader && !r.reachable))
    })
    .await;
    for view in &after {
        assert_eq!(map_of(view), (epoch, placement.clone()), "the map survives the leader");
    }

    // Restart the killed node, then stop all three and start them again.
    nodes[victim].start_again();
    for n in nodes.iter_mut() {
        n.stop();
    }
    for n in nodes.iter_mut() {
        n.start_again();
    }
    let all: Vec<&Node> = nodes.iter().collect();
    let recovered = wait_until(&all, "the recovered cluster", |v| {
        agreed_leader(v).is_some() && v.iter().all(|rows| rows.iter().all(|r| r.reachable))
    })
    .await;
    for view in &recovered {
        assert_eq!(map_of(view), (epoch, placement.clone()), "the map survives a full restart");
    }

    // Lose the majority: the last node has no coordinator to talk to, yet it still answers
    // SHOW CLUSTER with the map it knows and serves statements on its own fragments (the data
    // path does not wait for the control plane).
    nodes[1].kill9();
    nodes[2].kill9();
    let alone = wait_until(&[&nodes[0]], "two members unreachable", |v| {
        v[0].iter().filter(|r| !r.reachable).count() == 2
    })
    .await;
    assert_eq!(map_of(&alone[0]), (epoch, placement.clone()), "the map is still known");
    let client = nodes[0].connect().await;
    let id = local_id(&client, 1).await;
    client
        .simple_query(&format!("INSERT INTO notes VALUES ('{id}', '{{\"n\": 1}}')"))
        .await
        .unwrap();
    let rows = simple_rows(
        &client.simple_query(&format!("SELECT id() FROM notes WHERE id() = '{id}'")).await.unwrap(),
    );
    assert_eq!(rows, [[Some(id.clone())]]);
    drop(client);
    nodes[1].start_again();
    nodes[2].start_again();
    let all: Vec<&Node> = nodes.iter().collect();
    wait_until(&all, "the majority is back", |v| {
        agreed_leader(v).is_some() && v.iter().all(|rows| rows.iter().all(|r| r.reachable))
    })
    .await;
    for n in nodes.iter_mut() {
        n.stop();
    }
}

/// A document id that lands in a fragment node `me` serves itself (its SHOW FRAGMENTS rows
/// owned by it: single-node style rows name an executor only, cluster rows `node N …`).
async fn local_id(client: &tokio_postgres::Client, me: u32) -> String {
    let rows = simple_rows(&client.simple_query("SHOW FRAGMENTS").await.unwrap());
    let ranges: Vec<(u32, u32)> = rows
        .iter()
        .filter(|r| {
            let owner = r[2].as_deref().unwrap_or("");
            !owner.starts_with("node ") || owner.starts_with(&format!("node {me} "))
        })
        .map(|r| {
            let range = r[1].as_deref().unwrap().trim_matches(|c| c == '[' || c == ')');
            let (a, b) = range.split_once(", ").unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert!(!ranges.is_empty(), "node {me} serves no fragment: {rows:?}");
    (0..100_000)
        .map(|i| format!("notes/{i}"))
        .find(|id| {
            let shard = router::shard_of(id).unwrap().shard().unwrap().get();
            ranges.iter().any(|(a, b)| (*a..*b).contains(&shard))
        })
        .unwrap()
}

// Checks roles and refusals: a proxy joins as a non-voting member that gets no fragment; a
// second data node joining after allocation makes the coordinator plan two moves, which it
// hands off one by one (2 vs 2 fragments, epoch 5); a node of another cluster is refused,
// with the reason logged once on both sides, and stays outside.
#[tokio::test]
async fn proxy_rebalance_decisions_and_wrong_cluster() {
    let seed_port = free_loopback_port();
    let mut seed = Node::start_with(NodeOptions {
        fragments: 4,
        ..options_with(1, seed_port, None, &["--min-members", "1"])
    });
    seed.expect_log("is unreachable");
    seed.expect_log("refused a peer");
    wait_until(&[&seed], "the seed allocates alone", |v| {
        v[0].len() == 1 && v[0][0].coordinator && v[0][0].epoch == 1 && v[0][0].fragments == 4
    })
    .await;

    let mut proxy = Node::start_with(options_with(
        7,
        free_loopback_port(),
        Some(seed_port),
        &["--role", "proxy"],
    ));
    proxy.expect_log("is unreachable");
    let views = wait_until(&[&seed, &proxy], "the proxy joins", |v| {
        v.iter().all(|rows| rows.len() == 2 && rows.iter().all(|r| r.reachable))
    })
    .await;
    for view in &views {
        let p = view.iter().find(|r| r.node == 7).unwrap();
        assert_eq!(p.role, "proxy");
        assert!(!p.voter, "a proxy never votes");
        assert!(!p.coordinator);
        assert_eq!(p.fragments, 0);
    }

    let mut data = Node::start_with(NodeOptions {
        fragments: 4,
        ..options_with(2, free_loopback_port(), Some(seed_port), &[])
    });
    data.expect_log("is unreachable");
    wait_for_log(&seed, "handoff committed", 2).await;
    let views = wait_until(&[&seed, &proxy, &data], "three members, the moves handed off", |v| {
        v.iter()
            .all(|rows| rows.len() == 3 && rows.iter().all(|r| r.reachable) && map_of(rows).0 == 5)
    })
    .await;
    for view in &views {
        let (epoch, placement) = map_of(view);
        assert_eq!(epoch, 5, "each of the two handoffs bumps the epoch when begun and committed");
        assert_eq!(placement[&1].1, 2);
        assert_eq!(placement[&2].1, 2);
        assert_eq!(placement[&7].1, 0, "nothing moves to a proxy");
        assert!(view.iter().find(|r| r.node == 2).unwrap().voter, "a data node votes");
    }
    assert_eq!(
        seed.log_lines().iter().filter(|l| l.contains("coordinator planned a move")).count(),
        2,
        "4 vs 0 fragments with threshold 1: two moves reach 2 vs 2"
    );

    let mut stranger = Node::start_with(NodeOptions {
        extra_args: vec![
            "--cluster-name".into(),
            "other".into(),
            "--node-id".into(),
            "9".into(),
            "--peer-listen".into(),
            format!("127.0.0.1:{}", free_loopback_port()),
            "--join".into(),
            format!("127.0.0.1:{seed_port}"),
        ],
        ..NodeOptions::default()
    });
    stranger.expect_log("cannot join");
    wait_for_log(&stranger, "cannot join", 1).await;
    wait_for_log(&seed, "belongs to cluster \"other\"", 1).await;
    let alone = show_cluster(&stranger).await.unwrap();
    assert_eq!(alone.len(), 1, "the stranger is in no cluster: {alone:?}");
    assert!(!alone[0].coordinator);
    stranger.stop();
    let refusals = seed.log_lines().iter().filter(|l| l.contains("refused a peer")).count();
    assert_eq!(refusals, 1, "the refusal is logged once");
    let cannot = stranger.log_lines().iter().filter(|l| l.contains("cannot join")).count();
    assert_eq!(cannot, 1, "the failed join is logged once");
    data.stop();
    proxy.stop();
    seed.stop();
}

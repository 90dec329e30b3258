//! `ALTER CLUSTER REMOVE NODE`: a member that stopped for good is forgotten by the cluster, so
//! nothing waits for it any more. Refused for an unknown node, a node still running and a node
//! that still owns fragments (a SIGKILLed data node: removing it would lose them); a data node
//! stopped with SIGTERM (its fragments handed to the others) and a stopped proxy are removed,
//! from the member list and from the raft voters, after which a configuration change is in
//! force when its statement returns (with the proxy a member, it stayed pending). A removed
//! node started again joins as a member anew.
//!
//! Also: nothing is placed on a member that stopped. A data node stopped with SIGTERM while
//! it holds no fragment is recorded as leaving all the same; a member that does not answer is
//! no target for a leaving node's fragments; a planned move to it off a leaving node is
//! dropped and planned again elsewhere, so the drain finishes (before, each of these held the
//! drain until it gave up with a WARN and left its fragments unavailable).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::cluster::{cluster_args, local_fragments, query, simple, wait_for, wait_for_log};
use support::{Node, NodeOptions, free_loopback_port};

const FRAGMENTS: u32 = 6;

fn options(id: u32, peer: u16, join: Option<u16>, more: &[&str]) -> NodeOptions {
    let extra_args = cluster_args("remove", id, peer, join, more);
    NodeOptions { executors: 1, fragments: FRAGMENTS, extra_args, ..NodeOptions::default() }
}

fn start(options: NodeOptions) -> Node {
    let mut node = Node::start_with(options);
    // Expected whenever a member stops: the others notice once.
    node.expect_log("is unreachable");
    node
}

/// `SHOW CLUSTER` on `node` as (node, reachable, voter, fragments) rows, if it answers.
async fn members(node: &Node) -> Option<Vec<(u32, bool, bool, u64)>> {
    let rows = simple(node, "SHOW CLUSTER").await?;
    let b = |v: &Option<String>| v.as_deref() == Some("t");
    Some(
        rows.iter()
            .map(|r| {
                (
                    r[0].as_deref().unwrap().parse().unwrap(),
                    b(&r[4]),
                    b(&r[5]),
                    r[8].as_deref().unwrap().parse().unwrap(),
                )
            })
            .collect(),
    )
}

// Checks the refusals, the removal of a gracefully stopped data node and of a stopped proxy
// (gone from every view and from the voters; a configuration change is then in force at
// once), and a removed node joining again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_remove_stopped_members() {
    let seed_port = free_loopback_port();
    let third_port = free_loopback_port();
    let mut first = start(options(1, seed_port, None, &["--min-members", "3"]));
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), &[]));
    let mut third = start(options(3, third_port, Some(seed_port), &[]));
    let mut proxy = start(options(4, free_loopback_port(), Some(seed_port), &["--role", "proxy"]));
    let all = [&first, &second, &third, &proxy];
    wait_for(&all, "four members, an allocated map, everyone reachable", || async {
        let m = members(&first).await?;
        let fragments: u64 = m.iter().map(|r| r.3).sum();
        (m.len() == 4 && fragments == u64::from(FRAGMENTS) && m.iter().all(|r| r.1)).then_some(())
    })
    .await;
    let conn = first.conn_str();

    let err = query(&conn, "ALTER CLUSTER REMOVE NODE 9").await.unwrap_err();
    assert!(err.starts_with("42704:"), "{err}");
    let err = query(&conn, "ALTER CLUSTER REMOVE NODE n3").await.unwrap_err();
    assert!(err.starts_with("55000:") && err.contains("is running"), "{err}");

    // A SIGKILLed data node keeps its fragments: removing it would lose them.
    third.kill9();
    wait_for(&[&first], "node 3 unreachable", || async {
        members(&first).await?.iter().any(|r| r.0 == 3 && !r.1).then_some(())
    })
    .await;
    let err = query(&conn, "ALTER CLUSTER REMOVE NODE 3").await.unwrap_err();
    assert!(err.starts_with("55000:") && err.contains("fragment"), "{err}");

    // Started again and stopped with SIGTERM, it hands its fragments to the others first.
    third.start_again();
    wait_for(&[&first, &third], "node 3 back", || async {
        members(&first).await?.iter().any(|r| r.0 == 3 && r.1).then_some(())
    })
    .await;
    third.stop();
    proxy.stop();
    wait_for(&[&first, &second], "nodes 3 and 4 down, node 3 without fragments", || async {
        let m = members(&first).await?;
        let down = m.iter().filter(|r| (r.0 == 3 || r.0 == 4) && !r.1 && r.3 == 0).count();
        (down == 2).then_some(())
    })
    .await;
    query(&conn, "ALTER CLUSTER REMOVE NODE 3").await.unwrap();
    query(&second.conn_str(), "ALTER CLUSTER REMOVE NODE n4;").await.unwrap();
    let err = query(&conn, "ALTER CLUSTER REMOVE NODE 4").await.unwrap_err();
    assert!(err.starts_with("42704:"), "removed already: {err}");
    for node in [&first, &second] {
        wait_for(&[&first, &second], "two members left in every view", || async {
            let m = members(node).await?;
            let ids: Vec<u32> = m.iter().map(|r| r.0).collect();
            let fragments: u64 = m.iter().map(|r| r.3).sum();
            let voting = m.iter().all(|r| r.1 && r.2);
            (ids == [1, 2] && voting && fragments == u64::from(FRAGMENTS)).then_some(())
        })
        .await;
    }

    // Nobody waits for the removed proxy: the change is in force when the statement returns.
    query(&conn, r#"CREATE TABLE inv () WITH (sharding = '{"Fields": ["Customer"]}')"#)
        .await
        .unwrap();
    let rows = query(&conn, "SHOW SHARDING inv").await.unwrap();
    assert_eq!(rows[0][2].as_deref(), Some("in force"), "{rows:?}");

    // The removed data node started again joins anew (it may receive fragments again).
    third.start_again();
    wait_for(&[&first, &second, &third], "node 3 a member again", || async {
        let m = members(&first).await?;
        (m.len() == 3 && m.iter().all(|r| r.1 && r.2)).then_some(())
    })
    .await;
    third.stop();
    second.stop();
    first.stop();
}

/// `SHOW CLUSTER` on `node` as (node, reachable, leaving, fragments) rows, if it answers.
async fn leaving(node: &Node) -> Option<Vec<(u32, bool, bool, u64)>> {
    let rows = simple(node, "SHOW CLUSTER").await?;
    let b = |v: &Option<String>| v.as_deref() == Some("t");
    let n = |v: &Option<String>| v.as_deref().unwrap().parse::<u64>().unwrap();
    Some(
        rows.iter()
            .map(|r| (u32::try_from(n(&r[0])).unwrap(), b(&r[4]), b(&r[11]), n(&r[8])))
            .collect(),
    )
}

// Checks nothing is placed on a stopped member: with manual allocation (the strategy plans
// no rebalance), nodes 3 and 4 join holding nothing. Node 3 stopped with SIGTERM is recorded
// as leaving; node 4 is killed and an operator's move of one of node 2's fragments to it
// waits. Node 2 stopped with SIGTERM then hands every fragment to node 1: the move to node 4
// is dropped and planned again, and node 4 (least loaded, but silent) receives nothing. Its
// `stop` asserts no WARN (the drain giving up is one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_stopped_members_receive_nothing() {
    let seed_port = free_loopback_port();
    let manual = ["--allocation", "manual"];
    // Node 1, the last to stop, leaves with its fragments without waiting for anyone.
    let seed_args =
        ["--min-members", "2", "--allocation", "manual", "--handoff-on-shutdown", "false"];
    let mut first = start(options(1, seed_port, None, &seed_args));
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), &manual));
    wait_for(&[&first, &second], "the map on nodes 1 and 2", || async {
        let m = leaving(&first).await?;
        (m.len() == 2 && m.iter().all(|r| r.1 && r.3 == 3)).then_some(())
    })
    .await;
    let mut third = start(options(3, free_loopback_port(), Some(seed_port), &manual));
    let mut fourth = start(options(4, free_loopback_port(), Some(seed_port), &manual));
    let all = [&first, &second, &third, &fourth];
    wait_for(&all, "four members, everyone reachable, nodes 3 and 4 without fragments", || async {
        let m = leaving(&first).await?;
        let fragments: u64 = m.iter().map(|r| r.3).sum();
        (m.len() == 4 && fragments == u64::from(FRAGMENTS) && m.iter().all(|r| r.1 && !r.2))
            .then_some(())
    })
    .await;
    let conn = first.conn_str();

    third.stop();
    wait_for_log(&third, "no fragments to hand off; recorded as leaving", 1).await;
    wait_for(&[&first], "node 3 down and leaving", || async {
        leaving(&first).await?.iter().any(|r| r.0 == 3 && !r.1 && r.2).then_some(())
    })
    .await;
    // Three voters left, so killing node 4 keeps a quorum.
    query(&conn, "ALTER CLUSTER REMOVE NODE 3").await.unwrap();

    fourth.kill9();
    wait_for(&[&first], "node 4 unreachable", || async {
        leaving(&first).await?.iter().any(|r| r.0 == 4 && !r.1).then_some(())
    })
    .await;
    let of_second = local_fragments(&second).await.unwrap();
    let moved = of_second.keys().next().unwrap();
    query(&conn, &format!("ALTER FRAGMENT {moved} MOVE TO NODE 4")).await.unwrap();
    second.stop();
    wait_for(&[&first], "every fragment on node 1", || async {
        let m = leaving(&first).await?;
        let on = |node: u32| m.iter().find(|r| r.0 == node).map(|r| r.3);
        ((on(1), on(2), on(4)) == (Some(6), Some(0), Some(0))).then_some(())
    })
    .await;
    wait_for_log(&first, "coordinator dropped a move off a leaving node", 1).await;
    first.stop();
}

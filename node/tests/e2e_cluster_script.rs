//! `scripts/cluster.sh` end to end: `start 3` forms a cluster, `status` shows every node up
//! and SHOW CLUSTER, a second `start 3` is a no-op, `start 4` adds a fourth node that joins,
//! `stop` stops all (twice: the second is a no-op) and `start 4` brings the same cluster back.
//! Every wait polls SHOW CLUSTER until a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::process::Command;
use std::time::Instant;

use support::cluster::{CLUSTER_DEADLINE, POLL_EVERY, ScriptCluster};

/// `(reachable members, epoch)` as node `node` shows them, or `None` if it does not answer.
/// Asked with psql, which closes its connection first: a connection the server closes first
/// leaves a TIME_WAIT on the node's port that keeps its restart from listening there (see the
/// report of this test's commit).
fn show_cluster(cluster: &ScriptCluster, node: u16) -> Option<(usize, u64)> {
    let out = Command::new("psql")
        .args(["-X", "-At", "-h", "127.0.0.1", "-U", "tessera", "-d", "tessera"])
        .args(["-p", &cluster.pg_port(node).to_string(), "-c", "SHOW CLUSTER"])
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    let reachable = rows.iter().filter(|r| r.get(4) == Some(&"t")).count();
    let epoch = rows.first()?.get(7)?.parse().ok()?;
    Some((reachable, epoch))
}

/// Polls until node `node` shows `members` reachable members and an allocated map.
fn wait_members(cluster: &ScriptCluster, node: u16, members: usize) {
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    let mut last = None;
    while Instant::now() < deadline {
        last = show_cluster(cluster, node);
        if last.is_some_and(|(m, epoch)| m == members && epoch >= 1) {
            return;
        }
        std::thread::sleep(POLL_EVERY);
    }
    panic!("node {node} never showed {members} members: last {last:?}\n{}", cluster.logs());
}

// Checks start, idempotent start, status, a fourth node joining, stop, idempotent stop and a
// restart of the whole cluster, all through the script.
#[test]
fn cluster_script_start_status_join_stop_restart() {
    let cluster = ScriptCluster::new("script-lifecycle", 6);
    let out = cluster.run(&["start", "3"]);
    assert_eq!(out.matches(" started (pid ").count(), 3, "{out}");
    wait_members(&cluster, 1, 3);
    let out = cluster.run(&["start", "3"]);
    assert_eq!(out.matches(" already running ").count(), 3, "a second start is a no-op: {out}");
    let status = cluster.run(&["status"]);
    assert_eq!(status.matches(" up\n").count(), 3, "{status}");
    assert!(status.contains("SHOW CLUSTER on node 1"), "{status}");
    assert!(status.contains("(3 rows)"), "psql shows the three members: {status}");

    let out = cluster.run(&["start", "4"]);
    assert_eq!(out.matches(" already running ").count(), 3, "{out}");
    assert!(out.contains("node 4 started"), "{out}");
    wait_members(&cluster, 1, 4);
    wait_members(&cluster, 4, 4);

    let out = cluster.run(&["stop"]);
    assert_eq!(out.matches(" stopped\n").count(), 4, "{out}");
    let out = cluster.run(&["stop"]);
    assert_eq!(out.matches(" not running\n").count(), 4, "a second stop is a no-op: {out}");
    let status = cluster.run(&["status"]);
    assert_eq!(status.matches(" down\n").count(), 4, "{status}");

    let out = cluster.run(&["start", "4"]);
    assert_eq!(out.matches(" started (pid ").count(), 4, "{out}");
    wait_members(&cluster, 1, 4);
    wait_members(&cluster, 3, 4);
    let out = cluster.run(&["stop"]);
    assert_eq!(out.matches(" stopped\n").count(), 4, "{out}");
}

// Checks bad arguments are refused without starting anything.
#[test]
fn cluster_script_refuses_bad_arguments() {
    let cluster = ScriptCluster::new("script-bad-args", 6);
    for args in [&["start"][..], &["start", "0"], &["start", "x"], &["bounce", "3"], &[]] {
        let out = cluster.script(args);
        assert!(!out.status.success(), "{args:?} must fail");
    }
    let status = cluster.run(&["status"]);
    assert!(status.contains("no nodes under"), "{status}");
}

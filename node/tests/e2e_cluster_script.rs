//! `scripts/cluster.sh` end to end: `start 3` forms a cluster, `status` shows every node up
//! and SHOW CLUSTER, a second `start 3` is a no-op, `start 4` adds a fourth node that joins,
//! `stop` stops all (twice: the second is a no-op) and `start 4` brings the same cluster back.
//! Every wait polls SHOW CLUSTER until a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::repo_root;

/// How long a cluster change may take before the test fails with the logs.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(90);
/// Pause between two polls of `SHOW CLUSTER` (polling, not synchronisation).
const POLL_EVERY: Duration = Duration::from_millis(100);
/// Ports the script derives per node (pg, peer, metrics) from the base: base + 10 * i + k.
const NODES: u16 = 4;

/// A base port whose derived ports were all free a moment ago. Chosen below Linux's
/// ephemeral range (32768 and up): a node restarted on the same port must not find it taken
/// as the local port of some other process's outgoing connection.
fn free_base_port() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    for attempt in 0..256u32 {
        let slot = seed.wrapping_add(attempt.wrapping_mul(7919)) % 2_000;
        let base = 10_000 + u16::try_from(slot).expect("small") * 10;
        let ports = (1..=NODES).flat_map(|i| (0..3).map(move |k| base + 10 * i + k));
        let held: Vec<_> = ports.map(|p| TcpListener::bind(("127.0.0.1", p))).collect();
        if held.iter().all(Result::is_ok) {
            return base;
        }
    }
    panic!("no free block of ports found");
}

/// The cluster the script runs, stopped (by the script) when dropped.
struct Cluster {
    dir: PathBuf,
    base: u16,
}

impl Cluster {
    fn new(test: &str) -> Cluster {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cluster-script-{test}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("remove a stale dir");
        }
        Cluster { dir, base: free_base_port() }
    }

    fn script(&self, args: &[&str]) -> Output {
        Command::new("bash")
            .arg(repo_root().join("scripts/cluster.sh"))
            .args(args)
            .env("TESSERA_BIN", env!("CARGO_BIN_EXE_tessera"))
            .env("TESSERA_CLUSTER_DIR", &self.dir)
            .env("TESSERA_CLUSTER_BASE_PORT", self.base.to_string())
            .env("TESSERA_CLUSTER_NAME", "script")
            .env("TESSERA_CLUSTER_FRAGMENTS", "6")
            .output()
            .expect("run scripts/cluster.sh")
    }

    /// Runs the script and fails the test (with every node's log) if it fails.
    fn run(&self, args: &[&str]) -> String {
        let out = self.script(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            panic!(
                "cluster.sh {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                self.logs()
            );
        }
        stdout
    }

    fn logs(&self) -> String {
        (1..=NODES)
            .map(|i| {
                let log = self.dir.join(format!("node{i}/log"));
                format!("--- node {i}:\n{}", std::fs::read_to_string(log).unwrap_or_default())
            })
            .collect()
    }

    fn pg_port(&self, node: u16) -> u16 {
        self.base + 10 * node
    }

    /// `(reachable members, epoch)` as node `node` shows them, or `None` if it does not answer.
    /// Asked with psql, which closes its connection first: a connection the server closes
    /// first leaves a TIME_WAIT on the node's port that keeps its restart from listening
    /// there (see the report of this test's commit).
    fn show_cluster(&self, node: u16) -> Option<(usize, u64)> {
        let out = Command::new("psql")
            .args(["-X", "-At", "-h", "127.0.0.1", "-U", "tessera", "-d", "tessera"])
            .args(["-p", &self.pg_port(node).to_string(), "-c", "SHOW CLUSTER"])
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
    fn wait_members(&self, node: u16, members: usize) {
        let deadline = Instant::now() + CLUSTER_DEADLINE;
        let mut last = None;
        while Instant::now() < deadline {
            last = self.show_cluster(node);
            if last.is_some_and(|(m, epoch)| m == members && epoch >= 1) {
                return;
            }
            std::thread::sleep(POLL_EVERY);
        }
        panic!("node {node} never showed {members} members: last {last:?}\n{}", self.logs());
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.script(&["stop"]);
    }
}

// Checks start, idempotent start, status, a fourth node joining, stop, idempotent stop and a
// restart of the whole cluster, all through the script.
#[test]
fn cluster_script_start_status_join_stop_restart() {
    let cluster = Cluster::new("lifecycle");
    let out = cluster.run(&["start", "3"]);
    assert_eq!(out.matches(" started (pid ").count(), 3, "{out}");
    cluster.wait_members(1, 3);
    let out = cluster.run(&["start", "3"]);
    assert_eq!(out.matches(" already running ").count(), 3, "a second start is a no-op: {out}");
    let status = cluster.run(&["status"]);
    assert_eq!(status.matches(" up\n").count(), 3, "{status}");
    assert!(status.contains("SHOW CLUSTER on node 1"), "{status}");
    assert!(status.contains("(3 rows)"), "psql shows the three members: {status}");

    let out = cluster.run(&["start", "4"]);
    assert_eq!(out.matches(" already running ").count(), 3, "{out}");
    assert!(out.contains("node 4 started"), "{out}");
    cluster.wait_members(1, 4);
    cluster.wait_members(4, 4);

    let out = cluster.run(&["stop"]);
    assert_eq!(out.matches(" stopped\n").count(), 4, "{out}");
    let out = cluster.run(&["stop"]);
    assert_eq!(out.matches(" not running\n").count(), 4, "a second stop is a no-op: {out}");
    let status = cluster.run(&["status"]);
    assert_eq!(status.matches(" down\n").count(), 4, "{status}");

    let out = cluster.run(&["start", "4"]);
    assert_eq!(out.matches(" started (pid ").count(), 4, "{out}");
    cluster.wait_members(1, 4);
    cluster.wait_members(3, 4);
    let out = cluster.run(&["stop"]);
    assert_eq!(out.matches(" stopped\n").count(), 4, "{out}");
}

// Checks bad arguments are refused without starting anything.
#[test]
fn cluster_script_refuses_bad_arguments() {
    let cluster = Cluster::new("bad-args");
    for args in [&["start"][..], &["start", "0"], &["start", "x"], &["bounce", "3"], &[]] {
        let out = cluster.script(args);
        assert!(!out.status.success(), "{args:?} must fail");
    }
    let status = cluster.run(&["status"]);
    assert!(status.contains("no nodes under"), "{status}");
}

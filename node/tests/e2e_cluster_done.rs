//! Issue #7's "Done when", as a test: `scripts/cluster.sh start 3` (the test's binary, a
//! private base port and directory), the bank workload with accounts on every fragment, a
//! fourth node joining (`start 4`) while it runs, `kill -9` of the coordinator leader (found
//! with SHOW CLUSTER), its restart (`start 4` again: only the dead node starts), and the bank
//! checker: every acknowledged transfer applied exactly once, nothing lost, the total
//! unchanged; then the bank runs through the fourth node (a region without fragments) and is
//! checked again. Every wait polls a condition until a deadline. Rebalancing is off (see
//! `Cluster::script`): the fourth node joins without receiving fragments.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[path = "support/bank.rs"]
mod bank;
mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bank::checker::{self, Ledger};
use bank::{Bank, Flavor, Load, PHASE_TIMEOUT, Phase, Shared};
use support::{repo_root, simple_rows};

/// How long a cluster change may take before the test fails with the logs.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(120);
/// Pause between two polls (polling, not synchronisation).
const POLL_EVERY: Duration = Duration::from_millis(100);
const NODES: u16 = 4;
const FRAGMENTS: usize = 6;
/// Accounts: 4 per fragment.
const ACCOUNTS: usize = 24;
const LOAD: Load = Load { transfer_clients: 4, read_clients: 1, amount_max: 20 };
/// Acknowledged transfers before the fourth node joins, before the kill (after the join),
/// and through the fourth node at the end.
const BEFORE_JOIN: u64 = 20;
const BEFORE_KILL: u64 = 30;
const THROUGH_FOURTH: u64 = 20;
const SEED: u64 = 0xD0_4E;

/// A base port whose derived ports (base + 10 * i + 0..3) were all free a moment ago, below
/// the ephemeral range (see e2e_cluster_script.rs).
fn free_base_port() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id()
        ^ 0x5A5A;
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
    fn new() -> Cluster {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cluster-done-{}", std::process::id()));
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
            .env("TESSERA_CLUSTER_NAME", "done")
            .env("TESSERA_CLUSTER_FRAGMENTS", FRAGMENTS.to_string())
            .output()
            .expect("run scripts/cluster.sh")
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.script(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "cluster.sh {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
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

    fn conn_str(&self, node: u16) -> String {
        format!(
            "host=127.0.0.1 port={} user=tessera dbname=tessera connect_timeout=5",
            self.base + 10 * node
        )
    }

    fn pid(&self, node: u16) -> i32 {
        let text = std::fs::read_to_string(self.dir.join(format!("node{node}/pid"))).unwrap();
        text.trim().parse().unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.script(&["stop"]);
    }
}

async fn simple(conn_str: &str, sql: &str) -> Option<Vec<Vec<Option<String>>>> {
    let (client, conn) = tokio_postgres::connect(conn_str, tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let messages = client.simple_query(sql).await.ok()?;
    Some(simple_rows(&messages))
}

/// Polls `check` until it gives a value; fails with every log after the deadline.
async fn wait_for<T, F, Fut>(cluster: &Cluster, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not reached\n{}", cluster.logs());
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Waits until `node` shows `members` reachable members, an allocated map, and every
/// fragment served; returns the coordinator leader's id.
async fn wait_members(cluster: &Cluster, node: u16, members: usize) -> u16 {
    let conn = cluster.conn_str(node);
    wait_for(cluster, &format!("node {node} with {members} members"), || async {
        let rows = simple(&conn, "SHOW CLUSTER").await?;
        let reachable = rows.iter().filter(|r| r[4].as_deref() == Some("t")).count();
        let epoch: u64 = rows.first()?[7].as_deref()?.parse().ok()?;
        let leader = rows.iter().find(|r| r[6].as_deref() == Some("t"))?;
        let fragments = simple(&conn, "SHOW FRAGMENTS").await?;
        (reachable == members && epoch >= 1 && fragments.len() == FRAGMENTS)
            .then(|| leader[0].as_deref()?.parse().ok())
            .flatten()
    })
    .await
}

/// Waits until `node` reads every account and lists no prepared transaction.
async fn wait_settled(cluster: &Cluster, node: u16) {
    let conn = cluster.conn_str(node);
    wait_for(cluster, &format!("node {node} settled"), || async {
        let rows = simple(&conn, "SHOW TRANSACTIONS").await?;
        if rows.iter().any(|r| matches!(r[1].as_deref(), Some("prepared" | "finishing"))) {
            return None;
        }
        let count = simple(&conn, "SELECT count(*) FROM accounts").await?;
        (count[0][0].as_deref() == Some(&ACCOUNTS.to_string())).then_some(())
    })
    .await;
}

/// A bank whose accounts cover every fragment (explicit shards, as in e2e_bank.rs).
async fn open_bank(cluster: &Cluster) -> Arc<Bank> {
    let rows = simple(&cluster.conn_str(1), "SHOW FRAGMENTS").await.unwrap();
    let mut accounts = Vec::new();
    let mut record_suffix = Vec::new();
    for i in 0..ACCOUNTS {
        let r = &rows[i % rows.len()];
        let range = r[1].as_deref().unwrap().trim_matches(|c| c == '[' || c == ')');
        let (start, end) = range.split_once(", ").unwrap();
        let (start, end): (u32, u32) = (start.parse().unwrap(), end.parse().unwrap());
        let shard = start + u32::try_from(i).unwrap();
        assert!(shard < end, "fragment too small");
        accounts.push(format!("a/{i}$@{shard}"));
        record_suffix.push(format!("$@{shard}"));
    }
    let bank =
        Bank { flavor: Flavor::Tessera, ledger: Ledger { accounts, initial: 100 }, record_suffix };
    bank.open(&bank::connect(&cluster.conn_str(1)).await).await;
    Arc::new(bank)
}

async fn check(cluster: &Cluster, node: u16, bank: &Bank, shared: &Shared, when: &str) {
    let state = bank.state(&bank::connect(&cluster.conn_str(node)).await).await;
    eprintln!("bank {when}: {}", shared.summary());
    let violations = checker::check(&bank.ledger, &shared.history(), &state);
    assert!(violations.is_empty(), "bank violated {when}:\n{}", bank::report(&violations));
    assert!(shared.unexpected().is_empty(), "unexpected errors {when}: {:?}", shared.unexpected());
    let total: i64 = state.balances.iter().map(|(_, b)| b).sum();
    assert_eq!(total, i64::try_from(ACCOUNTS).unwrap() * 100, "the total holds {when}");
    shared.settle(&state);
}

async fn until_acked(cluster: &Cluster, shared: &Shared, phase: &Phase, acked: u64, what: &str) {
    let waited = tokio::time::timeout(PHASE_TIMEOUT, bank::run_until(shared, phase, acked)).await;
    assert!(waited.is_ok(), "{what}: timed out: {}\n{}", shared.summary(), cluster.logs());
    assert!(
        shared.acked() >= acked,
        "{what}: clients ended early: {:?}\n{}",
        shared.unexpected(),
        cluster.logs()
    );
}

async fn join(phase: Phase) {
    assert!(tokio::time::timeout(PHASE_TIMEOUT, phase.join()).await.is_ok(), "clients hung");
}

// The "Done when" run of issue #7 (see the module comment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cluster_done_when_bank_join_and_leader_kill() {
    let cluster = Arc::new(Cluster::new());
    let out = cluster.run(&["start", "3"]);
    assert_eq!(out.matches(" started (pid ").count(), 3, "{out}");
    wait_members(&cluster, 1, 3).await;
    let bank = open_bank(&cluster).await;
    let shared = Arc::new(Shared::default());

    // The bank runs through node 2 while node 4 joins.
    let phase = Phase::start(&cluster.conn_str(2), &bank, LOAD, &shared, SEED, 0).await;
    until_acked(&cluster, &shared, &phase, BEFORE_JOIN, "before the join").await;
    let joining = {
        let cluster = Arc::clone(&cluster);
        tokio::task::spawn_blocking(move || cluster.run(&["start", "4"]))
    };
    let out = joining.await.unwrap();
    assert!(out.contains("node 4 started"), "{out}");
    let leader = wait_members(&cluster, 1, 4).await;
    wait_members(&cluster, 4, 4).await;
    until_acked(&cluster, &shared, &phase, shared.acked() + BEFORE_KILL, "after the join").await;

    // kill -9 of the coordinator leader, with transfers in flight.
    eprintln!("killing the coordinator leader, node {leader}");
    // SAFETY: kill(2) with a pid read from the script's pid file and a constant signal.
    let killed = unsafe { libc::kill(cluster.pid(leader), libc::SIGKILL) };
    assert_eq!(killed, 0, "kill -9 of node {leader}");
    shared.stop();
    join(phase).await;
    let out = cluster.run(&["start", "4"]);
    assert!(out.contains(&format!("node {leader} started")), "{out}");
    assert_eq!(out.matches(" already running ").count(), 3, "{out}");
    for node in 1..=NODES {
        wait_members(&cluster, node, 4).await;
        wait_settled(&cluster, node).await;
    }
    check(&cluster, 1, &bank, &shared, "after the leader's restart").await;

    // The bank through the fourth node (a region; fragments reach it by handoff meanwhile).
    let phase = Phase::start(&cluster.conn_str(4), &bank, LOAD, &shared, SEED, 1).await;
    until_acked(&cluster, &shared, &phase, shared.acked() + THROUGH_FOURTH, "through node 4").await;
    shared.stop();
    join(phase).await;
    for node in 1..=NODES {
        wait_settled(&cluster, node).await;
    }
    check(&cluster, 3, &bank, &shared, "at the end").await;
    // The coordinator rebalances onto the fourth node by handoff (3, 3, 2 and 0 fragments
    // differ by more than the threshold): once it owns one, the bank is whole through it.
    let conn = cluster.conn_str(4);
    wait_for(&cluster, "node 4 owns a fragment", || async {
        let rows = simple(&conn, "SHOW FRAGMENTS").await?;
        rows.iter().any(|r| r[2].as_deref().is_some_and(|o| o.starts_with("node 4 "))).then_some(())
    })
    .await;
    for node in 1..=NODES {
        wait_settled(&cluster, node).await;
    }
    check(&cluster, 4, &bank, &shared, "after moves to node 4").await;
    let out = cluster.run(&["stop"]);
    assert_eq!(out.matches(" stopped\n").count(), 4, "{out}");
}

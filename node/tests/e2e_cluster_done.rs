//! Issue #7's "Done when", as a test: `scripts/cluster.sh start 3` (the test's binary, a
//! private base port and directory), the bank workload with accounts on every fragment, a
//! fourth node joining (`start 4`) while it runs, `kill -9` of the coordinator leader (found
//! with SHOW CLUSTER), its restart (`start 4` again: only the dead node starts), and the bank
//! checker: every acknowledged transfer applied exactly once, nothing lost, the total
//! unchanged; then the bank runs through the fourth node and is checked again, and once the
//! coordinator has rebalanced a fragment onto the fourth node (by handoff) once more. Every
//! wait polls a condition until a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[path = "support/bank.rs"]
mod bank;
mod support;

use std::sync::Arc;

use bank::checker::{self, Ledger};
use bank::{Bank, Flavor, Load, PHASE_TIMEOUT, Phase, Shared};
use support::cluster::{ScriptCluster, poll_until, query};

const NODES: u16 = support::cluster::SCRIPT_NODES;
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

/// Rows of `sql` on a fresh connection to `conn`, or `None`.
async fn simple(conn: &str, sql: &str) -> Option<Vec<Vec<Option<String>>>> {
    query(conn, sql).await.ok()
}

/// Polls `check` until it gives a value; fails with every node's log after the deadline.
async fn wait_for<T, F, Fut>(cluster: &ScriptCluster, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    poll_until(what, || cluster.logs(), check).await
}

/// Waits until `node` shows `members` reachable members, an allocated map, and every
/// fragment served; returns the coordinator leader's id.
async fn wait_members(cluster: &ScriptCluster, node: u16, members: usize) -> u16 {
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
async fn wait_settled(cluster: &ScriptCluster, node: u16) {
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
async fn open_bank(cluster: &ScriptCluster) -> Arc<Bank> {
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

async fn check(cluster: &ScriptCluster, node: u16, bank: &Bank, shared: &Shared, when: &str) {
    let state = bank.state(&bank::connect(&cluster.conn_str(node)).await).await;
    eprintln!("bank {when}: {}", shared.summary());
    let violations = checker::check(&bank.ledger, &shared.history(), &state);
    assert!(violations.is_empty(), "bank violated {when}:\n{}", bank::report(&violations));
    assert!(shared.unexpected().is_empty(), "unexpected errors {when}: {:?}", shared.unexpected());
    let total: i64 = state.balances.iter().map(|(_, b)| b).sum();
    assert_eq!(total, i64::try_from(ACCOUNTS).unwrap() * 100, "the total holds {when}");
    shared.settle(&state);
}

async fn until_acked(
    cluster: &ScriptCluster,
    shared: &Shared,
    phase: &Phase,
    acked: u64,
    what: &str,
) {
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
    let cluster = Arc::new(ScriptCluster::new("done", FRAGMENTS));
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

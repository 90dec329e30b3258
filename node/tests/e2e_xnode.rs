//! Cross-node transactions (issue #7 item 7): statements of a block run on every node's
//! fragments (the block's buffered writes travel with each forwarded share), COMMIT over
//! fragments of several nodes is a two-phase commit coordinated by the session's node, and a
//! participant or coordinator killed in the middle leaves all or nothing, also in the middle
//! of a scatter UPDATE's attempt that prepares as it reads (`Share::TxnWritePrepared`; the
//! first attempt is made to conflict by the test-only rewrite hook). Three data nodes on
//! loopback, one executor each. Every wait polls until a deadline (polling, not
//! synchronisation).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[path = "support/bank.rs"]
mod bank;
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use bank::checker::{self, Ledger, Outcome};
use bank::{Bank, Flavor, Load, PHASE_TIMEOUT, Phase, Rng, Shared};

use support::cluster::{cluster_args, id_owned_by, poll_until, simple, wait_for, wait_served};
use support::{Node, NodeOptions, free_loopback_port};
use tokio_postgres::SimpleQueryMessage;

const FRAGMENTS: u32 = 6;

fn options(id: u32, peer: u16, join: Option<u16>) -> NodeOptions {
    let extra_args = cluster_args("xnode", id, peer, join, &["--min-members", "3"]);
    NodeOptions { executors: 1, fragments: FRAGMENTS, extra_args, ..NodeOptions::default() }
}

/// Starts a cluster node; members that stop before it may be reported unreachable (WARN),
/// and forwarding to a killed node fails (WARN on phase two, ERROR nowhere). Each test stops
/// its nodes one after another, and a stopping node first hands its fragments off to the
/// others: on a loaded machine a handoff's decision can take longer than the proposal bound
/// (`PEER_REQUEST_TIMEOUT_MS`) to commit, which the driver logs as a WARN ("not confirmed") and settles on the
/// next coordinator tick (seen: the WARN, then the same handoff committed 0.3 s later).
fn start(options: NodeOptions) -> Node {
    let mut node = Node::start_with(options);
    node.expect_log("handoff decision not confirmed");
    node.expect_log("handoff decision refused");
    node.expect_log("is unreachable");
    node.expect_log("phase two not");
    node.expect_log("cannot resolve a transaction prepared too long");
    node.expect_log("transaction prepared too long");
    node
}

/// Three data nodes, every fragment allocated and open on its owner; node `fault.0` runs
/// with `TESSERA_FAULT=fault.1` (none when 0).
async fn cluster_with(fault: (u32, &str)) -> (Node, Node, Node) {
    let seed = free_loopback_port();
    let with = |id: u32, mut o: NodeOptions| {
        if fault.0 == id {
            o.env = vec![("TESSERA_FAULT".to_owned(), fault.1.to_owned())];
        }
        let mut node = start(o);
        node.expect_log("TESSERA_FAULT");
        node
    };
    let first = with(1, options(1, seed, None));
    let second = with(2, options(2, free_loopback_port(), Some(seed)));
    let third = with(3, options(3, free_loopback_port(), Some(seed)));
    wait_served(&[&first, &second, &third], FRAGMENTS as usize, 3).await;
    (first, second, third)
}

/// Every balance, read through `node` in one transaction block.
async fn balances(node: &Node) -> Option<BTreeMap<String, i64>> {
    let (client, conn) =
        tokio_postgres::connect(&node.conn_str(), tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client.batch_execute("BEGIN").await.ok()?;
    let rows = client.query("SELECT id(), balance::int8 FROM accounts", &[]).await.ok()?;
    client.batch_execute("COMMIT").await.ok()?;
    Some(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1))).collect())
}

async fn connect(node: &Node) -> tokio_postgres::Client {
    node.connect().await
}

/// Opens accounts `ids` with 100 each through `node`.
async fn open_accounts(node: &Node, ids: &[&str]) {
    let client = connect(node).await;
    for id in ids {
        client
            .batch_execute(&format!(r#"INSERT INTO accounts VALUES ('{id}', '{{"balance":100}}')"#))
            .await
            .unwrap();
    }
}

fn transfer_sql(from: &str, to: &str, amount: i64, from_balance: i64, to_balance: i64) -> String {
    format!(
        "UPDATE accounts SET balance = {} WHERE id() = '{from}'; \
         UPDATE accounts SET balance = {} WHERE id() = '{to}'",
        from_balance - amount,
        to_balance + amount
    )
}

// Checks a transfer between accounts on two other nodes, made through a third, commits
// atomically (reads inside the block see the block's writes on remote fragments, the result
// is visible through every node), a cross-node autocommit write is one transaction, a
// block that only reads remote fragments commits, and two blocks writing the same remote
// document conflict: the second COMMIT is 40001 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_xnode_transfer_commits_atomically_and_conflicts() {
    let (mut first, mut second, mut third) = cluster_with((0, "")).await;
    let ids = first.connect().await;
    let a = id_owned_by(&ids, 2, "acct-a").await;
    let b = id_owned_by(&ids, 3, "acct-b").await;
    let c = id_owned_by(&ids, 1, "acct-c").await;
    open_accounts(&second, &[&a, &b, &c]).await;

    // A transfer b -> a through node 1 (which owns neither).
    let client = connect(&first).await;
    client.batch_execute("BEGIN").await.unwrap();
    client.batch_execute(&transfer_sql(&b, &a, 30, 100, 100)).await.unwrap();
    // The block reads its own writes on both remote fragments.
    let row = client
        .query_one(
            &format!("SELECT sum(balance::int8) FROM accounts WHERE id() IN ('{a}', '{b}')"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 200);
    let row = client
        .query_one(&format!("SELECT balance::int8 FROM accounts WHERE id() = '{a}'"), &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 130);
    // Not visible elsewhere before COMMIT.
    assert_eq!(balances(&third).await.unwrap()[&a], 100);
    client.batch_execute("COMMIT").await.unwrap();
    for node in [&first, &second, &third] {
        let all = balances(node).await.unwrap();
        assert_eq!((all[&a], all[&b], all[&c]), (130, 70, 100), "{all:?}");
    }

    // An autocommit write over every node: one transaction.
    let n = client.execute("UPDATE accounts SET touched = true", &[]).await.unwrap();
    assert_eq!(n, 3);
    let row = client
        .query_one("SELECT count(*) FROM accounts WHERE touched::bool = true", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 3);

    // Two blocks write account a (node 2); the first to commit wins.
    let other = connect(&third).await;
    client.batch_execute("BEGIN").await.unwrap();
    other.batch_execute("BEGIN").await.unwrap();
    client.batch_execute(&transfer_sql(&a, &c, 10, 130, 100)).await.unwrap();
    other.batch_execute(&transfer_sql(&a, &b, 20, 130, 70)).await.unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    let err = other.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(support::sqlstate(&err), "40001", "{err}");
    let all = balances(&second).await.unwrap();
    assert_eq!((all[&a], all[&b], all[&c]), (120, 70, 110), "{all:?}");
    assert_eq!(all.values().sum::<i64>(), 300);

    // A block that reads remote fragments only commits (checks only); a read made stale by
    // another commit fails the COMMIT with 40001.
    client.batch_execute("BEGIN").await.unwrap();
    client
        .query_one(&format!("SELECT balance::int8 FROM accounts WHERE id() = '{b}'"), &[])
        .await
        .unwrap();
    client
        .batch_execute(&format!("UPDATE accounts SET balance = 999 WHERE id() = '{c}'"))
        .await
        .unwrap();
    other
        .batch_execute(&format!("UPDATE accounts SET balance = 71 WHERE id() = '{b}'"))
        .await
        .unwrap();
    let err = client.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(support::sqlstate(&err), "40001", "{err}");
    let all = balances(&first).await.unwrap();
    assert_eq!((all[&a], all[&b], all[&c]), (120, 71, 110), "{all:?}");

    // A phantom across nodes: the block counts flagged accounts (a scan of every node's
    // fragments, the remote ranges travel back with the reads and out again with COMMIT),
    // another session adds a flagged account on node 3, the block's COMMIT fails with 40001
    // and its write is not applied. Without the insert the same block commits.
    let flagged = "SELECT count(*) FROM accounts WHERE vip::bool = true";
    let d = id_owned_by(&ids, 3, "acct-d").await;
    for insert in [false, true] {
        client.batch_execute("BEGIN").await.unwrap();
        let n: i64 = client.query_one(flagged, &[]).await.unwrap().get(0);
        assert_eq!(n, 0);
        if insert {
            let sql =
                format!(r#"INSERT INTO accounts VALUES ('{d}', '{{"balance":0,"vip":true}}')"#);
            other.batch_execute(&sql).await.unwrap();
        }
        client
            .batch_execute(&format!("UPDATE accounts SET balance = 111 WHERE id() = '{c}'"))
            .await
            .unwrap();
        let committed = client.batch_execute("COMMIT").await;
        if insert {
            let err = committed.unwrap_err();
            assert_eq!(support::sqlstate(&err), "40001", "{err}");
            let all = balances(&second).await.unwrap();
            assert_eq!(all[&c], 110, "the failed block's write is not applied: {all:?}");
        } else {
            committed.expect("nothing entered the scanned ranges");
            client
                .batch_execute(&format!("UPDATE accounts SET balance = 110 WHERE id() = '{c}'"))
                .await
                .unwrap();
        }
    }

    // A plain SELECT outside a block goes out fragment by fragment, other nodes' included:
    // the same accounts and balances as one read inside a block, through every node.
    for node in [&first, &second, &third] {
        let streamed: BTreeMap<String, i64> =
            simple(node, "SELECT id(), balance::int8 FROM accounts")
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r[0].clone().unwrap(), r[1].as_deref().unwrap().parse().unwrap()))
                .collect();
        assert_eq!(streamed, balances(node).await.unwrap());
        assert_eq!(streamed.len(), 4);
    }

    // A block whose writes to node 2's fragments outgrow one frame (8 MiB: 9,000 documents
    // of 1 KB in one fragment, sent with every statement after the bound and at COMMIT) goes
    // in pieces and commits (54000 "split the transaction" before pieces). Answers larger
    // than a frame come back in pieces too (08006 before, the owner closing the connection):
    // the fragment's rows streamed, gathered, read in a block, an aggregate over them, and
    // a write's RETURNING of every document; through node 1 and node 3.
    let shard = router::shard_of(&a).unwrap().shard().unwrap().get();
    let pad = "p".repeat(1000);
    client.batch_execute("BEGIN").await.unwrap();
    for part in 0..10 {
        let rows: Vec<String> = (part * 900..(part + 1) * 900)
            .map(|i| format!(r#"('big{i}$@{shard}', '{{"pad":"{pad}","n":{i}}}')"#))
            .collect();
        let sql = format!("INSERT INTO accounts VALUES {}", rows.join(", "));
        client.batch_execute(&sql).await.unwrap();
    }
    client.batch_execute("COMMIT").await.unwrap();
    let third_client = connect(&third).await;
    for session in [&client, &third_client] {
        let rows = session.simple_query("SELECT id(), doc() FROM accounts").await.unwrap();
        let data = rows.iter().filter(|m| matches!(m, SimpleQueryMessage::Row(_))).count();
        assert_eq!(data, 9_004, "streamed");
        let sql = "SELECT id(), pad FROM accounts ORDER BY id() DESC";
        let rows = session.query(sql, &[]).await.unwrap();
        assert_eq!(rows.len(), 9_004, "gathered");
        assert_eq!(rows[0].get::<_, String>(0), format!("big999$@{shard}"));
        session.batch_execute("BEGIN").await.unwrap();
        let rows = session.query("SELECT id(), doc() FROM accounts", &[]).await.unwrap();
        assert_eq!(rows.len(), 9_004, "read in a block");
        session.batch_execute("COMMIT").await.unwrap();
        let row = session.query_one("SELECT sum(n::int8) FROM accounts", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), (0..9_000).sum::<i64>());
    }
    let rows = third_client
        .query("UPDATE accounts SET n = n + 1 WHERE n >= 0 RETURNING id(), doc()", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 9_000, "RETURNING");
    let row = client.query_one("SELECT sum(n::int8) FROM accounts", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), (1..=9_000).sum::<i64>());

    drop((client, other));
    for n in [&mut first, &mut second, &mut third] {
        n.stop();
    }
}

/// Runs one transfer `from -> to` of `amount` through `node` from the balances given;
/// returns whether COMMIT was answered with success (an error: the connection died).
async fn try_transfer(node: &Node, from: &str, to: &str, balances: (i64, i64)) -> bool {
    let client = connect(node).await;
    client.batch_execute("BEGIN").await.unwrap();
    client.batch_execute(&transfer_sql(from, to, 25, balances.0, balances.1)).await.unwrap();
    client.batch_execute("COMMIT").await.is_ok()
}

// Checks a participant killed right after its PREPARE is durable: the COMMIT fails (it was
// not acknowledged), and after the participant restarts it asks the coordinator node, which
// recorded no decision: ABORT, so nothing of the transfer is visible and the documents are
// writable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_xnode_participant_killed_after_prepare_aborts() {
    // Node 3 crashes on its first durable PREPARE.
    let (mut first, mut second, mut third) = cluster_with((3, "2pc-after-prepare:1")).await;
    let ids = first.connect().await;
    let a = id_owned_by(&ids, 2, "acct-a").await;
    let b = id_owned_by(&ids, 3, "acct-b").await;
    open_accounts(&first, &[&a, &b]).await;
    let committed = try_transfer(&first, &a, &b, (100, 100)).await;
    assert!(!committed, "a COMMIT whose participant died before the decision is not acknowledged");
    third.wait_crash();
    third.set_env(Vec::new());
    third.start_again();
    wait_served(&[&first, &second, &third], FRAGMENTS as usize, 3).await;
    // All or nothing: the resolution is ABORT (no decision was recorded), on both nodes, once
    // the participant asked (its documents are held until then).
    let all = wait_for(&[&first, &second, &third], "the in-doubt transfer resolved", || async {
        let all = balances(&second).await?;
        (all.len() == 2).then_some(all)
    })
    .await;
    assert_eq!((all[&a], all[&b]), (100, 100), "{all:?}");
    assert!(third.log_text().contains("in-doubt transaction of another node; asking it"));
    // The documents are writable again (the prepared hold is gone).
    wait_for(&[&first, &second, &third], "a transfer after the resolution", || async {
        try_transfer(&second, &a, &b, (100, 100)).await.then_some(())
    })
    .await;
    let all = balances(&third).await.unwrap();
    assert_eq!((all[&a], all[&b]), (75, 125), "{all:?}");
    for n in [&mut first, &mut second, &mut third] {
        n.stop();
    }
}

// Checks the coordinator node killed right after its COMMIT decision is durable: the
// participants on other nodes hold the transaction prepared and, once the coordinator node
// is back, ask it and commit: the transfer is there entirely (the client did not get an
// answer, so either outcome is allowed, but never a half).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_xnode_coordinator_killed_after_decision_commits() {
    // Node 1 crashes once its first COMMIT decision is durable.
    let (mut first, mut second, mut third) = cluster_with((1, "2pc-after-decision")).await;
    let ids = first.connect().await;
    let a = id_owned_by(&ids, 2, "acct-a").await;
    let b = id_owned_by(&ids, 3, "acct-b").await;
    open_accounts(&second, &[&a, &b]).await;
    let committed = try_transfer(&first, &a, &b, (100, 100)).await;
    assert!(!committed, "the coordinator died before answering");
    first.wait_crash();
    first.set_env(Vec::new());
    first.start_again();
    wait_served(&[&first, &second, &third], FRAGMENTS as usize, 3).await;
    let all = wait_for(&[&first, &second, &third], "the in-doubt transfer resolved", || async {
        let all = balances(&third).await?;
        (all.len() == 2).then_some(all)
    })
    .await;
    // The decision was durable: COMMIT on both participants.
    assert_eq!((all[&a], all[&b]), (75, 125), "{all:?}");
    let all = balances(&second).await.unwrap();
    assert_eq!((all[&a], all[&b]), (75, 125), "{all:?}");
    // The participants learnt the decision by asking the coordinator node. Each logs that
    // before it commits, so the line is written by now, but the test reads a node's stderr on
    // a thread of its own, which a loaded machine may not have run yet: poll for the line.
    for node in [&second, &third] {
        poll_until(
            "the participant's resolution in its log",
            || node.log_text(),
            || async {
                node.log_lines()
                    .iter()
                    .any(|l| {
                        l.contains("resolved from the coordinator log") && l.contains("commit=true")
                    })
                    .then_some(())
            },
        )
        .await;
    }
    for n in [&mut first, &mut second, &mut third] {
        n.stop();
    }
}

/// The scatter UPDATE of the prepared-attempt crash tests: no id, so every fragment of every
/// node, one transaction coordinated by the session's node.
const SCATTER: &str = "UPDATE accounts SET balance = balance + 1 WHERE balance >= 0";

/// Arms the rewrite and `crash` on node `crashing` (so the scatter UPDATE's first attempt
/// conflicts and its prepared attempt reaches the crash point), opens an account owned by
/// each node of `owners`, runs the UPDATE through node 1, which is not acknowledged, restarts
/// the crashed node without faults and returns the three nodes, the two ids and their balances
/// once the in-doubt UPDATE is resolved (both readable in one block).
async fn scatter_crash(
    crashing: u32,
    crash: &str,
    owners: (u32, u32),
) -> ([Node; 3], String, String, BTreeMap<String, i64>) {
    let faults = format!("autocommit-rewrite-after-read,{crash}");
    let (first, second, third) = cluster_with((crashing, &faults)).await;
    let ids = first.connect().await;
    let a = id_owned_by(&ids, owners.0, "acct-a").await;
    let b = id_owned_by(&ids, owners.1, "acct-b").await;
    open_accounts(&second, &[&a, &b]).await;
    let client = connect(&first).await;
    assert!(client.execute(SCATTER, &[]).await.is_err(), "the UPDATE is not acknowledged");
    let mut nodes = [first, second, third];
    let crashed = &mut nodes[crashing as usize - 1];
    crashed.wait_crash();
    crashed.set_env(Vec::new());
    crashed.start_again();
    let [first, second, third] = &nodes;
    wait_served(&[first, second, third], FRAGMENTS as usize, 3).await;
    let reader = &nodes[crashing as usize % 3];
    let all = wait_for(&[first, second, third], "the in-doubt UPDATE resolved", || async {
        let all = balances(reader).await?;
        (all.len() == 2).then_some(all)
    })
    .await;
    (nodes, a, b, all)
}

// Checks a participant node killed right after the durable PREPARE of a scatter UPDATE's
// prepared attempt (node 3 rewrites what its first attempt read, so that attempt conflicts
// and the next prepares as it reads; it crashes at that prepare): the statement is not
// acknowledged, and once node 3 is back it asks node 1, which recorded no decision: nothing
// of the UPDATE is anywhere, and the documents are writable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_xnode_participant_killed_in_a_prepared_attempt_aborts() {
    let (mut nodes, a, b, all) = scatter_crash(3, "2pc-after-prepare:1", (2, 3)).await;
    assert_eq!((all[&a], all[&b]), (100, 100), "{all:?}");
    assert!(nodes[2].log_text().contains("in-doubt transaction of another node; asking it"));
    let [first, second, third] = &nodes;
    wait_for(&[first, second, third], "a transfer after the resolution", || async {
        try_transfer(second, &a, &b, (100, 100)).await.then_some(())
    })
    .await;
    for n in &mut nodes {
        n.stop();
    }
}

// Checks the coordinator node killed right after the COMMIT decision of a scatter UPDATE's
// prepared attempt (node 1 holds one of the documents and rewrites it after its first
// attempt's read): once node 1 is back, its own share commits from its journal and node 2's
// from asking it: the UPDATE is there entirely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_xnode_coordinator_killed_after_a_prepared_attempt_decides_commits() {
    let (mut nodes, a, b, all) = scatter_crash(1, "2pc-after-decision", (1, 2)).await;
    assert_eq!((all[&a], all[&b]), (101, 101), "{all:?}");
    for n in &mut nodes {
        n.stop();
    }
}

/// Bank accounts: 4 on each of the 6 fragments (so on every node).
const BANK_ACCOUNTS: usize = 24;
/// Bank clients, all connected through node 1.
const BANK_LOAD: Load = Load { transfer_clients: 4, read_clients: 1, amount_max: 20 };
/// Node kills of the bank run, and acknowledged transfers between two kills:
/// `KILL_AFTER_MIN + rng.below(KILL_AFTER_SPREAD)`.
const BANK_KILLS: u64 = 3;
const KILL_AFTER_MIN: u64 = 10;
const KILL_AFTER_SPREAD: u64 = 40;
/// Acknowledged transfers of the last phase.
const TRANSFERS_AFTER_KILLS: u64 = 30;
const BANK_SEED_DEFAULT: u64 = 0x5EED_C105;

fn bank_seed() -> u64 {
    match std::env::var("TESSERA_BANK_SEED") {
        Ok(s) => s.parse().unwrap_or_else(|_| panic!("TESSERA_BANK_SEED={s} is not a number")),
        Err(_) => BANK_SEED_DEFAULT,
    }
}

/// Opens a bank through `node` with accounts on every fragment of the cluster (account `i`
/// at an explicit shard of fragment `i mod F`, its transfer records on the same shard), and
/// asserts every node holds some.
async fn open_cluster_bank(node: &Node) -> Arc<Bank> {
    let rows = simple(node, "SHOW FRAGMENTS").await.unwrap();
    assert_eq!(BANK_ACCOUNTS % rows.len(), 0);
    let mut accounts = Vec::new();
    let mut record_suffix = Vec::new();
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..BANK_ACCOUNTS {
        let r = &rows[i % rows.len()];
        let range = r[1].as_deref().unwrap().trim_matches(|c| c == '[' || c == ')');
        let (start, end) = range.split_once(", ").unwrap();
        let (start, end): (u32, u32) = (start.parse().unwrap(), end.parse().unwrap());
        let shard = start + u32::try_from(i).unwrap();
        assert!(shard < end, "fragment too small");
        owners.insert(r[2].as_deref().unwrap().split(' ').nth(1).unwrap().to_owned());
        accounts.push(format!("a/{i}$@{shard}"));
        record_suffix.push(format!("$@{shard}"));
    }
    assert_eq!(owners.len(), 3, "accounts on every node");
    let bank =
        Bank { flavor: Flavor::Tessera, ledger: Ledger { accounts, initial: 100 }, record_suffix };
    bank.open(&node.connect().await).await;
    Arc::new(bank)
}

/// Waits until every node reads every account (a restarted node's new address is known to
/// the others).
async fn wait_readable(nodes: &[&Node]) {
    for node in nodes {
        wait_for(nodes, "every account readable", || async {
            let rows = simple(node, "SELECT count(*) FROM accounts").await?;
            (rows[0][0].as_deref() == Some(&BANK_ACCOUNTS.to_string())).then_some(())
        })
        .await;
    }
}

/// Waits until no node holds a transaction prepared (in-doubt ones resolved by asking their
/// coordinator), so a plain read of every balance sees whole transactions.
async fn wait_no_prepared(nodes: &[&Node]) {
    for node in nodes {
        wait_for(nodes, "no prepared transaction left", || async {
            let rows = simple(node, "SHOW TRANSACTIONS").await?;
            rows.iter()
                .all(|r| !matches!(r[1].as_deref(), Some("prepared" | "finishing")))
                .then_some(())
        })
        .await;
    }
}

/// Reads the state through `node`, checks everything the clients saw, fails with the seed.
async fn check_bank(node: &Node, bank: &Bank, shared: &Shared, seed: u64, when: &str) {
    let state = bank.state(&node.connect().await).await;
    let history = shared.history();
    eprintln!("bank {when}: {}", shared.summary());
    let violations = checker::check(&bank.ledger, &history, &state);
    assert!(
        violations.is_empty(),
        "bank violated {when} (TESSERA_BANK_SEED={seed}):\n{}",
        bank::report(&violations)
    );
    let unexpected = shared.unexpected();
    assert!(unexpected.is_empty(), "unexpected errors {when} (seed {seed}):\n{unexpected:?}");
    shared.settle(&state);
}

/// Runs bank clients through `node` until `acked` transfers are acknowledged in total.
async fn bank_phase(
    node: &Node,
    bank: &Arc<Bank>,
    shared: &Arc<Shared>,
    seed: u64,
    phase_no: u64,
    acked: u64,
) -> Phase {
    let phase = Phase::start(&node.conn_str(), bank, BANK_LOAD, shared, seed, phase_no).await;
    let waited = tokio::time::timeout(PHASE_TIMEOUT, bank::run_until(shared, &phase, acked)).await;
    assert!(waited.is_ok(), "phase {phase_no} timed out (seed {seed}): {}", shared.summary());
    assert!(
        shared.acked() >= acked,
        "phase {phase_no}: clients ended early (seed {seed}): {:?}",
        shared.unexpected()
    );
    phase
}

// Checks the bank over three nodes with accounts on every fragment, every client connected
// through node 1 (the coordinator of every cross-node transfer): at seeded points a seeded
// node (participant or coordinator) is SIGKILLed with transfers in flight and restarted;
// once the in-doubt transactions are resolved, every acknowledged transfer is applied exactly
// once, those in flight entirely or not at all, the total holds. A last phase ends cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_xnode_bank_survives_sigkills_of_nodes() {
    let seed = bank_seed();
    let (first, second, third) = cluster_with((0, "")).await;
    let mut nodes = [first, second, third];
    let bank = open_cluster_bank(&nodes[0]).await;
    let shared = Arc::new(Shared::default());
    let mut rng = Rng::new(seed, u64::MAX);
    let mut victims = Vec::new();
    for kill in 0..BANK_KILLS {
        let target = shared.acked() + KILL_AFTER_MIN + rng.below(KILL_AFTER_SPREAD);
        let phase = bank_phase(&nodes[0], &bank, &shared, seed, kill, target).await;
        let victim = usize::try_from(rng.below(3)).unwrap();
        victims.push(victim + 1);
        nodes[victim].kill9();
        shared.stop();
        let joined = tokio::time::timeout(PHASE_TIMEOUT, phase.join()).await;
        assert!(joined.is_ok(), "clients did not finish (seed {seed})");
        nodes[victim].start_again();
        let all: Vec<&Node> = nodes.iter().collect();
        wait_served(&all, FRAGMENTS as usize, 3).await;
        wait_no_prepared(&all).await;
        wait_readable(&all).await;
        check_bank(&nodes[0], &bank, &shared, seed, &format!("after killing node {}", victim + 1))
            .await;
    }
    eprintln!("bank: killed nodes {victims:?} (seed {seed})");
    let target = shared.acked() + TRANSFERS_AFTER_KILLS;
    let phase = bank_phase(&nodes[0], &bank, &shared, seed, BANK_KILLS, target).await;
    shared.stop();
    let joined = tokio::time::timeout(PHASE_TIMEOUT, phase.join()).await;
    assert!(joined.is_ok(), "clients did not finish (seed {seed})");
    check_bank(&nodes[0], &bank, &shared, seed, "after the last phase").await;
    let cross =
        shared.history().transfers.iter().filter(|t| t.outcome == Outcome::Committed).count();
    assert!(cross > 0);
    for n in &mut nodes {
        n.stop();
    }
}

/// What a handoff crash logs on the other nodes (WARN), besides the bank's own noise.
const HANDOFF_NOISE: &[&str] = &[
    "handoff failed",
    "aborted a handoff",
    "decision not confirmed",
    "decision refused",
    "source answered",
    "reconcile step",
    "cannot list this node's fragments",
    "TESSERA_HANDOFF_FAULT",
];

/// A fragment `node` reports owned by node `owner`, as `$n`.
async fn fragment_of(node: &Node, owner: u32) -> Option<String> {
    let rows = simple(node, "SHOW FRAGMENTS").await?;
    let prefix = format!("node {owner} ");
    rows.iter()
        .find(|r| r[2].as_deref().is_some_and(|o| o.starts_with(&prefix)))
        .and_then(|r| r[0].clone())
}

// Checks the bank's atomicity and durability across handoffs that crash (issue #7 item 10):
// transfers run through node 1 while a fragment of node 2 is moved to node 3 and node 2, the
// source and a participant of cross-node transfers, dies after its first acknowledged chunk;
// then, with transfers in flight again, a second move is asked and the coordinator leader is
// SIGKILLed. After each restart every acknowledged transfer is applied exactly once, those in
// flight entirely or not at all, the total holds, and every fragment has one owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_xnode_bank_survives_kills_during_handoff() {
    let seed = bank_seed();
    let port = free_loopback_port();
    let mut armed = options(2, free_loopback_port(), Some(port));
    armed.env = vec![("TESSERA_HANDOFF_FAULT".to_owned(), "source-after-chunk:1".to_owned())];
    let mut nodes = [
        start(options(1, port, None)),
        start(armed),
        start(options(3, free_loopback_port(), Some(port))),
    ];
    for node in &mut nodes {
        for noise in HANDOFF_NOISE {
            node.expect_log(noise);
        }
    }
    let all: Vec<&Node> = nodes.iter().collect();
    wait_served(&all, FRAGMENTS as usize, 3).await;
    let bank = open_cluster_bank(&nodes[0]).await;
    let shared = Arc::new(Shared::default());

    // 1. The source of a handoff dies mid-stream while transfers run.
    let phase = bank_phase(&nodes[0], &bank, &shared, seed, 0, KILL_AFTER_MIN).await;
    let moving = fragment_of(&nodes[0], 2).await.expect("node 2 owns a fragment");
    let asked = simple(&nodes[0], &format!("ALTER FRAGMENT {moving} MOVE TO NODE 3")).await;
    assert!(asked.is_some(), "the move of {moving} was refused");
    nodes[1].wait_crash();
    shared.stop();
    let joined = tokio::time::timeout(PHASE_TIMEOUT, phase.join()).await;
    assert!(joined.is_ok(), "clients did not finish (seed {seed})");
    nodes[1].set_env(Vec::new());
    nodes[1].start_again();
    let all: Vec<&Node> = nodes.iter().collect();
    wait_served(&all, FRAGMENTS as usize, 3).await;
    wait_no_prepared(&all).await;
    wait_readable(&all).await;
    check_bank(&nodes[0], &bank, &shared, seed, "after the source died mid-handoff").await;

    // 2. The coordinator leader is killed while a move runs and transfers are in flight.
    let target = shared.acked() + KILL_AFTER_MIN;
    let phase = bank_phase(&nodes[0], &bank, &shared, seed, 1, target).await;
    let moving = fragment_of(&nodes[0], 2).await.expect("node 2 owns a fragment");
    let asked = simple(&nodes[0], &format!("ALTER FRAGMENT {moving} MOVE TO NODE 3")).await;
    assert!(asked.is_some(), "the move of {moving} was refused");
    let rows = simple(&nodes[0], "SHOW CLUSTER").await.expect("SHOW CLUSTER");
    let leader: usize = rows
        .iter()
        .find(|r| r[6].as_deref() == Some("t"))
        .and_then(|r| r[0].as_deref()?.parse().ok())
        .expect("a coordinator leader");
    nodes[leader - 1].kill9();
    shared.stop();
    let joined = tokio::time::timeout(PHASE_TIMEOUT, phase.join()).await;
    assert!(joined.is_ok(), "clients did not finish (seed {seed})");
    nodes[leader - 1].start_again();
    let all: Vec<&Node> = nodes.iter().collect();
    wait_served(&all, FRAGMENTS as usize, 3).await;
    wait_no_prepared(&all).await;
    wait_readable(&all).await;
    check_bank(&nodes[0], &bank, &shared, seed, &format!("after killing leader node {leader}"))
        .await;
    for n in &mut nodes {
        n.stop();
    }
}

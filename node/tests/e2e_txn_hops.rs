//! Cross-executor hops of transaction blocks (session 5, issue 5): a block sent as one simple
//! Query whose writes all go to one fragment of the other executor is shipped there whole, one
//! mesh call; everything else runs statement by statement as before. Hops are counted with the
//! node's own `tessera_mesh_calls_total` (SHOW STATS), never timed.
//!
//! Ids pin documents to fragments with explicit shards (`id$@shard`): with 8 fragments,
//! fragment `i` holds shards `[i * 131072, (i + 1) * 131072)` and belongs to executor `i % 2`.
//! A session runs on whichever executor accepted its connection, so each check runs the same
//! block on a fragment of each executor: one of the two is local (no hop), the other remote.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{
    Node, mesh_calls, session_on_executor_1, simple_rows, sqlstate, t_value, tx_counter,
};

/// Two documents on fragment 0 (executor 0) and two on fragment 1 (executor 1).
const ON_0: [&str; 2] = ["a$@0", "c$@7"];
const ON_1: [&str; 2] = ["b$@131072", "d$@131079"];

/// Mesh calls `work` makes, net of what reading the counter itself costs (`show`).
async fn hops_of<F: std::future::Future<Output = ()>>(
    client: &tokio_postgres::Client,
    show: i64,
    work: F,
) -> i64 {
    let before = mesh_calls(client).await;
    work.await;
    mesh_calls(client).await - before - show
}

/// What one SHOW STATS adds to the counter it reads (constant for a node).
async fn show_cost(client: &tokio_postgres::Client) -> i64 {
    let a = mesh_calls(client).await;
    let b = mesh_calls(client).await;
    let c = mesh_calls(client).await;
    assert_eq!(b - a, c - b, "reading the counter costs the same each time");
    b - a
}

/// The two UPDATEs of a transfer of 10 from `first` to `second`, in one string.
fn transfer_updates(first: &str, second: &str) -> String {
    format!(
        "UPDATE t SET v = v - 10 WHERE id() = '{first}'; \
         UPDATE t SET v = v + 10 WHERE id() = '{second}'"
    )
}

fn transfer(first: &str, second: &str) -> String {
    format!("BEGIN; {}; COMMIT", transfer_updates(first, second))
}

async fn load(client: &tokio_postgres::Client) {
    for id in ON_0.iter().chain(&ON_1) {
        client
            .batch_execute(&format!("INSERT INTO t VALUES ('{id}', '{{\"v\":100}}')"))
            .await
            .unwrap();
    }
}

// Checks the hop counts of a single-fragment transfer: statement by statement a remote
// fragment costs 3 mesh calls (two UPDATEs, COMMIT) and a local one 0; in one Query message the
// remote block is shipped whole, 1 call, the local one still 0. Both commit on the fast path and
// move the balances.
#[tokio::test]
async fn one_query_block_on_a_remote_fragment_is_one_hop() {
    let node = Node::start();
    let s = node.connect().await;
    load(&s).await;
    let show = show_cost(&s).await;

    let mut one_by_one = Vec::new();
    for [first, second] in [ON_0, ON_1] {
        let hops = hops_of(&s, show, async {
            s.batch_execute("BEGIN").await.unwrap();
            s.execute("UPDATE t SET v = v - 10 WHERE id() = $1", &[&first]).await.unwrap();
            s.execute("UPDATE t SET v = v + 10 WHERE id() = $1", &[&second]).await.unwrap();
            s.batch_execute("COMMIT").await.unwrap();
        })
        .await;
        one_by_one.push(hops);
    }
    one_by_one.sort_unstable();
    assert_eq!(one_by_one, [0, 3], "statement by statement: local 0, remote 3");

    let fast = tx_counter(&s, "fast_path_commits").await;
    let mut shipped = Vec::new();
    for [first, second] in [ON_0, ON_1] {
        let hops = hops_of(&s, show, async {
            let messages = s.simple_query(&transfer(first, second)).await.unwrap();
            let tags: Vec<u64> = messages
                .iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
                    _ => None,
                })
                .collect();
            assert_eq!(tags, [0, 1, 1, 0], "BEGIN, UPDATE 1, UPDATE 1, COMMIT");
        })
        .await;
        shipped.push(hops);
    }
    shipped.sort_unstable();
    assert_eq!(shipped, [0, 1], "one Query: local 0, remote 1");
    assert_eq!(tx_counter(&s, "fast_path_commits").await, fast + 2);
    for [first, second] in [ON_0, ON_1] {
        assert_eq!(t_value(&s, first).await, Some(80));
        assert_eq!(t_value(&s, second).await, Some(120));
    }
    assert!(s.simple_query("SHOW TRANSACTIONS").await.is_ok());
}

// Checks that autocommit statements on one fragment cost one mesh call each when the fragment
// is on the other executor and none when it is local, and answer the same either way: an
// INSERT, a duplicate INSERT (23505 from the remote share), an UPDATE, a point SELECT and a
// DELETE, on a document of each executor.
#[tokio::test]
async fn autocommit_statements_on_a_remote_fragment_are_one_hop_each() {
    let node = Node::start();
    let s = node.connect().await;
    let show = show_cost(&s).await;
    let mut hops = Vec::new();
    for id in ["e$@0", "f$@131072"] {
        let n = hops_of(&s, show, async {
            let insert = format!("INSERT INTO t VALUES ('{id}', '{{\"v\":5}}')");
            assert_eq!(s.execute(insert.as_str(), &[]).await.unwrap(), 1);
            let again = s.execute(insert.as_str(), &[]).await.unwrap_err();
            assert_eq!(sqlstate(&again), "23505", "{id}: {again:?}");
            let update = "UPDATE t SET v = v + 1 WHERE id() = $1";
            assert_eq!(s.execute(update, &[&id]).await.unwrap(), 1);
            assert_eq!(t_value(&s, id).await, Some(6));
            assert_eq!(s.execute("DELETE FROM t WHERE id() = $1", &[&id]).await.unwrap(), 1);
        })
        .await;
        hops.push(n);
    }
    hops.sort_unstable();
    assert_eq!(hops, [0, 5], "five statements: local 0 hops, remote 1 each");
}

// Checks that a shipped block sees its own writes from statement to statement: an INSERT then
// UPDATEs of the new document and a DELETE of another, all on one fragment, then COMMIT; and
// that the command tags are the block's.
#[tokio::test]
async fn shipped_block_reads_its_own_writes() {
    let node = Node::start();
    let s = node.connect().await;
    load(&s).await;
    for (n, [kept, gone]) in [ON_0, ON_1].into_iter().enumerate() {
        let new = format!("n{n}$@{}", n * 131072 + 3);
        let sql = format!(
            "BEGIN; INSERT INTO t VALUES ('{new}', '{{\"v\":1}}'); \
             UPDATE t SET v = v + 10 WHERE id() = '{new}'; \
             UPDATE t SET v = v * 3 WHERE id() = '{new}'; \
             DELETE FROM t WHERE id() = '{gone}'; \
             UPDATE t SET v = v + 1 WHERE id() = '{gone}'; COMMIT"
        );
        let messages = s.simple_query(&sql).await.unwrap();
        let tags: Vec<u64> = messages
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(tags, [0, 1, 1, 1, 1, 0, 0], "the deleted document is not updated");
        assert_eq!(t_value(&s, &new).await, Some(33));
        assert_eq!(t_value(&s, gone).await, None);
        assert_eq!(t_value(&s, kept).await, Some(100));
    }
}

// Checks PostgreSQL's simple-query semantics inside a shipped block: the failing statement
// (a duplicate id) is the one that errs, the statements after it are skipped, the block is
// failed (25P02 until ROLLBACK or COMMIT, which rolls back) and nothing of it is applied.
#[tokio::test]
async fn failed_statement_fails_the_shipped_block() {
    let node = Node::start();
    let s = node.connect().await;
    load(&s).await;
    for end in ["ROLLBACK", "COMMIT"] {
        for [first, second] in [ON_0, ON_1] {
            let sql = format!(
                "BEGIN; UPDATE t SET v = v + 1 WHERE id() = '{first}'; \
                 INSERT INTO t VALUES ('{second}', '{{\"v\":9}}'); \
                 UPDATE t SET v = v + 1 WHERE id() = '{second}'; COMMIT"
            );
            let err = s.simple_query(&sql).await.unwrap_err();
            assert_eq!(sqlstate(&err), "23505");
            let refused = s.query("SELECT 1", &[]).await.unwrap_err();
            assert_eq!(sqlstate(&refused), "25P02");
            let messages = s.simple_query(end).await.unwrap();
            assert!(!messages.is_empty());
            assert_eq!(t_value(&s, first).await, Some(100), "{end}: nothing applied");
            assert_eq!(t_value(&s, second).await, Some(100), "{end}: nothing applied");
        }
    }
    // The session works normally afterwards, in and out of blocks.
    s.simple_query(&transfer(ON_1[0], ON_1[1])).await.unwrap();
    assert_eq!(t_value(&s, ON_1[0]).await, Some(90));
}

// Checks that a block over fragments of both executors is not shipped: it commits by
// two-phase commit as before, atomically.
#[tokio::test]
async fn block_over_two_executors_runs_as_before() {
    let node = Node::start();
    let s = node.connect().await;
    load(&s).await;
    let two_phase = tx_counter(&s, "two_phase_commits").await;
    s.simple_query(&transfer(ON_0[0], ON_1[0])).await.unwrap();
    assert_eq!(tx_counter(&s, "two_phase_commits").await, two_phase + 1);
    assert_eq!(t_value(&s, ON_0[0]).await, Some(90));
    assert_eq!(t_value(&s, ON_1[0]).await, Some(110));
}

// Checks that shipped blocks stay serializable under contention: sessions on both executors
// run one-Query transfers between the same two documents of each fragment concurrently,
// retrying 40001; every committed transfer is applied exactly once and the total holds.
#[tokio::test]
async fn concurrent_shipped_transfers_keep_the_total() {
    let node = Node::start();
    let setup = node.connect().await;
    load(&setup).await;
    let mut tasks = Vec::new();
    for c in 0..4 {
        let client = node.connect().await;
        tasks.push(tokio::spawn(async move {
            let mut done = [0i64; 2];
            for i in 0..40 {
                let pair = if (i + c) % 2 == 0 { ON_0 } else { ON_1 };
                loop {
                    match client.simple_query(&transfer(pair[0], pair[1])).await {
                        Ok(_) => break,
                        Err(e) => {
                            assert_eq!(sqlstate(&e), "40001", "{e:?}");
                            client.batch_execute("ROLLBACK").await.unwrap();
                        }
                    }
                }
                done[usize::from(pair == ON_1)] += 1;
            }
            done
        }));
    }
    let mut done = [0i64; 2];
    for t in tasks {
        let d = t.await.unwrap();
        done[0] += d[0];
        done[1] += d[1];
    }
    for (pair, n) in [(ON_0, done[0]), (ON_1, done[1])] {
        assert_eq!(t_value(&setup, pair[0]).await, Some(100 - 10 * n));
        assert_eq!(t_value(&setup, pair[1]).await, Some(100 + 10 * n));
    }
    assert_eq!(done[0] + done[1], 160);
}

// Checks the hops of a two-phase commit over both executors (session 6): a session on
// executor 0 (the coordinator's) pays the remote UPDATE, the prepare call and the phase-two
// call (3); a session on executor 1 pays the remote UPDATE and one call that prepares executor
// 0's share, waits for its own share's prepare and records the decision (2, was 3). Which
// executor a session runs on is read from the hops of a one-Query block on fragment 0 (shipped
// from executor 1, local on executor 0). Connections are opened until both kinds were seen.
#[tokio::test]
async fn two_phase_commit_from_either_executor_hops() {
    let node = Node::start();
    let setup = node.connect().await;
    load(&setup).await;
    let show = show_cost(&setup).await;
    let mut seen = [0i64; 2];
    let mut moved = 0;
    for _ in 0..64 {
        let s = node.connect().await;
        let on_1 = session_on_executor_1(&s).await;
        let two_phase = tx_counter(&s, "two_phase_commits").await;
        let hops = hops_of(&s, show, async {
            s.simple_query(&transfer(ON_0[0], ON_1[0])).await.unwrap();
        })
        .await;
        assert_eq!(tx_counter(&s, "two_phase_commits").await, two_phase + 1);
        assert_eq!(hops, if on_1 { 2 } else { 3 }, "session on executor {}", u8::from(on_1));
        moved += 1;
        seen[usize::from(on_1)] += 1;
        if seen[0] > 0 && seen[1] > 0 {
            break;
        }
    }
    assert!(seen[0] > 0 && seen[1] > 0, "sessions seen per executor: {seen:?}");
    assert_eq!(t_value(&setup, ON_0[0]).await, Some(100 - 10 * moved));
    assert_eq!(t_value(&setup, ON_1[0]).await, Some(100 + 10 * moved));
}

// Checks that a two-phase commit whose share on either executor conflicts applies nothing and
// leaves nothing prepared or held, from sessions on both executors: on executor 1 the
// coordinator's share prepares in the same call that waits for the session's word on the
// other share (session 6), so both "the coordinator's share failed" and "the other share
// failed, the coordinator's share is undone" run. Each block reads both documents, another
// session then changes one of them, and the COMMIT must fail with 40001.
#[tokio::test]
async fn two_phase_conflict_on_either_share_applies_nothing() {
    let node = Node::start();
    let setup = node.connect().await;
    load(&setup).await;
    let mut seen = [0; 2];
    let mut bumped = [0i64; 2];
    for _ in 0..64 {
        let s = node.connect().await;
        let on_1 = session_on_executor_1(&s).await;
        for (i, stale) in [ON_0[0], ON_1[0]].into_iter().enumerate() {
            s.batch_execute("BEGIN").await.unwrap();
            assert!(t_value(&s, ON_0[0]).await.is_some());
            assert!(t_value(&s, ON_1[0]).await.is_some());
            s.execute("UPDATE t SET v = v - 10 WHERE id() = $1", &[&ON_0[0]]).await.unwrap();
            s.execute("UPDATE t SET v = v + 10 WHERE id() = $1", &[&ON_1[0]]).await.unwrap();
            setup.execute("UPDATE t SET v = v + 1 WHERE id() = $1", &[&stale]).await.unwrap();
            bumped[i] += 1;
            let err = s.batch_execute("COMMIT").await.unwrap_err();
            assert_eq!(sqlstate(&err), "40001", "stale {stale}: {err:?}");
            let rows = simple_rows(&setup.simple_query("SHOW TRANSACTIONS").await.unwrap());
            let left: Vec<_> = rows
                .iter()
                .filter(|r| matches!(r[1].as_deref(), Some("prepared" | "held" | "finishing")))
                .collect();
            assert!(left.is_empty(), "nothing stays prepared or held: {left:?}");
        }
        seen[usize::from(on_1)] += 1;
        if seen[0] > 0 && seen[1] > 0 {
            break;
        }
    }
    assert!(seen[0] > 0 && seen[1] > 0, "sessions seen per executor: {seen:?}");
    assert_eq!(t_value(&setup, ON_0[0]).await, Some(100 + bumped[0]), "no transfer applied");
    assert_eq!(t_value(&setup, ON_1[0]).await, Some(100 + bumped[1]), "no transfer applied");
    // Nothing is held: a transfer over both executors commits at once.
    setup.simple_query(&transfer(ON_0[0], ON_1[0])).await.unwrap();
    assert_eq!(t_value(&setup, ON_1[0]).await, Some(110 + bumped[1]));
}

// Checks a query of writes alone (its implicit block, no BEGIN or COMMIT) is shipped like
// `BEGIN; …; COMMIT`: one mesh call when its fragment is on the other executor, none when
// local, committed on the fast path; and that a failing write there (a duplicate id) rolls
// back the writes before it, shipped or not.
#[tokio::test]
async fn implicit_block_on_a_remote_fragment_is_one_hop() {
    let node = Node::start();
    let s = node.connect().await;
    load(&s).await;
    let show = show_cost(&s).await;
    let fast = tx_counter(&s, "fast_path_commits").await;
    let mut hops = Vec::new();
    for [first, second] in [ON_0, ON_1] {
        let sql = transfer_updates(first, second);
        let n = hops_of(&s, show, async {
            s.batch_execute(&sql).await.unwrap();
        })
        .await;
        hops.push(n);
    }
    hops.sort_unstable();
    assert_eq!(hops, [0, 1], "local 0, remote 1");
    assert_eq!(tx_counter(&s, "fast_path_commits").await, fast + 2);
    for [first, second] in [ON_0, ON_1] {
        assert_eq!(t_value(&s, first).await, Some(90));
        assert_eq!(t_value(&s, second).await, Some(110));
    }

    for [first, _] in [ON_0, ON_1] {
        let sql = format!(
            "UPDATE t SET v = 0 WHERE id() = '{first}'; \
             INSERT INTO t VALUES ('{first}', '{{\"v\":1}}')"
        );
        let err = s.batch_execute(&sql).await.unwrap_err();
        assert_eq!(sqlstate(&err), "23505", "{first}: {err:?}");
        assert_eq!(t_value(&s, first).await, Some(90), "{first}: the UPDATE was rolled back");
    }
    let rows = simple_rows(&s.simple_query("SHOW TRANSACTIONS").await.unwrap());
    assert!(rows.is_empty(), "nothing left open: {rows:?}");
}

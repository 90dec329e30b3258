//! A simple Query of several statements is one transaction, as in PostgreSQL: its statements
//! commit together at the query's end, an error in any of them rolls back the ones before it
//! (over fragments of both executors), a `BEGIN` among them makes the block explicit with the
//! statements before it included, a `COMMIT` among them commits what came before, and what
//! cannot run in a block (TRUNCATE, which deletes in rounds) runs on its own when it comes
//! first and is refused with the reason after a read or write. The same holds for the
//! Executes an extended-protocol client sends before one Sync (a driver's batch or pipeline).
//!
//! Ids pin documents to fragments with explicit shards (`id$@shard`): with 8 fragments,
//! fragment `i` holds shards `[i * 131072, (i + 1) * 131072)` and belongs to executor `i % 2`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod pg_support;
mod support;

use std::io::Write;

use pg_support::raw::{bind, error_codes, execute, parse, read_until_ready, session, sync, tags};
use support::{Node, simple_rows, sqlstate, t_value, tx_counter};

/// Fragment 0 (executor 0) and fragment 3 (executor 1).
const A: &str = "a$@0";
const D: &str = "d$@393216";

fn insert(id: &str, v: i64) -> String {
    format!("INSERT INTO t VALUES ('{id}', '{{\"v\":{v}}}')")
}

fn set(id: &str, v: &str) -> String {
    format!("UPDATE t SET v = {v} WHERE id() = '{id}'")
}

// Checks that the statements of one query commit as one transaction over two executors (one
// two-phase commit, not two autocommits), and that an error in a later statement (a duplicate
// id, a division by zero) leaves nothing of the earlier ones, where each statement on its own
// would have committed.
#[tokio::test]
async fn statements_of_one_query_commit_together() {
    let node = Node::start();
    let client = node.connect().await;
    let err = client
        .batch_execute(&format!("{}; {}; {}", insert(A, 1), insert(D, 1), insert(A, 2)))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "23505", "{err:?}");
    assert_eq!(t_value(&client, A).await, None, "the first INSERT was rolled back");
    assert_eq!(t_value(&client, D).await, None, "the second INSERT was rolled back");

    let two_phase = tx_counter(&client, "two_phase_commits").await;
    client.batch_execute(&format!("{}; {}", insert(A, 1), insert(D, 1))).await.unwrap();
    assert_eq!(tx_counter(&client, "two_phase_commits").await, two_phase + 1);
    assert_eq!(t_value(&client, A).await, Some(1));
    assert_eq!(t_value(&client, D).await, Some(1));

    let err = client
        .batch_execute(&format!("{}; {}; SELECT 1 / 0", set(A, "v + 10"), set(D, "v - 10")))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22012", "{err:?}");
    assert_eq!(t_value(&client, A).await, Some(1));
    assert_eq!(t_value(&client, D).await, Some(1));

    // Reads inside see the query's own writes; the session is idle afterwards (no block).
    let messages = client
        .simple_query(&format!("{}; SELECT v::int8 FROM t WHERE id() = '{A}'", set(A, "7")))
        .await
        .unwrap();
    assert_eq!(simple_rows(&messages), vec![vec![Some("7".to_owned())]]);
    let err = client.batch_execute("COMMIT").await;
    assert!(err.is_ok(), "{err:?}");
    let rows = simple_rows(&client.simple_query("SHOW TRANSACTIONS").await.unwrap());
    assert!(rows.is_empty(), "no block left open: {rows:?}");

    // Only reads: nothing is validated at the end (no commit of any kind is counted), so a
    // query of SELECTs cannot fail with 40001 because of writes elsewhere.
    let counters = ["fast_path_commits", "two_phase_commits", "read_only_commits", "aborts"];
    let mut before = Vec::new();
    for c in counters {
        before.push(tx_counter(&client, c).await);
    }
    let reads = format!("SELECT v FROM t WHERE id() = '{A}'; SELECT count(*) FROM t");
    let rows = simple_rows(&client.simple_query(&reads).await.unwrap());
    assert_eq!(rows, [[Some("7".to_owned())], [Some("2".to_owned())]]);
    for (c, b) in counters.iter().zip(before) {
        assert_eq!(tx_counter(&client, c).await, b, "{c}");
    }
}

// Checks PostgreSQL's rules for transaction control inside such a query: a BEGIN makes the
// implicit block explicit, the statements before it included (another session sees nothing
// until COMMIT, and ROLLBACK undoes them too); a COMMIT commits what came before it, and a
// later error rolls back only what came after.
#[tokio::test]
async fn begin_and_commit_inside_a_query() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(&format!("{}; {}", insert(A, 1), insert(D, 1))).await.unwrap();

    s1.batch_execute(&format!("{}; BEGIN; {}", set(A, "2"), set(D, "2"))).await.unwrap();
    assert_eq!(t_value(&s2, A).await, Some(1), "the block is still open");
    assert_eq!(t_value(&s1, A).await, Some(2), "the session reads its own write");
    s1.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(t_value(&s2, A).await, Some(1), "ROLLBACK undid the statement before BEGIN");
    assert_eq!(t_value(&s2, D).await, Some(1));

    s1.batch_execute(&format!("{}; BEGIN; {}", set(A, "3"), set(D, "3"))).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    assert_eq!(t_value(&s2, A).await, Some(3));
    assert_eq!(t_value(&s2, D).await, Some(3));

    let err = s1
        .batch_execute(&format!("{}; COMMIT; {}; SELECT 1 / 0", set(A, "4"), set(D, "4")))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22012", "{err:?}");
    assert_eq!(t_value(&s2, A).await, Some(4), "committed by the COMMIT inside the query");
    assert_eq!(t_value(&s2, D).await, Some(3), "rolled back with the failing statement");

    // An error after BEGIN leaves an explicit failed block, as in PostgreSQL.
    let err = s1.batch_execute(&format!("BEGIN; {}; SELECT 1 / 0", set(A, "5"))).await.unwrap_err();
    assert_eq!(sqlstate(&err), "22012", "{err:?}");
    let err = s1.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(sqlstate(&err), "25P02", "{err:?}");
    s1.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(t_value(&s2, A).await, Some(4));
}

// Checks that TRUNCATE and DROP TABLE, which delete in rounds and so cannot join a
// transaction, are refused in a query of several statements after a read or write there,
// with a message saying why, and the statements before them rolled back; first in the query
// (before any read or write) they run on their own and the rest forms the implicit block.
#[tokio::test]
async fn truncate_in_a_query_of_several_statements() {
    let node = Node::start();
    let client = node.connect().await;
    client.batch_execute(&insert(A, 1)).await.unwrap();
    for statement in ["TRUNCATE t", "DROP TABLE t"] {
        let err = client.batch_execute(&format!("{}; {statement}", set(A, "9"))).await.unwrap_err();
        let message = err.as_db_error().expect("a server error").message().to_owned();
        assert!(message.contains("in a query of several statements"), "{message}");
        assert_eq!(t_value(&client, A).await, Some(1), "the UPDATE before it was rolled back");
    }
    let err = client
        .batch_execute(&format!("SELECT count(*) FROM t; TRUNCATE t; {}", insert(D, 1)))
        .await
        .unwrap_err();
    assert!(err.as_db_error().unwrap().message().contains("after a read"), "{err:?}");
    assert_eq!(t_value(&client, A).await, Some(1));

    client.batch_execute(&format!("TRUNCATE t; {}; {}", insert(D, 2), insert(A, 2))).await.unwrap();
    assert_eq!(t_value(&client, A).await, Some(2), "emptied, then both INSERTs committed");
    assert_eq!(t_value(&client, D).await, Some(2));
    let err = client
        .batch_execute(&format!("DROP TABLE IF EXISTS t; {}; {}", insert(A, 3), insert(A, 3)))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "23505", "{err:?}");
    assert_eq!(t_value(&client, A).await, None, "dropped on its own; the INSERTs rolled back");
    assert_eq!(t_value(&client, D).await, None);
}

// Checks the extended protocol's rule over a raw socket: the Executes before one Sync are
// one transaction (a duplicate in the second rolls back the first; two good ones commit by
// one two-phase commit over both executors), while one Execute with its Sync stays an
// autocommit statement.
#[tokio::test]
async fn executes_before_one_sync_commit_together() {
    let node = Node::start();
    let client = node.connect().await;
    let mut s = session(node.addr());
    let insert = |id: &str, v: i64| {
        let sql = insert(id, v);
        [parse("", &sql), bind("", "", &[], &[]), execute("")].concat()
    };
    let mut round = |frames: Vec<u8>| {
        s.write_all(&[frames, sync()].concat()).unwrap();
        read_until_ready(&mut s)
    };
    let reply = round([insert(A, 1), insert(D, 1), insert(A, 2)].concat());
    assert_eq!(error_codes(&reply), vec!["23505"], "{}", tags(&reply));
    assert_eq!(t_value(&client, A).await, None, "the first INSERT was rolled back");
    assert_eq!(t_value(&client, D).await, None, "the second INSERT was rolled back");

    let two_phase = tx_counter(&client, "two_phase_commits").await;
    let reply = round([insert(A, 1), insert(D, 1)].concat());
    assert_eq!(tags(&reply), "12C12CZ");
    assert_eq!(tx_counter(&client, "two_phase_commits").await, two_phase + 1);
    assert_eq!((t_value(&client, A).await, t_value(&client, D).await), (Some(1), Some(1)));

    let fast = tx_counter(&client, "fast_path_commits").await;
    let reply = round(insert(D, 5));
    assert_eq!(error_codes(&reply), vec!["23505"]);
    let reply = round([parse("", &set(D, "5")), bind("", "", &[], &[]), execute("")].concat());
    assert_eq!(tags(&reply), "12CZ");
    assert_eq!(t_value(&client, D).await, Some(5));
    assert_eq!(
        tx_counter(&client, "fast_path_commits").await,
        fast,
        "a lone Execute stays an autocommit write, not a block"
    );
}

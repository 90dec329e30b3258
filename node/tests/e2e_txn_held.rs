//! A commit or an autocommit write that meets a document held by another transaction's
//! prepared commit waits for the holder to release it (bounded by `TXN_HELD_WAIT_MAX`) and
//! runs again, instead of answering 40001 at once. The holder is kept prepared by a test-only
//! hook (`TESSERA_FAULT`): `2pc-pause-before-decision` (shorter than the wait: the waiter
//! completes) or `2pc-stall-before-decision` (longer: the waiter answers 40001).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, NodeOptions, simple_rows, sqlstate, t_value, tx_counter};

/// Fragment 0 (executor 0) and fragment 1 (executor 1).
const HELD: &str = "a$@0";
const OTHER: &str = "b$@131072";

/// A node with `fault` armed, holding `HELD` and `OTHER` at v = 0.
async fn start(fault: &str) -> (Node, tokio_postgres::Client) {
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), fault.to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    node.expect_log("transaction prepared too long");
    let client = node.connect().await;
    // One fragment each: the fast path, no two-phase commit, no fault.
    for id in [HELD, OTHER] {
        client
            .batch_execute(&format!("INSERT INTO t VALUES ('{id}', '{{\"v\":0}}')"))
            .await
            .unwrap();
    }
    (node, client)
}

/// Runs `sql` (a cross-executor transaction) on a session of its own, and returns once SHOW
/// TRANSACTIONS lists it `state` (its prepares done, the hook keeping it from its decision).
async fn hold(
    node: &Node,
    watch: &tokio_postgres::Client,
    sql: String,
    state: &str,
) -> tokio::task::JoinHandle<Result<(), tokio_postgres::Error>> {
    let holder = node.connect().await;
    let task = tokio::spawn(async move { holder.batch_execute(&sql).await });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let rows = simple_rows(&watch.simple_query("SHOW TRANSACTIONS").await.unwrap());
        if rows.iter().any(|r| r[1].as_deref() == Some(state)) {
            return task;
        }
        assert!(std::time::Instant::now() < deadline, "never {state}: {rows:?}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

// Checks that a transaction whose COMMIT meets a document only read (held) by a prepared
// transaction commits once the holder is through instead of failing with 40001; and that an
// autocommit UPDATE of a document a prepared transaction writes runs again once the holder
// committed (after it, so its value stays).
#[tokio::test]
async fn held_document_is_waited_for() {
    let (mut node, client) = start("2pc-pause-before-decision").await;
    let waits = tx_counter(&client, "held_waits").await;
    let reader = format!(
        "BEGIN; SELECT v::int8 FROM t WHERE id() = '{HELD}'; \
         UPDATE t SET v = 1 WHERE id() = '{OTHER}'; COMMIT"
    );
    let holder = hold(&node, &client, reader, "held").await;
    let other = node.connect().await;
    other
        .batch_execute(&format!(
            "BEGIN; SELECT v::int8 FROM t WHERE id() = '{HELD}'; \
             UPDATE t SET v = 2 WHERE id() = '{HELD}'; COMMIT"
        ))
        .await
        .expect("the commit waits for the holder, then commits");
    holder.await.unwrap().expect("the holder commits");
    assert_eq!(t_value(&client, HELD).await, Some(2));
    assert_eq!(t_value(&client, OTHER).await, Some(1));
    let after_commit = tx_counter(&client, "held_waits").await;
    assert!(after_commit > waits, "the commit waited: {waits} -> {after_commit}");

    let writer = format!(
        "BEGIN; UPDATE t SET v = 3 WHERE id() = '{HELD}'; \
         UPDATE t SET v = 3 WHERE id() = '{OTHER}'; COMMIT"
    );
    let holder = hold(&node, &client, writer, "prepared").await;
    other
        .batch_execute(&format!("UPDATE t SET v = 4 WHERE id() = '{HELD}'"))
        .await
        .expect("the write waits for the holder, then runs on its version");
    holder.await.unwrap().expect("the holder commits");
    assert_eq!(t_value(&client, HELD).await, Some(4), "applied after the holder's commit");
    assert_eq!(t_value(&client, OTHER).await, Some(3));
    let after_write = tx_counter(&client, "held_waits").await;
    assert!(after_write > after_commit, "the write waited: {after_commit} -> {after_write}");
    node.stop();
}

// Checks the bound: a holder that stays prepared longer than a commit waits for it (stalled
// past the prepared timeout by the hook) makes the waiting COMMIT, and an autocommit write of
// the same document, answer 40001 with nothing applied.
#[tokio::test]
async fn held_too_long_answers_40001() {
    let (mut node, client) = start("2pc-stall-before-decision").await;
    let reader = format!(
        "BEGIN; SELECT v::int8 FROM t WHERE id() = '{HELD}'; \
         UPDATE t SET v = 1 WHERE id() = '{OTHER}'; COMMIT"
    );
    let _holder = hold(&node, &client, reader, "held").await;
    let other = node.connect().await;
    let err = other
        .batch_execute(&format!(
            "BEGIN; SELECT v::int8 FROM t WHERE id() = '{HELD}'; \
             UPDATE t SET v = 2 WHERE id() = '{HELD}'; COMMIT"
        ))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "40001", "{err:?}");
    let err = other
        .batch_execute(&format!("UPDATE t SET v = 2 WHERE id() = '{HELD}'"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "40001", "{err:?}");
    assert_eq!(t_value(&client, HELD).await, Some(0), "nothing applied");
    node.stop();
}

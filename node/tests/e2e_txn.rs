//! Transactions end to end against a real node (2 executors, 8 fragments): read-your-writes,
//! ROLLBACK, the failed-block state, 40001 on conflicting commits, write skew across executors,
//! atomic multi-row INSERTs across executors, SHOW TRANSACTIONS.
//!
//! Ids pin documents to fragments with explicit shards (`id$@shard`): with 8 fragments,
//! fragment `i` holds shards `[i * 131072, (i + 1) * 131072)` and belongs to executor `i % 2`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, simple_rows, sqlstate};

/// On fragment 0 (executor 0), fragment 1 (executor 1), fragment 2 (executor 0).
const A: &str = "a$@0";
const B: &str = "b$@131072";
const C: &str = "c$@262144";

async fn value(client: &tokio_postgres::Client, id: &str) -> Option<i64> {
    client
        .query_opt("SELECT v::int8 FROM t WHERE id() = $1", &[&id])
        .await
        .unwrap()
        .map(|r| r.get(0))
}

async fn count(client: &tokio_postgres::Client) -> i64 {
    client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0)
}

async fn counter(client: &tokio_postgres::Client, name: &str) -> i64 {
    let rows = client.query("SHOW transaction_counters", &[]).await.unwrap();
    rows.iter().find(|r| r.get::<_, String>(0) == name).map(|r| r.get(1)).unwrap()
}

// Checks that inside a block reads see the block's own inserts, updates and deletes (point
// reads, scans and aggregates), that other sessions do not until COMMIT, and that ROLLBACK
// discards everything.
#[tokio::test]
async fn read_your_writes_then_commit_or_rollback() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(&format!("INSERT INTO t VALUES ('{C}', '{{\"v\":3}}')")).await.unwrap();

    s1.batch_execute("BEGIN").await.unwrap();
    s1.execute(&format!("INSERT INTO t VALUES ('{A}', '{{\"v\":1}}')"), &[]).await.unwrap();
    assert_eq!(value(&s1, A).await, Some(1), "own insert visible to a point read");
    s1.execute("UPDATE t SET v = v + 10 WHERE id() = $1", &[&A]).await.unwrap();
    assert_eq!(value(&s1, A).await, Some(11), "own update visible");
    s1.execute("DELETE FROM t WHERE id() = $1", &[&C]).await.unwrap();
    assert_eq!(value(&s1, C).await, None, "own delete hides the document");
    assert_eq!(count(&s1).await, 1, "a scan sees the overlay");
    let sum: i64 = s1.query_one("SELECT sum(v::int8) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(sum, 11, "aggregates see the overlay");
    assert_eq!(value(&s2, A).await, None, "other sessions do not see uncommitted writes");
    assert_eq!(value(&s2, C).await, Some(3));
    s1.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(value(&s1, A).await, None, "ROLLBACK discards the insert");
    assert_eq!(value(&s1, C).await, Some(3), "ROLLBACK discards the delete");

    s1.batch_execute("BEGIN").await.unwrap();
    s1.execute(&format!("INSERT INTO t VALUES ('{A}', '{{\"v\":1}}')"), &[]).await.unwrap();
    s1.execute(&format!("INSERT INTO t VALUES ('{B}', '{{\"v\":2}}')"), &[]).await.unwrap();
    s1.execute("UPDATE t SET v = 30 WHERE id() = $1", &[&C]).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    assert_eq!(value(&s2, A).await, Some(1));
    assert_eq!(value(&s2, B).await, Some(2));
    assert_eq!(value(&s2, C).await, Some(30));
    assert!(counter(&s2, "two_phase_commits").await >= 1);

    // One fragment only: the fast path.
    let before = counter(&s2, "fast_path_commits").await;
    s1.batch_execute("BEGIN").await.unwrap();
    s1.execute("UPDATE t SET v = v + 1 WHERE id() = $1", &[&A]).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    assert_eq!(value(&s2, A).await, Some(2));
    assert_eq!(counter(&s2, "fast_path_commits").await, before + 1);
}

// Checks the failed-block state: after an error inside a block every statement fails with
// 25P02 until ROLLBACK (or COMMIT, which rolls back); nothing of the block is applied; the
// session works normally afterwards. Also BEGIN inside a block and COMMIT outside one are
// warnings, not errors.
#[tokio::test]
async fn failed_block_refuses_until_rollback() {
    let node = Node::start();
    let s = node.connect().await;
    s.batch_execute(&format!("INSERT INTO t VALUES ('{B}', '{{\"v\":2}}')")).await.unwrap();
    for end in ["ROLLBACK", "COMMIT"] {
        s.batch_execute("BEGIN").await.unwrap();
        s.batch_execute("BEGIN").await.expect("BEGIN inside a block is a warning");
        s.execute(&format!("INSERT INTO t VALUES ('{A}', '{{\"v\":1}}')"), &[]).await.unwrap();
        let dup = s
            .execute(&format!("INSERT INTO t VALUES ('{B}', '{{\"v\":9}}')"), &[])
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&dup), "23505");
        let refused = s.query("SELECT 1", &[]).await.unwrap_err();
        assert_eq!(sqlstate(&refused), "25P02");
        let refused = s.batch_execute("SELECT count(*) FROM t").await.unwrap_err();
        assert_eq!(sqlstate(&refused), "25P02");
        let messages = s.simple_query(end).await.unwrap();
        assert!(!messages.is_empty());
        assert_eq!(value(&s, A).await, None, "{end} of a failed block applies nothing");
        assert_eq!(value(&s, B).await, Some(2));
    }
    s.batch_execute("COMMIT").await.expect("COMMIT outside a block is a warning");
    s.batch_execute("ROLLBACK").await.expect("ROLLBACK outside a block is a warning");
}

// Checks that two sessions reading and updating one document in overlapping blocks cannot
// both commit: the second COMMIT fails with 40001 and its write is not applied.
#[tokio::test]
async fn two_sessions_updating_one_document() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(&format!("INSERT INTO t VALUES ('{A}', '{{\"v\":100}}')")).await.unwrap();
    for s in [&s1, &s2] {
        s.batch_execute("BEGIN").await.unwrap();
        assert_eq!(value(s, A).await, Some(100));
    }
    s1.execute("UPDATE t SET v = v - 30 WHERE id() = $1", &[&A]).await.unwrap();
    s2.execute("UPDATE t SET v = v - 50 WHERE id() = $1", &[&A]).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    let err = s2.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(sqlstate(&err), "40001");
    assert_eq!(value(&s1, A).await, Some(70));
    // After the failed COMMIT the session is out of the block and works.
    s2.execute("UPDATE t SET v = v - 50 WHERE id() = $1", &[&A]).await.unwrap();
    assert_eq!(value(&s1, A).await, Some(20));
    assert!(counter(&s1, "conflicts").await >= 1);
}

// Checks write skew across executors: each session reads both documents (on fragments of
// different executors) and writes the one the other only read. Serializable means one of the
// two COMMITs fails with 40001; the invariant "at least one is on" holds.
#[tokio::test]
async fn write_skew_across_executors() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(&format!(
        "INSERT INTO t VALUES ('{A}', '{{\"v\":1}}'), ('{B}', '{{\"v\":1}}')"
    ))
    .await
    .unwrap();
    for s in [&s1, &s2] {
        s.batch_execute("BEGIN").await.unwrap();
        let on: i64 = s
            .query_one("SELECT sum(v::int8) FROM t WHERE id() IN ($1, $2)", &[&A, &B])
            .await
            .unwrap()
            .get(0);
        assert_eq!(on, 2);
    }
    s1.execute("UPDATE t SET v = 0 WHERE id() = $1", &[&A]).await.unwrap();
    s2.execute("UPDATE t SET v = 0 WHERE id() = $1", &[&B]).await.unwrap();
    let r1 = s1.batch_execute("COMMIT").await;
    let r2 = s2.batch_execute("COMMIT").await;
    assert!(r1.is_ok(), "the first commit wins: {r1:?}");
    assert_eq!(sqlstate(&r2.unwrap_err()), "40001");
    let on = value(&s1, A).await.unwrap() + value(&s1, B).await.unwrap();
    assert_eq!(on, 1, "exactly one write applied");
}

// Checks that a multi-row INSERT over fragments of both executors is atomic: with a duplicate
// id on one fragment nothing is inserted anywhere; without, all rows are, by one two-phase
// commit.
#[tokio::test]
async fn multi_row_insert_across_executors_is_atomic() {
    let node = Node::start();
    let s = node.connect().await;
    s.batch_execute(&format!("INSERT INTO t VALUES ('{C}', '{{\"v\":3}}')")).await.unwrap();
    let err = s
        .batch_execute(&format!(
            "INSERT INTO t VALUES ('{A}', '{{\"v\":1}}'), ('{B}', '{{\"v\":2}}'), ('{C}', '{{\"v\":9}}')"
        ))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "23505");
    assert_eq!(count(&s).await, 1, "a duplicate on one fragment aborts every row");
    let before = counter(&s, "two_phase_commits").await;
    let n = s
        .execute(
            &format!("INSERT INTO t VALUES ('{A}', '{{\"v\":1}}'), ('{B}', '{{\"v\":2}}')"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(count(&s).await, 3);
    assert_eq!(counter(&s, "two_phase_commits").await, before + 1);
    // A scatter UPDATE over every fragment is one transaction too.
    let n = s.execute("UPDATE t SET v = v * 10", &[]).await.unwrap();
    assert_eq!(n, 3);
    let sum: i64 = s.query_one("SELECT sum(v::int8) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(sum, 60);
}

// Checks SHOW TRANSACTIONS lists an open block with the fragments it touched, and that it is
// gone after COMMIT; and that the counters are listed.
#[tokio::test]
async fn show_transactions_lists_open_blocks() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute("BEGIN").await.unwrap();
    s1.execute(&format!("INSERT INTO t VALUES ('{B}', '{{\"v\":2}}')"), &[]).await.unwrap();
    let rows = simple_rows(&s2.simple_query("SHOW TRANSACTIONS").await.unwrap());
    let open: Vec<_> = rows.iter().filter(|r| r[1].as_deref() == Some("active")).collect();
    assert_eq!(open.len(), 1, "{rows:?}");
    assert_eq!(open[0][2].as_deref(), Some("$1"), "participants: fragment 1");
    s1.batch_execute("COMMIT").await.unwrap();
    let rows = simple_rows(&s2.simple_query("SHOW TRANSACTIONS").await.unwrap());
    assert!(rows.iter().all(|r| r[1].as_deref() != Some("active")), "{rows:?}");
    let counters = simple_rows(&s2.simple_query("SHOW transaction_counters").await.unwrap());
    let names: Vec<_> = counters.iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!(
        names,
        ["fast_path_commits", "two_phase_commits", "read_only_commits", "aborts", "conflicts"]
    );
}

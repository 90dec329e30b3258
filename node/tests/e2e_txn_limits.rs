//! The per-fragment bound of one commit: a write statement or transaction changes at most
//! 4,096 documents of one fragment (one storage batch, `TXN_FRAGMENT_OPS_MAX`), atomically.
//! At the bound a multi-fragment DELETE or UPDATE commits; past it the statement fails with
//! 54000 naming the fragment, the limit and what to do, and changes nothing anywhere. Reads
//! are not bound that way: a read-only participant is held in memory, not logged.
//!
//! Ids pin documents to fragments with explicit shards (`id$@shard`): with 8 fragments,
//! fragment `i` holds shards `[i * 131072, (i + 1) * 131072)` and belongs to executor `i % 2`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, sqlstate};

/// The limit under test (`node::engine::limits::TXN_FRAGMENT_OPS_MAX`).
const MAX: usize = 4096;

/// Inserts documents `{prefix}{i}` for `i` in `from..to` on `shard`, with `{"v":1,"n":i}`.
async fn insert(client: &tokio_postgres::Client, prefix: &str, shard: u32, from: usize, to: usize) {
    let rows: Vec<String> =
        (from..to).map(|i| format!("('{prefix}{i}$@{shard}', '{{\"v\":1,\"n\":{i}}}')")).collect();
    client.batch_execute(&format!("INSERT INTO t VALUES {}", rows.join(", "))).await.unwrap();
}

async fn count(client: &tokio_postgres::Client, filter: &str) -> i64 {
    client.query_one(&format!("SELECT count(*) FROM t {filter}"), &[]).await.unwrap().get(0)
}

// Checks the boundary of a multi-fragment autocommit DELETE and UPDATE: with exactly 4,096
// matching documents on fragment 0 (and one on fragment 1) both commit; with 4,097 both fail
// with 54000 and a message naming the limit and the fix, nothing is changed on either
// fragment, and the same work split into two statements succeeds.
#[tokio::test]
async fn multi_fragment_write_at_and_past_the_fragment_limit() {
    let node = Node::start();
    let client = node.connect().await;
    insert(&client, "k", 0, 0, MAX).await;
    insert(&client, "z", 131_072, 0, 1).await;
    let n = client.execute("UPDATE t SET v = 2 WHERE v = 1", &[]).await.unwrap();
    assert_eq!(n, MAX as u64 + 1, "at the limit an UPDATE over two fragments commits");
    let n = client.execute("DELETE FROM t WHERE v = 2", &[]).await.unwrap();
    assert_eq!(n, MAX as u64 + 1, "at the limit a DELETE over two fragments commits");
    assert_eq!(count(&client, "").await, 0);

    insert(&client, "k", 0, 0, MAX).await;
    insert(&client, "k", 0, MAX, MAX + 1).await;
    insert(&client, "z", 131_072, 0, 1).await;
    for sql in ["DELETE FROM t WHERE v = 1", "UPDATE t SET v = 2 WHERE v = 1"] {
        let err = client.execute(sql, &[]).await.unwrap_err();
        assert_eq!(sqlstate(&err), "54000", "{sql}: {err:?}");
        let message = err.as_db_error().unwrap().message().to_owned();
        assert!(message.contains("4097 documents"), "{message}");
        assert!(message.contains("the limit is 4096 per fragment"), "{message}");
        assert!(message.contains("split the write"), "{message}");
        assert_eq!(count(&client, "WHERE v = 1").await, MAX as i64 + 2, "{sql} changed nothing");
    }
    // Single-fragment statements have the same bound and the same message.
    let err = client.execute("DELETE FROM t WHERE id() LIKE 'k%'", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&err), "54000", "{err:?}");
    assert!(err.as_db_error().unwrap().message().contains("split the write"), "{err:?}");
    // What the message says to do: narrower WHERE conditions.
    let a = client.execute("DELETE FROM t WHERE v = 1 AND n::int8 < 2000", &[]).await.unwrap();
    let b = client.execute("DELETE FROM t WHERE v = 1", &[]).await.unwrap();
    assert_eq!(a + b, MAX as u64 + 2);
    assert_eq!(count(&client, "").await, 0);
}

// Checks that reads are not bound by the per-fragment batch: a transaction that read more
// than 4,096 documents of one fragment (every document, by a count) and writes two other
// fragments commits by two-phase commit, the fragment it only read being held in memory.
#[tokio::test]
async fn read_only_participant_reads_past_the_fragment_limit() {
    let node = Node::start();
    let client = node.connect().await;
    insert(&client, "r", 131_072, 0, MAX).await;
    insert(&client, "r", 131_072, MAX, MAX + 100).await;
    insert(&client, "a", 0, 0, 1).await;
    insert(&client, "c", 262_144, 0, 1).await;
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(count(&client, "").await, MAX as i64 + 102);
    client.execute("UPDATE t SET v = 5 WHERE id() = 'a0$@0'", &[]).await.unwrap();
    client.execute("UPDATE t SET v = 5 WHERE id() = 'c0$@262144'", &[]).await.unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(count(&client, "WHERE v = 5").await, 2);
}

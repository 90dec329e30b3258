//! The bounds of one commit: a write statement or transaction writes at most 65,536 documents
//! (`TXN_WRITES_MAX`), and writes and checks at most as many on one fragment (one storage
//! batch, `TXN_FRAGMENT_OPS_MAX`), atomically, however many log records that takes. Past a
//! bound the statement fails with 54000 naming the limit and what to do, and changes nothing
//! anywhere. Reads are not bound by the fragment's batch: a read-only participant is held in
//! memory, not logged.
//!
//! Ids pin documents to fragments with explicit shards (`id$@shard`): with 8 fragments,
//! fragment `i` holds shards `[i * 131072, (i + 1) * 131072)` and belongs to executor `i % 2`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use bytes::Bytes;
use futures_util::{SinkExt, pin_mut};
use support::{Node, sqlstate};

/// The bounds under test (`node::engine::limits::TXN_WRITES_MAX`, `TXN_FRAGMENT_OPS_MAX`).
const MAX: usize = 65_536;

/// Operations one log record holds (`storage::limits::RECORD_OPS_MAX`): the old bound.
const RECORD_OPS: usize = 4096;

/// Inserts documents `{prefix}{i}` for `i` in `from..to` on `shard`, with `{"v":1,"n":i}`.
async fn insert(client: &tokio_postgres::Client, prefix: &str, shard: u32, from: usize, to: usize) {
    let rows: Vec<String> =
        (from..to).map(|i| format!("('{prefix}{i}$@{shard}', '{{\"v\":1,\"n\":{i}}}')")).collect();
    client.batch_execute(&format!("INSERT INTO t VALUES {}", rows.join(", "))).await.unwrap();
}

/// Loads documents as `insert` does, any number, with COPY.
async fn load(client: &tokio_postgres::Client, prefix: &str, shard: u32, from: usize, to: usize) {
    let input: String =
        (from..to).map(|i| format!("{prefix}{i}$@{shard}\t{{\"v\":1,\"n\":{i}}}\n")).collect();
    let sink = client.copy_in::<_, Bytes>("COPY t FROM STDIN").await.unwrap();
    pin_mut!(sink);
    sink.send(Bytes::from(input)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), (to - from) as u64);
}

async fn count(client: &tokio_postgres::Client, filter: &str) -> i64 {
    client.query_one(&format!("SELECT count(*) FROM t {filter}"), &[]).await.unwrap().get(0)
}

// Checks commits larger than one log record (more documents than 4,096, more bytes than 2 MiB
// on one fragment): one INSERT of 10,000 rows on one fragment, a two-fragment UPDATE of all
// of them (two-phase commit, prepared in parts), a block of 6,400 documents of 1 KiB on one
// fragment; each commits whole, and everything is there after a SIGKILL and a restart.
#[tokio::test]
async fn commits_larger_than_one_record() {
    let mut node = Node::start();
    let client = node.connect().await;
    insert(&client, "k", 0, 0, 10_000).await;
    insert(&client, "z", 131_072, 0, 1).await;
    let n = client.execute("UPDATE t SET v = 2 WHERE v = 1", &[]).await.unwrap();
    assert_eq!(n, 10_001, "an UPDATE over two fragments, 10,000 documents on one");
    let pad = "p".repeat(1000);
    client.batch_execute("BEGIN").await.unwrap();
    for part in 0..8 {
        let rows: Vec<String> = (part * 800..(part + 1) * 800)
            .map(|i| format!("('w{i}$@262144', '{{\"v\":3,\"n\":{i},\"pad\":\"{pad}\"}}')"))
            .collect();
        client.batch_execute(&format!("INSERT INTO t VALUES {}", rows.join(", "))).await.unwrap();
    }
    assert_eq!(count(&client, "WHERE v = 3").await, 6_400, "the block reads its own writes");
    client.batch_execute("COMMIT").await.unwrap();
    drop(client);
    node.kill9();
    node.start_again();
    let client = node.connect().await;
    assert_eq!(count(&client, "WHERE v = 2").await, 10_001);
    assert_eq!(count(&client, "WHERE v = 3").await, 6_400);
    let sql = "SELECT length(pad) FROM t WHERE id() = 'w6399$@262144'";
    let rows = support::simple_rows(&client.simple_query(sql).await.unwrap());
    assert_eq!(rows, vec![vec![Some("1000".to_owned())]]);
    let n = client.execute("DELETE FROM t", &[]).await.unwrap();
    assert_eq!(n, 16_401);
    assert_eq!(count(&client, "").await, 0);
}

// Checks the bounds: a DELETE matching 65,537 documents of one fragment stops its scan there,
// and an UPDATE of 50,000 on one fragment and 20,000 on another passes the transaction's
// bound; both fail with 54000 naming the limit and the fix and change nothing; the same work
// in two statements (what the message says to do) succeeds. A block that reads more
// documents of a fragment than it may write and writes one there is refused by the
// per-fragment bound at COMMIT.
#[tokio::test]
async fn write_past_the_bounds() {
    let node = Node::start();
    let client = node.connect().await;
    load(&client, "k", 0, 0, MAX + 1).await;
    load(&client, "z", 131_072, 0, 20_000).await;
    let total = MAX as i64 + 1 + 20_000;
    for (sql, says) in [
        ("DELETE FROM t WHERE id() LIKE 'k%'", "changes more than 65536 documents on one fragment"),
        ("UPDATE t SET v = 2 WHERE n::int8 < 50000", "limit of 65536 documents written"),
    ] {
        let err = client.execute(sql, &[]).await.unwrap_err();
        assert_eq!(sqlstate(&err), "54000", "{err:?}");
        let message = err.as_db_error().unwrap().message().to_owned();
        assert!(message.contains(says), "{message}");
        assert!(message.contains("split it into smaller statements"), "{message}");
        assert_eq!(count(&client, "WHERE v = 1").await, total, "{sql} changed nothing");
    }
    client.batch_execute("BEGIN").await.unwrap();
    for i in (0..=MAX).step_by(1000) {
        let sql = format!(
            "SELECT n FROM t WHERE id() IN ({})",
            (i..(i + 1000).min(MAX + 1))
                .map(|j| format!("'k{j}$@0'"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        client.simple_query(&sql).await.unwrap();
    }
    client.execute("UPDATE t SET v = 7 WHERE id() = 'k0$@0'", &[]).await.unwrap();
    let err = client.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(sqlstate(&err), "54000", "{err:?}");
    let message = err.as_db_error().unwrap().message().to_owned();
    assert!(message.contains("65537 documents written or read on fragment"), "{message}");
    assert!(message.contains("the limit is 65536 per fragment"), "{message}");
    assert_eq!(count(&client, "WHERE v = 7").await, 0, "the refused COMMIT changed nothing");
    let a = client.execute("DELETE FROM t WHERE v = 1 AND n::int8 < 30000", &[]).await.unwrap();
    let b = client.execute("DELETE FROM t WHERE v = 1", &[]).await.unwrap();
    assert_eq!(a + b, total as u64);
    assert_eq!(count(&client, "").await, 0);
}

// Checks that reads are not bound by the per-fragment batch: a transaction that read more
// documents of one fragment than one record holds (every document, by a count) and writes two
// other fragments commits by two-phase commit, the fragment it only read being held in memory.
#[tokio::test]
async fn read_only_participant_reads_past_one_record() {
    let node = Node::start();
    let client = node.connect().await;
    insert(&client, "r", 131_072, 0, RECORD_OPS + 100).await;
    insert(&client, "a", 0, 0, 1).await;
    insert(&client, "c", 262_144, 0, 1).await;
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(count(&client, "").await, RECORD_OPS as i64 + 102);
    client.execute("UPDATE t SET v = 5 WHERE id() = 'a0$@0'", &[]).await.unwrap();
    client.execute("UPDATE t SET v = 5 WHERE id() = 'c0$@262144'", &[]).await.unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(count(&client, "WHERE v = 5").await, 2);
}

// Checks a read-only block that read more documents than a commit validates at once, on two
// fragments of two executors (the ranges of every fragment held at once, then the documents
// validated in rounds of 4,096 checks per fragment): it commits when nothing changed in
// between; a document it read rewritten or deleted by another session, or one added to a
// range it counted, fails its COMMIT with 40001, wherever that document's check falls among
// the rounds.
#[tokio::test]
async fn large_read_only_block_validates_every_round() {
    let node = Node::start();
    let client = node.connect().await;
    let other = node.connect().await;
    load(&client, "a", 0, 0, 9_000).await;
    load(&client, "b", 131_072, 0, 9_000).await;
    let holds = support::tx_counter(&client, "read_only_holds").await;
    let changes = [
        (18_000, None),
        (18_000, Some("UPDATE t SET v = 2 WHERE id() = 'b8999$@131072'")),
        (18_000, Some("INSERT INTO t VALUES ('a9000$@0', '{\"v\":1}')")),
        (18_001, Some("DELETE FROM t WHERE id() = 'b5$@131072'")),
        (18_000, None),
    ];
    for (docs, change) in changes {
        client.batch_execute("BEGIN").await.unwrap();
        assert_eq!(count(&client, "").await, docs);
        let Some(sql) = change else {
            client.batch_execute("COMMIT").await.unwrap();
            continue;
        };
        other.batch_execute(sql).await.unwrap();
        let err = client.batch_execute("COMMIT").await.unwrap_err();
        assert_eq!(sqlstate(&err), "40001", "{sql}: {err:?}");
    }
    // The two commits held the ranges of all eight fragments first (too many checks to hold
    // whole), then checked the documents in rounds.
    assert_eq!(support::tx_counter(&client, "read_only_holds").await, holds + 2);
}

// Checks a block's UPDATE and DELETE over more documents than one slice reads (4,096: each
// fragment is read in slices, other statements of the executor running between): an UPDATE
// of every other one of 9,000 documents on one fragment returns its 4,500 rows, a DELETE
// over the same range then merges the buffered updates with the stored documents across its
// slices, and the commit applies exactly those writes. A block whose sliced UPDATE read the
// whole range fails its COMMIT with 40001 when another session adds a document to it (the
// range counted across the slices), and writes nothing.
#[tokio::test]
async fn block_update_and_delete_read_in_slices() {
    let node = Node::start();
    let client = node.connect().await;
    let other = node.connect().await;
    load(&client, "a", 0, 0, 9_000).await;
    client.batch_execute("BEGIN").await.unwrap();
    let updated = client.query("UPDATE t SET v = 2 WHERE n % 2 = 0 RETURNING id()", &[]).await;
    assert_eq!(updated.unwrap().len(), 4_500);
    assert_eq!(count(&client, "WHERE v = 2").await, 4_500, "the block reads its own writes");
    let deleted = client.execute("DELETE FROM t WHERE n >= 8000", &[]).await.unwrap();
    assert_eq!(deleted, 1_000);
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(count(&other, "").await, 8_000);
    assert_eq!(count(&other, "WHERE v = 2").await, 4_000);
    assert_eq!(count(&other, "WHERE v = 2 AND n % 2 = 1").await, 0);
    client.batch_execute("BEGIN").await.unwrap();
    let n = client.execute("UPDATE t SET v = 3 WHERE v = 1", &[]).await.unwrap();
    assert_eq!(n, 4_000);
    other.execute("INSERT INTO t VALUES ('a9999$@0', '{\"v\":9,\"n\":9999}')", &[]).await.unwrap();
    let err = client.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(sqlstate(&err), "40001", "{err:?}");
    assert_eq!(count(&other, "WHERE v = 3").await, 0, "nothing written");
}

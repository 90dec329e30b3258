//! An autocommit UPDATE over several fragments whose documents are rewritten between its read
//! and its commit, on every attempt, still commits: its attempts after a conflict prepare each
//! fragment's writes at the instant it was read (`Core::txn_write_prepared`), so a write that
//! lands after the read waits for the statement instead of failing it. The rewrite is a
//! test-only hook (`TESSERA_FAULT=autocommit-rewrite-after-read`): after each autocommit share
//! is read, the first document it writes is rewritten durably before the share returns, which
//! is what a writer rewriting that document back to back does at worst. Before the prepared
//! retries every attempt conflicted and the statement ended in 40001 after its 16 attempts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, NodeOptions, simple_rows, tx_counter};

/// Documents per fragment; the default node has eight fragments over two executors.
const PER_FRAGMENT: u32 = 5;
const FRAGMENTS: u32 = 8;
const SHARDS_PER_FRAGMENT: u32 = 131_072;

// Checks that the UPDATE's first attempt conflicts (the hook works), a later one prepares as
// it reads and commits every document once, nothing stays prepared, and a DELETE over the
// same fragments after it commits too.
#[tokio::test]
async fn autocommit_update_rewritten_between_read_and_commit_commits() {
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), "autocommit-rewrite-after-read".to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    let client = node.connect().await;
    let total = PER_FRAGMENT * FRAGMENTS;
    for f in 0..FRAGMENTS {
        for i in 0..PER_FRAGMENT {
            let id = format!("d{f}_{i}$@{}", f * SHARDS_PER_FRAGMENT + i);
            // One fragment each: the fast path, no hook.
            client
                .batch_execute(&format!("INSERT INTO t VALUES ('{id}', '{{\"n\":{i},\"c\":0}}')"))
                .await
                .unwrap();
        }
    }
    let conflicts = tx_counter(&client, "conflicts").await;
    let retries = tx_counter(&client, "prepared_retries").await;
    let two_phase = tx_counter(&client, "two_phase_commits").await;

    let n = client.execute("UPDATE t SET c = c + 1 WHERE n >= 0", &[]).await.unwrap();
    assert_eq!(n, u64::from(total));

    assert!(tx_counter(&client, "conflicts").await > conflicts, "the first attempt conflicted");
    assert!(tx_counter(&client, "prepared_retries").await > retries, "a retry prepared as it read");
    assert_eq!(tx_counter(&client, "two_phase_commits").await, two_phase + 1);
    let rows = client.query("SELECT id(), c::int8 FROM t", &[]).await.unwrap();
    assert_eq!(rows.len(), total as usize);
    for row in &rows {
        assert_eq!(row.get::<_, i64>(1), 1, "{} updated once", row.get::<_, String>(0));
    }
    let open = simple_rows(&client.simple_query("SHOW TRANSACTIONS").await.unwrap());
    assert!(open.iter().all(|r| r[1].as_deref() != Some("prepared")), "{open:?}");

    // Deletes are not rewritten by the hook: the first attempt commits.
    let n = client.execute("DELETE FROM t WHERE n < 2", &[]).await.unwrap();
    assert_eq!(n, u64::from(2 * FRAGMENTS));
    let left: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(left, i64::from(total - 2 * FRAGMENTS));
}

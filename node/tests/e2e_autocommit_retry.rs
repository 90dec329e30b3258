//! An autocommit UPDATE over several fragments whose documents are rewritten between its read
//! and its commit, on every attempt, still commits: its attempts after a conflict prepare each
//! fragment's writes at the instant it was read (`Core::txn_write_prepared`), so a write that
//! lands after the read waits for the statement instead of failing it. The rewrite is a
//! test-only hook (`TESSERA_FAULT=autocommit-rewrite-after-read`): after each autocommit share
//! is read, the first document it writes is rewritten durably before the share returns, which
//! is what a writer rewriting that document back to back does at worst. Before the prepared
//! retries every attempt conflicted and the statement ended in 40001 after its 16 attempts.
//! The same with the node killed at the crash points of that retry's two-phase commit
//! (`TESSERA_FAULT` takes the rewrite beside one of them): after a restart the UPDATE is
//! all or nothing, and the right one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, NodeOptions, simple_rows, tx_counter};

/// Documents per fragment; the default node has eight fragments over two executors.
const PER_FRAGMENT: u32 = 5;
const FRAGMENTS: u32 = 8;
const SHARDS_PER_FRAGMENT: u32 = 131_072;

/// Starts a node with `faults` armed and loads `PER_FRAGMENT` documents on each fragment
/// (one fragment each: the fast path, no hook), each with `c` = 0.
async fn start(faults: &str) -> (Node, tokio_postgres::Client) {
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), faults.to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    let client = node.connect().await;
    for f in 0..FRAGMENTS {
        for i in 0..PER_FRAGMENT {
            let id = format!("d{f}_{i}$@{}", f * SHARDS_PER_FRAGMENT + i);
            client
                .batch_execute(&format!("INSERT INTO t VALUES ('{id}', '{{\"n\":{i},\"c\":0}}')"))
                .await
                .unwrap();
        }
    }
    (node, client)
}

/// The UPDATE every test runs: no id, so every fragment (a transaction of one).
const UPDATE: &str = "UPDATE t SET c = c + 1 WHERE n >= 0";

/// How many documents have `c` = `value`.
async fn with_c(client: &tokio_postgres::Client, value: i64) -> i64 {
    let rows = client.query("SELECT c::int8 FROM t", &[]).await.unwrap();
    assert_eq!(rows.len(), (PER_FRAGMENT * FRAGMENTS) as usize);
    rows.iter().filter(|r| r.get::<_, i64>(0) == value).count() as i64
}

// Checks that the UPDATE's first attempt conflicts (the hook works), a later one prepares as
// it reads and commits every document once, nothing stays prepared; that the next such
// UPDATE, right after, prepares from its first attempt (no conflict), while one of another
// collection does not; and a DELETE over the same fragments after them commits too.
#[tokio::test]
async fn autocommit_update_rewritten_between_read_and_commit_commits() {
    let (_node, client) = start("autocommit-rewrite-after-read").await;
    let total = i64::from(PER_FRAGMENT * FRAGMENTS);
    let conflicts = tx_counter(&client, "conflicts").await;
    let attempts = tx_counter(&client, "prepared_attempts").await;
    let two_phase = tx_counter(&client, "two_phase_commits").await;

    let started = std::time::Instant::now();
    let n = client.execute(UPDATE, &[]).await.unwrap();
    assert_eq!(n, total as u64);

    let conflicts_after = tx_counter(&client, "conflicts").await;
    let attempts_after = tx_counter(&client, "prepared_attempts").await;
    assert!(conflicts_after > conflicts, "the first attempt conflicted");
    assert!(attempts_after > attempts, "a retry prepared as it read");
    assert_eq!(tx_counter(&client, "two_phase_commits").await, two_phase + 1);
    assert_eq!(with_c(&client, 1).await, total, "every document updated once");
    let open = simple_rows(&client.simple_query("SHOW TRANSACTIONS").await.unwrap());
    assert!(open.iter().all(|r| r[1].as_deref() != Some("prepared")), "{open:?}");

    // The conflict was noted less than `started.elapsed()` ago: within the contention window
    // (1 s) when that is well under it, so the next UPDATE prepares from its first attempt
    // and the hook (which rewrites only after a read that does not prepare) never runs.
    let since_conflict = started.elapsed();
    assert_eq!(client.execute(UPDATE, &[]).await.unwrap(), total as u64);
    assert_eq!(with_c(&client, 2).await, total, "every document updated twice");
    if since_conflict < std::time::Duration::from_millis(500) {
        assert_eq!(tx_counter(&client, "conflicts").await, conflicts_after, "no conflict");
        assert_eq!(tx_counter(&client, "prepared_attempts").await, attempts_after + 1);
    }

    // The window is the collection's: an UPDATE of another collection over every fragment,
    // at once, still reads first and commits after (the hook makes it conflict).
    for f in 0..FRAGMENTS {
        let id = format!("u{f}$@{}", f * SHARDS_PER_FRAGMENT);
        let sql = format!("INSERT INTO u VALUES ('{id}', '{{\"c\":0}}')");
        client.batch_execute(&sql).await.unwrap();
    }
    let conflicts_before = tx_counter(&client, "conflicts").await;
    let n = client.execute("UPDATE u SET c = c + 1 WHERE c >= 0", &[]).await.unwrap();
    assert_eq!(n, u64::from(FRAGMENTS));
    assert!(tx_counter(&client, "conflicts").await > conflicts_before, "u's first attempt read");

    // Deletes are not rewritten by the hook: the first attempt commits.
    let n = client.execute("DELETE FROM t WHERE n < 2", &[]).await.unwrap();
    assert_eq!(n, u64::from(2 * FRAGMENTS));
    let left: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(left, total - i64::from(2 * FRAGMENTS));
}

/// Runs the UPDATE with the rewrite and `crash` armed (the first attempt conflicts, so the
/// crash point is reached by the prepared retry), waits for the node to die, restarts it
/// without faults and returns how many documents the UPDATE changed, after checking that it
/// is all or none and that nothing stays prepared.
async fn crash_at(crash: &str) -> i64 {
    let (mut node, client) = start(&format!("autocommit-rewrite-after-read,{crash}")).await;
    node.expect_log("torn tail");
    let result = client.execute(UPDATE, &[]).await;
    if crash != "2pc-during-apply" {
        assert!(result.is_err(), "the node dies before answering");
    }
    node.wait_crash();
    node.set_env(Vec::new());
    node.start_again();
    assert!(
        node.log_text().contains("in-doubt transaction resolved"),
        "recovery resolved the prepared retry:\n{}",
        node.log_text()
    );
    let client = node.connect().await;
    let updated = with_c(&client, 1).await;
    let untouched = with_c(&client, 0).await;
    assert_eq!(updated + untouched, i64::from(PER_FRAGMENT * FRAGMENTS), "all or nothing");
    assert!(updated == 0 || untouched == 0, "{updated} updated, {untouched} not: all or nothing");
    let open = simple_rows(&client.simple_query("SHOW TRANSACTIONS").await.unwrap());
    assert!(open.iter().all(|r| r[1].as_deref() != Some("prepared")), "{open:?}");
    // The documents are free again.
    assert_eq!(client.execute(UPDATE, &[]).await.unwrap(), u64::from(PER_FRAGMENT * FRAGMENTS));
    node.stop();
    updated
}

// Checks a crash once the retry's first PREPARE is durable: no decision, nothing applied.
#[tokio::test]
async fn crash_after_a_prepared_retry_prepares_aborts() {
    assert_eq!(crash_at("2pc-after-prepare:1").await, 0);
}

// Checks a crash right after the retry's COMMIT decision is durable: recovery commits every
// fragment from the coordinator's journal.
#[tokio::test]
async fn crash_after_a_prepared_retry_decides_commits() {
    assert_eq!(crash_at("2pc-after-decision").await, i64::from(PER_FRAGMENT * FRAGMENTS));
}

// Checks a crash once the first fragment's Commit record of the retry is durable: recovery
// commits the rest.
#[tokio::test]
async fn crash_while_a_prepared_retry_applies_commits() {
    assert_eq!(crash_at("2pc-during-apply").await, i64::from(PER_FRAGMENT * FRAGMENTS));
}

//! Transactions end to end against a real node (2 executors, 8 fragments): read-your-writes,
//! ROLLBACK, the failed-block state, 40001 on conflicting commits, write skew across executors,
//! atomic multi-row INSERTs across executors, SHOW TRANSACTIONS.
//!
//! Ids pin documents to fragments with explicit shards (`id$@shard`): with 8 fragments,
//! fragment `i` holds shards `[i * 131072, (i + 1) * 131072)` and belongs to executor `i % 2`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, simple_rows, sqlstate, t_value, tx_counter};

/// On fragment 0 (executor 0), fragment 1 (executor 1), fragment 2 (executor 0).
const A: &str = "a$@0";
const B: &str = "b$@131072";
const C: &str = "c$@262144";

async fn count(client: &tokio_postgres::Client) -> i64 {
    client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0)
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
    assert_eq!(t_value(&s1, A).await, Some(1), "own insert visible to a point read");
    s1.execute("UPDATE t SET v = v + 10 WHERE id() = $1", &[&A]).await.unwrap();
    assert_eq!(t_value(&s1, A).await, Some(11), "own update visible");
    s1.execute("DELETE FROM t WHERE id() = $1", &[&C]).await.unwrap();
    assert_eq!(t_value(&s1, C).await, None, "own delete hides the document");
    assert_eq!(count(&s1).await, 1, "a scan sees the overlay");
    let sum: i64 = s1.query_one("SELECT sum(v::int8) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(sum, 11, "aggregates see the overlay");
    assert_eq!(t_value(&s2, A).await, None, "other sessions do not see uncommitted writes");
    assert_eq!(t_value(&s2, C).await, Some(3));
    s1.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(t_value(&s1, A).await, None, "ROLLBACK discards the insert");
    assert_eq!(t_value(&s1, C).await, Some(3), "ROLLBACK discards the delete");

    s1.batch_execute("BEGIN").await.unwrap();
    s1.execute(&format!("INSERT INTO t VALUES ('{A}', '{{\"v\":1}}')"), &[]).await.unwrap();
    s1.execute(&format!("INSERT INTO t VALUES ('{B}', '{{\"v\":2}}')"), &[]).await.unwrap();
    s1.execute("UPDATE t SET v = 30 WHERE id() = $1", &[&C]).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    assert_eq!(t_value(&s2, A).await, Some(1));
    assert_eq!(t_value(&s2, B).await, Some(2));
    assert_eq!(t_value(&s2, C).await, Some(30));
    assert!(tx_counter(&s2, "two_phase_commits").await >= 1);

    // One fragment only: the fast path.
    let before = tx_counter(&s2, "fast_path_commits").await;
    s1.batch_execute("BEGIN").await.unwrap();
    s1.execute("UPDATE t SET v = v + 1 WHERE id() = $1", &[&A]).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    assert_eq!(t_value(&s2, A).await, Some(2));
    assert_eq!(tx_counter(&s2, "fast_path_commits").await, before + 1);
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
        assert_eq!(t_value(&s, A).await, None, "{end} of a failed block applies nothing");
        assert_eq!(t_value(&s, B).await, Some(2));
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
        assert_eq!(t_value(s, A).await, Some(100));
    }
    s1.execute("UPDATE t SET v = v - 30 WHERE id() = $1", &[&A]).await.unwrap();
    s2.execute("UPDATE t SET v = v - 50 WHERE id() = $1", &[&A]).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    let err = s2.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(sqlstate(&err), "40001");
    assert_eq!(t_value(&s1, A).await, Some(70));
    // After the failed COMMIT the session is out of the block and works.
    s2.execute("UPDATE t SET v = v - 50 WHERE id() = $1", &[&A]).await.unwrap();
    assert_eq!(t_value(&s1, A).await, Some(20));
    assert!(tx_counter(&s1, "conflicts").await >= 1);
}

// Checks the lost update: a block reads a document, another session commits a change to it,
// then the block updates it to a constant (its UPDATE reads the new version) and commits. The
// commit must fail with 40001: the block's first read is stale.
#[tokio::test]
async fn update_after_a_stale_read_conflicts() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(&format!("INSERT INTO t VALUES ('{A}', '{{\"v\":100}}')")).await.unwrap();
    s1.batch_execute("BEGIN").await.unwrap();
    assert_eq!(t_value(&s1, A).await, Some(100));
    s2.execute("UPDATE t SET v = 70 WHERE id() = $1", &[&A]).await.unwrap();
    s1.execute("UPDATE t SET v = 1 WHERE id() = $1", &[&A]).await.unwrap();
    let err = s1.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(sqlstate(&err), "40001");
    assert_eq!(t_value(&s2, A).await, Some(70), "the other session's commit stands");
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
    let on = t_value(&s1, A).await.unwrap() + t_value(&s1, B).await.unwrap();
    assert_eq!(on, 1, "exactly one write applied");
}

// Checks two-phase commits from sessions on both executors: each COMMIT's writes are visible
// on both executors when it is acknowledged (executor 0's share of phase two runs inside the
// decision's call when the session is on executor 1), and every participant's report reaches
// the coordinator (reports travel in batches), so no decision stays "committed (applying)".
#[tokio::test]
async fn two_phase_commits_from_both_executors_are_visible_and_reported() {
    const SESSIONS: usize = 8;
    const TRANSFERS: i64 = 12;
    let node = Node::start();
    let setup = node.connect().await;
    let two_phase_before = tx_counter(&setup, "two_phase_commits").await;
    let mut tasks = Vec::new();
    for i in 0..SESSIONS {
        let client = node.connect().await;
        // Fragment 0 (executor 0) and fragment 1 (executor 1), one pair per session.
        let (x, y) = (format!("x{i}$@0"), format!("y{i}$@131072"));
        tasks.push(tokio::spawn(async move {
            client
                .batch_execute(&format!(
                    "INSERT INTO t VALUES ('{x}', '{{\"v\":100}}'), ('{y}', '{{\"v\":100}}')"
                ))
                .await
                .unwrap();
            for n in 1..=TRANSFERS {
                client.batch_execute("BEGIN").await.unwrap();
                client.execute("UPDATE t SET v = v - 1 WHERE id() = $1", &[&x]).await.unwrap();
                client.execute("UPDATE t SET v = v + 1 WHERE id() = $1", &[&y]).await.unwrap();
                client.batch_execute("COMMIT").await.unwrap();
                assert_eq!(t_value(&client, &x).await, Some(100 - n), "{x} after commit {n}");
                assert_eq!(t_value(&client, &y).await, Some(100 + n), "{y} after commit {n}");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Each session's INSERT spans both executors too: one more two-phase commit each.
    let expected = two_phase_before + (SESSIONS as i64) * (TRANSFERS + 1);
    assert_eq!(tx_counter(&setup, "two_phase_commits").await, expected);
    // Reports follow the Commit records' fdatasyncs, after the acknowledgements.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let rows = simple_rows(&setup.simple_query("SHOW TRANSACTIONS").await.unwrap());
        let applying: Vec<_> =
            rows.iter().filter(|r| r[1].as_deref() == Some("committed (applying)")).collect();
        if applying.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "decisions never reported: {applying:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
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
    let before = tx_counter(&s, "two_phase_commits").await;
    let n = s
        .execute(
            &format!("INSERT INTO t VALUES ('{A}', '{{\"v\":1}}'), ('{B}', '{{\"v\":2}}')"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(count(&s).await, 3);
    assert_eq!(tx_counter(&s, "two_phase_commits").await, before + 1);
    // A scatter UPDATE over every fragment is one transaction too.
    let n = s.execute("UPDATE t SET v = v * 10", &[]).await.unwrap();
    assert_eq!(n, 3);
    let sum: i64 = s.query_one("SELECT sum(v::int8) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(sum, 60);
    // EXPLAIN ANALYZE of such a write still reports every fragment it ran on.
    let lines: Vec<String> = s
        .query("EXPLAIN ANALYZE UPDATE t SET v = v + 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let total = lines.iter().find(|l| l.contains("Total:")).expect("a total line");
    assert!(total.contains("fragments=8") && total.contains("returned=3"), "{lines:?}");
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
        [
            "fast_path_commits",
            "two_phase_commits",
            "read_only_commits",
            "read_only_holds",
            "aborts",
            "conflicts",
            "range_conflicts",
            "held_waits",
            "paused_reads",
            "prepared_attempts"
        ]
    );
}

// Checks a content-configured collection validates inside a block: a document breaking the
// configuration fails its statement with 23514 and the block with it (25P02 afterwards).
#[tokio::test]
async fn content_validation_fails_the_block() {
    let node = Node::start();
    let s = node.connect().await;
    s.batch_execute(
        r#"CREATE TABLE orders () WITH (sharding = '{"Fields":["Customer"],"Range":1000}')"#,
    )
    .await
    .unwrap();
    s.batch_execute("BEGIN").await.unwrap();
    s.execute(r#"INSERT INTO orders VALUES ('orders/1-A$', '{"Customer":"customers/1-A"}')"#, &[])
        .await
        .unwrap();
    let err = s
        .execute(r#"INSERT INTO orders VALUES ('orders/9-A', '{"Customer":"customers/1-A"}')"#, &[])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "23514");
    assert_eq!(sqlstate(&s.query("SELECT 1", &[]).await.unwrap_err()), "25P02");
    s.batch_execute("ROLLBACK").await.unwrap();
    let n: i64 = s.query_one("SELECT count(*) FROM orders", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "nothing of the failed block is applied");
}

/// A small deterministic generator (xorshift), seeded per task.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

// Checks a small bank: 8 accounts on 8 fragments of both executors, 4 clients transferring
// random amounts between random accounts with prepared statements (retrying on 40001), and a
// client summing every balance in read-only blocks. Every committed sum equals the initial
// total, and so does the final one.
#[tokio::test]
async fn concurrent_transfers_keep_the_total() {
    const ACCOUNTS: u64 = 8;
    const CLIENTS: u64 = 4;
    const TRANSFERS: u64 = 25;
    const START: i64 = 1_000;
    let node = Node::start();
    let setup = node.connect().await;
    let ids: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct{i}$@{}", i * 131_072)).collect();
    let values: Vec<String> =
        ids.iter().map(|id| format!("('{id}', '{{\"balance\":{START}}}')")).collect();
    setup.batch_execute(&format!("INSERT INTO acct VALUES {}", values.join(", "))).await.unwrap();
    let total = START * i64::try_from(ACCOUNTS).unwrap();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = node.connect().await;
        let ids = ids.clone();
        tasks.push(tokio::spawn(async move {
            let read =
                client.prepare("SELECT balance::int8 FROM acct WHERE id() = $1").await.unwrap();
            let take = client
                .prepare("UPDATE acct SET balance = balance - $2::int8 WHERE id() = $1")
                .await
                .unwrap();
            let give = client
                .prepare("UPDATE acct SET balance = balance + $2::int8 WHERE id() = $1")
                .await
                .unwrap();
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (c + 1));
            let mut done = 0;
            let mut conflicts = 0;
            while done < TRANSFERS {
                let from = &ids[usize::try_from(rng.below(ACCOUNTS)).unwrap()];
                let to = &ids[usize::try_from(rng.below(ACCOUNTS)).unwrap()];
                let amount = i64::try_from(rng.below(50)).unwrap() + 1;
                client.batch_execute("BEGIN").await.unwrap();
                let result = async {
                    let balance: i64 = client.query_one(&read, &[from]).await?.get(0);
                    if balance >= amount && from != to {
                        client.execute(&take, &[from, &amount]).await?;
                        client.execute(&give, &[to, &amount]).await?;
                    }
                    client.batch_execute("COMMIT").await
                }
                .await;
                match result {
                    Ok(()) => done += 1,
                    Err(e) if sqlstate(&e) == "40001" => {
                        conflicts += 1;
                        let _ = client.batch_execute("ROLLBACK").await;
                        assert!(conflicts < 10_000, "client {c} starves");
                    }
                    Err(e) => panic!("client {c}: {e:?}"),
                }
            }
        }));
    }
    let auditor = node.connect().await;
    let audit = tokio::spawn(async move {
        let mut audits = 0;
        for _ in 0..20 {
            auditor.batch_execute("BEGIN").await.unwrap();
            let sum: i64 =
                auditor.query_one("SELECT sum(balance::int8) FROM acct", &[]).await.unwrap().get(0);
            match auditor.batch_execute("COMMIT").await {
                Ok(()) => {
                    assert_eq!(sum, total, "a committed read-only block saw a partial transfer");
                    audits += 1;
                }
                Err(e) => assert_eq!(sqlstate(&e), "40001"),
            }
        }
        audits
    });
    for t in tasks {
        t.await.expect("transfer client");
    }
    audit.await.expect("auditor");
    let sum: i64 =
        setup.query_one("SELECT sum(balance::int8) FROM acct", &[]).await.unwrap().get(0);
    assert_eq!(sum, total);
}

// Checks what psql shows for a failed block (command tags not suppressed): the BEGIN inside a
// block is a WARNING, statements after the error are 25P02 errors, the COMMIT of the failed
// block answers ROLLBACK, a COMMIT outside a block is a WARNING, and nothing was applied.
#[test]
fn psql_shows_failed_block_tags_and_warnings() {
    let node = Node::start();
    let mut command = std::process::Command::new("psql");
    command
        .arg(node.conn_str())
        .args(["-X", "-A", "-t", "-f"])
        .arg(support::test_file("sql/e2e_txn_block.sql"))
        .env("PGCONNECT_TIMEOUT", "30");
    let out = support::run_client(command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "psql failed: {stderr}");
    let tags: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        tags,
        ["INSERT 0 1", "BEGIN", "BEGIN", "INSERT 0 1", "ROLLBACK", "COMMIT", "1"],
        "{stdout}"
    );
    assert!(stderr.contains("WARNING:  there is already a transaction in progress"), "{stderr}");
    assert!(stderr.contains("ERROR:  duplicate document id"), "{stderr}");
    assert!(
        stderr.contains("ERROR:  current transaction is aborted, commands ignored until end of transaction block"),
        "{stderr}"
    );
    assert!(stderr.contains("WARNING:  there is no transaction in progress"), "{stderr}");
}

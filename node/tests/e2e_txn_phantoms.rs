//! Phantoms: a block that scanned a range and decided from what it found (or did not find)
//! must not commit after another transaction put a document into that range. Against a real
//! node (2 executors, 8 fragments); ids pin documents to fragments with explicit shards
//! (`id$@shard`: fragment `i` holds shards `[i * 131072, (i + 1) * 131072)`, executor `i % 2`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, sqlstate, tx_counter};

async fn on_call(client: &tokio_postgres::Client) -> i64 {
    client.query_one("SELECT count(*) FROM t WHERE oncall = true", &[]).await.unwrap().get(0)
}

// Checks the simplest phantom: a block counts the documents matching a filter (a scan of
// every fragment), another session inserts a matching document and commits, the block then
// writes and commits: 40001 naming the range, nothing of the block applied, the conflict
// counted. The same block without the insert commits.
#[tokio::test]
async fn an_insert_into_a_scanned_range_fails_the_commit() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(r#"INSERT INTO t VALUES ('a$@0', '{"oncall": true}')"#).await.unwrap();
    let conflicts = tx_counter(&s1, "conflicts").await;
    let ranges = tx_counter(&s1, "range_conflicts").await;

    s1.batch_execute("BEGIN").await.unwrap();
    assert_eq!(on_call(&s1).await, 1);
    s1.batch_execute(r#"INSERT INTO t VALUES ('log1$@5', '{"seen": 1}')"#).await.unwrap();
    s1.batch_execute("COMMIT").await.expect("nothing entered the range");

    s1.batch_execute("BEGIN").await.unwrap();
    assert_eq!(on_call(&s1).await, 1);
    s2.batch_execute(r#"INSERT INTO t VALUES ('b$@131072', '{"oncall": true}')"#).await.unwrap();
    s1.batch_execute(r#"INSERT INTO t VALUES ('log2$@5', '{"seen": 1}')"#).await.unwrap();
    let err = s1.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(sqlstate(&err), "40001", "{err:?}");
    let message = err.as_db_error().map(|e| e.message().to_owned()).unwrap_or_default();
    assert!(message.contains("entered a range this transaction read"), "{message}");
    let log2: i64 =
        s2.query_one("SELECT count(*) FROM t WHERE id() = 'log2$@5'", &[]).await.unwrap().get(0);
    assert_eq!(log2, 0, "nothing of the failed block was applied");
    assert!(tx_counter(&s2, "conflicts").await > conflicts);
    assert_eq!(tx_counter(&s2, "range_conflicts").await, ranges + 1, "counted as a range conflict");
}

// Checks the write skew through a phantom (PostgreSQL's SSI example): two blocks each count
// the on-call doctors in one fragment's range, find one, and each adds a second one on
// another fragment (one on each executor). Serializable allows only one of the two commits,
// so the second fails with 40001 and exactly one document was added.
#[tokio::test]
async fn two_blocks_inserting_after_the_same_count() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(r#"INSERT INTO t VALUES ('first$@0', '{"oncall": true}')"#).await.unwrap();
    for s in [&s1, &s2] {
        s.batch_execute("BEGIN").await.unwrap();
        assert_eq!(on_call(s).await, 1);
    }
    s1.batch_execute(r#"INSERT INTO t VALUES ('x$@131072', '{"oncall": true}')"#).await.unwrap();
    s2.batch_execute(r#"INSERT INTO t VALUES ('y$@262144', '{"oncall": true}')"#).await.unwrap();
    let r1 = s1.batch_execute("COMMIT").await;
    let r2 = s2.batch_execute("COMMIT").await;
    assert!(r1.is_ok(), "the first commit wins: {r1:?}");
    assert_eq!(sqlstate(&r2.unwrap_err()), "40001");
    assert_eq!(on_call(&s1).await, 2, "exactly one of the two inserts applied");
}

// Checks the absence of a document found by a scan (not a point read) is protected too: a
// block looks for a name with a filter, finds none, and inserts it under a new id; another
// session inserted that name meanwhile on the same fragment the block writes (the fast path,
// one fragment, validates the range in the same record's check): 40001, one document.
#[tokio::test]
async fn a_uniqueness_check_by_scan_holds() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(r#"CREATE TABLE users () WITH (sharding = '{"Fields": ["name"]}')"#)
        .await
        .unwrap();
    let fast = tx_counter(&s1, "fast_path_commits").await;
    s1.batch_execute("BEGIN").await.unwrap();
    let found: i64 =
        s1.query_one("SELECT count(*) FROM users WHERE name = 'ann'", &[]).await.unwrap().get(0);
    assert_eq!(found, 0);
    s2.batch_execute(r#"INSERT INTO users VALUES ('u2$', '{"name": "ann"}')"#).await.unwrap();
    s1.batch_execute(r#"INSERT INTO users VALUES ('u1$', '{"name": "ann"}')"#).await.unwrap();
    let err = s1.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(sqlstate(&err), "40001", "{err:?}");
    let n: i64 =
        s2.query_one("SELECT count(*) FROM users WHERE name = 'ann'", &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
    // The block read and wrote one shard's range: the fast path, no two-phase commit.
    s1.batch_execute("BEGIN").await.unwrap();
    let found: i64 =
        s1.query_one("SELECT count(*) FROM users WHERE name = 'bob'", &[]).await.unwrap().get(0);
    assert_eq!(found, 0);
    s1.batch_execute(r#"INSERT INTO users VALUES ('u3$', '{"name": "bob"}')"#).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    assert_eq!(tx_counter(&s1, "fast_path_commits").await, fast + 1);
}

// Checks what is not a conflict: a LIMIT that stopped a fragment's scan early records no
// range there (any rows that still match are a valid answer), so an insert into that
// fragment lets the block commit; a change in another collection does not touch the range.
#[tokio::test]
async fn a_limited_scan_and_other_collections_do_not_conflict() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    s1.batch_execute(r#"INSERT INTO t VALUES ('p$@1', '{"v": 1}'), ('q$@2', '{"v": 2}')"#)
        .await
        .unwrap();
    s1.batch_execute("BEGIN").await.unwrap();
    let rows = s1.query("SELECT id() FROM t LIMIT 1", &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    s2.batch_execute(r#"INSERT INTO t VALUES ('r$@3', '{"v": 3}')"#).await.unwrap();
    s2.batch_execute(r#"INSERT INTO other VALUES ('o$@4', '{"v": 4}')"#).await.unwrap();
    s1.batch_execute(r#"INSERT INTO t VALUES ('s$@5', '{"v": 5}')"#).await.unwrap();
    s1.batch_execute("COMMIT").await.expect("the LIMIT stopped the scan of that fragment");
}

//! Read-only participants of a two-phase commit: a fragment a transaction only read is held in
//! memory from validation to the decision and writes no record (no PREPARE, no Commit, no
//! fdatasync); the transaction's writers still commit by two-phase commit, the decision is
//! still forgotten once every writing participant reported, and a write waiting for the held
//! document runs once the hold is released.
//!
//! Ids pin documents to fragments with explicit shards (`id$@shard`): with 8 fragments,
//! fragment `i` holds shards `[i * 131072, (i + 1) * 131072)` and belongs to executor `i % 2`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::{Node, NodeOptions, simple_rows, t_value, tx_counter};

/// Fragment 0 (executor 0), fragment 1 (executor 1), fragment 2 (executor 0), fragment 3
/// (executor 1).
const A: &str = "a$@0";
const B: &str = "b$@131072";
const C: &str = "c$@262144";
const D: &str = "d$@393216";

/// One gauge or counter sample of `name` whose labels contain `label`, from /metrics.
fn sample(addr: SocketAddr, name: &str, label: &str) -> f64 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let prefix = format!("{name}{{");
    let line = text
        .lines()
        .find(|l| l.starts_with(&prefix) && l.contains(label))
        .unwrap_or_else(|| panic!("no {name} with {label} in:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Waits (bounded) until the coordinator holds no committed decision that is still applying:
/// every writing participant reported its Commit records durable.
async fn decisions_forgotten(client: &tokio_postgres::Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = simple_rows(&client.simple_query("SHOW TRANSACTIONS").await.unwrap());
        let left: Vec<_> = rows
            .iter()
            .filter(|r| {
                matches!(r[1].as_deref(), Some("committed (applying)" | "prepared" | "held"))
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "decisions never reported: {left:?}");
        tokio::task::yield_now().await;
    }
}

// Checks that transactions reading a fragment on each executor and writing fragments of both
// executors commit by two-phase commit while the fragments only read log nothing (their
// durable LSN stays put: no PREPARE, no Commit record), that the writes are there, that the
// coordinator forgets every decision (the read-only executors do not report, and nobody waits
// for them), and that afterwards the read-only documents are writable (the holds are gone).
#[tokio::test]
async fn read_only_participants_log_nothing() {
    let node = Node::start_with(NodeOptions { metrics: true, ..NodeOptions::default() });
    let addr = node.metrics_addr().expect("metrics address");
    let client = node.connect().await;
    for id in [A, B, C, D] {
        client.execute("INSERT INTO t VALUES ($1, '{\"v\":100}')", &[&id]).await.unwrap();
    }
    let lsn = |f: u32| sample(addr, "tessera_fragment_lsn_durable", &format!("fragment=\"{f}\""));
    let (b_lsn, c_lsn) = (lsn(1), lsn(2));
    let two_phase = tx_counter(&client, "two_phase_commits").await;
    // Writers A (executor 0) and D (executor 1); B (executor 1) and C (executor 0) only read.
    for n in 1..=5 {
        client.batch_execute("BEGIN").await.unwrap();
        let read: i64 = client
            .query_one("SELECT sum(v::int8) FROM t WHERE id() IN ($1, $2)", &[&B, &C])
            .await
            .unwrap()
            .get(0);
        assert_eq!(read, 200);
        client.execute("UPDATE t SET v = v - 1 WHERE id() = $1", &[&A]).await.unwrap();
        client.execute("UPDATE t SET v = v + 1 WHERE id() = $1", &[&D]).await.unwrap();
        client.batch_execute("COMMIT").await.unwrap();
        assert_eq!(t_value(&client, A).await, Some(100 - n));
        assert_eq!(t_value(&client, D).await, Some(100 + n));
    }
    assert_eq!(tx_counter(&client, "two_phase_commits").await, two_phase + 5);
    assert_eq!(lsn(1), b_lsn, "the read-only fragment of executor 1 logged nothing");
    assert_eq!(lsn(2), c_lsn, "the read-only fragment of executor 0 logged nothing");
    decisions_forgotten(&client).await;
    client.execute("UPDATE t SET v = 0 WHERE id() IN ($1, $2)", &[&B, &C]).await.unwrap();
    assert_eq!(t_value(&client, B).await, Some(0), "no hold left on B");
    assert_eq!(t_value(&client, C).await, Some(0), "no hold left on C");
}

// Checks that a transaction whose read-only participant's check fails (the document it read
// changed after the read) gets 40001 and applies nothing on the writing fragments, and that
// nothing stays held or prepared: the same documents are writable and a retry commits.
#[tokio::test]
async fn failed_hold_aborts_the_writers() {
    let node = Node::start();
    let s1 = node.connect().await;
    let s2 = node.connect().await;
    for id in [A, B, D] {
        s1.execute("INSERT INTO t VALUES ($1, '{\"v\":100}')", &[&id]).await.unwrap();
    }
    s1.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        s1.query_one("SELECT v::int8 FROM t WHERE id() = $1", &[&B])
            .await
            .unwrap()
            .get::<_, i64>(0),
        100
    );
    s1.execute("UPDATE t SET v = 1 WHERE id() = $1", &[&A]).await.unwrap();
    s1.execute("UPDATE t SET v = 1 WHERE id() = $1", &[&D]).await.unwrap();
    s2.execute("UPDATE t SET v = 7 WHERE id() = $1", &[&B]).await.unwrap();
    let err = s1.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(support::sqlstate(&err), "40001");
    assert_eq!(t_value(&s2, A).await, Some(100), "nothing applied on A");
    assert_eq!(t_value(&s2, D).await, Some(100), "nothing applied on D");
    decisions_forgotten(&s2).await;
    s2.execute("UPDATE t SET v = 8 WHERE id() IN ($1, $2, $3)", &[&A, &B, &D]).await.unwrap();
    s1.batch_execute("BEGIN").await.unwrap();
    assert_eq!(t_value(&s1, B).await, Some(8));
    s1.execute("UPDATE t SET v = 2 WHERE id() = $1", &[&A]).await.unwrap();
    s1.execute("UPDATE t SET v = 2 WHERE id() = $1", &[&D]).await.unwrap();
    s1.batch_execute("COMMIT").await.unwrap();
    assert_eq!(t_value(&s2, A).await, Some(2));
    assert_eq!(t_value(&s2, D).await, Some(2));
}

// Checks a block that only reads, over several fragments of this node: one that counted
// ranges (a scan of every fragment) or found documents missing on two fragments holds those on
// each while its other checks run (`read_only_holds`), and releases them before COMMIT answers
// (nothing held, and a write into a counted range right after meets no hold: `held_waits`
// unchanged). One that read existing documents by id on two fragments, or found one missing
// on one fragment only, holds nothing. A hold refused because a document entered a counted
// range fails COMMIT with 40001 and releases the holds taken on the other fragments.
#[tokio::test]
async fn read_only_commit_holds_counts_across_fragments() {
    let node = Node::start();
    let client = node.connect().await;
    let other = node.connect().await;
    for id in [A, B] {
        client.execute("INSERT INTO t VALUES ($1, '{\"v\":100}')", &[&id]).await.unwrap();
    }
    let holds = tx_counter(&client, "read_only_holds").await;
    let held_waits = tx_counter(&client, "held_waits").await;
    let blocks: [(&str, i64); 5] = [
        ("SELECT count(*) FROM t", 1),
        ("SELECT v FROM t WHERE id() IN ('a$@0', 'b$@131072')", 0),
        ("SELECT v FROM t WHERE id() = 'gone$@262144'", 0),
        ("SELECT v FROM t WHERE id() IN ('gone$@262144', 'gone$@393216')", 1),
        ("SELECT v FROM t WHERE id() IN ('a$@0', 'gone$@393216')", 1),
    ];
    let mut expected = holds;
    for (sql, held) in blocks {
        client.batch_execute("BEGIN").await.unwrap();
        client.simple_query(sql).await.unwrap();
        client.batch_execute("COMMIT").await.unwrap();
        expected += held;
        assert_eq!(tx_counter(&client, "read_only_holds").await, expected, "{sql}");
        assert!(nothing_held(&client).await, "{sql}: released");
    }
    other.execute("INSERT INTO t VALUES ($1, '{\"v\":1}')", &[&C]).await.unwrap();
    assert_eq!(tx_counter(&client, "held_waits").await, held_waits, "no hold met");
    client.batch_execute("BEGIN").await.unwrap();
    client.simple_query("SELECT count(*) FROM t").await.unwrap();
    other.execute("INSERT INTO t VALUES ($1, '{\"v\":1}')", &[&D]).await.unwrap();
    let err = client.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(support::sqlstate(&err), "40001", "{err:?}");
    assert!(nothing_held(&client).await, "the holds taken were released");
    assert_eq!(tx_counter(&client, "read_only_holds").await, expected, "no commit counted");
    other.execute("DELETE FROM t WHERE id() IN ($1, $2, $3, $4)", &[&A, &B, &C, &D]).await.unwrap();
    assert_eq!(tx_counter(&client, "held_waits").await, held_waits, "no hold met");
}

/// Whether no fragment holds documents for a read-only participant or commit.
async fn nothing_held(client: &tokio_postgres::Client) -> bool {
    let rows = simple_rows(&client.simple_query("SHOW TRANSACTIONS").await.unwrap());
    rows.iter().all(|r| r[1].as_deref() != Some("held"))
}

/// Arms `fault`, runs one two-phase commit that reads `B` (fragment 1, executor 1: a
/// read-only participant) and inserts `A` and `D` (fragments 0 and 3, both executors), which
/// kills the node; restarts without the fault and returns how many of `A`, `D` exist, after
/// checking nothing stays prepared and `B` is writable (its hold did not survive).
async fn crash_with_a_reader(fault: &str) -> usize {
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), fault.to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    let client = node.connect().await;
    // One fragment: the fast path, no two-phase commit, no fault.
    client.execute("INSERT INTO t VALUES ($1, '{\"v\":100}')", &[&B]).await.unwrap();
    let sql = format!(
        "BEGIN; SELECT v FROM t WHERE id() = '{B}'; \
         INSERT INTO t VALUES ('{A}', '{{\"v\":1}}'), ('{D}', '{{\"v\":1}}'); COMMIT"
    );
    let result = client.batch_execute(&sql).await;
    assert!(result.is_err(), "the node dies before acknowledging the commit");
    node.wait_crash();
    node.set_env(Vec::new());
    node.start_again();
    let client = node.connect().await;
    let mut present = 0;
    for id in [A, D] {
        present += usize::from(t_value(&client, id).await.is_some());
    }
    let rows = simple_rows(&client.simple_query("SHOW TRANSACTIONS").await.unwrap());
    assert!(
        rows.iter().all(|r| !matches!(r[1].as_deref(), Some("prepared" | "held"))),
        "nothing stays prepared or held after recovery: {rows:?}"
    );
    client.execute("UPDATE t SET v = 7 WHERE id() = $1", &[&B]).await.unwrap();
    assert_eq!(t_value(&client, B).await, Some(7), "no hold survives a restart");
    node.stop();
    present
}

// Checks a crash once both writers' PREPAREs are durable (the reader's hold in memory only):
// no decision, so after the restart neither write is there and the read document is free.
// With one-round commits (the default) both PREPAREs durable is the commit: both are there.
#[tokio::test]
async fn crash_after_the_writers_prepared_aborts() {
    let one_round = support::one_round_commits();
    let expected = if one_round { 2 } else { 0 };
    assert_eq!(crash_with_a_reader("2pc-after-prepare:2").await, expected);
}

// Checks a crash right after the COMMIT decision is durable: both writes are there after the
// restart, and the read-only participant, which had nothing to recover, is free.
#[tokio::test]
async fn crash_after_the_decision_commits_without_the_reader() {
    assert_eq!(crash_with_a_reader("2pc-after-decision").await, 2);
}

//! Crash points of two-phase commit: the node is started with a test-only fault armed
//! (`TESSERA_FAULT`), runs a transaction writing documents on fragments of both executors,
//! aborts itself at that point, and is started again. Recovery must leave the transaction all
//! or nothing, and the right one: committed exactly when the COMMIT decision was durable.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, NodeOptions};

/// Fragment 0 (executor 0), fragment 1 (executor 1), fragment 3 (executor 1).
const IDS: [&str; 3] = ["a$@0", "b$@131072", "d$@393216"];

/// Arms `fault`, runs one cross-executor transaction from a session on executor 1 (`on_1`,
/// where the coordinator's share prepares and decides in one call) or 0 (which prepares, then
/// decides, then finishes executor 1's share), which kills the node; restarts without the
/// fault and returns how many of its documents exist, after checking the pre-existing document
/// the transaction updated moved with them.
async fn crash_at(fault: &str, on_1: bool) -> usize {
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), fault.to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    node.expect_log("torn tail");
    let client = support::connect_on_executor(&node, on_1).await;
    // An autocommit write on one fragment: the fast path, no two-phase commit, no fault.
    client.batch_execute(r#"INSERT INTO t VALUES ('c$@262144', '{"v":0}')"#).await.unwrap();
    let sql = format!(
        "BEGIN; INSERT INTO t VALUES ('{}', '{{\"v\":1}}'), ('{}', '{{\"v\":1}}'), ('{}', '{{\"v\":1}}'); \
         UPDATE t SET v = 1 WHERE id() = 'c$@262144'; COMMIT",
        IDS[0], IDS[1], IDS[2]
    );
    let result = client.batch_execute(&sql).await;
    // During apply, the commit may be acknowledged first: it is acknowledged once the writes
    // are visible, before the participants' Commit records are durable.
    if fault != "2pc-during-apply" {
        assert!(result.is_err(), "the node dies before acknowledging the commit");
    }
    node.wait_crash();
    node.set_env(Vec::new());
    node.start_again();
    assert!(
        node.log_text().contains("in-doubt transaction resolved"),
        "recovery resolved the prepared transaction:\n{}",
        node.log_text()
    );
    let client = node.connect().await;
    // First, while a one-round commit's markers may still wait for their cleanup: SHOW
    // FRAGMENTS counts the user's documents, not those markers.
    let shown: i64 = support::simple_rows(&client.simple_query("SHOW FRAGMENTS").await.unwrap())
        .iter()
        .map(|r| r[3].clone().unwrap().parse::<i64>().unwrap())
        .sum();
    let mut present = 0;
    for id in IDS {
        let row = client.query_opt("SELECT v::int8 FROM t WHERE id() = $1", &[&id]).await.unwrap();
        present += usize::from(row.is_some());
    }
    assert_eq!(shown, i64::try_from(present).unwrap() + 1, "SHOW FRAGMENTS' documents");
    let c: i64 = client
        .query_one("SELECT v::int8 FROM t WHERE id() = 'c$@262144'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(c == 1, present == IDS.len(), "the update and the inserts share one fate");
    let in_doubt = client.query("SHOW TRANSACTIONS", &[]).await.unwrap();
    assert!(
        in_doubt.iter().all(|r| r.get::<_, String>(1) != "prepared"),
        "nothing stays prepared after recovery"
    );
    // The node works normally afterwards, including two-phase commits.
    client
        .batch_execute(r#"INSERT INTO t VALUES ('x$@0', '{"v":1}'), ('y$@131072', '{"v":1}')"#)
        .await
        .unwrap();
    node.stop();
    present
}

// Checks a crash after one participant's PREPARE is durable: no decision, so after restart
// nothing of the transaction is there.
#[tokio::test]
async fn crash_after_first_prepare_aborts() {
    let present = crash_at("2pc-after-prepare:1", false).await;
    if support::one_round_commits() {
        // The other participants' PREPAREs may have become durable before the crash too
        // (their fdatasyncs run at once): then it committed. All or nothing either way.
        assert!(present == 0 || present == IDS.len(), "{present}");
    } else {
        assert_eq!(present, 0);
    }
}

// Checks a crash once every participant's PREPARE is durable but before the decision: still
// no decision, so it aborts; with one-round commits every PREPARE durable is the commit, so
// recovery commits it.
#[tokio::test]
async fn crash_after_all_prepares_aborts() {
    let expected = if support::one_round_commits() { IDS.len() } else { 0 };
    assert_eq!(crash_at("2pc-after-prepare:3", true).await, expected);
}

// Checks a crash right after the COMMIT decision is durable, before any participant applied
// it: recovery commits every participant from the coordinator's journal. From a session on
// each executor (the decision is recorded inside the coordinator's prepare call from
// executor 1).
#[tokio::test]
async fn crash_after_decision_commits() {
    assert_eq!(crash_at("2pc-after-decision", false).await, IDS.len());
}

#[tokio::test]
async fn crash_after_decision_from_executor_1_commits() {
    assert_eq!(crash_at("2pc-after-decision", true).await, IDS.len());
}

// Checks a crash after the first participant's Commit record is durable and before the
// others': recovery commits the rest. From a session on each executor.
#[tokio::test]
async fn crash_during_apply_commits() {
    assert_eq!(crash_at("2pc-during-apply", false).await, IDS.len());
}

#[tokio::test]
async fn crash_during_apply_from_executor_1_commits() {
    assert_eq!(crash_at("2pc-during-apply", true).await, IDS.len());
}

// Checks the prepared-transaction timeout: a session stalls between its prepares and its
// decision for longer than TXN_PREPARED_TIMEOUT (a test-only hook). The timeout records ABORT
// and aborts the participants, so the late session's COMMIT finds the abort and fails with
// 40001; nothing is applied and nothing stays prepared. Takes about 2 × the timeout. From a
// session on each executor (from executor 1 the stall is inside the coordinator's prepare
// call, session 6).
#[tokio::test]
async fn prepared_too_long_is_aborted_by_the_timeout() {
    stalled_commit_is_aborted(false).await;
}

#[tokio::test]
async fn prepared_too_long_from_executor_1_is_aborted_by_the_timeout() {
    stalled_commit_is_aborted(true).await;
}

async fn stalled_commit_is_aborted(on_1: bool) {
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), "2pc-stall-before-decision".to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    node.expect_log("transaction prepared too long");
    let client = support::connect_on_executor(&node, on_1).await;
    let result = client
        .batch_execute(&format!(
            "BEGIN; INSERT INTO t VALUES ('{}', '{{\"v\":1}}'), ('{}', '{{\"v\":1}}'); COMMIT",
            IDS[0], IDS[1]
        ))
        .await;
    if support::one_round_commits() {
        // Every PREPARE was durable before the stall: committed, by the sweeper first and
        // the late session after it; both documents stay.
        result.unwrap();
        let n: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
        assert_eq!(n, 2, "the stalled one-round commit is whole");
        let rows = client.query("SHOW TRANSACTIONS", &[]).await.unwrap();
        assert!(rows.iter().all(|r| r.get::<_, String>(1) != "prepared"));
        node.stop();
        return;
    }
    let err = result.unwrap_err();
    assert_eq!(support::sqlstate(&err), "40001", "{err:?}");
    let n: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "the timed-out transaction applied nothing");
    let rows = client.query("SHOW TRANSACTIONS", &[]).await.unwrap();
    assert!(rows.iter().all(|r| r.get::<_, String>(1) != "prepared"));
    let aborts = client.query("SHOW transaction_counters", &[]).await.unwrap();
    assert!(aborts.iter().any(|r| r.get::<_, String>(0) == "aborts" && r.get::<_, i64>(1) >= 1));
    // The documents are free again.
    client
        .batch_execute(&format!("INSERT INTO t VALUES ('{}', '{{\"v\":2}}')", IDS[0]))
        .await
        .unwrap();
    node.stop();
}

// Checks the one-round commit's timeout when a participant never prepared (executor 1 stalls
// before preparing its share, a test-only hook): the other participant's timeout finds
// executor 1's fragment without the PREPARE, fences it there and aborts; executor 1's late
// prepare is then refused, so the COMMIT fails with 40001 and nothing is applied or held.
// Only with one-round commits (the default); with the journal the same
// stall is the decision's timeout, checked above.
#[tokio::test]
async fn one_round_participant_that_never_prepared_is_fenced() {
    if !support::one_round_commits() {
        return;
    }
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), "2pc-stall-before-prepare".to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    node.expect_log("transaction prepared too long");
    let client = support::connect_on_executor(&node, false).await;
    let err = client
        .batch_execute(&format!(
            "BEGIN; INSERT INTO t VALUES ('{}', '{{\"v\":1}}'), ('{}', '{{\"v\":1}}'); COMMIT",
            IDS[0], IDS[1]
        ))
        .await
        .unwrap_err();
    assert_eq!(support::sqlstate(&err), "40001", "{err:?}");
    assert!(
        node.log_text().contains("commit=false"),
        "the timeout aborted it:\n{}",
        node.log_text()
    );
    let n: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "the fenced transaction applied nothing");
    let rows = client.query("SHOW TRANSACTIONS", &[]).await.unwrap();
    assert!(rows.iter().all(|r| r.get::<_, String>(1) != "prepared"));
    client
        .batch_execute(&format!("INSERT INTO t VALUES ('{}', '{{\"v\":2}}')", IDS[0]))
        .await
        .unwrap();
    node.stop();
}

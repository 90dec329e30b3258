//! `tessera dump` on a stopped node: JSON lines with collection, id, shard, version and doc;
//! `--collection` and `--shard-range` filter; the output round-trips (loaded into a fresh node
//! and dumped again, the same documents come out, shards included).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use support::{Node, NodeOptions, run_client};

fn dump(dir: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    c.arg("dump").arg("--data-dir").arg(dir).args(extra);
    let out = run_client(c);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// (collection, id, shard, doc) of each line: everything but the version, which a reload
/// assigns anew.
fn content(lines: &[serde_json::Value]) -> BTreeSet<(String, String, u64, String)> {
    lines
        .iter()
        .map(|l| {
            let keys: BTreeSet<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(keys, BTreeSet::from(["collection", "id", "shard", "version", "doc"]));
            assert!(l["version"].as_u64().unwrap() > 0);
            (
                l["collection"].as_str().unwrap().to_owned(),
                l["id"].as_str().unwrap().to_owned(),
                l["shard"].as_u64().unwrap(),
                l["doc"].to_string(),
            )
        })
        .collect()
}

// Checks the fields, both filters and a round trip through a second node.
#[tokio::test]
async fn dump_filters_and_round_trips() {
    let mut node = Node::start();
    {
        let client = node.connect().await;
        let a: Vec<String> = (0..30)
            .map(|i| {
                format!(r#"('a/{i}', '{{"i": {i}, "nested": {{"x": [1, "two", null, 3.5]}}}}')"#)
            })
            .collect();
        client.simple_query(&format!("INSERT INTO alpha VALUES {}", a.join(", "))).await.unwrap();
        let b: Vec<String> = (0..10).map(|i| format!(r#"('B/{i}', '{{"s": "é{i}"}}')"#)).collect();
        client.simple_query(&format!("INSERT INTO beta VALUES {}", b.join(", "))).await.unwrap();
        client.simple_query("DELETE FROM alpha WHERE i >= 25").await.unwrap();
        client.simple_query("UPDATE beta SET s = 'changed' WHERE id() = 'B/0'").await.unwrap();
    }
    node.stop();
    let all = dump(node.data_dir(), &[]);
    assert_eq!(all.len(), 35);
    let original = content(&all);
    assert!(original.contains(&(
        "beta".into(),
        "B/0".into(),
        all.iter().find(|l| l["id"] == "B/0").unwrap()["shard"].as_u64().unwrap(),
        r#"{"s":"changed"}"#.into()
    )));
    let beta = dump(node.data_dir(), &["--collection", "beta"]);
    assert_eq!(beta.len(), 10);
    let low = dump(node.data_dir(), &["--shard-range", "0..524288"]);
    assert!(low.iter().all(|l| l["shard"].as_u64().unwrap() < 524_288));
    let high = dump(node.data_dir(), &["--shard-range", "524288..1048576"]);
    assert_eq!(low.len() + high.len(), 35);

    // Round trip: load every line into a fresh node with parameters, dump again.
    let mut copy = Node::start();
    {
        let client = copy.connect().await;
        let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
        for l in &all {
            let sql = format!(
                "INSERT INTO {} VALUES ({}, {})",
                l["collection"].as_str().unwrap(),
                quote(l["id"].as_str().unwrap()),
                quote(&l["doc"].to_string())
            );
            client.simple_query(&sql).await.unwrap();
        }
    }
    copy.stop();
    assert_eq!(content(&dump(copy.data_dir(), &[])), original);
}

// Checks that a node killed between a two-phase commit's durable COMMIT decision and its last
// participant's Commit record dumps the transaction whole, as its recovery would serve it:
// one fragment holds the transaction's PREPARE and Commit records, the others only its
// PREPARE, and the decision is in the coordinator's journal. (A backup cut in phase two holds
// the same: the cut pauses decisions, not the Commit records of decided transactions.) Dump
// used to show only the fragment with the Commit record: half a transaction.
#[tokio::test]
async fn dump_applies_the_coordinators_commit_decisions() {
    const IDS: [&str; 3] = ["a$@0", "b$@131072", "d$@393216"];
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), "2pc-during-apply".to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    let client = node.connect().await;
    let values: Vec<String> = IDS.iter().map(|id| format!(r#"('{id}', '{{"v": 1}}')"#)).collect();
    // The commit may be acknowledged before the crash (once its writes are visible).
    let _ = client
        .batch_execute(&format!("BEGIN; INSERT INTO t VALUES {}; COMMIT", values.join(", ")))
        .await;
    node.wait_crash();
    let lines = dump(node.data_dir(), &[]);
    let ids: BTreeSet<String> =
        lines.iter().map(|l| l["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids, IDS.iter().map(|id| (*id).to_owned()).collect(), "{lines:?}");
}

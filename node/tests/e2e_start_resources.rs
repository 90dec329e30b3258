//! What a node checks of the machine at start. The open-file limit (`node::open_files`): a
//! soft limit below what the node needs is raised (up to the hard limit); a hard limit with
//! room for fewer clients than `PG_CONNECTIONS_MAX` admits only the clients that fit, so the
//! fragments never run out of descriptors; a limit too low for the fragments themselves
//! refuses to start, saying what to raise it to. The staged segments' memory
//! (`node::staged_memory`): more than the machine has refuses to start, naming a
//! `--segment-bytes` that fits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::process::Command;

use node::open_files::reserved_files;
use node::pg::limits::PG_CONNECTIONS_MAX;
use support::{Node, NodeOptions, limit_open_files, run_client};
use tokio_postgres::error::SqlState;

const FRAGMENTS: u32 = 8;
const EXECUTORS: u32 = 2;

fn reserved() -> u64 {
    reserved_files(u64::from(FRAGMENTS), u64::from(EXECUTORS), false)
}

/// The soft open-file limit of process `pid`, from /proc.
fn soft_limit(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("read limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("open files line");
    line.split_whitespace().nth(3).expect("soft column").parse().expect("a number")
}

// Checks that a soft limit below the need is raised to exactly the need when the hard limit
// allows it, and that the node then logs no warning about connections.
#[test]
fn a_low_soft_limit_is_raised_to_what_the_node_needs() {
    let needed = reserved() + PG_CONNECTIONS_MAX as u64;
    let mut node = Node::start_with(NodeOptions {
        fragments: FRAGMENTS,
        executors: EXECUTORS,
        open_files: Some((256, needed + 1000)),
        ..NodeOptions::default()
    });
    assert_eq!(soft_limit(node.pid()), needed);
    assert!(node.log_text().contains("raised the open-file limit"), "{}", node.log_text());
    node.stop();
}

// Checks that a hard limit with room for only 12 clients beyond the reserve admits 12: the
// 13th gets 53300 naming the count, the admitted ones keep working and the fragments still
// take writes (their files were reserved first).
#[tokio::test]
async fn a_low_hard_limit_admits_only_the_clients_that_fit() {
    let limit = reserved() + 12;
    let mut node = Node::start_with(NodeOptions {
        fragments: FRAGMENTS,
        executors: EXECUTORS,
        open_files: Some((limit, limit)),
        ..NodeOptions::default()
    });
    node.expect_log("leaves room for 12 client connections");
    assert!(node.log_text().contains("leaves room for 12 client connections"));
    let mut clients = Vec::new();
    for _ in 0..12 {
        clients.push(node.connect().await);
    }
    let err = tokio_postgres::connect(&node.conn_str(), tokio_postgres::NoTls)
        .await
        .err()
        .expect("the 13th client is refused");
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code(), &SqlState::TOO_MANY_CONNECTIONS);
    assert!(db.detail().unwrap_or_default().contains("at most 12 connections"), "{db:?}");
    for (i, c) in clients.iter().enumerate() {
        c.simple_query(&format!("INSERT INTO t VALUES ('d{i}', '{{\"n\":{i}}}')")).await.unwrap();
    }
    let rows = clients[0].simple_query("SELECT count(*) FROM t").await.unwrap();
    assert_eq!(support::simple_rows(&rows)[0][0].as_deref(), Some("12"));
    drop(clients);
    node.stop();
}

/// `tessera serve` on a fresh data directory in `dir` with `args`, its open-file limit
/// `open_files` (soft and hard); the finished process's output.
fn serve_once(
    dir: &std::path::Path,
    args: &[&str],
    open_files: Option<u64>,
) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""])
        .args(args)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("NO_COLOR", "1");
    if let Some(limit) = open_files {
        limit_open_files(&mut command, limit, limit);
    }
    run_client(command)
}

// Checks that a limit too low for the fragments and a handful of clients stops the node at
// start with an error naming the limit and the `ulimit -n` value to use, before any fragment
// opens.
#[test]
fn a_limit_too_low_to_serve_refuses_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limit = reserved() + 2;
    let (fragments, executors) = (FRAGMENTS.to_string(), EXECUTORS.to_string());
    let args = ["--fragments", &fragments, "--executors", &executors];
    let out = serve_once(dir.path(), &args, Some(limit));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the node must not start: {stderr}");
    assert!(stderr.contains(&format!("open-file limit (RLIMIT_NOFILE) is {limit}")), "{stderr}");
    let needed = reserved() + PG_CONNECTIONS_MAX as u64;
    assert!(stderr.contains(&format!("ulimit -n {needed}")), "{stderr}");
    assert!(!stderr.contains("ready: listening on"), "{stderr}");
}

// Checks that staged segments larger than any test machine's memory (4,096 fragments of 1 GiB:
// 4 TiB) stop the node at start, before any fragment opens (no segment file is created), with
// the sizes and a --segment-bytes that fits.
#[test]
fn staged_segments_larger_than_memory_refuse_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out =
        serve_once(dir.path(), &["--fragments", "4096", "--segment-bytes", "1073741824"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the node must not start: {stderr}");
    assert!(stderr.contains(&format!("can take {}", 4096u64 << 30)), "{stderr}");
    assert!(stderr.contains("lower --segment-bytes to"), "{stderr}");
    let fragments = std::fs::read_dir(dir.path().join("data").join("fragments"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten());
    let segments = fragments.filter(|f| f.path().extension().is_some_and(|e| e == "seg"));
    assert_eq!(segments.count(), 0, "no fragment opened");
}

// Checks a data directory holding a content sharding configuration of its own does not start
// as a cluster node (a cluster node takes configurations from the replicated catalog, so its
// documents were placed by rules the cluster does not know), naming the collection.
#[test]
fn a_configured_catalog_does_not_start_as_a_cluster_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let catalog = r#"{"format": 1, "version": 1, "collections": {"invoices": {"sharding": {"Fields": ["Customer"]}}}}"#;
    std::fs::write(dir.path().join("data").join("catalog.json"), catalog).unwrap();
    let peer = support::free_loopback_port().to_string();
    let peer_listen = format!("127.0.0.1:{peer}");
    let args = ["--cluster-name", "c", "--node-id", "1", "--peer-listen", &peer_listen];
    let out = serve_once(dir.path(), &args, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the node must not start: {stderr}");
    assert!(
        stderr.contains("content sharding configurations of its own (collections invoices)"),
        "{stderr}"
    );
    assert!(!stderr.contains("ready: listening on"), "{stderr}");
}

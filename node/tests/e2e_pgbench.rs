//! A short bounded pgbench run (simple protocol, 4 clients, 2 threads, 50 transactions each)
//! of `sql/e2e_pgbench.sql`: random-id upserts (`INSERT … ON CONFLICT (id) DO UPDATE`) and
//! point reads. Every transaction must be processed and the upsert counters must add up to
//! the 200 transactions. The same with `-M prepared` (extended protocol, named prepared
//! statements, each `:id` a text parameter) over `sql/e2e_pgbench_prepared.sql`. No timing
//! is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::process::Command;

use support::{Node, run_client, test_file};

/// Runs pgbench with `mode` over `script`; asserts exit 0, 200/200 processed, no failures.
fn pgbench(node: &Node, mode: &str, script: &str) {
    let mut command = Command::new("pgbench");
    command
        .args(["-n", "-M", mode, "-f"])
        .arg(test_file(script))
        .args(["-t", "50", "-c", "4", "-j", "2", "-h", "127.0.0.1", "-p"])
        .arg(node.port().to_string())
        .args(["-U", "bench", "tessera"]);
    let out = run_client(command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pgbench failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("number of transactions actually processed: 200/200"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("number of failed transactions: 0 "), "stdout:\n{stdout}");
}

/// The sum of the `hits` counters of collection `bench`.
async fn hits(node: &Node) -> i64 {
    let client = node.connect().await;
    client.query_one("SELECT sum(hits::int8) FROM bench", &[]).await.unwrap().get(0)
}

// Checks the simple-protocol run: 200/200 processed, no failed transaction, and the
// documents' hit counters sum to 200 (every upsert counted once).
#[tokio::test]
async fn pgbench_runs_every_transaction() {
    let node = Node::start();
    pgbench(&node, "simple", "sql/e2e_pgbench.sql");
    assert_eq!(hits(&node).await, 200);
}

// Checks the prepared-statement run the same way.
#[tokio::test]
async fn pgbench_prepared_runs_every_transaction() {
    let node = Node::start();
    pgbench(&node, "prepared", "sql/e2e_pgbench_prepared.sql");
    assert_eq!(hits(&node).await, 200);
}

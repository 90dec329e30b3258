//! A short bounded pgbench run (simple protocol, 4 clients, 2 threads, 50 transactions each)
//! of `sql/e2e_pgbench.sql`: random-id upserts (`INSERT … ON CONFLICT (id) DO UPDATE`) and
//! point reads. Every transaction must be processed and the upsert counters must add up to
//! the 200 transactions. No timing is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::process::Command;

use support::{Node, run_client, test_file};

// Checks pgbench exits 0 with "number of transactions actually processed: 200/200" and no
// failed transactions, then that the documents' hit counters sum to 200.
#[tokio::test]
async fn pgbench_runs_every_transaction() {
    let node = Node::start();
    let mut command = Command::new("pgbench");
    command
        .args(["-n", "-f"])
        .arg(test_file("sql/e2e_pgbench.sql"))
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
    let client = node.connect().await;
    let hits: i64 =
        client.query_one("SELECT sum(hits::int8) FROM bench", &[]).await.unwrap().get(0);
    assert_eq!(hits, 200);
}

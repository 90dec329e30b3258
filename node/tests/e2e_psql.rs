//! psql (PostgreSQL 15's client) runs script files against `tessera serve` with
//! `psql -X -q -A -t -v ON_ERROR_STOP=1 -f`: the output of `sql/e2e_basic.sql` must equal
//! `sql/e2e_basic.out` byte for byte, and a script whose third line fails stops there with
//! exit status 3, the error on stderr, and nothing after it run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::process::{Command, Output};

use support::{Node, run_client, test_file};

fn psql(node: &Node, script: &str) -> Output {
    let mut command = Command::new("psql");
    command
        .arg(node.conn_str())
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(test_file(script))
        .env("PGCONNECT_TIMEOUT", "30");
    run_client(command)
}

// Checks a script of writes, reads, RETURNING, a content-configured collection and SHOW
// against its expected output, and that psql exits 0 with nothing on stderr.
#[test]
fn psql_script_matches_expected_output() {
    let node = Node::start();
    let out = psql(&node, "sql/e2e_basic.sql");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "psql failed: {stderr}");
    assert_eq!(stderr, "");
    let expected = std::fs::read_to_string(test_file("sql/e2e_basic.out")).unwrap();
    assert_eq!(stdout, expected);
}

// Checks ON_ERROR_STOP: the duplicate id on line 3 is reported with the file and line, psql
// exits 3, and line 4 never ran (a second psql run sees only the first document).
#[test]
fn psql_stops_at_the_first_error() {
    let node = Node::start();
    let out = psql(&node, "sql/e2e_error_stops.sql");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    assert!(stderr.contains("e2e_error_stops.sql:3: ERROR:  duplicate document id"), "{stderr}");
    let mut check = Command::new("psql");
    check.arg(node.conn_str()).args([
        "-X",
        "-q",
        "-A",
        "-t",
        "-c",
        "SELECT id() FROM s ORDER BY 1",
    ]);
    let out = run_client(check);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\n");
}

// Checks psql's `\dt` (a join of pg_catalog relations) is refused by the catalog's name with
// feature_not_supported, not as a JOIN, and the error says what describes the data instead.
#[test]
fn psql_describe_names_the_missing_catalog() {
    let node = Node::start();
    let mut command = Command::new("psql");
    command
        .arg(node.conn_str())
        .args(["-X", "-v", "VERBOSITY=verbose", "-c", "\\dt"])
        .env("PGCONNECT_TIMEOUT", "30");
    let out = run_client(command);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("ERROR:  0A000: unsupported: the system catalog pg_catalog.pg_class"),
        "{stderr}"
    );
    assert!(stderr.contains("SHOW COLLECTIONS, SHOW SHARDING and SHOW FRAGMENTS"), "{stderr}");
}

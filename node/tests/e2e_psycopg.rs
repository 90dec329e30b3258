//! psycopg 3, a driver with its own habits (typed binary parameters, `executemany`, json
//! adaptation, server-side prepared statements), against `tessera serve`: the Rust test starts
//! the node and runs `python3 node/tests/py/e2e_psycopg.py <port>`, which asserts as it goes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::process::Command;

use support::{Node, run_client, test_file};

// Checks that the psycopg script exits 0 and printed its final line; its own assertions cover
// transaction blocks and their status byte, executemany, binary and text results, json columns, errors with SQLSTATE.
#[test]
fn psycopg_script_passes() {
    let node = Node::start();
    let mut command = Command::new("python3");
    command.arg(test_file("py/e2e_psycopg.py")).arg(node.port().to_string());
    let out = run_client(command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python3 failed (psycopg: scripts/install-deps.sh python)\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("psycopg e2e ok"), "stdout:\n{stdout}\nstderr:\n{stderr}");
}

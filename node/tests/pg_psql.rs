//! psql (PostgreSQL 15's client, /usr/bin/psql; `scripts/install-deps.sh postgres` installs it)
//! runs a script against the test engine: it negotiates SSL (answered 'N', psql falls back to
//! plain text with sslmode=prefer), logs in with SCRAM, prints results, reports errors with
//! their messages and carries on after them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::io::Write;
use std::process::{Command, Stdio};

use node::pg::{PgAuth, PgConfig, ScramCredentials};

const SCRIPT: &str = "\
select 7;
series 3;
selec 1;
insert;
begin;
fail;
select 8;
rollback;
select 9;
";

// Checks psql end to end: rows of the good statements in order, the two errors (syntax and
// execution) and the failed-transaction refusal on stderr, and the script running to its end.
#[test]
fn psql_runs_a_script() {
    let credentials = ScramCredentials::from_password("psql-pass").unwrap();
    let server =
        pg_support::start(PgConfig { auth: PgAuth::Scram(credentials), ..PgConfig::default() }, 8);
    let conninfo = format!(
        "host={} port={} user=tester dbname=test sslmode=prefer",
        server.addr.ip(),
        server.addr.port()
    );
    let mut child = Command::new("psql")
        .args([conninfo.as_str(), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=0"])
        .env("PGPASSWORD", "psql-pass")
        .env("PGCONNECT_TIMEOUT", "30")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql must be installed: run scripts/install-deps.sh postgres");
    child.stdin.take().unwrap().write_all(SCRIPT.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stdout, "7\n1\n2\n3\n9\n", "stderr: {stderr}");
    assert!(stderr.contains("ERROR:  syntax error at or near \"selec\""), "{stderr}");
    assert!(stderr.contains("ERROR:  division by zero"), "{stderr}");
    assert!(stderr.contains("ERROR:  current transaction is aborted"), "{stderr}");
    assert_eq!(stderr.matches("ERROR:").count(), 3, "{stderr}");
    pg_support::assert_no_warnings();
}

//! The null server (`bench::null_server`, binary `pg-null-server`) answers real clients: for
//! each I/O flavour, tokio-postgres prepares and runs pgbench's point read and a simple query,
//! psql runs a query, and a short pgbench run of `bench/pgbench/tessera-point-read.sql` in
//! prepared mode completes every transaction without an error. psql and pgbench are required
//! (scripts/install-deps.sh installs them): a missing one fails the test rather than skipping.

mod common;

use std::net::SocketAddr;
use std::process::Command;

use bench::null_server::{
    CANNED_DOC, CANNED_ID, Durable, Flavor, Logs, NullServerError, Spawned, spawn, spawn_durable,
};

fn flavors() -> [Flavor; 5] {
    [
        Flavor::Threads,
        Flavor::Epoll { loops: 1 },
        Flavor::Epoll { loops: 2 },
        Flavor::Glommio { executors: 1 },
        Flavor::Glommio { executors: 2 },
    ]
}

fn start(flavor: Flavor) -> SocketAddr {
    spawn("127.0.0.1:0".parse().unwrap(), flavor).expect("binding a loopback port")
}

#[tokio::test]
async fn smoke_tokio_postgres_prepared_and_simple() {
    for flavor in flavors() {
        let addr = start(flavor);
        let url = format!("postgres://bench@{}:{}/bench", addr.ip(), addr.port());
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("{flavor:?}: connect: {e}"));
        let driver = tokio::spawn(connection);
        let statement = client.prepare("SELECT * FROM pgb_docs WHERE id() = $1").await.unwrap();
        assert_eq!(statement.params(), &[tokio_postgres::types::Type::TEXT], "{flavor:?}");
        let names: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
        assert_eq!(names, ["id", "doc"], "{flavor:?}");
        for key in ["1", "19999"] {
            let rows = client.query(&statement, &[&key]).await.unwrap();
            assert_eq!(rows.len(), 1, "{flavor:?}");
            assert_eq!(rows[0].get::<_, &str>(0), CANNED_ID, "{flavor:?}");
        }
        let messages = client.simple_query("SELECT 1").await.unwrap();
        let row = messages
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .expect("a row");
        assert_eq!(row.get(1), Some(CANNED_DOC), "{flavor:?}");
        drop(client);
        driver.await.unwrap().unwrap();
    }
}

#[test]
fn smoke_psql_and_pgbench_prepared_point_read() {
    let script = common::repo_root().join("bench/pgbench/tessera-point-read.sql");
    for flavor in flavors() {
        let addr = start(flavor);
        let port = addr.port().to_string();
        let psql = Command::new("psql")
            .args([
                "-X",
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "bench",
                "-qAtc",
                "SELECT 1",
                "bench",
            ])
            .env("PGSSLMODE", "prefer")
            .output()
            .expect("psql not found: run scripts/install-deps.sh");
        assert!(psql.status.success(), "{flavor:?}: {}", String::from_utf8_lossy(&psql.stderr));
        assert_eq!(
            String::from_utf8_lossy(&psql.stdout).trim(),
            format!("{CANNED_ID}|{CANNED_DOC}"),
            "{flavor:?}"
        );
        let pgbench = Command::new("pgbench")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "bench", "-n", "-M", "prepared"])
            .args(["-c", "4", "-j", "2", "-t", "250", "-D", "docs=20000", "-f"])
            .arg(&script)
            .arg("bench")
            .env("PGSSLMODE", "prefer")
            .output()
            .expect("pgbench not found: run scripts/install-deps.sh");
        let stdout = String::from_utf8_lossy(&pgbench.stdout);
        assert!(
            pgbench.status.success(),
            "{flavor:?}: {stdout}\n{}",
            String::from_utf8_lossy(&pgbench.stderr)
        );
        assert!(
            stdout.contains("number of transactions actually processed: 1000/1000"),
            "{flavor:?}: {stdout}"
        );
        assert!(stdout.contains("number of failed transactions: 0"), "{flavor:?}: {stdout}");
    }
}

/// The durable flavours: every model and log layout the null server offers.
fn durable_flavors() -> [(Flavor, Logs, bool, usize); 12] {
    [
        (Flavor::Threads, Logs::One, false, 1),
        (Flavor::Threads, Logs::One, true, 1),
        (Flavor::Epoll { loops: 1 }, Logs::PerLoop, false, 1),
        (Flavor::Epoll { loops: 2 }, Logs::PerLoop, false, 1),
        (Flavor::Epoll { loops: 2 }, Logs::One, false, 1),
        (Flavor::Epoll { loops: 2 }, Logs::PerLoop, true, 1),
        (Flavor::Glommio { executors: 1 }, Logs::PerLoop, true, 1),
        (Flavor::Glommio { executors: 2 }, Logs::PerLoop, true, 1),
        (Flavor::Glommio { executors: 1 }, Logs::One, true, 1),
        (Flavor::Glommio { executors: 2 }, Logs::One, true, 1),
        (Flavor::Glommio { executors: 1 }, Logs::PerLoop, true, 2),
        (Flavor::Glommio { executors: 2 }, Logs::One, true, 3),
    ]
}

/// A small ring: tests write a few hundred records.
const TEST_LOG_BYTES: u64 = 1 << 20;

fn start_durable(
    (flavor, logs, direct, syncs_in_flight): (Flavor, Logs, bool, usize),
    dir: &std::path::Path,
) -> Spawned {
    let durable =
        Durable { dir: dir.to_owned(), logs, direct, syncs_in_flight, log_bytes: TEST_LOG_BYTES };
    spawn_durable("127.0.0.1:0".parse().unwrap(), flavor, Some(&durable))
        .expect("binding a loopback port and preparing the logs")
}

/// One client's writes, one at a time: each answer comes only after its own fdatasync (so
/// N sequential writes are exactly N syncs), a read needs none, and the log holds the
/// statements.
#[tokio::test]
async fn smoke_durable_answer_follows_its_fdatasync() {
    for layout in durable_flavors() {
        let (flavor, logs, ..) = layout;
        let dir = tempfile::tempdir().unwrap();
        let server = start_durable(layout, dir.path());
        let addr = server.addr;
        let url = format!("postgres://bench@{}:{}/bench", addr.ip(), addr.port());
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("{flavor:?}: connect: {e}"));
        let driver = tokio::spawn(connection);
        let insert = client.prepare("INSERT INTO pgb_docs VALUES ($1, '{}')").await.unwrap();
        for i in 1..=10u64 {
            let rows = client.execute(&insert, &[&format!("key-{i}")]).await.unwrap();
            assert_eq!(rows, 1, "{flavor:?}");
            let (appended, synced, acked, syncs) = server.stats.snapshot();
            assert_eq!((appended, synced, acked, syncs), (i, i, i, i), "{flavor:?} {logs:?}");
        }
        client.simple_query("UPDATE pgb_docs SET a = 1").await.unwrap();
        assert_eq!(server.stats.snapshot(), (11, 11, 11, 11), "{flavor:?} {logs:?}");
        client.query("SELECT * FROM pgb_docs WHERE id() = $1", &[&"1"]).await.unwrap();
        assert_eq!(server.stats.snapshot().3, 11, "{flavor:?}: a read is not synced");
        drop(client);
        driver.await.unwrap().unwrap();
        let mut logged = Vec::new();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            assert_eq!(bytes.len() as u64, TEST_LOG_BYTES, "{flavor:?}: the file never grows");
            logged.extend(bytes);
        }
        let text = String::from_utf8_lossy(&logged);
        assert_eq!(text.matches("INSERT INTO pgb_docs").count(), 10, "{flavor:?}");
        assert!(text.contains("key-10") && text.contains("UPDATE pgb_docs"), "{flavor:?}");
    }
}

/// pgbench's own insert and upsert scripts, 4 clients: every transaction succeeds, every
/// write is synced before its answer, and concurrent writers share fdatasyncs at most one
/// each.
#[test]
fn smoke_durable_pgbench_insert_and_upsert() {
    let root = common::repo_root();
    for layout in durable_flavors() {
        let (flavor, logs, ..) = layout;
        let dir = tempfile::tempdir().unwrap();
        let server = start_durable(layout, dir.path());
        let port = server.addr.port().to_string();
        let mut transactions = 0;
        for script in ["tessera-insert.sql", "tessera-upsert.sql"] {
            let pgbench = Command::new("pgbench")
                .args(["-h", "127.0.0.1", "-p", &port, "-U", "bench", "-n", "-M", "prepared"])
                .args(["-c", "4", "-j", "2", "-t", "50", "-D", "docs=20000", "-f"])
                .arg(root.join("bench/pgbench").join(script))
                .arg("bench")
                .env("PGSSLMODE", "prefer")
                .output()
                .expect("pgbench not found: run scripts/install-deps.sh");
            let stdout = String::from_utf8_lossy(&pgbench.stdout);
            assert!(
                pgbench.status.success(),
                "{flavor:?} {script}: {stdout}\n{}",
                String::from_utf8_lossy(&pgbench.stderr)
            );
            assert!(
                stdout.contains("number of transactions actually processed: 200/200"),
                "{flavor:?} {script}: {stdout}"
            );
            transactions += 200;
        }
        let (appended, synced, acked, syncs) = server.stats.snapshot();
        assert_eq!((appended, synced, acked), (transactions, transactions, transactions));
        assert!((1..=transactions).contains(&syncs), "{flavor:?} {logs:?}: {syncs} syncs");
    }
}

/// A log size that is not whole blocks is refused before anything starts.
#[test]
fn smoke_durable_log_size_must_be_whole_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let durable = Durable {
        dir: dir.path().to_owned(),
        logs: Logs::One,
        direct: false,
        syncs_in_flight: 1,
        log_bytes: 1000,
    };
    let spawned = spawn_durable("127.0.0.1:0".parse().unwrap(), Flavor::Threads, Some(&durable));
    assert!(matches!(spawned, Err(NullServerError::LogBytes { bytes: 1000 })));
}

//! The null server (`bench::null_server`, binary `pg-null-server`) answers real clients: for
//! each I/O flavour, tokio-postgres prepares and runs pgbench's point read and a simple query,
//! psql runs a query, and a short pgbench run of `bench/pgbench/tessera-point-read.sql` in
//! prepared mode completes every transaction without an error. psql and pgbench are required
//! (scripts/install-deps.sh installs them): a missing one fails the test rather than skipping.

mod common;

use std::net::SocketAddr;
use std::process::Command;

use bench::null_server::{CANNED_DOC, CANNED_ID, Flavor, spawn};

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

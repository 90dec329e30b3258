//! pgbench (PostgreSQL 15's, /usr/bin/pgbench) drives the test engine with a custom script in
//! each query mode: simple, extended and prepared, several clients at once. Checks that every
//! transaction completes without a failure; the latency and tps pgbench prints are the wire
//! layer's throughput numbers (BENCHMARKS.md quotes a release run).
//!
//! `TESSERA_PGBENCH_TRANSACTIONS=20000 cargo test --release -p node --test pg_pgbench -- --nocapture`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::process::Command;

use node::pg::PgConfig;

// Checks pgbench with 4 clients runs the script in every protocol mode with all transactions
// processed and none failed.
#[test]
fn pgbench_custom_script_all_modes() {
    let transactions: usize = std::env::var("TESSERA_PGBENCH_TRANSACTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let server = pg_support::start(PgConfig::default(), 16);
    let script = std::env::temp_dir().join(format!("tessera-pgbench-{}.sql", std::process::id()));
    // Two statements per transaction: one row, then three.
    std::fs::write(&script, "select 1;\nseries 3;\n").unwrap();
    for mode in ["simple", "extended", "prepared"] {
        let output = Command::new("pgbench")
            .args([
                "-h",
                &server.addr.ip().to_string(),
                "-p",
                &server.addr.port().to_string(),
                "-U",
                "tester",
                "-n",
                "-c",
                "4",
                "-j",
                "1",
                "-t",
                &transactions.to_string(),
                "-M",
                mode,
                "-f",
                script.to_str().unwrap(),
                "test",
            ])
            .env("PGSSLMODE", "disable")
            .output()
            .expect("pgbench must be installed: run scripts/install-deps.sh postgres");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{mode}: {stdout}\n{stderr}");
        let expected = format!(
            "number of transactions actually processed: {}/{}",
            transactions * 4,
            transactions * 4
        );
        assert!(stdout.contains(&expected), "{mode}: {stdout}\n{stderr}");
        assert!(stdout.contains("number of failed transactions: 0"), "{mode}: {stdout}");
        for line in
            stdout.lines().filter(|l| l.starts_with("latency average") || l.starts_with("tps"))
        {
            println!("pgbench -M {mode}: {line}");
        }
    }
    std::fs::remove_file(&script).unwrap();
    pg_support::assert_no_warnings();
}

//! The command line refuses bad input before connecting anywhere, with a message that names
//! the problem: bad target specs, unknown workloads, limits, and unreachable servers.

use std::process::Command;

/// Runs bench with `args`, expects failure, returns stderr.
fn fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .args(["--no-progress", "--out", "/nonexistent/never-written"])
        .output()
        .expect("running bench");
    assert!(!out.status.success(), "bench {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const PG: &str = "postgres=postgres://bench@127.0.0.1:1/postgres";

#[test]
fn cli_rejects_bad_targets() {
    // A spec without FLAVOR=, an unknown flavor, and an unparsable connection string.
    let e = fails(&["--target", "postgres://127.0.0.1/x"]);
    assert!(e.contains("expected FLAVOR=CONNECTION_STRING"), "{e}");
    let e = fails(&["--target", "mysql=postgres://127.0.0.1/x"]);
    assert!(e.contains("unknown flavor \"mysql\""), "{e}");
    let e = fails(&["--target", "postgres=postgres://127.0.0.1:notaport/x"]);
    assert!(e.contains("bad connection string"), "{e}");
    let e = fails(&["--target", PG, "--target", PG]);
    assert!(e.contains("used twice"), "{e}");
}

#[test]
fn cli_rejects_unknown_workloads_and_limits() {
    // Unknown workload names list the known ones; out-of-range settings name the setting.
    let e = fails(&["--target", PG, "--workloads", "point-read,ycsb-z"]);
    assert!(e.contains("unknown workload \"ycsb-z\""), "{e}");
    assert!(e.contains("cross-fragment-transfer"), "{e}");
    let e = fails(&["--target", PG, "--connections", "100000"]);
    assert!(e.contains("connections = 100000 is outside 1..=1024"), "{e}");
    let e = fails(&["--target", PG, "--rate", "0"]);
    assert!(e.contains("rate (ops/s) = 0"), "{e}");
    let e = fails(&["--target", PG, "--duration", "ten"]);
    assert!(e.contains("bad duration \"ten\""), "{e}");
    let e = fails(&["--target", PG, "--docs", "0", "--workloads", "point-read"]);
    assert!(e.contains("give --docs N"), "{e}");
}

#[test]
fn cli_reports_an_unreachable_server() {
    // Port 1 on loopback refuses connections: the error names the target and the cause.
    let e = fails(&["--target", PG, "--workloads", "insert", "--docs", "0"]);
    assert!(e.contains("connecting to postgres"), "{e}");
    assert!(e.contains("127.0.0.1:1") || e.contains("refused"), "{e}");
}

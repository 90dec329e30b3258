//! A server that drops connections mid-run: every failure is counted as `connection-closed`
//! (never hidden), the open-loop requests the dead connections can no longer send are counted
//! as unsent at their lower-bound latency, the run ends, and the next workload starts on fresh
//! connections instead of failing at once on the closed ones.
//!
//! The fake server in `common::fake_pg` closes the socket at the first Execute. As in the stall
//! test, every count follows from the schedule (100/s for 1 s, 2 connections, depth 1): each
//! connection sends one request, loses it, and leaves its other 49 due requests unsent.

mod common;

use common::fake_pg::{Mode, spawn_fake_server};
use common::{read_json, run_bench_raw, short_run};

#[test]
fn crash_closed_connections_are_counted_and_replaced() {
    let port = spawn_fake_server(Mode::CloseOnExecute);
    let dir = std::env::temp_dir().join(format!("bench-crash-{}", std::process::id()));
    let target = format!("postgres=postgres://bench@127.0.0.1:{port}/x?sslmode=disable");
    let out = run_bench_raw(&short_run(
        &target,
        &dir,
        &[
            "--workloads",
            "point-read,ycsb-c",
            "--docs",
            "10",
            "--skip-load",
            "--duration",
            "1s",
            "--connections",
            "2",
            "--rate",
            "100",
        ],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "lost requests fail the run: {stderr}");
    assert!(stderr.contains("reconnecting"), "{stderr}");

    let run: serde_json::Value = read_json(&dir.join("run.json"));
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert_eq!(r["ops"], 0);
        let errors = r["errors"].as_object().unwrap();
        assert_eq!(
            errors.keys().collect::<Vec<_>>(),
            ["connection-closed"],
            "{}: {errors:?}",
            r["workload"]
        );
        assert_eq!(r["error_count"], 2, "one lost request per connection");
        assert_eq!(r["unsent"], 98);
    }
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(summary.contains("2 × connection-closed"), "{summary}");
    std::fs::remove_dir_all(&dir).unwrap();
}

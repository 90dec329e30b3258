//! A server that stops answering: the open loop must charge the stall to every request that
//! was due during it (no coordinated omission), and the run must still end, counting the
//! requests that never got a reply as `timeout` errors.
//!
//! The server is a fake in this file: it speaks just enough of the PostgreSQL protocol to let
//! a client connect and prepare a statement, then never answers an Execute. Everything asserted
//! follows from the schedule arithmetic (rate 100/s for 1 s over 2 connections at depth 1),
//! not from how fast anything ran: each connection sends its first request and then nothing,
//! so 98 of the 100 due requests are unsent and recorded at their lower-bound latency, the
//! longest being the end minus the due time of the earliest unsent one (1000 - 20 ms).
//! A second workload follows, and must see the same picture on fresh connections rather than
//! hang behind the requests the first one left unanswered.

mod common;

use common::fake_pg::{Mode, spawn_fake_server};
use common::{read_json, run_bench_raw, short_run};

#[test]
fn stall_is_charged_to_every_due_request_and_the_run_ends() {
    let port = spawn_fake_server(Mode::StallOnExecute);
    let dir = std::env::temp_dir().join(format!("bench-stall-{}", std::process::id()));
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
            "--drain-timeout",
            "200ms",
        ],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "timeouts fail the run: {stderr}");

    let run: serde_json::Value = read_json(&dir.join("run.json"));
    // The second workload runs on fresh connections (the stalled ones are replaced), so it
    // sees exactly the same picture instead of queueing behind the hung requests.
    assert_eq!(run["results"].as_array().unwrap().len(), 2);
    for r in run["results"].as_array().unwrap() {
        assert_eq!(r["ops"], 0);
        assert_eq!(r["errors"]["timeout"]["count"], 2, "one hung request per connection");
        assert_eq!(r["error_count"], 2);
        assert_eq!(r["unsent"], 98, "100 due in 1 s at 100/s, 2 sent");
        // Lower bounds 10 ms .. 980 ms (end minus due times 20 ms .. 990 ms), 0.1 % precision.
        let max = r["latency"]["max_ms"].as_f64().unwrap();
        assert!((979.0..=981.0).contains(&max), "max {max}");
        let p50 = r["latency"]["p50_ms"].as_f64().unwrap();
        assert!((480.0..=510.0).contains(&p50), "p50 {p50}");
    }
    assert!(stderr.contains("reconnecting"), "{stderr}");
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(summary.contains("point-read on postgres: 98"), "{summary}");
    assert!(summary.contains("ycsb-c on postgres: 98"), "{summary}");
    assert!(summary.contains("2 × timeout"), "{summary}");
    std::fs::remove_dir_all(&dir).unwrap();
}

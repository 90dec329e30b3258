//! Smoke test against a real PostgreSQL: starts a private instance with scripts/pg-local.sh,
//! runs every workload for one second with tiny sizes (closed loop), then one workload in
//! open loop, and checks that every output file exists and every workload completed
//! operations without a single error.
//!
//! PostgreSQL's server binaries are required: without them this test fails and says to run
//! scripts/install-deps.sh (CI does), rather than skipping silently.

mod common;

use std::path::Path;

use common::{PrivatePostgres, read_json, run_bench, short_run};

/// Reads the total count from an .hgrm footer.
fn hgrm_total(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text.lines().find(|l| l.contains("Total count")).expect("hgrm footer");
    line.rsplit('=').next().unwrap().trim_end_matches(']').trim().parse().unwrap()
}

#[test]
fn smoke_every_workload_against_a_private_postgres() {
    let pg = PrivatePostgres::start();
    let target = format!("postgres={}", pg.url);
    let out_dir = pg.dir.join("closed");
    run_bench(&short_run(
        &target,
        &out_dir,
        &[
            "--workloads",
            "all",
            "--docs",
            "200",
            "--duration",
            "1s",
            "--connections",
            "2",
            "--depth",
            "2",
            "--seed",
            "7",
        ],
    ));

    for file in ["summary.md", "run.json"] {
        assert!(out_dir.join(file).is_file(), "{file} missing");
    }
    let run = read_json(&out_dir.join("run.json"));
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 17, "one result per workload");
    assert_eq!(run["load"][0]["docs"], 200);
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    for r in results {
        let workload = r["workload"].as_str().unwrap();
        let ops = r["ops"].as_u64().unwrap();
        assert!(ops > 0, "{workload}: no operations completed");
        assert_eq!(r["error_count"], 0, "{workload}: errors {}", r["errors"]);
        assert_eq!(r["target"], "postgres");
        // Every read, update and transfer touched an existing document.
        assert!(r["rows"].as_u64().unwrap() > 0, "{workload}: no rows");
        let hgrm = out_dir.join(r["hgrm"].as_str().unwrap());
        assert_eq!(
            hgrm_total(&hgrm),
            ops + r["unsent"].as_u64().unwrap(),
            "{workload}: the .hgrm holds every measured request"
        );
        let hlog = std::fs::read_to_string(out_dir.join(r["hlog"].as_str().unwrap())).unwrap();
        assert!(hlog.contains("#[StartTime:"), "{workload}: hlog header");
        let svg = std::fs::read_to_string(out_dir.join(format!("{workload}.svg"))).unwrap();
        assert!(svg.contains("<polyline"), "{workload}.svg has no line");
        assert!(
            summary.contains(&format!("| {workload} | postgres |")),
            "{workload} not in summary"
        );
    }
    // Point reads of loaded ids find exactly one row each.
    let point = results.iter().find(|r| r["workload"] == "point-read").unwrap();
    assert_eq!(point["rows"], point["ops"]);

    // Open loop, on the documents loaded above (--skip-load keeps them).
    let open_dir = pg.dir.join("open");
    run_bench(&short_run(
        &target,
        &open_dir,
        &[
            "--workloads",
            "point-read",
            "--docs",
            "200",
            "--skip-load",
            "--duration",
            "1s",
            "--connections",
            "2",
            "--rate",
            "200",
        ],
    ));
    let run = read_json(&open_dir.join("run.json"));
    assert_eq!(run["settings"]["arrival"]["kind"], "open");
    assert_eq!(run["settings"]["arrival"]["rate_per_sec"], 200);
    let r = &run["results"][0];
    assert!(r["ops"].as_u64().unwrap() > 0);
    assert_eq!(r["error_count"], 0);
    // The generator reports its own lateness (no bound asserted: that would be a timing test).
    assert!(r["send_lag"]["p50_ms"].as_f64().is_some());
    let summary = std::fs::read_to_string(open_dir.join("summary.md")).unwrap();
    assert!(summary.contains("Client send lag"), "{summary}");
}

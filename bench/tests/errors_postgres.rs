//! Server errors during a run are counted per SQLSTATE, listed in the summary and run.json,
//! and make bench exit with status 2; they are never hidden. A failed statement inside a
//! transaction is rolled back so the connection stays usable: the only errors are the
//! server's real ones, never "current transaction is aborted" (25P02) as a knock-on effect.
//!
//! The failure is made deterministic with a CHECK constraint that every debit violates.

mod common;

use common::{PrivatePostgres, read_json, run_bench, run_bench_raw, short_run};

#[test]
fn errors_are_counted_by_sqlstate_and_fail_the_run() {
    let pg = PrivatePostgres::start();
    let target = format!("postgres={}", pg.url);
    // Load 64 documents (balance 1000) and run nothing else.
    let load_dir = pg.dir.join("load");
    run_bench(&short_run(
        &target,
        &load_dir,
        &["--workloads", "insert", "--docs", "64", "--duration", "100ms", "--connections", "1"],
    ));
    pg.psql(
        "ALTER TABLE bench_docs ADD CONSTRAINT balance_floor \
         CHECK ((doc->>'balance')::bigint >= 1000)",
    );

    let out_dir = pg.dir.join("failing");
    let out = run_bench_raw(&short_run(
        &target,
        &out_dir,
        &[
            "--workloads",
            "single-fragment-txn",
            "--docs",
            "64",
            "--skip-load",
            "--duration",
            "500ms",
            "--connections",
            "2",
        ],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "bench must fail the run: {stderr}");
    assert!(stderr.contains("requests failed"), "{stderr}");

    let run: serde_json::Value = read_json(&out_dir.join("run.json"));
    let r = &run["results"][0];
    assert_eq!(r["ops"], 0, "every transfer violates the constraint");
    let errors = r["errors"].as_object().unwrap();
    assert_eq!(errors.keys().collect::<Vec<_>>(), ["23514"], "only check violations: {errors:?}");
    let count = errors["23514"]["count"].as_u64().unwrap();
    assert!(count > 0);
    assert_eq!(r["error_count"], count);
    assert!(
        errors["23514"]["example"].as_str().unwrap().contains("balance_floor"),
        "the example names the constraint: {}",
        errors["23514"]["example"]
    );
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(summary.contains("single-fragment-txn on postgres:"), "{summary}");
    assert!(summary.contains("× 23514"), "{summary}");
    // The plot and histogram files are still written for a run with no successes.
    assert!(out_dir.join("single-fragment-txn.svg").is_file());
    assert!(out_dir.join("single-fragment-txn.postgres.hgrm").is_file());
}

#[test]
fn errors_when_the_collection_is_missing_are_reported() {
    // --skip-load against an empty database: preparing fails with 42P01 (undefined table),
    // which is counted and reported for the workload instead of aborting silently.
    let pg = PrivatePostgres::start();
    let target = format!("postgres={}", pg.url);
    let out_dir = pg.dir.join("missing");
    let out = run_bench_raw(&short_run(
        &target,
        &out_dir,
        &[
            "--workloads",
            "point-read",
            "--docs",
            "10",
            "--skip-load",
            "--duration",
            "200ms",
            "--connections",
            "1",
        ],
    ));
    assert_eq!(out.status.code(), Some(2));
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(summary.contains("1 × 42P01"), "{summary}");
    assert!(summary.contains("bench_docs"), "{summary}");
}

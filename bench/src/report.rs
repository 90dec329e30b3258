//! Results: the summary table, run.json, `.hgrm` files and SVG plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::config::{Flavor, Settings, Workload};
use crate::driver::LoadReport;
use crate::error::OutputError;
use crate::hist::{self, Percentiles};
use crate::plot;
use crate::schedule::{ErrorCount, Recorder};

/// One workload on one target, all rounds merged.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResult {
    /// Workload.
    pub workload: Workload,
    /// Target name.
    pub target: String,
    /// Target flavor.
    pub flavor: Flavor,
    /// Successful measured operations.
    pub ops: u64,
    /// `ops / measured_secs`.
    pub ops_per_sec: f64,
    /// Measured time, all rounds together.
    pub measured_secs: f64,
    /// Requests in flight per connection actually used.
    pub depth: usize,
    /// Latency summary, from each request's due time.
    pub latency: Percentiles,
    /// Client send lag (due -> sent): the generator's lateness, plus queueing behind a full
    /// pipeline when an open loop is overloaded. Already included in `latency`.
    pub send_lag: Percentiles,
    /// Errors by kind (SQLSTATE, `connection-closed`, `timeout`, `client`).
    pub errors: BTreeMap<String, ErrorCount>,
    /// Sum of `errors`.
    pub error_count: u64,
    /// Open loop: requests due but never sent (their lower-bound latency is in the histogram).
    pub unsent: u64,
    /// Transactions: measured attempts refused with 40001/40P01 and run again (each
    /// transaction's latency includes its retries).
    pub retries: u64,
    /// Operations completed during warm-up (not measured).
    pub warmup_ops: u64,
    /// Rows returned or changed by measured operations.
    pub rows: u64,
    /// The `.hgrm` file, relative to the results directory.
    pub hgrm: String,
    /// The `.hlog` file (lossless histogram), relative to the results directory.
    pub hlog: String,
    #[serde(skip)]
    histogram: Histogram<u64>,
}

impl WorkloadResult {
    /// Builds the result from a merged recorder.
    pub fn new(
        workload: Workload,
        target: &str,
        flavor: Flavor,
        depth: usize,
        measured_secs: f64,
        rec: &Recorder,
    ) -> Self {
        let ops = rec.ops();
        WorkloadResult {
            workload,
            target: target.to_owned(),
            flavor,
            ops,
            ops_per_sec: if measured_secs > 0.0 { ops as f64 / measured_secs } else { 0.0 },
            measured_secs,
            depth,
            latency: Percentiles::of(rec.histogram()),
            send_lag: Percentiles::of(rec.lag_histogram()),
            errors: rec.errors().clone(),
            error_count: rec.error_count(),
            unsent: rec.unsent_count(),
            retries: rec.retries(),
            warmup_ops: rec.warmup_ops(),
            rows: rec.rows(),
            hgrm: format!("{}.{}.hgrm", workload.name(), target),
            hlog: format!("{}.{}.hlog", workload.name(), target),
            histogram: rec.histogram().clone(),
        }
    }

    /// Latencies in microseconds.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.histogram
    }
}

/// A target as recorded in run.json (password removed).
#[derive(Clone, Debug, Serialize)]
pub struct TargetInfo {
    /// Name.
    pub name: String,
    /// Flavor.
    pub flavor: Flavor,
    /// Connection string without password.
    pub connection: String,
}

/// Everything one invocation measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// UTC start time, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started_utc: String,
    /// The same instant, seconds since the Unix epoch.
    pub started_unix_secs: u64,
    /// Settings used.
    pub settings: Settings,
    /// Targets measured.
    pub targets: Vec<TargetInfo>,
    /// Loading, per target.
    pub load: Vec<LoadReport>,
    /// Results, per workload and target, in run order.
    pub results: Vec<WorkloadResult>,
    /// Workloads a target cannot run yet (`sql::unsupported`), not measured there.
    pub skipped: Vec<Skipped>,
}

/// A workload not run on a target, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    /// The workload.
    pub workload: Workload,
    /// Target name.
    pub target: String,
    /// Why it was not run.
    pub reason: String,
}

/// The summary as a Markdown table, followed by the errors, if any.
pub fn summary_markdown(report: &RunReport) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail; results are ignored on purpose.
    let arrival = match report.settings.arrival {
        crate::config::Loop::Closed => "closed loop".to_owned(),
        crate::config::Loop::Open { rate_per_sec } => {
            format!("open loop at {rate_per_sec} ops/s per target")
        }
    };
    let _ = writeln!(
        s,
        "Run {} · {} · {} connections × depth {} · {:.0} s measured per workload per target in {} round(s) · warm-up {:.0} s · {} docs · seed {}\n",
        report.started_utc,
        arrival,
        report.settings.connections,
        report.settings.depth,
        report.settings.duration.as_secs_f64(),
        report.settings.rounds,
        report.settings.warmup.as_secs_f64(),
        report.settings.docs,
        report.settings.seed,
    );
    let _ = writeln!(
        s,
        "| workload | target | ops/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors |"
    );
    let _ = writeln!(s, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &report.results {
        let l = &r.latency;
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} |",
            r.workload,
            r.target,
            r.ops_per_sec,
            l.p50_ms,
            l.p90_ms,
            l.p99_ms,
            l.p999_ms,
            l.max_ms,
            r.error_count
        );
    }
    if !report.skipped.is_empty() {
        let _ = writeln!(s, "\nSkipped (not measured, not counted as errors):\n");
        for k in &report.skipped {
            let _ = writeln!(s, "- {} on {}: {}", k.workload, k.target, k.reason);
        }
    }
    let retried: Vec<&WorkloadResult> = report.results.iter().filter(|r| r.retries > 0).collect();
    if !retried.is_empty() {
        let _ = writeln!(s, "\nTransactions retried after 40001/40P01 (inside their latency):\n");
        for r in retried {
            let _ = writeln!(s, "- {} on {}: {} retries", r.workload, r.target, r.retries);
        }
    }
    let failing: Vec<&WorkloadResult> =
        report.results.iter().filter(|r| r.error_count > 0).collect();
    if !failing.is_empty() {
        let _ = writeln!(s, "\nErrors:\n");
        for r in failing {
            for (kind, e) in &r.errors {
                let _ = writeln!(
                    s,
                    "- {} on {}: {} × {} (first: {})",
                    r.workload, r.target, e.count, kind, e.example
                );
            }
        }
    }
    if matches!(report.settings.arrival, crate::config::Loop::Open { .. }) {
        let _ = writeln!(
            s,
            "\nClient send lag (due → sent, included in the latencies above; generator lateness plus queueing when overloaded):\n"
        );
        for r in &report.results {
            let l = &r.send_lag;
            let _ = writeln!(
                s,
                "- {} on {}: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
                r.workload, r.target, l.p50_ms, l.p99_ms, l.max_ms
            );
        }
    }
    let unsent: Vec<&WorkloadResult> = report.results.iter().filter(|r| r.unsent > 0).collect();
    if !unsent.is_empty() {
        let _ = writeln!(
            s,
            "\nOpen loop fell behind (requests due but never sent, counted at their lower-bound latency):\n"
        );
        for r in unsent {
            let _ = writeln!(s, "- {} on {}: {}", r.workload, r.target, r.unsent);
        }
    }
    for l in &report.load {
        let _ = writeln!(
            s,
            "\nLoaded {} docs into {} in {:.1} s ({:.0} docs/s).",
            l.docs,
            l.target,
            l.secs,
            if l.secs > 0.0 { l.docs as f64 / l.secs } else { 0.0 }
        );
    }
    s
}

fn write(path: PathBuf, contents: &str) -> Result<(), OutputError> {
    std::fs::write(&path, contents).map_err(|source| OutputError::Io { path, source })
}

/// Writes summary.md, run.json, one `.hgrm` per workload and target, one SVG per workload.
/// Returns the files written.
pub fn write_all(dir: &Path, report: &RunReport) -> Result<Vec<PathBuf>, OutputError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| OutputError::Io { path: dir.to_owned(), source })?;
    let mut written = Vec::new();
    let summary = dir.join("summary.md");
    write(summary.clone(), &summary_markdown(report))?;
    written.push(summary);

    let json_path = dir.join("run.json");
    let json = serde_json::to_string_pretty(report)
        .map_err(|source| OutputError::Json { path: json_path.clone(), source })?;
    write(json_path.clone(), &json)?;
    written.push(json_path);

    for r in &report.results {
        let path = dir.join(&r.hgrm);
        write(path.clone(), &hist::hgrm(r.histogram()))?;
        written.push(path);
        let path = dir.join(&r.hlog);
        let bytes = hist::hlog(
            r.histogram(),
            &r.target,
            Duration::from_secs(report.started_unix_secs),
            Duration::from_secs_f64(r.measured_secs),
        )
        .map_err(|message| OutputError::HistogramLog { path: path.clone(), message })?;
        std::fs::write(&path, bytes)
            .map_err(|source| OutputError::Io { path: path.clone(), source })?;
        written.push(path);
    }

    let mut workloads: Vec<Workload> = Vec::new();
    for r in &report.results {
        if !workloads.contains(&r.workload) {
            workloads.push(r.workload);
        }
    }
    for w in workloads {
        let rows: Vec<&WorkloadResult> =
            report.results.iter().filter(|r| r.workload == w).collect();
        let distributions: Vec<Vec<hist::DistributionPoint>> =
            rows.iter().map(|r| hist::distribution(r.histogram())).collect();
        let series: Vec<plot::Series<'_>> = rows
            .iter()
            .zip(&distributions)
            .map(|(r, d)| plot::Series { name: &r.target, points: d })
            .collect();
        let title = format!("{w}: latency by percentile ({})", report.started_utc);
        let path = dir.join(format!("{w}.svg"));
        write(path.clone(), &plot::svg(&title, &series))?;
        written.push(path);
    }
    Ok(written)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch (proleptic Gregorian, UTC).
pub fn utc_timestamp(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Howard Hinnant's days-to-civil algorithm, for days since 1970-01-01 (non-negative).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Loop;
    use std::time::Duration;

    fn report() -> RunReport {
        let mut ok = Recorder::new(0);
        for us in 1..=1000u64 {
            ok.success(0, us * 1000, 1);
        }
        let mut bad = Recorder::new(0);
        bad.success(0, 5_000_000, 0);
        bad.error("40001", "could not serialize access");
        RunReport {
            started_utc: utc_timestamp(0),
            started_unix_secs: 0,
            settings: Settings {
                duration: Duration::from_secs(2),
                warmup: Duration::ZERO,
                connections: 1,
                depth: 1,
                arrival: Loop::Closed,
                rounds: 1,
                docs: 10,
                load: true,
                seed: 5,
                drain_timeout: Duration::from_secs(30),
            },
            targets: vec![],
            load: vec![LoadReport { target: "pg".into(), docs: 10, secs: 0.5 }],
            results: vec![
                WorkloadResult::new(Workload::PointRead, "pg", Flavor::Postgres, 1, 2.0, &ok),
                WorkloadResult::new(Workload::PointRead, "other", Flavor::Tessera, 1, 2.0, &bad),
            ],
            skipped: vec![Skipped {
                workload: Workload::SingleFragmentTxn,
                target: "other".into(),
                reason: "needs a transaction block".into(),
            }],
        }
    }

    #[test]
    fn unit_utc_timestamp_matches_known_dates() {
        // The epoch, a leap day and a date in this project's lifetime.
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_794_819_600), "2026-11-16T09:00:00Z");
    }

    #[test]
    fn unit_summary_lists_every_result_and_every_error() {
        // One table row per result with throughput from ops / seconds; errors are listed
        // with kind, count and example, and the load line is there.
        let text = summary_markdown(&report());
        assert!(text.contains("| point-read | pg | 500 |"), "{text}");
        assert!(
            text.contains("| point-read | other | 0 |")
                || text.contains("| point-read | other | 1 |"),
            "{text}"
        );
        assert!(
            text.contains("point-read on other: 1 × 40001 (first: could not serialize access)"),
            "{text}"
        );
        assert!(text.contains("Loaded 10 docs into pg in 0.5 s (20 docs/s)."), "{text}");
        // A skipped pair is named with its reason, and has no table row.
        assert!(
            text.contains("- single-fragment-txn on other: needs a transaction block"),
            "{text}"
        );
        assert!(!text.contains("| single-fragment-txn |"), "{text}");
    }

    #[test]
    fn unit_write_all_creates_every_file() {
        // summary.md, run.json (valid JSON with the counts), an .hgrm per result and one SVG
        // per workload land in the directory.
        let dir = std::env::temp_dir().join(format!("bench-report-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = write_all(&dir, &report()).unwrap();
        let names: Vec<String> =
            written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(
            names,
            [
                "summary.md",
                "run.json",
                "point-read.pg.hgrm",
                "point-read.pg.hlog",
                "point-read.other.hgrm",
                "point-read.other.hlog",
                "point-read.svg"
            ]
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
        assert_eq!(json["results"][0]["ops"], 1000);
        assert_eq!(json["results"][1]["errors"]["40001"]["count"], 1);
        assert_eq!(json["settings"]["duration"], 2.0);
        let hgrm = std::fs::read_to_string(dir.join("point-read.pg.hgrm")).unwrap();
        assert!(hgrm.contains("Total count    =         1000]"));
        let svg = std::fs::read_to_string(dir.join("point-read.svg")).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

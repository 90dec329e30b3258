//! `bench`: a load generator for any PostgreSQL-wire endpoint, with latency histograms.
//!
//! It runs the same workloads against several targets (a Tessera node, a PostgreSQL server)
//! in one invocation, alternating between them so machine drift hits every target alike,
//! and writes a summary table, run.json, HdrHistogram percentile files and SVG plots.
//!
//! It never links another Tessera crate: it knows the server only through SQL (`sql.rs`).

pub mod config;
pub mod driver;
pub mod error;
pub mod hist;
pub mod layout;
pub mod limits;
pub mod null_log;
pub mod null_server;
pub mod ops;
pub mod plot;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod sql;
pub mod zipf;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::{Settings, Target, Workload};
use crate::error::ConfigError;
use crate::report::{RunReport, Skipped, TargetInfo, WorkloadResult};
use crate::schedule::Recorder;
use crate::zipf::ScrambledZipfian;

/// One invocation: targets, workloads, settings.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Servers to measure.
    pub targets: Vec<Target>,
    /// Workloads, in order.
    pub workloads: Vec<Workload>,
    /// Everything else.
    pub settings: Settings,
    /// Draw progress bars (they are hidden anyway when stderr is not a terminal).
    pub show_progress: bool,
}

impl Plan {
    /// Checks limits, unique target names and that workloads have the documents they need.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut names = HashSet::new();
        for t in &self.targets {
            if !names.insert(t.name()) {
                return Err(ConfigError::DuplicateTarget { name: t.name().to_owned() });
            }
        }
        self.settings.validate(self.targets.len(), &self.workloads)
    }
}

/// The order of targets in round `round`: rotated by one each round (ABC, BCA, CAB, ...).
pub fn round_order(targets: usize, round: u32) -> Vec<usize> {
    if targets == 0 {
        return Vec::new();
    }
    let shift = round as usize % targets;
    (0..targets).map(|i| (i + shift) % targets).collect()
}

/// Connects to every target, loads documents, runs every workload on every target in
/// alternating rounds and returns the merged results. Fails before measuring anything if a
/// target cannot be reached or loaded; errors during the workloads are counted, not fatal.
pub async fn run(plan: &Plan) -> anyhow::Result<RunReport> {
    plan.validate()?;
    let settings = &plan.settings;
    let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let run_nonce = u64::try_from(started.as_millis()).unwrap_or(0);

    let mut pools = Vec::with_capacity(plan.targets.len());
    for t in &plan.targets {
        pools.push(driver::connect(t, settings.connections).await?);
    }
    let mut loads = Vec::new();
    if settings.load {
        for (t, pool) in plan.targets.iter().zip(&pools) {
            let l = driver::load(t, pool, settings.docs, settings.seed, plan.show_progress).await?;
            eprintln!("loaded {} docs into {} in {:.1}s", l.docs, l.target, l.secs);
            loads.push(l);
        }
    }

    let zipf = if plan
        .workloads
        .iter()
        .any(|w| matches!(w, Workload::YcsbA | Workload::YcsbB | Workload::YcsbC))
    {
        Some(Arc::new(ScrambledZipfian::new(settings.docs.max(1))))
    } else {
        None
    };

    let groups = if plan.workloads.contains(&Workload::CrossFragmentTransfer) {
        let (layout, source) = driver::layout(&plan.targets, &pools).await?;
        let groups = layout::ExecutorGroups::new(&layout, settings.docs);
        eprintln!(
            "cross-fragment-transfer: pairs documents on two of {} executors, placed by {source}",
            groups.executors()
        );
        Some(Arc::new(groups))
    } else {
        None
    };

    let rounds = settings.rounds;
    let per_round = settings.duration / rounds;
    let measured_secs = (per_round * rounds).as_secs_f64();
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut slice_id = 0u64;
    for &workload in &plan.workloads {
        // Targets that cannot run this workload yet are skipped, with the reason recorded.
        let runs: Vec<bool> = plan
            .targets
            .iter()
            .map(|t| match sql::unsupported(t.flavor(), workload) {
                Some(reason) => {
                    eprintln!("{:>24} {:>10}: SKIPPED: {reason}", workload.name(), t.name());
                    skipped.push(Skipped {
                        workload,
                        target: t.name().to_owned(),
                        reason: reason.to_owned(),
                    });
                    false
                }
                None => true,
            })
            .collect();
        let mut merged: Vec<Recorder> = plan.targets.iter().map(|_| Recorder::new(0)).collect();
        for round in 0..rounds {
            for i in round_order(plan.targets.len(), round) {
                let (Some(target), Some(pool)) = (plan.targets.get(i), pools.get(i)) else {
                    continue;
                };
                if runs.get(i) != Some(&true) {
                    continue;
                }
                slice_id += 1;
                let rec = driver::run_slice(driver::Slice {
                    target,
                    pool,
                    workload,
                    settings,
                    warmup: if round == 0 { settings.warmup } else { Duration::ZERO },
                    measured: per_round,
                    slice_id,
                    zipf: zipf.clone(),
                    groups: groups.clone(),
                    run_nonce,
                    show_progress: plan.show_progress,
                })
                .await;
                if let Some(m) = merged.get_mut(i) {
                    m.merge(&rec);
                }
                if rec.errors().contains_key("timeout") || pool.any_closed() {
                    // Requests that never got a reply still occupy their connections, and
                    // closed connections fail everything; later slices would inherit both.
                    // Start the next slice on fresh connections.
                    eprintln!(
                        "{}: requests timed out or connections closed; reconnecting",
                        target.name()
                    );
                    match driver::connect(target, settings.connections).await {
                        Ok(fresh) => {
                            if let Some(slot) = pools.get_mut(i) {
                                *slot = fresh;
                            }
                        }
                        Err(e) => eprintln!(
                            "{}: reconnecting failed, keeping the old connections: {e:#}",
                            target.name()
                        ),
                    }
                }
            }
        }
        for ((target, rec), _) in
            plan.targets.iter().zip(&merged).zip(&runs).filter(|(_, runs)| **runs)
        {
            let r = WorkloadResult::new(
                workload,
                target.name(),
                target.flavor(),
                settings.depth_for(workload),
                measured_secs,
                rec,
            );
            eprintln!(
                "{:>24} {:>10}: {:>9.0} ops/s  p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  errors {}",
                r.workload.name(),
                r.target,
                r.ops_per_sec,
                r.latency.p50_ms,
                r.latency.p99_ms,
                r.latency.max_ms,
                r.error_count
            );
            results.push(r);
        }
    }

    Ok(RunReport {
        started_utc: report::utc_timestamp(started.as_secs()),
        started_unix_secs: started.as_secs(),
        settings: settings.clone(),
        targets: plan
            .targets
            .iter()
            .map(|t| TargetInfo {
                name: t.name().to_owned(),
                flavor: t.flavor(),
                connection: t.display().to_owned(),
            })
            .collect(),
        load: loads,
        results,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_round_order_rotates_targets() {
        // Each target leads one round in turn, so drift within a round is shared out.
        assert_eq!(round_order(3, 0), [0, 1, 2]);
        assert_eq!(round_order(3, 1), [1, 2, 0]);
        assert_eq!(round_order(3, 2), [2, 0, 1]);
        assert_eq!(round_order(3, 3), [0, 1, 2]);
        assert_eq!(round_order(1, 7), [0]);
        assert!(round_order(0, 1).is_empty());
    }
}

//! `bench`: runs workloads against Tessera and PostgreSQL, with latency histograms.
//! See `bench --help` and the `bench` section of BENCHMARKS.md.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use bench::config::{Loop, Settings, Target, Workload, parse_duration};
use bench::{Plan, report};
use clap::Parser;

/// Load generator for PostgreSQL-wire servers: open or closed loop, latency histograms, plots.
#[derive(Debug, Parser)]
#[command(name = "bench", version)]
struct Cli {
    /// A server to measure, `FLAVOR=CONNSTR` or `NAME:FLAVOR=CONNSTR`; FLAVOR is `tessera` or
    /// `postgres`. Repeat for several; they are measured in alternation.
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// Comma-separated workloads: point-read, insert, upsert, content-query, scatter-query,
    /// single-fragment-txn, cross-fragment-transfer, pipelined-txn, autocommit-write,
    /// single-write-txn, query-write-txn, query-write, two-write-autocommit, query-txn, ycsb-a,
    /// ycsb-b, ycsb-c, or all. A target that cannot run a workload yet skips it, with the reason printed and
    /// recorded in run.json and summary.md.
    #[arg(long, default_value = "all")]
    workloads: String,
    /// Documents in the data set. They are loaded first (dropping and recreating the
    /// collection) unless --skip-load is given.
    #[arg(long, default_value_t = 10_000)]
    docs: u64,
    /// Do not create or load the collection: reuse the documents of an earlier run with the
    /// same --docs.
    #[arg(long)]
    skip_load: bool,
    /// Measured time per workload per target, e.g. 10s, 500ms, 2m.
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Unmeasured warm-up before each workload on each target.
    #[arg(long, default_value = "2s")]
    warmup: String,
    /// Connections per target.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Requests in flight per connection (pipelining; transactions always use 1).
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Open loop: operations per second per target (all connections together). Without it
    /// the run is a closed loop.
    #[arg(long)]
    rate: Option<u64>,
    /// With --rate: the rate is per connection instead of per target.
    #[arg(long, requires = "rate")]
    rate_per_connection: bool,
    /// Rounds per workload; targets alternate every round, in rotating order.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// After each slice's end, how long to wait for requests still in flight before counting
    /// them as `timeout` errors.
    #[arg(long, default_value = "30s")]
    drain_timeout: String,
    /// Results directory (default: bench/results/<UTC date and time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads of the client runtime (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress bars.
    #[arg(long)]
    no_progress: bool,
}

fn plan(cli: &Cli) -> anyhow::Result<Plan> {
    let targets = cli.targets.iter().map(|t| t.parse::<Target>()).collect::<Result<Vec<_>, _>>()?;
    let arrival = match cli.rate {
        None => Loop::Closed,
        Some(rate) => {
            let total = if cli.rate_per_connection {
                rate.saturating_mul(cli.connections as u64)
            } else {
                rate
            };
            Loop::Open { rate_per_sec: total }
        }
    };
    let plan = Plan {
        targets,
        workloads: Workload::parse_list(&cli.workloads)?,
        settings: Settings {
            duration: parse_duration(&cli.duration)?,
            warmup: parse_duration(&cli.warmup)?,
            connections: cli.connections,
            depth: cli.depth,
            arrival,
            rounds: cli.rounds,
            docs: cli.docs,
            load: !cli.skip_load,
            seed: cli.seed,
            drain_timeout: parse_duration(&cli.drain_timeout)?,
        },
        show_progress: !cli.no_progress,
    };
    plan.validate()?;
    Ok(plan)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let plan = plan(&cli)?;
    let out = cli.out.clone().unwrap_or_else(|| {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let stamp = report::utc_timestamp(now.as_secs()).replace(':', "");
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results").join(stamp)
    });
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = cli.threads {
        builder.worker_threads(n.max(1));
    }
    let runtime = builder.build().context("starting the tokio runtime")?;
    let report = runtime.block_on(bench::run(&plan))?;
    let written = report::write_all(&out, &report)?;
    print!("{}", report::summary_markdown(&report));
    println!("\nresults: {}", out.display());
    for p in written {
        println!("  {}", p.display());
    }
    let errors: u64 = report.results.iter().map(|r| r.error_count).sum();
    if errors > 0 {
        eprintln!("bench: {errors} requests failed; see the Errors list above and run.json");
        std::process::exit(2);
    }
    Ok(())
}

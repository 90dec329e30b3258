//! Cost of one cross-executor hop (`runtime::Mesh::call` with empty work), for A/B runs of
//! the runtime: two executors; executor 0 makes `CALLS` calls to executor 1, one at a time
//! (round-trip latency) and then from `CONCURRENCY` tasks at once (CPU per call under
//! overlap). Prints one line per phase: wall-clock p50/p99 of the sequential round trips, and
//! the process's CPU time (user + system, from `getrusage`) per call in each phase.
//!
//! Usage: `cargo run --release -p node --example mesh_hop -- [CALLS] [CONCURRENCY]`
//! (defaults 20000 and 16).

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use node::runtime::{ExecutorContext, ExecutorIndex, Shutdown, run};

/// Process CPU time so far (user + system).
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct we hand it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage for the calling process.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The `per_mille`-th of `sorted` (nearest rank).
fn percentile(sorted: &[Duration], per_mille: usize) -> Duration {
    let Some(last) = sorted.len().checked_sub(1) else { return Duration::ZERO };
    sorted[(last * per_mille / 1000).min(last)]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let calls: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let concurrency: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16).max(1);
    let report: Arc<Mutex<Vec<String>>> = Arc::default();
    let out = Arc::clone(&report);
    let result = run(
        2,
        Shutdown::new(),
        |ctx: ExecutorContext<usize>| async move { Ok(ctx.index.get()) },
        move |state: Rc<usize>, ctx| {
            let out = Arc::clone(&out);
            async move {
                if *state != 0 {
                    ctx.shutdown.wait().await;
                    return;
                }
                let one = ExecutorIndex::new(1);
                // Warm-up: allocations, the other executor's first wake-ups.
                for _ in 0..1000 {
                    let _ = ctx.mesh.call(one, |s: Rc<usize>| async move { *s }).await;
                }
                let mut rtt = Vec::with_capacity(calls);
                let cpu0 = cpu_time();
                let wall0 = Instant::now();
                for _ in 0..calls {
                    let t = Instant::now();
                    let answer = ctx.mesh.call(one, |s: Rc<usize>| async move { *s }).await;
                    rtt.push(t.elapsed());
                    if answer != Ok(1) {
                        out.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(format!("error: {answer:?}"));
                    }
                }
                let (cpu, wall) = (cpu_time() - cpu0, wall0.elapsed());
                rtt.sort_unstable();
                out.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                    "sequential calls={calls} p50_us={:.1} p99_us={:.1} mean_us={:.1} \
                     cpu_us_per_call={:.2}",
                    percentile(&rtt, 500).as_secs_f64() * 1e6,
                    percentile(&rtt, 990).as_secs_f64() * 1e6,
                    wall.as_secs_f64() * 1e6 / calls as f64,
                    cpu.as_secs_f64() * 1e6 / calls as f64,
                ));
                let cpu0 = cpu_time();
                let wall0 = Instant::now();
                let per_task = calls / concurrency;
                let mut tasks = Vec::with_capacity(concurrency);
                for _ in 0..concurrency {
                    let mesh = ctx.mesh.clone();
                    tasks.push(glommio::spawn_local(async move {
                        for _ in 0..per_task {
                            let _ = mesh.call(one, |s: Rc<usize>| async move { *s }).await;
                        }
                    }));
                }
                for t in tasks {
                    t.await;
                }
                let (cpu, wall) = (cpu_time() - cpu0, wall0.elapsed());
                let done = per_task * concurrency;
                out.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                    "concurrent tasks={concurrency} calls={done} calls_per_s={:.0} \
                     cpu_us_per_call={:.2}",
                    done as f64 / wall.as_secs_f64(),
                    cpu.as_secs_f64() * 1e6 / done as f64,
                ));
                ctx.shutdown.trigger();
            }
        },
        |_, _| async {},
    );
    for line in report.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("{line}");
    }
    if let Err(e) = result {
        eprintln!("runtime: {e}");
        std::process::exit(1);
    }
}

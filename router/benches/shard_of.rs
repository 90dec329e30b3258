//! Micro-benchmark of `shard_of` (run with `cargo bench -p router`): nanoseconds per call for
//! the id shapes a node sees, median of several timed batches after a warm-up.
//!
//! No criterion: `std::time::Instant` around batches of calls with `std::hint::black_box` on
//! input and output is enough for a number we quote as a goal check (20-byte ASCII id under
//! 30 ns). The machine is shared: the minimum over many short batches approximates an idle
//! machine (some batch runs undisturbed); the median shows the cost under the load at hand.

use std::hint::black_box;
use std::time::Instant;

/// Calls per timed batch.
const BATCH_CALLS: u32 = 100_000;
/// Timed batches per case; the median and the minimum are reported.
const BATCHES: usize = 101;

/// How much to run: `cargo bench` passes `--bench`; `cargo test --all-targets` runs this
/// binary without it (unoptimised), where one short batch per case checks it still works.
#[derive(Clone, Copy)]
struct Plan {
    batch_calls: u32,
    batches: usize,
}

fn measure(plan: Plan, name: &str, id: &str) {
    let Plan { batch_calls, batches } = plan;
    // Warm up caches and the branch predictor, and check the id is valid.
    for _ in 0..batch_calls / 4 {
        black_box(router::shard_of(black_box(id))).expect("benchmark ids are valid");
    }
    let mut per_call_ns: Vec<f64> = (0..batches)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch_calls {
                let _ = black_box(router::shard_of(black_box(id)));
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(batch_calls)
        })
        .collect();
    per_call_ns.sort_by(f64::total_cmp);
    let median = per_call_ns[batches / 2];
    let (min, max) = (per_call_ns[0], per_call_ns[batches - 1]);
    println!(
        "{name:<32} {bytes:>4} B  min {min:>7.1} ns/op  median {median:>7.1}  max {max:>7.1}",
        bytes = id.len()
    );
}

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let plan = if benchmarking {
        Plan { batch_calls: BATCH_CALLS, batches: BATCHES }
    } else {
        println!("shard_of bench: smoke run (use `cargo bench -p router` for numbers)");
        Plan { batch_calls: 100, batches: 1 }
    };
    let long = format!("orders/{}", "x".repeat(490));
    let long_upper = format!("Orders/{}", "X".repeat(490));
    let cases: [(&str, &str); 8] = [
        ("ascii 20 B, lower case", "orders/1234567890-ab"),
        ("ascii 20 B, mixed case", "Orders/1234567890-AB"),
        ("ascii 497 B, lower case", &long),
        ("ascii 497 B, upper case", &long_upper),
        ("$-routed tail", "orders/2-A$customers/1-A"),
        ("$@N explicit shard", "orders/1-A$@982173"),
        ("non-ascii 20 B", "Überweisung/ÄrgerΣ"),
        ("non-ascii 20 B, $-routed tail", "o/1$Überweisung/ΣΑ"),
    ];
    for (name, id) in cases {
        measure(plan, name, id);
    }
}

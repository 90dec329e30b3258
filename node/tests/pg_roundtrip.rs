//! Round trips of `select 1` through the whole wire layer (tokio-postgres client, glommio
//! server, test engine): checks every answer, and prints latency percentiles so the same test
//! doubles as the wire layer's micro-benchmark. It asserts nothing about time.
//!
//! Numbers for BENCHMARKS.md:
//! `TESSERA_PG_ROUNDTRIPS=20000 cargo test --release -p node --test pg_roundtrip -- --nocapture`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::time::{Duration, Instant};

use node::pg::PgConfig;

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    // Nearest-rank percentile: index = ceil(q * n) - 1, in integers (q in per mille).
    let at = |per_mille: usize| {
        let i = (per_mille * samples.len()).div_ceil(1000).saturating_sub(1);
        samples[i].as_secs_f64() * 1e6
    };
    println!(
        "{name}: n={} p50={:.1}us p90={:.1}us p99={:.1}us max={:.1}us",
        samples.len(),
        at(500),
        at(900),
        at(990),
        at(1000)
    );
}

// Checks `select 1` answers correctly over many round trips in the simple protocol, the
// extended protocol with a prepared statement, and a pipeline of queries in flight together;
// prints the latency distribution of each.
#[tokio::test]
async fn roundtrip_select_1() {
    let n: usize =
        std::env::var("TESSERA_PG_ROUNDTRIPS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let server = pg_support::start(PgConfig::default(), 8);
    let client = server.connect().await;

    let mut simple = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let messages = client.simple_query("select 1").await.unwrap();
        simple.push(start.elapsed());
        assert_eq!(messages.len(), 3);
    }

    let statement = client.prepare("select 1").await.unwrap();
    let mut extended = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let row = client.query_one(&statement, &[]).await.unwrap();
        extended.push(start.elapsed());
        assert_eq!(row.get::<_, i32>(0), 1);
    }

    // 16 prepared queries in flight at once: tokio-postgres pipelines them on one socket.
    let batches = n.div_ceil(16);
    let start = Instant::now();
    for _ in 0..batches {
        let queries = (0..16).map(|_| client.query_one(&statement, &[]));
        for row in futures_join_all(queries).await {
            assert_eq!(row.unwrap().get::<_, i32>(0), 1);
        }
    }
    let pipelined = start.elapsed();

    percentiles("simple select 1", simple);
    percentiles("extended select 1 (prepared)", extended);
    println!(
        "pipelined x16 prepared select 1: {} queries in {:.1} ms = {:.0} queries/s",
        batches * 16,
        pipelined.as_secs_f64() * 1e3,
        (batches * 16) as f64 / pipelined.as_secs_f64()
    );
    pg_support::assert_no_warnings();
}

/// Runs futures concurrently on the current task and returns their outputs in order.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in set.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *out = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().map(|o| o.unwrap()).collect()
}

//! The crash test: a writer in a child process (this test binary, re-invoked) applies batches
//! from many concurrent tasks and prints `ack <batch>` after each acknowledgement; the parent
//! SIGKILLs it at a seeded random moment (after a random number of acknowledgements, then up
//! to 3 ms later), reopens the fragment, and checks that every
//! acknowledged batch is present with the right content and that no batch is partly visible.
//! Half the writers come back through the reactor (a timer) between writes, as network clients
//! do, so records also arrive while a chunk is in flight and the log has two chunks in flight
//! at some kills (the count of such chunks is printed, not asserted: it depends on timing).
//!
//! Every eleventh batch is large (200 documents of 3 KB): more than a chunk of a 256 KiB
//! segment holds, so it is logged in parts over several chunks and a kill can fall between
//! them (the count of such batches recovery dropped is printed, not asserted).
//!
//! `sigkill_during_split_waves` does the same with `FragmentOptions::split_waves` and 64
//! writers (chunks of split waves start on glommio's blocking thread when chunks are fast).
//!
//! Iterations: `TESSERA_CRASH_ITERS` (default 5); seed: `TESSERA_CRASH_SEED` (printed).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::ops::ControlFlow;
use std::process::{Command, Stdio};
use std::rc::Rc;

use common::*;
use serde_json::json;
use storage::WriteBatch;

const SEGMENT: u64 = 256 << 10;
const OPS_PER_BATCH: usize = 3;
/// Documents of every eleventh batch, logged in parts (see the module docs).
const OPS_PER_LARGE_BATCH: usize = 200;
const WRITERS: usize = 16;
const CHILD_DIR: &str = "TESSERA_CRASH_CHILD_DIR";
const CHILD_ITER: &str = "TESSERA_CRASH_CHILD_ITER";
const CHILD_SPLIT: &str = "TESSERA_CRASH_CHILD_SPLIT";
const SPLIT_WRITERS: usize = 64;

/// Documents in batch `n`.
fn ops_of(n: u64) -> usize {
    if n % 11 == 10 { OPS_PER_LARGE_BATCH } else { OPS_PER_BATCH }
}

fn batch(iter: u64, n: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    let pad =
        if ops_of(n) == OPS_PER_BATCH { usize::try_from(n % 7 * 50).expect("small") } else { 3000 };
    for k in 0..ops_of(n) {
        let id = format!("i{iter}-b{n}-{k}");
        let doc = json!({"iter": iter, "n": n, "k": k, "pad": "z".repeat(pad)});
        b = b.put("c", &id, shard_of(&id), None, doc);
    }
    b
}

/// The child: writes until killed.
fn child(dir: String, iter: u64, split: bool) {
    run_allowing_warnings(move || async move {
        let options = storage::FragmentOptions { split_waves: split, ..options(SEGMENT) };
        let f = Rc::new(open(std::path::Path::new(&dir), options).await);
        let next = Rc::new(std::cell::Cell::new(0u64));
        let mut tasks = Vec::new();
        for w in 0..if split { SPLIT_WRITERS } else { WRITERS } {
            let (f, next) = (f.clone(), next.clone());
            tasks.push(glommio::spawn_local(async move {
                // Bounded: the parent kills the child long before this ends.
                for _ in 0..100_000 {
                    let n = next.get();
                    next.set(n + 1);
                    f.apply(batch(iter, n)).await.expect("apply");
                    let pipelined = f.io_stats().pipelined;
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ack {n} {pipelined}").expect("stdout");
                    out.flush().expect("flush");
                    if w % 2 == 1 {
                        // Think time through the reactor (an arrival pattern, not a wait for
                        // anything): the next write arrives in another turn of the executor.
                        glommio::timer::sleep(std::time::Duration::from_micros(20)).await;
                    }
                }
            }));
        }
        for t in tasks {
            t.await;
        }
    });
}

// Checks durability and atomicity across SIGKILL, over several kill points.
#[test]
fn sigkill_during_writes() {
    crash_test("sigkill_during_writes", false);
}

// The same with split waves of writers.
#[test]
fn sigkill_during_split_waves() {
    crash_test("sigkill_during_split_waves", true);
}

/// The parent's loop (or, in the re-invoked child, the writer).
fn crash_test(name: &str, split: bool) {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let iter = std::env::var(CHILD_ITER).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        child(dir, iter, std::env::var(CHILD_SPLIT).is_ok());
        return;
    }
    let iters: u64 =
        std::env::var("TESSERA_CRASH_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let seed: u64 =
        std::env::var("TESSERA_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    println!("crash test: {iters} iterations, seed {seed} (TESSERA_CRASH_SEED)");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut acked_all: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut torn_total = 0;
    let mut pipelined_total = 0;
    let mut unfinished_total = 0;
    for iter in 0..iters {
        let kill_after = 1 + rng.below(400);
        let mut command = Command::new(std::env::current_exe().expect("exe"));
        command
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir.path())
            .env(CHILD_ITER, iter.to_string());
        if split {
            command.env(CHILD_SPLIT, "1");
        }
        let mut child =
            command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn child");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut acked = BTreeSet::new();
        let mut pipelined = 0;
        let mut record = |line: &str, acked: &mut BTreeSet<u64>| {
            if let Some(rest) = line.strip_prefix("ack ") {
                let mut words = rest.split(' ');
                acked.insert(words.next().and_then(|n| n.parse().ok()).expect("ack number"));
                let p: u64 = words.next().and_then(|p| p.parse().ok()).expect("pipelined");
                pipelined = pipelined.max(p);
            }
        };
        while let Some(Ok(line)) = lines.next() {
            record(&line, &mut acked);
            if acked.len() as u64 >= kill_after {
                break;
            }
        }
        // A random moment after that acknowledgement (up to 3 ms: a few chunks), so the kill
        // is not always right behind a completed chunk.
        std::thread::sleep(std::time::Duration::from_micros(rng.below(3000)));
        child.kill().expect("SIGKILL");
        // Acknowledgements already in the pipe count too.
        for line in lines.map_while(Result::ok) {
            record(&line, &mut acked);
        }
        pipelined_total += pipelined;
        child.wait().expect("reap");
        acked_all.insert(iter, acked);
        let path = dir.path().to_path_buf();
        unfinished_total +=
            storage::verify_dir(&path, FRAGMENT).expect("verify").unfinished_batches;
        let expected = acked_all.clone();
        torn_total += run_allowing_warnings(move || async move {
            let f = open(&path, options(SEGMENT)).await;
            // Every acknowledged batch, whole and right.
            for (iter, acked) in &expected {
                for n in acked {
                    for k in 0..ops_of(*n) {
                        let id = format!("i{iter}-b{n}-{k}");
                        let d = f
                            .get("c", &id)
                            .unwrap_or_else(|| panic!("acknowledged {id} lost (seed {seed})"));
                        assert_eq!(d.doc().to_serde()["n"], json!(n));
                    }
                }
            }
            // No batch partly visible.
            let mut groups: BTreeMap<String, usize> = BTreeMap::new();
            f.scan("c", router::ShardRange::ALL, |d| {
                let id = d.id();
                let batch = id.rsplit_once('-').map(|(b, _)| b.to_owned()).expect("id shape");
                *groups.entry(batch).or_default() += 1;
                ControlFlow::Continue(())
            });
            for (batch, count) in groups {
                let n: u64 = batch
                    .rsplit_once("-b")
                    .and_then(|(_, n)| n.parse().ok())
                    .expect("batch number");
                assert_eq!(count, ops_of(n), "batch {batch} partly visible (seed {seed})");
            }
            let torn = f.stats().torn_tails;
            f.close().await;
            torn
        });
    }
    println!(
        "crash test ({name}): {iters} kills, {torn_total} torn tails truncated, \
         {unfinished_total} batches cut off between their parts dropped, \
         {pipelined_total} chunks started behind another before the kills"
    );
}

//! Storage benchmarks: raw 4 KiB write + fdatasync latency (the reference), durable 1 KiB
//! writes with 1, 16 and 256 concurrent writers on one fragment (throughput and p50/p99
//! acknowledgement latency), point reads per second on one core, and scan rate.
//!
//! Run: `cargo bench -p storage --bench log` (data under $TMPDIR, which must be a real disk).
//! Seconds per write run: `TESSERA_BENCH_SECONDS` (default 5). Writer counts:
//! `TESSERA_BENCH_WRITERS` (comma-separated, default `1,16,256`). `TESSERA_BENCH_WRITES=N`
//! makes each write run stop after N writes in all instead of after a time (fixed work, for
//! timing the whole process); `-- ack` runs only the write runs, without the raw reference;
//! `-- paths` compares the two chunk I/O paths (io_uring, blocking thread) op by op, then gives
//! each path's machine CPU per operation in runs of its own, beside a plain thread's; `-- grow`
//! measures the executor CPU of each batch while the index grows (`TESSERA_BENCH_GROW_DOCS`
//! new documents, default 3,000,000).
//! `TESSERA_BENCH_RATES` (comma-separated writes/s, e.g. `100000,200000`) adds, after each
//! writer count's run, one paced run per rate: the writers (at most that many writes in flight)
//! offer the rate, the k-th write is due at `start + k / rate`, and its acknowledgement latency
//! counts from when it was due, not from when a writer got to it, so a run that falls behind
//! shows the wait (no coordinated omission). A closed run (each writer writes again at once)
//! measures the most the fragment takes; its latency is then what Little's law says, writers
//! divided by throughput. `TESSERA_BENCH_PACE_TICK_US` sets how often the pacer releases the
//! writes that fell due (default 50).
//! `-- ceiling` serves the paced runs' load (`TESSERA_BENCH_RATES`, default 100,000/s) with
//! no log at all, two plain threads writing and fdatasyncing what fell due (`common/ceiling.rs`):
//! the floor this disk puts under the log's acknowledgement latency.
//! `TESSERA_BENCH_SYNCS=N` gives the write runs' fragment a sync gate of N permits (the node's
//! `--max-syncs-per-executor`): with 1, one chunk at a time is written and synced instead of
//! `CHUNKS_IN_FLIGHT_MAX`.
//! `TESSERA_BENCH_READ_SEGMENT_BYTES=N` sets the point reads' and scans' segment size (default
//! 1 GiB: every read from the active segment, staged in memory; smaller, most reads go through
//! sealed segments' file mappings).
//! `TESSERA_BENCH_SEGMENT_BYTES=N` sets the write runs' segment size (default 1 GiB, so a run
//! does not roll; the node's default is 64 MiB). Every segment but the first of a fragment
//! stages its chunks in pages the previous one handed on, so with 1 GiB segments every byte a
//! run writes lands in a freshly zeroed page (`segment`'s module comment).
//! `TESSERA_BENCH_SPLIT_WAVES=1` opens the write runs' fragments with
//! `FragmentOptions::split_waves` (default off). `TESSERA_BENCH_CHUNK_IO=ring` sends their
//! chunks through io_uring (`FragmentOptions::chunk_io`, `ChunkIo::Ring`) instead of the
//! default blocking-thread job. Allocator: mimalloc, as the node's binary;
//! transparent huge pages only in the staged segments (`storage::hugepages`), as the node's,
//! unless `TESSERA_BENCH_THP=on` (the system's setting). The executor is pinned to CPU 0
//! unless `TESSERA_BENCH_PIN=off`. `TESSERA_BENCH_SPIN_US=N` lets the executor spin N µs
//! before it parks (glommio's `spin_before_park`; default: it parks at once).

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use router::{FragmentId, ShardId, ShardRange};
use serde_json::json;
use storage::{Disk, DmaDisk, Fragment, FragmentOptions, WriteBatch};

#[path = "common/ceiling.rs"]
mod ceiling;
#[path = "common/machine_cpu.rs"]
mod machine_cpu;

/// mimalloc, as the node's binary (main `75b36a4`): the write path's allocations are part of
/// its CPU per write. Transparent huge pages only for the staged segments, as the node's,
/// unless `TESSERA_BENCH_THP=on` (see `main`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The park watchdog's heartbeat period for the bench (it checks every 4 periods, 20 ms, like
/// the node's); the bench runs no heartbeat, so each check signals its executor.
const BENCH_WATCHDOG_TICK: Duration = Duration::from_millis(5);

const SEGMENT_BYTES: u64 = 1 << 30;
const DOC_PAD_BYTES: usize = 1000;

fn shard_of(key: &str) -> ShardId {
    let h = key.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    ShardId::from_u64_mod(h)
}

/// CPU time of this thread, in seconds: the machine is shared, so rates are also reported per
/// CPU-second of the executor thread, which wall time on a busy machine understates.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn micros(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// The reference: 4 KiB O_DIRECT write + fdatasync through the same I/O path as the log
/// (`storage::DmaDisk`, so off glommio's IOPOLL ring as segment writes are; a plain glommio
/// `DmaFile` opened first would put this thread's writes to the device on that ring, where the
/// executor busy-polls while a write is in flight).
async fn raw_fdatasync(dir: &std::path::Path) {
    let path = dir.join("raw.dat");
    let file = DmaDisk.create(&path).await.expect("open raw");
    let region = preallocated(&*file).await;
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    let n = 6000u64;
    let origin = Instant::now();
    // (start, duration) of each write + fdatasync, back to back.
    let mut spans = Vec::new();
    for i in 0..n {
        let mut buf = file.alloc(4096);
        buf.as_bytes_mut().fill(u8::try_from(i % 251).unwrap_or(0));
        let t = Instant::now();
        file.write_at(buf, (i * 4096) % region).await.expect("write");
        file.fdatasync().await.expect("fdatasync");
        let took = t.elapsed();
        h.record(nanos(took)).expect("record");
        spans.push((t.duration_since(origin), took));
    }
    println!(
        "raw 4KiB write+fdatasync (preallocated): n={n} p50={:.0}us p99={:.0}us max={:.0}us",
        micros(&h, 0.5),
        micros(&h, 0.99),
        h.max() as f64 / 1000.0
    );
    let g = group_commit_view(&spans);
    println!(
        "  the same, as writes arriving at any instant see it (the fdatasync in flight, then their own): p50={:.0}us p99={:.0}us p99.9={:.0}us",
        micros(&g, 0.5),
        micros(&g, 0.99),
        micros(&g, 0.999)
    );
    file.close().await.expect("close");
    std::fs::remove_file(&path).expect("remove raw");
}

/// What the back-to-back write + fdatasync `spans` (start, duration) would mean to writes
/// arriving at a steady rate: each instant of the run (every `GROUP_VIEW_STEP`) is a write
/// that waits for the write + fdatasync in flight to end, then for the next one, its own: the
/// ack of an ideal group commit with one fdatasync in flight and no CPU cost. Unlike the
/// per-operation p99, this weighs a slow fdatasync by how long it lasts, which is how a stream
/// of writes meets it: one 5 ms fdatasync among 3,000 is one slow sample, but at 100,000
/// writes/s it holds up 500 writes.
fn group_commit_view(spans: &[(Duration, Duration)]) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    let (Some(first), Some(last)) = (spans.first(), spans.len().checked_sub(1)) else {
        return h;
    };
    let end = spans.get(last).map_or(first.0, |s| s.0);
    let mut t = first.0;
    while t < end {
        // The last span starting at or before t, and the one after it.
        let i = spans.partition_point(|s| s.0 <= t).saturating_sub(1);
        if let (Some(cur), Some(next)) = (spans.get(i), spans.get(i + 1)) {
            let in_flight = (cur.0 + cur.1).saturating_sub(t);
            h.record(nanos(in_flight + next.1)).expect("record");
        }
        t += GROUP_VIEW_STEP;
    }
    h
}

/// The spacing of the instants [`group_commit_view`] samples.
const GROUP_VIEW_STEP: Duration = Duration::from_micros(5);

/// The two I/O paths a chunk can take, one 4 KiB write + fdatasync at a time, alternating so
/// both see the same disk: glommio's io_uring (`write_at` then `fdatasync`, the raw reference)
/// and glommio's blocking thread (`write_and_sync`, what `DmaDisk` does for the log's chunks).
async fn io_paths(dir: &std::path::Path) {
    use storage::ChunkIo;
    let path = dir.join("paths.dat");
    let file = DmaDisk.create(&path).await.expect("open paths");
    let region = preallocated(&*file).await;
    let mut ring = Histogram::<u64>::new(3).expect("histogram");
    let mut thread = Histogram::<u64>::new(3).expect("histogram");
    let n = 3000u64;
    for i in 0..2 * n {
        let (how, h) =
            if i % 2 == 0 { (ChunkIo::Ring, &mut ring) } else { (ChunkIo::Now, &mut thread) };
        h.record(nanos(write_4k(&*file, i, region, how).await)).expect("record");
    }
    for (name, h) in
        [("io_uring write+fdatasync", &ring), ("blocking-thread write_and_sync", &thread)]
    {
        println!(
            "4KiB {name}, alternating: n={n} p50={:.0}us p99={:.0}us max={:.0}us",
            micros(h, 0.5),
            micros(h, 0.99),
            h.max() as f64 / 1000.0
        );
    }
    // The machine's CPU per operation of each path, in runs of its own (the alternating run
    // cannot split it): what the executor, io_uring's workers, the blocking thread and the
    // kernel spend on one write + fdatasync. A plain thread doing the same calls is the floor.
    for (name, how) in [
        ("io_uring write+fdatasync", Some(ChunkIo::Ring)),
        ("blocking-thread write_and_sync", Some(ChunkIo::Now)),
        ("plain thread", None),
    ] {
        let mut h = Histogram::<u64>::new(3).expect("histogram");
        let before = machine_cpu::busy_ticks();
        let began = Instant::now();
        if let Some(how) = how {
            for i in 0..n {
                h.record(nanos(write_4k(&*file, i, region, how).await)).expect("record");
            }
        } else {
            let path = path.clone();
            h = std::thread::spawn(move || plain_write_and_sync(&path, n, region))
                .join()
                .expect("plain thread");
        }
        let took = began.elapsed();
        let busy = machine_cpu::busy_ticks().saturating_sub(before);
        println!(
            "4KiB {name}, {n} in a row: p50={:.0}us p99={:.0}us, machine CPU {:.0}us/op over {:.2}s",
            micros(&h, 0.5),
            micros(&h, 0.99),
            busy as f64 * 1e6 / machine_cpu::ticks_per_second() / n as f64,
            took.as_secs_f64()
        );
    }
    file.close().await.expect("close");
    std::fs::remove_file(&path).expect("remove paths");
}

/// Zero-fills the first 64 MiB of `file` and syncs it, as segments are preallocated; returns
/// that size, the region the 4 KiB writes cycle over.
async fn preallocated(file: &dyn storage::disk::DiskFile) -> u64 {
    const REGION: usize = 64 << 20;
    file.write_zeros_now(0, REGION).await.expect("fill");
    file.fdatasync().await.expect("sync");
    REGION as u64
}

/// The `i`-th 4 KiB write + fdatasync of a path run, at its place in the first `region` bytes,
/// the way `how` says (`ChunkIo::Ring`: io_uring write, then io_uring fdatasync; `ChunkIo::Now`:
/// one job on glommio's blocking thread); returns how long it took.
async fn write_4k(
    file: &dyn storage::disk::DiskFile,
    i: u64,
    region: u64,
    how: storage::ChunkIo,
) -> Duration {
    let mut buf = file.alloc(4096);
    buf.as_bytes_mut().fill(u8::try_from(i % 251).unwrap_or(0));
    let t = Instant::now();
    file.write_and_sync(buf, (i * 4096) % region, how).await.expect("write and fdatasync");
    t.elapsed()
}

/// `n` 4 KiB `pwrite` + `fdatasync` pairs from this (plain) thread, O_DIRECT, over the first
/// `region` bytes of `path`: the floor for what a chunk's I/O costs.
fn plain_write_and_sync(path: &std::path::Path, n: u64, region: u64) -> Histogram<u64> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("open O_DIRECT");
    #[repr(C, align(4096))]
    struct Block([u8; 4096]);
    let mut block = Box::new(Block([0; 4096]));
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    for i in 0..n {
        block.0.fill(u8::try_from(i % 251).unwrap_or(0));
        let t = Instant::now();
        file.write_all_at(&block.0, (i * 4096) % region).expect("pwrite");
        file.sync_data().expect("fdatasync");
        h.record(nanos(t.elapsed())).expect("record");
    }
    h
}

/// How the writers of a run issue their writes.
#[derive(Clone, Copy, Debug)]
enum Load {
    /// Each writer writes again as soon as its last write is acknowledged.
    Closed,
    /// The writers together offer this many writes per second (see the module docs).
    Paced(f64),
}

/// A count (bytes, microseconds) from the environment variable `name`, or `default` when it
/// is not set.
fn number_from_env(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| {
        v.parse().unwrap_or_else(|_| panic!("{name}={v:?}: not a whole number"))
    })
}

/// When the `k`-th write of a paced run is due.
fn due(start: Instant, rate: f64, k: u64) -> Instant {
    start + Duration::from_secs_f64(k as f64 / rate)
}

/// Writes of a run offering `rate` that fall due within `seconds` of its start, the first at
/// the start itself not counted. (The float is finite, positive and far below 2^64: the bench
/// parses rates as positive finite numbers and runs for seconds.)
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn writes_within(rate: f64, seconds: f64) -> u64 {
    (rate * seconds).floor() as u64
}

/// How often a paced run's pacer hands out the writes that fell due. One timer for the run,
/// not one per write: 256 writers each sleeping on a timer of its own cost more executor CPU
/// than the writes (a first version of this bench: 0.79 of a core at 100,000 writes/s).
/// `TESSERA_BENCH_PACE_TICK_US` sets another: the tick shares the executor with the log it
/// measures (session 31: at 100,000 writes/s the executor spent 4.18-4.31 s of CPU per 5 s run
/// with this tick, 3.31-3.35 s with 200 us), while a longer tick releases each write later
/// after it fell due, which its latency counts.
const PACE_TICK: Duration = Duration::from_micros(50);

fn pace_tick() -> Duration {
    std::env::var("TESSERA_BENCH_PACE_TICK_US").map_or(PACE_TICK, |v| match v.parse::<u64>() {
        Ok(us) if us > 0 => Duration::from_micros(us),
        _ => panic!("TESSERA_BENCH_PACE_TICK_US={v:?}: not a positive number of microseconds"),
    })
}

/// A paced run's due writes. They fall due in order, so a count stands for them: the pacer
/// releases each write (a permit of `ready`) once it is due, and a writer takes the next
/// number; a number past `total` (the pacer's last release, one per writer) ends the writer.
struct Tickets {
    next: std::cell::Cell<u64>,
    total: u64,
    ready: glommio::sync::Semaphore,
}

impl Tickets {
    fn new(total: u64) -> Tickets {
        Tickets { next: std::cell::Cell::new(0), total, ready: glommio::sync::Semaphore::new(0) }
    }

    async fn next(&self) -> Option<u64> {
        self.ready.acquire(1).await.ok()?;
        let k = self.next.get();
        self.next.set(k + 1);
        (k < self.total).then_some(k)
    }

    /// Releases the writes of a run offering `rate` from `start`, each once it is due, then
    /// one end for each of `writers`.
    async fn pace(&self, start: Instant, rate: f64, writers: usize) {
        let tick = pace_tick();
        let mut released = 0u64;
        while released < self.total {
            let due_now = (writes_within(rate, start.elapsed().as_secs_f64()) + 1).min(self.total);
            if due_now > released {
                self.ready.signal(due_now - released);
                released = due_now;
            }
            if released < self.total {
                glommio::timer::sleep(tick).await;
            }
        }
        self.ready.signal(writers as u64);
    }
}

async fn durable_writes(
    dir: &std::path::Path,
    writers: usize,
    load: Load,
    seconds: u64,
    limit: Option<u64>,
) {
    let fdir = dir.join(format!("w{writers}"));
    let segment_bytes = number_from_env("TESSERA_BENCH_SEGMENT_BYTES", SEGMENT_BYTES);
    let options = FragmentOptions {
        segment_bytes,
        compact_dead_bytes_min: u64::MAX,
        split_waves: std::env::var("TESSERA_BENCH_SPLIT_WAVES").is_ok_and(|v| v == "1"),
        sync_gate: std::env::var("TESSERA_BENCH_SYNCS").ok().map(|v| {
            let n = v.parse().unwrap_or_else(|_| panic!("TESSERA_BENCH_SYNCS={v:?}: not a count"));
            storage::SyncGate::new(n).unwrap_or_else(|e| panic!("TESSERA_BENCH_SYNCS: {e}"))
        }),
        chunk_io: match std::env::var("TESSERA_BENCH_CHUNK_IO").as_deref() {
            Ok("ring") => storage::ChunkIo::Ring,
            Ok("thread") | Err(_) => storage::ChunkIo::Now,
            Ok(other) => panic!("TESSERA_BENCH_CHUNK_IO={other:?}: ring or thread"),
        },
        ..FragmentOptions::default()
    };
    let f = Rc::new(
        Fragment::open(&fdir, FragmentId::new(1), ShardRange::ALL, options).await.expect("open"),
    );
    let hist = Rc::new(RefCell::new(Histogram::<u64>::new(3).expect("histogram")));
    // The acks that came while the spare segment was being zero-filled.
    let filling = Rc::new(RefCell::new(Histogram::<u64>::new(3).expect("histogram")));
    let pad = "x".repeat(DOC_PAD_BYTES);
    // Acks of at least SLOW_ACK: when the write started (or was due) and how long it took.
    let slow = Rc::new(RefCell::new(Vec::<(Duration, Duration)>::new()));
    let start = Instant::now();
    let cpu_start = thread_cpu_seconds();
    let deadline = start + Duration::from_secs(seconds);
    let started = Rc::new(std::cell::Cell::new(0u64));
    let (tickets, pacer) = match load {
        Load::Closed => (Rc::new(Tickets::new(0)), None),
        Load::Paced(rate) => {
            let total = limit.unwrap_or(writes_within(rate, seconds as f64));
            let tickets = Rc::new(Tickets::new(total));
            let pacing = tickets.clone();
            let pacer = glommio::spawn_local(async move {
                pacing.pace(start, rate, writers).await;
            });
            (tickets, Some(pacer))
        }
    };
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (f, hist, pad, started) = (f.clone(), hist.clone(), pad.clone(), started.clone());
        let (filling, tickets, slow) = (filling.clone(), tickets.clone(), slow.clone());
        tasks.push(glommio::spawn_local(async move {
            let mut n = 0u64;
            loop {
                // When the write counts from: now (closed), or when it was due (paced).
                let from = match load {
                    Load::Closed => {
                        let k = started.get();
                        match limit {
                            Some(limit) if k >= limit => break,
                            Some(_) => started.set(k + 1),
                            None if Instant::now() >= deadline => break,
                            None => {}
                        }
                        Instant::now()
                    }
                    Load::Paced(rate) => match tickets.next().await {
                        Some(k) => due(start, rate, k),
                        None => break,
                    },
                };
                let id = format!("w{w}-{n}");
                let b = WriteBatch::new().put(
                    "bench",
                    &id,
                    shard_of(&id),
                    None,
                    json!({"n": n, "pad": pad}),
                );
                f.apply(b).await.expect("apply");
                let lat = from.elapsed();
                hist.borrow_mut().record(nanos(lat)).expect("record");
                if lat >= SLOW_ACK {
                    slow.borrow_mut().push((from.duration_since(start), lat));
                }
                if f.spare_filling() {
                    filling.borrow_mut().record(nanos(lat)).expect("record");
                }
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await;
    }
    if let Some(p) = pacer {
        p.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_seconds() - cpu_start;
    {
        let h = hist.borrow();
        let how = match load {
            Load::Closed => String::new(),
            Load::Paced(rate) => format!(" offering {rate:.0}/s"),
        };
        println!(
            "durable 1KiB writes, {writers:>3} writers{how}: {:.0} writes/s wall, {:.0} per CPU-second ({total} in {elapsed:.2}s, cpu {cpu:.2}s) ack p50={:.0}us p99={:.0}us max={:.0}us",
            total as f64 / elapsed,
            total as f64 / cpu,
            micros(&h, 0.5),
            micros(&h, 0.99),
            h.max() as f64 / 1000.0
        );
    }
    let io = f.io_stats();
    let stats = f.stats();
    println!(
        "  log bytes per write {:.0}; group commits: {} fdatasyncs, {:.1} writes each, {} pipelined (started behind another), rolls waiting for a late spare {}, without a spare {}",
        stats.live_bytes as f64 / stats.docs.max(1) as f64,
        io.fdatasyncs,
        io.writes_synced as f64 / io.fdatasyncs.max(1) as f64,
        io.pipelined,
        io.spare_late,
        io.spare_missed
    );
    let (all, during) = (&io.fdatasync_micros, &io.fdatasync_micros_filling);
    let rest = all.count() - during.count();
    println!(
        "  chunk write+fdatasync mean: {:.0}us while a spare segment was zero-filled ({} chunks), {:.0}us otherwise ({rest} chunks)",
        during.sum() as f64 / during.count().max(1) as f64,
        during.count(),
        (all.sum() - during.sum()) as f64 / rest.max(1) as f64,
    );
    // Where the group commits' own time went (`IoStats::chunk_phases`): the disk's write and
    // fdatasync against the hand-offs to and from the blocking thread.
    let phases: Vec<String> = io
        .chunk_phases
        .named()
        .iter()
        .map(|(name, h)| {
            let within_1ms =
                h.bounds().iter().position(|&b| b == 1_000).map_or(0, |i| h.cumulative()[i]);
            format!(
                "{name} {:.0}us ({} over 1 ms)",
                h.sum() as f64 / h.count().max(1) as f64,
                h.count() - within_1ms
            )
        })
        .collect();
    println!("  chunk phases, mean: {}", phases.join(", "));
    {
        let (h, fh) = (hist.borrow(), filling.borrow());
        println!(
            "  acks while a spare was zero-filled: {} of {}, p50={:.0}us p99={:.0}us",
            fh.len(),
            h.len(),
            micros(&fh, 0.5),
            micros(&fh, 0.99)
        );
    }
    print_slow_episodes(&mut slow.borrow_mut());
    Rc::try_unwrap(f).expect("sole owner").close().await;
    std::fs::remove_dir_all(&fdir).expect("cleanup");
}

/// An ack at least this slow is listed by episode (`print_slow_episodes`).
const SLOW_ACK: Duration = Duration::from_millis(1);

/// Slow acks whose writes started within this of each other belong to one episode.
const SLOW_EPISODE_GAP: Duration = Duration::from_millis(5);

/// Slow acks whose writes started close together.
struct Episode {
    first: Duration,
    last: Duration,
    acks: u64,
    worst: Duration,
}

/// Groups the slow acks into episodes (writes started close together) and prints how many
/// there were and the five that held the most: a few long episodes are stalls, many short
/// ones queueing.
fn print_slow_episodes(slow: &mut [(Duration, Duration)]) {
    slow.sort();
    let mut episodes: Vec<Episode> = Vec::new();
    for &(at, lat) in slow.iter() {
        match episodes.last_mut() {
            Some(e) if at.saturating_sub(e.last) <= SLOW_EPISODE_GAP => {
                e.last = at;
                e.acks += 1;
                e.worst = e.worst.max(lat);
            }
            _ => episodes.push(Episode { first: at, last: at, acks: 1, worst: lat }),
        }
    }
    println!(
        "  acks of {} ms or more: {} in {} episodes (writes started within {} ms of each other)",
        SLOW_ACK.as_millis(),
        slow.len(),
        episodes.len(),
        SLOW_EPISODE_GAP.as_millis()
    );
    episodes.sort_by_key(|e| std::cmp::Reverse(e.acks));
    for e in episodes.iter().take(5) {
        println!(
            "    at {:.3}s for {:.1} ms: {} acks, worst {:.1} ms",
            e.first.as_secs_f64(),
            (e.last - e.first).as_secs_f64() * 1000.0,
            e.acks,
            e.worst.as_secs_f64() * 1000.0
        );
    }
}

async fn reads_and_scans(dir: &std::path::Path) {
    let fdir = dir.join("reads");
    // One 1 GiB segment by default: every read from the staged (active) segment.
    let segment_bytes = number_from_env("TESSERA_BENCH_READ_SEGMENT_BYTES", SEGMENT_BYTES);
    let options = FragmentOptions {
        segment_bytes,
        compact_dead_bytes_min: u64::MAX,
        ..FragmentOptions::default()
    };
    let f =
        Fragment::open(&fdir, FragmentId::new(2), ShardRange::ALL, options).await.expect("open");
    let docs = 200_000u64;
    let pad = "y".repeat(DOC_PAD_BYTES);
    let mut n = 0;
    while n < docs {
        let mut b = WriteBatch::new();
        for _ in 0..256 {
            let id = format!("doc/{n}");
            b = b.put("r", &id, shard_of(&id), None, json!({"n": n, "pad": pad}));
            n += 1;
        }
        f.apply(b).await.expect("load");
    }
    // Ids in one contiguous arena, visited in order, so the benchmark's own id strings stay in
    // cache while the documents are looked up in a scattered order.
    let mut arena = String::new();
    let mut spans = Vec::with_capacity(usize::try_from(docs).unwrap_or(0));
    for i in 0..docs {
        let start = arena.len();
        std::fmt::Write::write_fmt(&mut arena, format_args!("doc/{}", (i * 7919) % docs))
            .expect("format");
        spans.push((start, arena.len()));
    }
    let ids: Vec<&str> = spans.iter().map(|&(s, e)| &arena[s..e]).collect();
    let rounds = 10;
    // Warm-up: fault every page of the mapping in once.
    let mut sum = 0i64;
    for id in &ids {
        sum += f.get("r", id).map_or(0, |d| i64::from(d.version().get() > 0));
    }
    let start = Instant::now();
    let cpu_start = thread_cpu_seconds();
    for _ in 0..rounds {
        for id in &ids {
            let d = f.get("r", id).expect("present");
            if let storage::ArchivedJsonValue::Object(m) = d.doc()
                && let Some(first) = m.first()
                && let storage::ArchivedJsonValue::Int(v) = &first.value
            {
                sum += v.to_native();
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_seconds() - cpu_start;
    let reads = docs * rounds;
    println!(
        "point reads (get + read one field), {docs} docs: {:.0} reads/s wall, {:.0} per CPU-second ({reads} in {elapsed:.2}s, cpu {cpu:.2}s, checksum {sum})",
        reads as f64 / elapsed,
        reads as f64 / cpu
    );
    let start = Instant::now();
    let cpu_start = thread_cpu_seconds();
    let mut count = 0u64;
    let mut bytes = 0u64;
    let scans = 5;
    for _ in 0..scans {
        f.scan("r", ShardRange::ALL, |d| {
            count += 1;
            if let storage::ArchivedJsonValue::Object(m) = d.doc() {
                bytes += m.len() as u64;
            }
            ControlFlow::Continue(())
        });
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_seconds() - cpu_start;
    println!(
        "scan (whole fragment, {docs} docs x {scans}, ~1.1 KB each): {:.0} docs/s wall, {:.0} per CPU-second (members seen {bytes})",
        count as f64 / elapsed,
        count as f64 / cpu
    );
    f.close().await;
    std::fs::remove_dir_all(&fdir).expect("cleanup");
}

/// The index's growth, measured in executor CPU (not wall time, so the machine's load does not
/// enter): `docs` new small documents in batches of `GROW_BATCH_OPS` puts, one batch at a time,
/// and the thread CPU each batch took (serializing it, and applying it to the index once
/// durable). A table that rehashes every entry at once shows as a few batches far above the
/// median (session 4: single stalls up to 104 ms).
async fn index_growth(dir: &std::path::Path, docs: u64) {
    const GROW_BATCH_OPS: u64 = 1024;
    let fdir = dir.join("grow");
    let options = FragmentOptions {
        segment_bytes: SEGMENT_BYTES,
        compact_dead_bytes_min: u64::MAX,
        ..FragmentOptions::default()
    };
    let f =
        Fragment::open(&fdir, FragmentId::new(3), ShardRange::ALL, options).await.expect("open");
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let (mut worst, mut worst_at) = (0.0f64, 0u64);
    let cpu_start = thread_cpu_seconds();
    let mut n = 0u64;
    while n < docs {
        let mut b = WriteBatch::new();
        for _ in 0..GROW_BATCH_OPS {
            let id = format!("g{n}");
            b = b.put("g", &id, shard_of(&id), None, json!({ "n": n }));
            n += 1;
        }
        let cpu = thread_cpu_seconds();
        f.apply(b).await.expect("apply");
        let took = thread_cpu_seconds() - cpu;
        hist.record(nanos(Duration::from_secs_f64(took))).expect("record");
        if took > worst {
            (worst, worst_at) = (took, n);
        }
    }
    println!(
        "index growth, {n} new docs in batches of {GROW_BATCH_OPS}: batch CPU p50={:.0}us p99={:.0}us max={:.0}us (at {worst_at} docs), cpu {:.2}s in all",
        micros(&hist, 0.5),
        micros(&hist, 0.99),
        worst * 1e6,
        thread_cpu_seconds() - cpu_start
    );
    f.close().await;
    std::fs::remove_dir_all(&fdir).expect("cleanup");
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it, and
    // must not spend a minute and a gigabyte of disk there.
    if !std::env::args().any(|a| a == "--bench") {
        println!("storage bench: skipped outside `cargo bench -p storage --bench log`");
        return;
    }
    // Huge pages only for the staged segments, as the node's binary (`storage::hugepages`): with
    // them on the index's large tables, the random inserts into a freshly doubled table fault
    // them all within a few waves: 0.1-0.5 s acks at each doubling on dev-2c (BENCHMARKS.md,
    // session 7, `s7-ack`). `TESSERA_BENCH_THP=on` leaves the system's setting in force.
    if std::env::var("TESSERA_BENCH_THP").map_or(true, |v| v != "on") {
        let got = storage::hugepages::only_where_advised().expect("huge page policy");
        println!("transparent huge pages: {got:?}");
    }
    let seconds: u64 =
        std::env::var("TESSERA_BENCH_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let writer_counts: Vec<usize> = std::env::var("TESSERA_BENCH_WRITERS")
        .ok()
        .map(|v| v.split(',').filter_map(|w| w.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 256]);
    let limit: Option<u64> =
        std::env::var("TESSERA_BENCH_WRITES").ok().and_then(|v| v.parse().ok());
    let rates: Vec<f64> = match std::env::var("TESSERA_BENCH_RATES") {
        Ok(v) if v.trim().is_empty() => Vec::new(),
        Ok(v) => v
            .split(',')
            .map(|r| match r.trim().parse::<f64>() {
                Ok(r) if r.is_finite() && r > 0.0 => r,
                _ => panic!("TESSERA_BENCH_RATES: {r:?} is not a positive number of writes/s"),
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let only: Option<String> = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    if only.as_deref() == Some("ceiling") {
        let dir = tempfile::tempdir().expect("tempdir");
        let rates = if rates.is_empty() { vec![100_000.0] } else { rates };
        ceiling::run(dir.path(), &rates, seconds);
        return;
    }
    // Under the park watchdog like the node's executors: glommio 0.9.0 can park this executor
    // with runnable tasks (`storage::park`), and one run of this bench once hung that way. No
    // heartbeat: its always-pending timer makes every park arm and cancel a timeout, which
    // costs a 1-writer run about a fifth of its CPU per write (BENCHMARKS.md, branch `park`),
    // so the watchdog, seeing no ticks, signals the executor every period instead.
    // `TESSERA_BENCH_PARK=off` runs without the watchdog, to measure what it costs.
    let park = std::env::var("TESSERA_BENCH_PARK").map_or(true, |v| v != "off");
    let watchdog = storage::park::ParkWatchdog::start(BENCH_WATCHDOG_TICK).expect("watchdog");
    let bench_thread = storage::park::ExecutorThread {
        name: "storage-bench".to_owned(),
        builder: || {
            // Pinned to CPU 0 unless `TESSERA_BENCH_PIN=off` (the node's executors are
            // unbound). io_uring's io-wq workers, which run the ring path's fdatasyncs (the
            // raw reference's, and the log's with `TESSERA_BENCH_CHUNK_IO=ring`), take the
            // affinity of the ring's thread: pinned, they share CPU 0 with the executor.
            let placement = if std::env::var("TESSERA_BENCH_PIN").is_ok_and(|v| v == "off") {
                glommio::Placement::Unbound
            } else {
                glommio::Placement::Fixed(0)
            };
            let builder = glommio::LocalExecutorBuilder::new(placement).io_memory(1 << 20);
            let builder = match number_from_env("TESSERA_BENCH_SPIN_US", 0) {
                0 => builder,
                spin => builder.spin_before_park(Duration::from_micros(spin)),
            };
            builder
                // The log runs its chunks on glommio's blocking threads; for a pinned executor
                // glommio would pin them to the same CPU. The node's executors are unbound,
                // and so are their blocking threads, as many as here.
                .blocking_thread_pool_placement(glommio::PoolPlacement::Unbound(2))
        },
        cannot_start: |e| panic!("cannot build the executor: {e}"),
        watch: park.then(|| (watchdog.watcher(), std::sync::Arc::default())),
    };
    bench_thread
        .spawn(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let want = |name: &str| only.as_deref().is_none_or(|o| o == name);
            if want("raw") || want("writes") {
                raw_fdatasync(dir.path()).await;
            }
            if want("writes") || only.as_deref() == Some("ack") {
                for &writers in &writer_counts {
                    durable_writes(dir.path(), writers, Load::Closed, seconds, limit).await;
                    for &rate in &rates {
                        durable_writes(dir.path(), writers, Load::Paced(rate), seconds, limit)
                            .await;
                    }
                }
            }
            if want("writes") {
                raw_fdatasync(dir.path()).await;
            }
            if only.as_deref() == Some("grow") {
                let docs = std::env::var("TESSERA_BENCH_GROW_DOCS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(3_000_000);
                index_growth(dir.path(), docs).await;
            }
            if only.as_deref() == Some("paths") {
                io_paths(dir.path()).await;
            }
            if want("reads") {
                reads_and_scans(dir.path()).await;
            }
        })
        .expect("executor")
        .join()
        .expect("join");
    drop(watchdog);
}

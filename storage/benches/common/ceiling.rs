//! `log-bench ceiling`: what this disk allows a paced group commit, with no log in the way.
//!
//! The same offered load as the log bench's paced run (`TESSERA_BENCH_RATES`, each write due
//! at `start + k / rate`, its latency counted from when it was due), served by the least a
//! group commit can do: two plain threads (the log's `CHUNKS_IN_FLIGHT_MAX` chunks in flight),
//! each taking every write that fell due since the last chunk started, writing that many
//! records' bytes (`TESSERA_BENCH_CEILING_RECORD_BYTES`, default what the log bench's paced run
//! reports as its log bytes per write; chunks rounded up to 4 KiB blocks) in one O_DIRECT
//! `pwrite` at the file's end, then `fdatasync`. A write is acknowledged when its chunk
//! and every chunk before it are durable, as the log acknowledges. No executor, no index, no
//! records built, no hand-off: each number here is a floor under the log's on this disk.
//!
//! Each rate runs four times ([`Growth`]): into a file zero-filled before the run (space
//! prepared in advance, nothing else on the disk), then the three ways a log can grow while it
//! is written: beside a spare-segment fill (a third thread appending zeros to fresh 64 MiB
//! files in 256 KiB pieces, two zero bytes per log byte, each file fdatasynced when full: the
//! log's own way, `SPARE_FILL_BYTES_PER_LOG_BYTE`), appending to an empty file (every
//! fdatasync commits a size change and new blocks), and into `fallocate`d unwritten extents
//! (every fdatasync commits their conversion). The raw 4 KiB write + fdatasync reference
//! (`plain_write_and_sync`, a plain thread) is taken before and after, in the same process.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::{due, micros, nanos, plain_write_and_sync, writes_within};

/// Log bytes per write when `TESSERA_BENCH_CEILING_RECORD_BYTES` is not set: what the log
/// bench's paced run prints as its `log bytes per write` (a 1 KiB document, its id and the
/// frame; session 31). Each chunk is then rounded up to whole 4 KiB blocks, as the log's are.
const RECORD_BYTES_DEFAULT: u64 = 1_125;
/// The spare fill's piece, file size and zero bytes per log byte, as the log's defaults
/// (`SPARE_FILL_PIECE_BYTES`, the node's 64 MiB segments, `SPARE_FILL_BYTES_PER_LOG_BYTE`).
const FILL_PIECE_BYTES: usize = 256 << 10;
const FILL_FILE_BYTES: u64 = 64 << 20;
const FILL_BYTES_PER_LOG_BYTE: u64 = 2;
const BLOCK: u64 = 4096;
/// The most space zero-filled before a run (see `paced`).
const PREPARED_RING_BYTES: u64 = 1 << 30;

fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("a length in memory")
}

/// An O_DIRECT buffer, 4 KiB-aligned (rkyv's aligned vector, as the log's staging buffer).
type Aligned = rkyv::util::AlignedVec<4096>;

/// `len` bytes of `byte` in an O_DIRECT buffer.
fn aligned(len: usize, byte: u8) -> Aligned {
    let mut buf = Aligned::with_capacity(len);
    buf.resize(len, byte);
    buf
}

/// The first `len` bytes of `buf`.
fn head(buf: &Aligned, len: usize) -> &[u8] {
    buf.get(..len).expect("a write within its buffer")
}

fn open_direct(path: &Path, create: bool) -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .create(create)
        .truncate(create)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("open O_DIRECT")
}

/// Zero-fills the first `bytes` of `path` (created) and fdatasyncs it.
fn zero_filled(path: &Path, bytes: u64) -> std::fs::File {
    let file = open_direct(path, true);
    let zeros = aligned(1 << 20, 0);
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(1 << 20);
        file.write_all_at(head(&zeros, to_usize(n)), at).expect("zero-fill");
        at += n;
    }
    file.sync_data().expect("fdatasync");
    file
}

/// How the ideal group commit's file gets its space.
#[derive(Clone, Copy, Debug)]
enum Growth {
    /// Zero-filled before the run; nothing else written during it.
    Prepared,
    /// Zero-filled before the run, with a spare fill beside it (the log's way).
    SpareFill,
    /// An empty file, extended by each chunk.
    Append,
    /// `fallocate`d before the run (unwritten extents), converted by each chunk.
    Fallocate,
}

impl Growth {
    const ALL: [Growth; 4] =
        [Growth::Prepared, Growth::SpareFill, Growth::Append, Growth::Fallocate];

    fn name(self) -> &'static str {
        match self {
            Growth::Prepared => "into space zero-filled before the run",
            Growth::SpareFill => "beside a spare fill",
            Growth::Append => "appending",
            Growth::Fallocate => "into fallocated extents",
        }
    }
}

/// One chunk: writes `lo..hi` (by due number), durable at `done`.
struct Chunk {
    lo: u64,
    hi: u64,
    done: Instant,
}

/// What the two chunk threads share: the next write to take, where the next chunk goes, and
/// the chunks in the order they were taken (the log's order).
struct Taking {
    next: u64,
    offset: u64,
    chunks: Vec<Option<Chunk>>,
}

/// Reduces the timer slack of this thread to 1 µs, so a chunk thread waiting for the next
/// due write wakes when it falls due, not up to 50 µs later.
fn tight_timer() {
    // SAFETY: prctl with PR_SET_TIMERSLACK takes plain integers and changes only this
    // thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000, 0, 0, 0) };
}

/// One paced run of the ideal group commit, its file growing as `growth` says; returns the
/// ack histogram and the number of chunks.
fn paced(
    dir: &Path,
    rate: f64,
    seconds: u64,
    record: u64,
    growth: Growth,
) -> (Histogram<u64>, usize) {
    let total = writes_within(rate, seconds as f64);
    let max_chunk = storage::limits::GROUP_COMMIT_BATCH_BYTES_MAX as u64;
    // Room for every write, each chunk rounded up to a block: at most one block more per
    // write. Zero-filled space is a ring of at most `PREPARED_RING_BYTES` (a chunk that would
    // cross its end starts again at 0, over blocks written before: still prepared space), so a
    // run does not zero-fill gigabytes first; fallocated space takes the whole bound (no bytes
    // are written for it, and wrapping would turn its writes into overwrites).
    let log_bytes = (total * record).div_ceil(BLOCK) * BLOCK + total * BLOCK;
    let ring = match growth {
        Growth::Prepared | Growth::SpareFill => log_bytes.min(PREPARED_RING_BYTES),
        Growth::Append | Growth::Fallocate => log_bytes,
    };
    let log_path = dir.join("ceiling-log.dat");
    let log = Arc::new(match growth {
        Growth::Prepared | Growth::SpareFill => zero_filled(&log_path, ring),
        Growth::Append => open_direct(&log_path, true),
        Growth::Fallocate => {
            use std::os::fd::AsRawFd;
            let f = open_direct(&log_path, true);
            let len = libc::off_t::try_from(log_bytes).expect("file size");
            // SAFETY: fallocate takes the open descriptor and plain integers.
            let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) };
            assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
            f.sync_all().expect("fsync the fallocated file");
            f
        }
    });
    let taking = Arc::new(Mutex::new(Taking { next: 0, offset: 0, chunks: Vec::new() }));
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let filler = matches!(growth, Growth::SpareFill).then(|| {
        let (dir, written, stop) = (dir.to_path_buf(), written.clone(), stop.clone());
        std::thread::spawn(move || {
            let zeros = aligned(FILL_PIECE_BYTES, 0);
            let mut filled = 0u64;
            let mut files = 0u64;
            'files: while !stop.load(Ordering::Relaxed) {
                let path = dir.join(format!("ceiling-spare-{files}.dat"));
                files += 1;
                let file = open_direct(&path, true);
                let mut at = 0u64;
                while at < FILL_FILE_BYTES {
                    if stop.load(Ordering::Relaxed) {
                        break 'files;
                    }
                    if filled >= written.load(Ordering::Relaxed) * FILL_BYTES_PER_LOG_BYTE {
                        std::thread::sleep(Duration::from_micros(100));
                        continue;
                    }
                    file.write_all_at(head(&zeros, FILL_PIECE_BYTES), at).expect("fill");
                    at += FILL_PIECE_BYTES as u64;
                    filled += FILL_PIECE_BYTES as u64;
                }
                file.sync_data().expect("fdatasync the fill");
            }
            for f in 0..files {
                let _ = std::fs::remove_file(dir.join(format!("ceiling-spare-{f}.dat")));
            }
        })
    });
    let start = Instant::now();
    let threads: Vec<_> = (0..storage::limits::CHUNKS_IN_FLIGHT_MAX)
        .map(|t| {
            let (log, taking, written) = (log.clone(), taking.clone(), written.clone());
            std::thread::spawn(move || {
                tight_timer();
                let buf =
                    aligned(to_usize(max_chunk), b'a'.wrapping_add(u8::try_from(t).unwrap_or(0)));
                loop {
                    let now = Instant::now();
                    let due_now = (writes_within(rate, (now - start).as_secs_f64()) + 1).min(total);
                    let mut g = taking.lock().expect("lock");
                    if g.next >= total {
                        return;
                    }
                    if due_now <= g.next {
                        let wake = due(start, rate, g.next);
                        drop(g);
                        std::thread::sleep(wake.saturating_duration_since(now));
                        continue;
                    }
                    let lo = g.next;
                    let hi = due_now.min(lo + max_chunk / record);
                    let len = ((hi - lo) * record).div_ceil(BLOCK) * BLOCK;
                    if g.offset + len > ring {
                        g.offset = 0;
                    }
                    let (offset, seq) = (g.offset, g.chunks.len());
                    g.next = hi;
                    g.offset += len;
                    g.chunks.push(None);
                    drop(g);
                    log.write_all_at(head(&buf, to_usize(len)), offset).expect("pwrite");
                    log.sync_data().expect("fdatasync");
                    written.fetch_add(len, Ordering::Relaxed);
                    let done = Instant::now();
                    if let Some(slot) = taking.lock().expect("lock").chunks.get_mut(seq) {
                        *slot = Some(Chunk { lo, hi, done });
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("chunk thread");
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(f) = filler {
        f.join().expect("fill thread");
    }
    let taking = Arc::try_unwrap(taking).ok().expect("sole owner").into_inner().expect("lock");
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    let mut durable = start;
    let chunks = taking.chunks.len();
    for c in taking.chunks.into_iter().flatten() {
        // Acknowledged once this chunk and every one before it are durable.
        durable = durable.max(c.done);
        for k in c.lo..c.hi {
            h.record(nanos(durable.saturating_duration_since(due(start, rate, k))))
                .expect("record");
        }
    }
    drop(log);
    std::fs::remove_file(&log_path).expect("remove the ceiling log");
    (h, chunks)
}

/// `log-bench ceiling`: the raw reference, the ideal group commit paced at each rate in each
/// [`Growth`], the raw reference again.
pub fn run(dir: &Path, rates: &[f64], seconds: u64) {
    let record = std::env::var("TESSERA_BENCH_CEILING_RECORD_BYTES")
        .map_or(RECORD_BYTES_DEFAULT, |v| {
            v.parse().unwrap_or_else(|_| panic!("TESSERA_BENCH_CEILING_RECORD_BYTES={v:?}"))
        });
    let raw = |when: &str| {
        let path = dir.join("ceiling-raw.dat");
        drop(zero_filled(&path, 64 << 20));
        let h = plain_write_and_sync(&path, 6000, 64 << 20);
        std::fs::remove_file(&path).expect("remove raw");
        println!(
            "raw 4KiB write+fdatasync (plain thread, preallocated, {when}): p50={:.0}us p99={:.0}us max={:.0}us",
            micros(&h, 0.5),
            micros(&h, 0.99),
            h.max() as f64 / 1000.0
        );
        micros(&h, 0.99)
    };
    let before = raw("before");
    for &rate in rates {
        for growth in Growth::ALL {
            let (h, chunks) = paced(dir, rate, seconds, record, growth);
            println!(
                "ideal group commit, {record} B per write, offering {rate:.0}/s, {}: {} writes in {chunks} chunks, ack p50={:.0}us p99={:.0}us p99.9={:.0}us max={:.0}us ({:.1}x the raw p99 before)",
                growth.name(),
                h.len(),
                micros(&h, 0.5),
                micros(&h, 0.99),
                micros(&h, 0.999),
                h.max() as f64 / 1000.0,
                micros(&h, 0.99) / before
            );
        }
    }
    raw("after");
}

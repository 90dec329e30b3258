//! A fragment's own I/O counters: group commits (one write and one fdatasync each), the writes
//! each fdatasync covered, bytes appended, fdatasync latency and where each group commit's
//! time went ([`ChunkPhases`]). Kept in `Cell`s (a fragment never leaves its executor), read
//! through [`crate::Fragment::io_stats`].
//!
//! [`Histogram`] has fixed bucket bounds so histograms of different fragments and executors
//! merge by adding counts; node uses the same type for its statement and commit latencies.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use crate::disk::ChunkTimes;

/// Upper bounds (inclusive, microseconds) of the latency histogram buckets; one more bucket
/// (`+Inf`) takes the rest. Spans a page-cache fdatasync (tens of µs) to a stalled disk (s).
pub const LATENCY_BUCKETS_MICROS: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// Upper bounds (inclusive) of the group-commit batch size histogram: records per fdatasync.
pub const BATCH_BUCKETS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Counts of observations in fixed buckets, their number and their sum. Cumulative form (as
/// Prometheus wants it) is computed on export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    bounds: &'static [u64],
    /// Per bucket (not cumulative); the last is `+Inf`.
    counts: Vec<u64>,
    count: u64,
    sum: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [u64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len() + 1], count: 0, sum: 0 }
    }

    /// An empty latency histogram (microseconds, [`LATENCY_BUCKETS_MICROS`]).
    pub fn latency() -> Histogram {
        Histogram::new(&LATENCY_BUCKETS_MICROS)
    }

    /// Records one value.
    pub fn observe(&mut self, value: u64) {
        let i = self.bounds.partition_point(|&b| b < value);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
    }

    /// Records a duration in microseconds.
    pub fn observe_duration(&mut self, elapsed: Duration) {
        self.observe(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    /// Adds another histogram's counts. Histograms over different bounds are not merged (the
    /// other one is ignored): every histogram of one kind uses the same constant bounds.
    pub fn merge(&mut self, other: &Histogram) {
        if self.bounds != other.bounds {
            return;
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
    }

    /// The bucket upper bounds (without `+Inf`).
    pub fn bounds(&self) -> &'static [u64] {
        self.bounds
    }

    /// Cumulative counts per bound, then the total for `+Inf`.
    pub fn cumulative(&self) -> Vec<u64> {
        let mut total = 0;
        self.counts
            .iter()
            .map(|c| {
                total += c;
                total
            })
            .collect()
    }

    /// Observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the observed values.
    pub fn sum(&self) -> u64 {
        self.sum
    }
}

/// A snapshot of a fragment's I/O counters since open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoStats {
    /// Group commits: one O_DIRECT write and one fdatasync each.
    pub fdatasyncs: u64,
    /// Records (writes) made durable by those fdatasyncs.
    pub writes_synced: u64,
    /// Bytes written to the log by group commits (chunks, padding included).
    pub bytes_appended: u64,
    /// Records per fdatasync ([`BATCH_BUCKETS`]).
    pub batch_size: Histogram,
    /// Time of each write + fdatasync, microseconds ([`LATENCY_BUCKETS_MICROS`]).
    pub fdatasync_micros: Histogram,
    /// Group commits whose write started while the previous chunk's write or fdatasync was
    /// still under way (the pipeline's second chunk).
    pub pipelined: u64,
    /// Of `fdatasync_micros`: the group commits that completed while a spare segment's paced
    /// zero-fill was under way (its writes share the disk with the log's).
    pub fdatasync_micros_filling: Histogram,
    /// Segment rolls that found no spare (none started, or its fill failed) and wrote the new
    /// segment's zeros while writers waited.
    pub spare_missed: u64,
    /// Segment rolls that found the spare's paced zero-fill still under way and waited for
    /// the rest of it at full speed.
    pub spare_late: u64,
    /// Where each group commit's own time went: the disk's share against the executor's.
    pub chunk_phases: ChunkPhases,
}

/// Each group commit's time from its launch to the writer seeing its fdatasync end, in four
/// parts (microseconds, [`LATENCY_BUCKETS_MICROS`]); one observation each per group commit.
/// `write` and `fdatasync` are the disk's; `thread_wait` and `notice` the node's hand-offs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkPhases {
    /// Waiting for a blocking thread to start the job (zero on the ring path).
    pub thread_wait: Histogram,
    /// The write.
    pub write: Histogram,
    /// The fdatasync.
    pub fdatasync: Histogram,
    /// The rest: from the fdatasync's end (or the launch, less the three above) until the
    /// writer task saw the chunk done (the executor's wake-up and its turn to run).
    pub notice: Histogram,
}

impl Default for ChunkPhases {
    fn default() -> Self {
        ChunkPhases {
            thread_wait: Histogram::latency(),
            write: Histogram::latency(),
            fdatasync: Histogram::latency(),
            notice: Histogram::latency(),
        }
    }
}

impl ChunkPhases {
    /// The four parts with their names, in order (`thread_wait`, `write`, `fdatasync`,
    /// `notice`).
    pub fn named(&self) -> [(&'static str, &Histogram); 4] {
        [
            ("thread_wait", &self.thread_wait),
            ("write", &self.write),
            ("fdatasync", &self.fdatasync),
            ("notice", &self.notice),
        ]
    }

    /// Adds `other`'s observations (another fragment's).
    pub fn merge(&mut self, other: &ChunkPhases) {
        self.thread_wait.merge(&other.thread_wait);
        self.write.merge(&other.write);
        self.fdatasync.merge(&other.fdatasync);
        self.notice.merge(&other.notice);
    }
}

/// The live counters, updated by the group-commit writer.
#[derive(Debug)]
pub(crate) struct IoCounters {
    fdatasyncs: Cell<u64>,
    writes_synced: Cell<u64>,
    bytes_appended: Cell<u64>,
    batch_size: RefCell<Histogram>,
    fdatasync_micros: RefCell<Histogram>,
    pipelined: Cell<u64>,
    fdatasync_micros_filling: RefCell<Histogram>,
    spare_missed: Cell<u64>,
    spare_late: Cell<u64>,
    chunk_phases: RefCell<ChunkPhases>,
}

impl Default for IoCounters {
    fn default() -> Self {
        IoCounters {
            fdatasyncs: Cell::new(0),
            writes_synced: Cell::new(0),
            bytes_appended: Cell::new(0),
            batch_size: RefCell::new(Histogram::new(&BATCH_BUCKETS)),
            fdatasync_micros: RefCell::new(Histogram::latency()),
            pipelined: Cell::new(0),
            fdatasync_micros_filling: RefCell::new(Histogram::latency()),
            spare_missed: Cell::new(0),
            spare_late: Cell::new(0),
            chunk_phases: RefCell::new(ChunkPhases::default()),
        }
    }
}

impl IoCounters {
    /// One durable group commit of `records` records and `bytes` bytes that took `elapsed`,
    /// `filling` if a spare's zero-fill was under way.
    pub(crate) fn synced(&self, records: usize, bytes: usize, elapsed: Duration, filling: bool) {
        if filling {
            self.fdatasync_micros_filling.borrow_mut().observe_duration(elapsed);
        }
        self.fdatasyncs.set(self.fdatasyncs.get() + 1);
        self.writes_synced.set(self.writes_synced.get() + records as u64);
        self.bytes_appended.set(self.bytes_appended.get() + bytes as u64);
        self.batch_size.borrow_mut().observe(records as u64);
        self.fdatasync_micros.borrow_mut().observe_duration(elapsed);
    }

    /// Where one group commit's time went: `times` from its I/O, and `seen`, the time from its
    /// launch until the writer saw it end.
    pub(crate) fn chunk_phases(&self, times: ChunkTimes, seen: Duration) {
        let io = times.waited + times.written + times.synced;
        let mut p = self.chunk_phases.borrow_mut();
        p.thread_wait.observe_duration(times.waited);
        p.write.observe_duration(times.written);
        p.fdatasync.observe_duration(times.synced);
        p.notice.observe_duration(seen.saturating_sub(io));
    }

    /// A chunk started while another was in flight.
    pub(crate) fn pipelined(&self) {
        self.pipelined.set(self.pipelined.get() + 1);
    }

    /// A roll waited for the spare's fill to finish.
    pub(crate) fn spare_late(&self) {
        self.spare_late.set(self.spare_late.get() + 1);
    }

    /// A roll found no spare at all.
    pub(crate) fn spare_missed(&self) {
        self.spare_missed.set(self.spare_missed.get() + 1);
    }

    pub(crate) fn snapshot(&self) -> IoStats {
        IoStats {
            fdatasyncs: self.fdatasyncs.get(),
            writes_synced: self.writes_synced.get(),
            bytes_appended: self.bytes_appended.get(),
            batch_size: self.batch_size.borrow().clone(),
            fdatasync_micros: self.fdatasync_micros.borrow().clone(),
            pipelined: self.pipelined.get(),
            fdatasync_micros_filling: self.fdatasync_micros_filling.borrow().clone(),
            spare_missed: self.spare_missed.get(),
            spare_late: self.spare_late.get(),
            chunk_phases: self.chunk_phases.borrow().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks bucket placement (bounds are inclusive), cumulative counts and merging.
    #[test]
    fn histogram_buckets_and_merge() {
        let mut h = Histogram::new(&BATCH_BUCKETS);
        for v in [1, 1, 2, 3, 5000] {
            h.observe(v);
        }
        let cumulative = h.cumulative();
        assert_eq!(cumulative.len(), BATCH_BUCKETS.len() + 1);
        assert_eq!(cumulative[0], 2, "two observations of 1");
        assert_eq!(cumulative[1], 3, "2 is in the bucket <= 2");
        assert_eq!(cumulative[2], 4, "3 is in the bucket <= 4");
        assert_eq!(*cumulative.last().unwrap(), 5, "+Inf counts everything");
        assert_eq!((h.count(), h.sum()), (5, 5007));
        let mut other = Histogram::new(&BATCH_BUCKETS);
        other.observe(1);
        h.merge(&other);
        assert_eq!(h.cumulative()[0], 3);
        let latency = Histogram::latency();
        h.merge(&latency);
        assert_eq!(h.count(), 6, "a histogram over other bounds is not merged");
    }

    // Checks that a group commit moves every counter.
    #[test]
    fn counters_count_group_commits() {
        let c = IoCounters::default();
        c.synced(3, 8192, Duration::from_micros(700), true);
        c.synced(1, 4096, Duration::from_micros(40), false);
        let s = c.snapshot();
        assert_eq!((s.fdatasyncs, s.writes_synced, s.bytes_appended), (2, 4, 12288));
        assert_eq!(s.fdatasync_micros.count(), 2);
        assert_eq!(s.fdatasync_micros.cumulative()[0], 1, "40 µs is in the first bucket");
        assert_eq!(s.batch_size.sum(), 4);
        assert_eq!(s.fdatasync_micros_filling.count(), 1, "one while a spare filled");
        assert_eq!(s.fdatasync_micros_filling.sum(), 700);
    }

    // Checks that a chunk's phases land in their histograms and the rest counts as notice.
    #[test]
    fn chunk_phases_split_a_group_commit() {
        let c = IoCounters::default();
        let us = Duration::from_micros;
        let times = ChunkTimes { waited: us(30), written: us(60), synced: us(2_000) };
        c.chunk_phases(times, us(2_400));
        // A writer that saw the end before the parts add up (clocks of two threads): no
        // negative notice.
        c.chunk_phases(ChunkTimes { waited: us(0), written: us(10), synced: us(20) }, us(25));
        let p = c.snapshot().chunk_phases;
        let sums: Vec<u64> = p.named().iter().map(|(_, h)| h.sum()).collect();
        assert_eq!(sums, vec![30, 70, 2_020, 310]);
        assert!(p.named().iter().all(|(_, h)| h.count() == 2));
        let mut merged = ChunkPhases::default();
        merged.merge(&p);
        merged.merge(&p);
        assert_eq!(merged.fdatasync.sum(), 4_040);
    }
}

//! When to send requests (open and closed loop) and how to record their latency.
//!
//! Everything here is pure arithmetic over nanosecond timestamps on a clock the caller
//! supplies, so the driver runs it against tokio's clock and the tests against a fake one.
//!
//! Open loop: request `i` of connection `j` (of `n`) is due at
//! `start + (i * n + j) * 1e9 / rate`, computed from the index each time (no accumulated
//! drift), which spreads the connections evenly over the global arrival sequence. Latency is
//! measured from the due time, so a stalled server is charged for every request that should
//! have been sent during the stall (no coordinated omission).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::limits;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Due times of one connection's requests in an open-loop run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    start_ns: u64,
    rate_per_sec: u64,
    connection: u64,
    connections: u64,
}

impl Schedule {
    /// Connection `connection` of `connections`, sharing `rate_per_sec` (all connections
    /// together) from `start_ns`.
    pub fn new(start_ns: u64, rate_per_sec: u64, connection: u64, connections: u64) -> Self {
        assert!(rate_per_sec > 0, "open loop needs a positive rate");
        assert!(connection < connections, "connection index out of range");
        Schedule { start_ns, rate_per_sec, connection, connections }
    }

    /// When this connection's request `index` is due.
    pub fn due_ns(&self, index: u64) -> u64 {
        let slot = u128::from(index) * u128::from(self.connections) + u128::from(self.connection);
        let offset = slot * NANOS_PER_SEC / u128::from(self.rate_per_sec);
        u64::try_from(u128::from(self.start_ns) + offset).unwrap_or(u64::MAX)
    }

    /// How many of this connection's requests are due strictly before `end_ns`.
    pub fn count_before(&self, end_ns: u64) -> u64 {
        if end_ns <= self.start_ns {
            return 0;
        }
        // Slots s with s * 1e9 / rate < end - start, i.e. s < ceil((end-start) * rate / 1e9).
        let span = u128::from(end_ns - self.start_ns) * u128::from(self.rate_per_sec);
        let slots = span.div_ceil(NANOS_PER_SEC);
        let conn = u128::from(self.connection);
        if slots <= conn {
            return 0;
        }
        let n = u128::from(self.connections);
        u64::try_from((slots - conn).div_ceil(n)).unwrap_or(u64::MAX)
    }
}

/// What the driver should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send a request now; its latency counts from `due_ns`.
    Send {
        /// When the request was due (open loop) or now (closed loop).
        due_ns: u64,
    },
    /// Nothing to send before this time; wait for it or for a completion, whichever is first.
    WaitUntil {
        /// The next due time (or the end of the run).
        at_ns: u64,
    },
    /// The pipeline is full (or the run is over with requests in flight): wait for a completion.
    WaitCompletion,
    /// The run is over and nothing is in flight.
    Done,
}

/// The send decision for one connection: open or closed loop, a pipelining depth, an end.
#[derive(Clone, Debug)]
pub struct Pacer {
    schedule: Option<Schedule>,
    end_ns: u64,
    depth: usize,
    next_index: u64,
}

impl Pacer {
    /// Closed loop: keep `depth` requests in flight until `end_ns`.
    pub fn closed(end_ns: u64, depth: usize) -> Self {
        assert!(depth > 0);
        Pacer { schedule: None, end_ns, depth, next_index: 0 }
    }

    /// Open loop: send on `schedule`, at most `depth` in flight, nothing due at or after `end_ns`.
    pub fn open(schedule: Schedule, end_ns: u64, depth: usize) -> Self {
        assert!(depth > 0);
        Pacer { schedule: Some(schedule), end_ns, depth, next_index: 0 }
    }

    /// Decides the next step given the clock and the number of requests in flight.
    pub fn next(&mut self, now_ns: u64, in_flight: usize) -> Action {
        if now_ns >= self.end_ns {
            return if in_flight > 0 { Action::WaitCompletion } else { Action::Done };
        }
        if in_flight >= self.depth {
            return Action::WaitCompletion;
        }
        match &self.schedule {
            None => Action::Send { due_ns: now_ns },
            Some(schedule) => {
                let due = schedule.due_ns(self.next_index);
                if due >= self.end_ns {
                    // Nothing more is due in this run; only completions remain.
                    return if in_flight > 0 {
                        Action::WaitCompletion
                    } else {
                        Action::WaitUntil { at_ns: self.end_ns }
                    };
                }
                if due > now_ns {
                    return Action::WaitUntil { at_ns: due };
                }
                self.next_index += 1;
                Action::Send { due_ns: due }
            }
        }
    }

    /// Due times of open-loop requests that were due before the end but never sent (the
    /// pipeline stayed full). Empty for a closed loop. Call once, after `Done`.
    pub fn unsent(&self) -> impl Iterator<Item = u64> + '_ {
        let (count, schedule) = match &self.schedule {
            Some(s) => (s.count_before(self.end_ns), Some(s)),
            None => (0, None),
        };
        (self.next_index..count.max(self.next_index))
            .filter_map(move |i| schedule.map(|s| s.due_ns(i)))
    }
}

/// Errors of one kind (SQLSTATE, `connection`, `timeout`), with one example message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCount {
    /// How many.
    pub count: u64,
    /// The first message seen, truncated.
    pub example: String,
}

/// Latencies and counts of one workload on one target.
#[derive(Clone, Debug)]
pub struct Recorder {
    histogram: Histogram<u64>,
    /// Client send lag of measured requests: sent - due, microseconds (see `sent`).
    lag: Histogram<u64>,
    measure_from_ns: u64,
    warmup_ops: u64,
    rows: u64,
    unsent: u64,
    retries: u64,
    errors: BTreeMap<String, ErrorCount>,
}

/// A new empty latency histogram in microseconds, 1 us .. `LATENCY_US_MAX`.
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that satisfy the crate's requirements (low >= 1, high >= 2*low,
    // sigfigs <= 5), so this cannot fail.
    Histogram::new_with_bounds(1, limits::LATENCY_US_MAX, limits::HISTOGRAM_SIGFIGS)
        .unwrap_or_else(|e| panic!("histogram bounds are constants: {e}"))
}

/// Adds `from` into `into`. Both come from `new_histogram`, so their bounds match and `add`
/// cannot fail; saturate rather than lose counts if that ever changes.
fn add_histogram(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    if into.add(from).is_err() {
        for v in from.iter_recorded() {
            into.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

fn latency_us(due_ns: u64, done_ns: u64) -> u64 {
    // Round to the nearest microsecond, at least 1 (the histogram's lowest value).
    (done_ns.saturating_sub(due_ns).saturating_add(500) / 1_000).clamp(1, limits::LATENCY_US_MAX)
}

impl Recorder {
    /// Records only requests due at or after `measure_from_ns` (the end of the warm-up).
    pub fn new(measure_from_ns: u64) -> Self {
        Recorder {
            histogram: new_histogram(),
            lag: new_histogram(),
            measure_from_ns,
            warmup_ops: 0,
            rows: 0,
            unsent: 0,
            retries: 0,
            errors: BTreeMap::new(),
        }
    }

    /// A successful request due at `due_ns` that completed at `done_ns` returning `rows`.
    pub fn success(&mut self, due_ns: u64, done_ns: u64, rows: u64) {
        if due_ns < self.measure_from_ns {
            self.warmup_ops += 1;
            return;
        }
        self.histogram.saturating_record(latency_us(due_ns, done_ns));
        self.rows += rows;
    }

    /// A measured request due at `due_ns` left the client at `sent_ns`. The difference is the
    /// generator's own lateness plus, in an overloaded open loop, queueing behind a full
    /// pipeline; it is already inside the latency and is reported to judge the generator.
    pub fn sent(&mut self, due_ns: u64, sent_ns: u64) {
        if due_ns < self.measure_from_ns {
            return;
        }
        self.lag.saturating_record(latency_us(due_ns, sent_ns));
    }

    /// A measured transaction due at `due_ns` was run again `n` times after serialization
    /// failures (its latency includes them).
    pub fn retried(&mut self, due_ns: u64, n: u64) {
        if due_ns >= self.measure_from_ns {
            self.retries += n;
        }
    }

    /// A failed request. Errors count during warm-up too: they are never hidden. Their latency
    /// is not mixed into the histogram of successes.
    pub fn error(&mut self, kind: &str, message: &str) {
        let key = if self.errors.len() >= limits::ERROR_KINDS_MAX && !self.errors.contains_key(kind)
        {
            "other"
        } else {
            kind
        };
        let entry = self.errors.entry(key.to_owned()).or_default();
        if entry.count == 0 {
            let mut end = message.len().min(limits::ERROR_EXAMPLE_BYTES_MAX);
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            entry.example = message[..end].to_owned();
        }
        entry.count += 1;
    }

    /// An open-loop request due at `due_ns` that was never sent before the run ended at
    /// `end_ns`. Its latency is at least `end - due`, and that lower bound is recorded so a
    /// stall at the end of a run still shows.
    pub fn unsent(&mut self, due_ns: u64, end_ns: u64) {
        if due_ns < self.measure_from_ns {
            return;
        }
        self.unsent += 1;
        self.histogram.saturating_record(latency_us(due_ns, end_ns));
    }

    /// Adds another recorder's counts (another connection, or another round).
    pub fn merge(&mut self, other: &Recorder) {
        add_histogram(&mut self.histogram, &other.histogram);
        add_histogram(&mut self.lag, &other.lag);
        self.warmup_ops += other.warmup_ops;
        self.rows += other.rows;
        self.unsent += other.unsent;
        self.retries += other.retries;
        for (kind, e) in &other.errors {
            let entry = self.errors.entry(kind.clone()).or_default();
            if entry.count == 0 {
                entry.example = e.example.clone();
            }
            entry.count += e.count;
        }
    }

    /// Client send lag of measured requests, microseconds (see `sent`).
    pub fn lag_histogram(&self) -> &Histogram<u64> {
        &self.lag
    }
    /// Latencies of measured requests (successes and unsent lower bounds), microseconds.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.histogram
    }
    /// Successful measured requests.
    pub fn ops(&self) -> u64 {
        self.histogram.len() - self.unsent
    }
    /// Requests completed during warm-up (not measured).
    pub fn warmup_ops(&self) -> u64 {
        self.warmup_ops
    }
    /// Rows returned by measured requests.
    pub fn rows(&self) -> u64 {
        self.rows
    }
    /// Retries of measured transactions after serialization failures.
    pub fn retries(&self) -> u64 {
        self.retries
    }
    /// Open-loop requests due but never sent.
    pub fn unsent_count(&self) -> u64 {
        self.unsent
    }
    /// Errors by kind.
    pub fn errors(&self) -> &BTreeMap<String, ErrorCount> {
        &self.errors
    }
    /// Total errors.
    pub fn error_count(&self) -> u64 {
        self.errors.values().map(|e| e.count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake clock: the test moves time by hand.
    struct FakeClock(u64);

    #[test]
    fn unit_schedule_spreads_connections_over_the_global_rate() {
        // 4 connections sharing 1000 ops/s: the union of their due times is exactly every
        // millisecond from the start, each connection every 4 ms with its own phase.
        let start = 5_000;
        let schedules: Vec<Schedule> = (0..4).map(|c| Schedule::new(start, 1000, c, 4)).collect();
        let mut all: Vec<u64> =
            schedules.iter().flat_map(|s| (0..25).map(move |i| s.due_ns(i))).collect();
        all.sort_unstable();
        let expected: Vec<u64> = (0..100).map(|k| start + k * 1_000_000).collect();
        assert_eq!(all, expected);
        assert_eq!(schedules[1].due_ns(0), start + 1_000_000);
        assert_eq!(schedules[1].due_ns(1), start + 5_000_000);
    }

    #[test]
    fn unit_schedule_has_no_drift_at_awkward_rates() {
        // 3 ops/s has a period of 333,333,333.33 ns; computing from the index keeps the
        // millionth request within one nanosecond of the exact time.
        let s = Schedule::new(0, 3, 0, 1);
        assert_eq!(s.due_ns(3), 1_000_000_000);
        assert_eq!(s.due_ns(3_000_000), 1_000_000_000_000_000);
        assert_eq!(s.due_ns(1), 333_333_333);
    }

    #[test]
    fn unit_global_slots_match_per_connection_schedules() {
        // The driver's ticker walks one schedule of all slots and wakes connection
        // `slot mod n`; that must be exactly when each connection's own schedule says its
        // request is due, at any rate (including ones that do not divide a second).
        for (rate, n) in [(1000u64, 8u64), (7, 3), (999_999, 5)] {
            let all = Schedule::new(0, rate, 0, 1);
            for j in 0..n {
                let own = Schedule::new(0, rate, j, n);
                for i in 0..50 {
                    assert_eq!(
                        own.due_ns(i),
                        all.due_ns(i * n + j),
                        "rate {rate} n {n} j {j} i {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn unit_count_before_matches_due_times() {
        // count_before(end) is the number of indices whose due time is < end, for every
        // connection phase and a range of ends, including exact hits on a due time.
        for conns in [1u64, 3, 4] {
            for c in 0..conns {
                let s = Schedule::new(100, 7, c, conns);
                for end in [0, 100, 101, 142_857_243, 1_000_000_100, 3_000_000_000] {
                    let brute = (0..100).take_while(|&i| s.due_ns(i) < end).count() as u64;
                    assert_eq!(s.count_before(end), brute, "conns {conns} c {c} end {end}");
                }
            }
        }
    }

    #[test]
    fn unit_open_pacer_follows_the_schedule_on_a_fake_clock() {
        // 1000 ops/s on one connection, depth 2, for 5 ms: sends at 0,1,2,3,4 ms when the clock
        // is on time, waits until each due time otherwise, and is done when idle at the end.
        let mut clock = FakeClock(0);
        let mut p = Pacer::open(Schedule::new(0, 1000, 0, 1), 5_000_000, 2);
        assert_eq!(p.next(clock.0, 0), Action::Send { due_ns: 0 });
        assert_eq!(p.next(clock.0, 0), Action::WaitUntil { at_ns: 1_000_000 });
        clock.0 = 1_000_000;
        assert_eq!(p.next(clock.0, 1), Action::Send { due_ns: 1_000_000 });
        // Two in flight at depth 2: wait for a completion even though the next is due.
        clock.0 = 2_500_000;
        assert_eq!(p.next(clock.0, 2), Action::WaitCompletion);
        // A completion arrives late; the overdue request goes out with its original due time.
        assert_eq!(p.next(clock.0, 1), Action::Send { due_ns: 2_000_000 });
        assert_eq!(p.next(clock.0, 2), Action::WaitCompletion);
        clock.0 = 4_900_000;
        assert_eq!(p.next(clock.0, 0), Action::Send { due_ns: 3_000_000 });
        assert_eq!(p.next(clock.0, 1), Action::Send { due_ns: 4_000_000 });
        // Nothing is due before the end: wait for the two in flight.
        assert_eq!(p.next(clock.0, 2), Action::WaitCompletion);
        clock.0 = 5_000_000;
        assert_eq!(p.next(clock.0, 1), Action::WaitCompletion);
        assert_eq!(p.next(clock.0, 0), Action::Done);
        assert_eq!(p.unsent().count(), 0);
    }

    #[test]
    fn unit_open_pacer_reports_requests_it_could_not_send() {
        // A server that never answers: depth 1 fills at once, the clock passes the end, and the
        // 9 requests due at 1..=9 ms are reported unsent with their due times.
        let mut p = Pacer::open(Schedule::new(0, 1000, 0, 1), 10_000_000, 1);
        assert_eq!(p.next(0, 0), Action::Send { due_ns: 0 });
        assert_eq!(p.next(9_999_999, 1), Action::WaitCompletion);
        assert_eq!(p.next(10_000_000, 1), Action::WaitCompletion);
        assert_eq!(p.next(10_000_001, 0), Action::Done);
        let unsent: Vec<u64> = p.unsent().collect();
        assert_eq!(unsent, (1..10).map(|k| k * 1_000_000).collect::<Vec<_>>());
    }

    #[test]
    fn unit_closed_pacer_keeps_the_pipeline_full() {
        // Closed loop sends whenever a slot is free, stamping the send time, until the end.
        let mut p = Pacer::closed(100, 3);
        assert_eq!(p.next(10, 0), Action::Send { due_ns: 10 });
        assert_eq!(p.next(10, 1), Action::Send { due_ns: 10 });
        assert_eq!(p.next(11, 2), Action::Send { due_ns: 11 });
        assert_eq!(p.next(12, 3), Action::WaitCompletion);
        assert_eq!(p.next(100, 3), Action::WaitCompletion);
        assert_eq!(p.next(100, 0), Action::Done);
        assert_eq!(p.unsent().count(), 0);
    }

    #[test]
    fn unit_recorder_measures_from_the_due_time_and_skips_warmup() {
        // Latency is done - due (not done - sent); requests due in the warm-up are only counted.
        let mut r = Recorder::new(1_000_000);
        r.success(500_000, 700_000, 1); // warm-up
        r.success(1_000_000, 3_000_000, 1); // 2 ms
        r.success(2_000_000, 2_000_400, 0); // 0.4 us rounds to 1 us (the floor)
        assert_eq!(r.warmup_ops(), 1);
        assert_eq!(r.ops(), 2);
        assert_eq!(r.rows(), 1);
        assert!(r.histogram().equivalent(r.histogram().max(), 2_000));
        assert_eq!(r.histogram().min(), 1);
        // A request stuck behind a stall is charged from its due time.
        r.unsent(4_000_000, 54_000_000);
        assert_eq!(r.unsent_count(), 1);
        assert_eq!(r.ops(), 2);
        assert!(r.histogram().equivalent(r.histogram().max(), 50_000));
        // Send lag is kept apart from latency, and not for warm-up requests.
        r.sent(1_000_000, 1_250_000);
        r.sent(500_000, 900_000);
        assert_eq!(r.lag_histogram().len(), 1);
        assert!(r.lag_histogram().equivalent(r.lag_histogram().max(), 250));
        // Latencies beyond the histogram's range are clamped, not dropped.
        r.success(1_000_000, u64::MAX, 0);
        assert_eq!(r.ops(), 3);
        assert!(r.histogram().equivalent(r.histogram().max(), limits::LATENCY_US_MAX));
    }

    #[test]
    fn unit_recorder_counts_and_merges_errors() {
        // Errors are counted by kind with the first message kept; merge adds counts and
        // histograms; kinds past the limit fold into `other`.
        let mut a = Recorder::new(0);
        a.error("40001", "could not serialize");
        a.error("40001", "second message");
        a.success(0, 1_000_000, 3);
        let mut b = Recorder::new(0);
        b.error("connection", "reset by peer");
        b.success(0, 2_000_000, 4);
        a.merge(&b);
        assert_eq!(a.error_count(), 3);
        assert_eq!(a.errors()["40001"].count, 2);
        assert_eq!(a.errors()["40001"].example, "could not serialize");
        assert_eq!(a.errors()["connection"].count, 1);
        assert_eq!(a.ops(), 2);
        assert_eq!(a.rows(), 7);
        let mut c = Recorder::new(0);
        for i in 0..limits::ERROR_KINDS_MAX + 5 {
            c.error(&format!("k{i}"), &"é".repeat(limits::ERROR_EXAMPLE_BYTES_MAX));
        }
        assert_eq!(c.errors().len(), limits::ERROR_KINDS_MAX + 1);
        assert_eq!(c.errors()["other"].count, 5);
        assert_eq!(c.error_count(), limits::ERROR_KINDS_MAX as u64 + 5);
        assert!(c.errors()["k0"].example.len() <= limits::ERROR_EXAMPLE_BYTES_MAX);
    }
}

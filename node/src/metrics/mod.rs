//! Operator metrics: counters and latency histograms kept per executor without locks (`Cell`s
//! in the executor's [`crate::engine::Core`]), collected on scrape with one `Mesh::call` per
//! executor, and rendered as Prometheus text (exposition format 0.0.4) on `--metrics-listen`
//! ([`http`]) or as rows of `SHOW STATS`.
//!
//! Histograms use fixed buckets (`storage::iostats::LATENCY_BUCKETS_MICROS`, exported in
//! seconds: 50 µs … 10 s; group-commit batch sizes `BATCH_BUCKETS`: 1 … 1024 records), so
//! per-core histograms merge by adding counts.
//!
//! Adding a counter family is one line: give the snapshot a field whose type implements
//! [`ExportMetrics`] and call its `export` in [`render_set`].

pub mod http;
pub mod limits;

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Duration;

use router::{FragmentId, Opcode};
use storage::{Fragment, Histogram, IoStats};

use crate::engine::{Core, FragmentCounters};
use crate::runtime::{ExecutorIndex, Mesh};

/// What kind of statement ran, for `tessera_statements_total{kind=…}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    /// SELECT (with or without a collection).
    Select,
    /// INSERT.
    Insert,
    /// UPDATE.
    Update,
    /// DELETE.
    Delete,
    /// CREATE TABLE / ALTER TABLE.
    Ddl,
    /// EXPLAIN [ANALYZE].
    Explain,
    /// SHOW, SET, verify_sharding and the rest.
    Utility,
}

impl StatementKind {
    const ALL: [StatementKind; 7] = [
        StatementKind::Select,
        StatementKind::Insert,
        StatementKind::Update,
        StatementKind::Delete,
        StatementKind::Ddl,
        StatementKind::Explain,
        StatementKind::Utility,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            StatementKind::Select => "select",
            StatementKind::Insert => "insert",
            StatementKind::Update => "update",
            StatementKind::Delete => "delete",
            StatementKind::Ddl => "ddl",
            StatementKind::Explain => "explain",
            StatementKind::Utility => "utility",
        }
    }

    /// The kind of a planned statement.
    pub fn of(statement: &query::plan::Statement) -> StatementKind {
        use query::plan::Statement as S;
        match statement {
            S::Select(_) => StatementKind::Select,
            S::Insert(_) => StatementKind::Insert,
            S::Update(_) => StatementKind::Update,
            S::Delete(_) => StatementKind::Delete,
            S::CreateCollection { .. } | S::AlterSharding { .. } => StatementKind::Ddl,
            S::Explain { .. } => StatementKind::Explain,
            _ => StatementKind::Utility,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

const OPCODES: [(Opcode, &str); 3] =
    [(Opcode::Single, "single"), (Opcode::Multi, "multi"), (Opcode::Scatter, "scatter")];

fn opcode_index(opcode: Opcode) -> usize {
    OPCODES.iter().position(|(o, _)| *o == opcode).unwrap_or(0)
}

/// One executor's live counters. Touched only on its own thread.
#[derive(Debug)]
pub struct ExecutorMetrics {
    statements: [Cell<u64>; 7],
    statement_errors: Cell<u64>,
    slow_statements: Cell<u64>,
    rows_read: Cell<u64>,
    rows_written: Cell<u64>,
    routes: [Cell<u64>; 3],
    connections: Cell<u64>,
    commits: Cell<u64>,
    commit_conflicts: Cell<u64>,
    commit_aborts: Cell<u64>,
    statement_micros: RefCell<Histogram>,
    commit_micros: RefCell<Histogram>,
    slow_threshold: Cell<Option<Duration>>,
}

impl Default for ExecutorMetrics {
    fn default() -> Self {
        ExecutorMetrics {
            statements: Default::default(),
            statement_errors: Cell::new(0),
            slow_statements: Cell::new(0),
            rows_read: Cell::new(0),
            rows_written: Cell::new(0),
            routes: Default::default(),
            connections: Cell::new(0),
            commits: Cell::new(0),
            commit_conflicts: Cell::new(0),
            commit_aborts: Cell::new(0),
            statement_micros: RefCell::new(Histogram::latency()),
            commit_micros: RefCell::new(Histogram::latency()),
            slow_threshold: Cell::new(None),
        }
    }
}

fn bump(c: &Cell<u64>, by: u64) {
    c.set(c.get().saturating_add(by));
}

impl ExecutorMetrics {
    /// Sets the slow-statement threshold (`None`: off).
    pub fn set_slow_threshold(&self, threshold: Option<Duration>) {
        self.slow_threshold.set(threshold);
    }

    /// A statement finished after `elapsed`; returns whether it is slow (to be logged).
    pub fn statement(&self, kind: StatementKind, elapsed: Duration, ok: bool) -> bool {
        if let Some(c) = self.statements.get(kind.index()) {
            bump(c, 1);
        }
        if !ok {
            bump(&self.statement_errors, 1);
        }
        self.statement_micros.borrow_mut().observe_duration(elapsed);
        let slow = self.slow_threshold.get().is_some_and(|t| elapsed >= t);
        if slow {
            bump(&self.slow_statements, 1);
        }
        slow
    }

    /// A statement was routed.
    pub fn routed(&self, opcode: Opcode) {
        if let Some(c) = self.routes.get(opcode_index(opcode)) {
            bump(c, 1);
        }
    }

    /// Documents read by a statement's share on a fragment.
    pub fn rows_read(&self, rows: u64) {
        bump(&self.rows_read, rows);
    }

    /// A durable commit of `rows` written documents that took `elapsed` (apply to fdatasync).
    pub fn committed(&self, rows: u64, elapsed: Duration) {
        bump(&self.commits, 1);
        bump(&self.rows_written, rows);
        self.commit_micros.borrow_mut().observe_duration(elapsed);
    }

    /// A commit found a concurrent write and is re-run.
    pub fn conflict(&self) {
        bump(&self.commit_conflicts, 1);
    }

    /// A write gave up after its attempts (40001 to the client).
    pub fn aborted(&self) {
        bump(&self.commit_aborts, 1);
    }

    /// A client connection opened on this executor.
    pub fn connection_opened(&self) {
        bump(&self.connections, 1);
    }

    /// A client connection closed.
    pub fn connection_closed(&self) {
        self.connections.set(self.connections.get().saturating_sub(1));
    }

    fn snapshot(&self, executor: ExecutorIndex) -> ExecutorSnapshot {
        ExecutorSnapshot {
            executor: executor.get(),
            statements: self.statements.iter().map(Cell::get).collect(),
            statement_errors: self.statement_errors.get(),
            slow_statements: self.slow_statements.get(),
            rows_read: self.rows_read.get(),
            rows_written: self.rows_written.get(),
            routes: self.routes.iter().map(Cell::get).collect(),
            // Counted by `Mesh::call` on this executor's thread, where snapshots are taken.
            mesh_calls: crate::runtime::calls_sent(),
            mesh_background_calls: crate::runtime::background_calls_sent(),
            connections: self.connections.get(),
            commits: self.commits.get(),
            commit_conflicts: self.commit_conflicts.get(),
            commit_aborts: self.commit_aborts.get(),
            parse_cache: query::ParseCacheStats::default(),
            statement_micros: self.statement_micros.borrow().clone(),
            commit_micros: self.commit_micros.borrow().clone(),
            transactions: crate::engine::TxCounters::default(),
            prepared: 0,
            fragments: Vec::new(),
        }
    }
}

/// One fragment's numbers at scrape time.
#[derive(Debug, Clone)]
pub struct FragmentSnapshot {
    /// The fragment.
    pub fragment: FragmentId,
    /// Statements that ran on it and documents they read (node counters).
    pub counters: FragmentCounters,
    /// Live documents.
    pub docs: u64,
    /// Log bytes of live documents.
    pub live_bytes: u64,
    /// Log bytes of everything else.
    pub dead_bytes: u64,
    /// Segment files.
    pub segments: u64,
    /// Compactions since open.
    pub compactions: u64,
    /// Torn tails truncated at open.
    pub torn_tails: u64,
    /// Last durable LSN.
    pub lsn_durable: u64,
    /// Prepared transactions without an outcome.
    pub in_doubt: u64,
    /// Group-commit I/O.
    pub io: IoStats,
}

impl FragmentSnapshot {
    /// The numbers of `fragment` now.
    pub fn of(fragment: &Fragment, counters: FragmentCounters) -> FragmentSnapshot {
        let stats = fragment.totals();
        FragmentSnapshot {
            fragment: fragment.id(),
            counters,
            docs: stats.docs,
            live_bytes: stats.live_bytes,
            dead_bytes: stats.dead_bytes,
            segments: stats.segments,
            compactions: stats.compactions,
            torn_tails: stats.torn_tails,
            lsn_durable: stats.lsn_durable,
            in_doubt: fragment.in_doubt().len() as u64,
            io: fragment.io_stats(),
        }
    }
}

/// One executor's numbers at scrape time (`Send`: crosses the mesh).
#[derive(Debug, Clone)]
pub struct ExecutorSnapshot {
    /// Executor index.
    pub executor: usize,
    statements: Vec<u64>,
    statement_errors: u64,
    slow_statements: u64,
    rows_read: u64,
    rows_written: u64,
    routes: Vec<u64>,
    mesh_calls: u64,
    mesh_background_calls: u64,
    connections: u64,
    commits: u64,
    commit_conflicts: u64,
    commit_aborts: u64,
    parse_cache: query::ParseCacheStats,
    statement_micros: Histogram,
    commit_micros: Histogram,
    /// Transaction outcomes on this executor (sessions that ran here).
    pub transactions: crate::engine::TxCounters,
    /// Transactions prepared on this executor's fragments, awaiting their decision.
    pub prepared: u64,
    /// Its fragments.
    pub fragments: Vec<FragmentSnapshot>,
}

/// The snapshot of `core`'s executor: its counters and every fragment it owns.
pub fn snapshot(core: &Core) -> ExecutorSnapshot {
    let mut s = core.metrics().snapshot(core.index());
    s.fragments = core.fragment_snapshots();
    s.transactions = core.tx_counters();
    s.prepared = core.prepared_count() as u64;
    s.parse_cache = core.parse_cache_stats();
    s
}

/// Collects every executor's snapshot: the local one in place, the others with one mesh call
/// each.
pub async fn collect(core: &Rc<Core>, mesh: &Mesh<Core>) -> Vec<ExecutorSnapshot> {
    let mut out = Vec::with_capacity(mesh.len());
    for i in 0..mesh.len() {
        let index = ExecutorIndex::new(i);
        if index == core.index() {
            out.push(snapshot(core));
            continue;
        }
        match mesh.call(index, |c| async move { snapshot(&c) }).await {
            Ok(s) => out.push(s),
            // Shutting down: report what is left.
            Err(e) => tracing::debug!(error = %e, "metrics: executor did not answer"),
        }
    }
    out
}

/// The kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets, sum and count.
    Histogram,
}

impl MetricKind {
    fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// Label pairs of one sample.
pub type Labels = Vec<(&'static str, String)>;

/// One sample: full name (with `_bucket`/`_sum`/`_count` for histograms), labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// Value.
    pub value: f64,
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricKind,
    samples: Vec<Sample>,
}

/// Metric families in the order first added.
#[derive(Debug, Default)]
pub struct MetricSet {
    families: Vec<Family>,
}

/// Something that adds its samples to a [`MetricSet`] (a counter family).
pub trait ExportMetrics {
    /// Adds samples, each with `labels` plus its own.
    fn export(&self, set: &mut MetricSet, labels: &Labels);
}

impl MetricSet {
    fn add(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: MetricKind,
        samples: Vec<Sample>,
    ) {
        match self.families.iter_mut().find(|f| f.name == name) {
            Some(family) => family.samples.extend(samples),
            None => self.families.push(Family { name, help, kind, samples }),
        }
    }

    /// Adds a counter sample.
    pub fn counter(&mut self, name: &'static str, help: &'static str, labels: Labels, v: u64) {
        let sample = Sample { name: name.to_owned(), labels, value: v as f64 };
        self.add(name, help, MetricKind::Counter, vec![sample]);
    }

    /// Adds a gauge sample.
    pub fn gauge(&mut self, name: &'static str, help: &'static str, labels: Labels, v: u64) {
        let sample = Sample { name: name.to_owned(), labels, value: v as f64 };
        self.add(name, help, MetricKind::Gauge, vec![sample]);
    }

    /// Adds a histogram; `scale` divides bounds and sum (1e6 turns microseconds into seconds).
    pub fn histogram(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: Labels,
        h: &Histogram,
        scale: f64,
    ) {
        let mut samples = Vec::with_capacity(h.bounds().len() + 3);
        let cumulative = h.cumulative();
        for (i, count) in cumulative.iter().enumerate() {
            let le = match h.bounds().get(i) {
                Some(b) => format_value(*b as f64 / scale),
                None => "+Inf".to_owned(),
            };
            let mut l = labels.clone();
            l.push(("le", le));
            samples.push(Sample {
                name: format!("{name}_bucket"),
                labels: l,
                value: *count as f64,
            });
        }
        samples.push(Sample {
            name: format!("{name}_sum"),
            labels: labels.clone(),
            value: h.sum() as f64 / scale,
        });
        samples.push(Sample { name: format!("{name}_count"), labels, value: h.count() as f64 });
        self.add(name, help, MetricKind::Histogram, samples);
    }

    /// Every sample, family by family.
    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.families.iter().flat_map(|f| f.samples.iter())
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        for f in &self.families {
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.name());
            for s in &f.samples {
                out.push_str(&s.name);
                if !s.labels.is_empty() {
                    out.push('{');
                    out.push_str(&format_labels(&s.labels));
                    out.push('}');
                }
                let _ = writeln!(out, " {}", format_value(s.value));
            }
        }
        out
    }
}

/// `a="x",b="y"` with Prometheus escaping.
pub fn format_labels(labels: &Labels) -> String {
    let mut out = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

fn format_value(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

impl ExportMetrics for ExecutorSnapshot {
    fn export(&self, set: &mut MetricSet, labels: &Labels) {
        let l = |extra: Option<(&'static str, &str)>| {
            let mut l = labels.clone();
            if let Some((k, v)) = extra {
                l.push((k, v.to_owned()));
            }
            l
        };
        for (kind, n) in StatementKind::ALL.iter().zip(&self.statements) {
            set.counter(
                "tessera_statements_total",
                "Statements executed, by kind.",
                l(Some(("kind", kind.label()))),
                *n,
            );
        }
        set.counter(
            "tessera_statement_errors_total",
            "Statements that ended in an error.",
            l(None),
            self.statement_errors,
        );
        set.counter(
            "tessera_slow_statements_total",
            "Statements over --slow-statement-ms.",
            l(None),
            self.slow_statements,
        );
        set.counter(
            "tessera_rows_read_total",
            "Documents read by statements.",
            l(None),
            self.rows_read,
        );
        set.counter(
            "tessera_rows_written_total",
            "Documents written or deleted by durable commits.",
            l(None),
            self.rows_written,
        );
        for ((_, name), n) in OPCODES.iter().zip(&self.routes) {
            set.counter(
                "tessera_routes_total",
                "Statements routed, by opcode.",
                l(Some(("opcode", name))),
                *n,
            );
        }
        set.counter(
            "tessera_mesh_calls_total",
            "Cross-core calls sent (Mesh::call).",
            l(None),
            self.mesh_calls,
        );
        set.counter(
            "tessera_mesh_background_calls_total",
            "Cross-core calls no statement waits for (Mesh::call_background).",
            l(None),
            self.mesh_background_calls,
        );
        set.gauge("tessera_connections", "Open client connections.", l(None), self.connections);
        set.counter(
            "tessera_commits_total",
            "Durable autocommit write batches (one per fragment share).",
            l(None),
            self.commits,
        );
        set.counter(
            "tessera_commit_conflicts_total",
            "Write shares re-run after a concurrent write won.",
            l(None),
            self.commit_conflicts,
        );
        set.counter(
            "tessera_commit_aborts_total",
            "Writes that gave up after their attempts (40001).",
            l(None),
            self.commit_aborts,
        );
        set.counter(
            "tessera_parse_cache_hits_total",
            "SQL texts planned from the executor's parse cache.",
            l(None),
            self.parse_cache.hits,
        );
        set.counter(
            "tessera_parse_cache_misses_total",
            "SQL texts parsed (not in the parse cache).",
            l(None),
            self.parse_cache.misses,
        );
        set.gauge(
            "tessera_parse_cache_entries",
            "SQL texts in the executor's parse cache.",
            l(None),
            self.parse_cache.entries as u64,
        );
        self.transactions.export(set, labels);
        set.gauge(
            "tessera_transactions_prepared",
            "Transactions prepared on this executor's fragments, awaiting their decision.",
            l(None),
            self.prepared,
        );
        for f in &self.fragments {
            let mut fl = labels.clone();
            fl.push(("fragment", f.fragment.get().to_string()));
            f.export(set, &fl);
        }
    }
}

impl ExportMetrics for crate::engine::TxCounters {
    fn export(&self, set: &mut MetricSet, labels: &Labels) {
        let outcomes = [
            ("fast_path_commit", self.fast_path_commits),
            ("two_phase_commit", self.two_phase_commits),
            ("read_only_commit", self.read_only_commits),
            ("abort", self.aborts),
        ];
        for (outcome, n) in outcomes {
            let mut l = labels.clone();
            l.push(("outcome", outcome.to_owned()));
            set.counter(
                "tessera_transactions_total",
                "Transactions ended, by outcome (autocommit statements over several fragments \
                 and BEGIN blocks).",
                l,
                n,
            );
        }
        set.counter(
            "tessera_transaction_conflicts_total",
            "Transaction commits refused with 40001 (a document read or written had changed).",
            labels.clone(),
            self.conflicts,
        );
        set.counter(
            "tessera_transaction_range_conflicts_total",
            "Of those, commits refused because a range the transaction scanned gained or lost \
             documents (a phantom).",
            labels.clone(),
            self.range_conflicts,
        );
        set.counter(
            "tessera_transaction_read_only_holds_total",
            "Read-only commits over several fragments that held their scanned ranges and \
             absent documents at once before checking the rest.",
            labels.clone(),
            self.read_only_holds,
        );
        set.counter(
            "tessera_transaction_paused_reads_total",
            "Fragments an autocommit UPDATE or DELETE read at one instant, holding off writes \
             of the documents it read (in slices past one slice; every read of a prepared \
             attempt).",
            labels.clone(),
            self.paused_reads,
        );
        set.counter(
            "tessera_transaction_prepared_attempts_total",
            "Attempts of an autocommit UPDATE or DELETE over several fragments that prepared \
             each fragment's writes at the instant it was read (retries after a conflict, and \
             first attempts soon after one).",
            labels.clone(),
            self.prepared_attempts,
        );
    }
}

impl ExportMetrics for FragmentSnapshot {
    fn export(&self, set: &mut MetricSet, labels: &Labels) {
        let l = || labels.clone();
        set.counter(
            "tessera_fragment_statements_total",
            "Statement shares run on the fragment.",
            l(),
            self.counters.statements,
        );
        set.counter(
            "tessera_fragment_rows_read_total",
            "Documents read on the fragment.",
            l(),
            self.counters.rows_scanned,
        );
        set.gauge("tessera_fragment_documents", "Live documents.", l(), self.docs);
        set.gauge(
            "tessera_fragment_live_bytes",
            "Log bytes of live documents.",
            l(),
            self.live_bytes,
        );
        set.gauge(
            "tessera_fragment_dead_bytes",
            "Log bytes of old versions, tombstones and finished transactions.",
            l(),
            self.dead_bytes,
        );
        set.gauge("tessera_fragment_segments", "Segment files.", l(), self.segments);
        set.counter(
            "tessera_fragment_compactions_total",
            "Compactions since start.",
            l(),
            self.compactions,
        );
        set.counter(
            "tessera_fragment_torn_tails_total",
            "Torn tails truncated at open.",
            l(),
            self.torn_tails,
        );
        set.gauge(
            "tessera_fragment_lsn_durable",
            "Last durable log sequence number.",
            l(),
            self.lsn_durable,
        );
        set.gauge(
            "tessera_fragment_in_doubt_transactions",
            "Prepared transactions without an outcome.",
            l(),
            self.in_doubt,
        );
        set.counter(
            "tessera_fragment_fdatasyncs_total",
            "Group commits: one write and one fdatasync each.",
            l(),
            self.io.fdatasyncs,
        );
        set.counter(
            "tessera_fragment_writes_synced_total",
            "Log records made durable by those fdatasyncs.",
            l(),
            self.io.writes_synced,
        );
        set.counter(
            "tessera_fragment_bytes_appended_total",
            "Bytes appended to the log (chunks with padding).",
            l(),
            self.io.bytes_appended,
        );
    }
}

/// The whole node's metrics from every executor's snapshot: per-executor and per-fragment
/// counters, and node-wide histograms merged over the executors.
pub fn render_set(snapshots: &[ExecutorSnapshot]) -> MetricSet {
    let mut set = MetricSet::default();
    let mut statement = Histogram::latency();
    let mut commit = Histogram::latency();
    let mut fdatasync = Histogram::latency();
    let mut batch = Histogram::new(&storage::iostats::BATCH_BUCKETS);
    let mut phases = storage::ChunkPhases::default();
    for s in snapshots {
        s.export(&mut set, &vec![("executor", s.executor.to_string())]);
        statement.merge(&s.statement_micros);
        commit.merge(&s.commit_micros);
        for f in &s.fragments {
            fdatasync.merge(&f.io.fdatasync_micros);
            batch.merge(&f.io.batch_size);
            phases.merge(&f.io.chunk_phases);
        }
    }
    set.histogram(
        "tessera_statement_duration_seconds",
        "Statement latency, parse excluded.",
        Vec::new(),
        &statement,
        1e6,
    );
    set.histogram(
        "tessera_commit_duration_seconds",
        "Commit latency of a write share, enqueue to durable.",
        Vec::new(),
        &commit,
        1e6,
    );
    set.histogram(
        "tessera_fdatasync_duration_seconds",
        "Group-commit write and fdatasync latency.",
        Vec::new(),
        &fdatasync,
        1e6,
    );
    set.histogram(
        "tessera_group_commit_records",
        "Records per group commit (fdatasync).",
        Vec::new(),
        &batch,
        1.0,
    );
    for (phase, h) in phases.named() {
        set.histogram(
            "tessera_group_commit_phase_seconds",
            "Where each group commit's time went: thread_wait (for a blocking thread), write and \
             fdatasync (the disk), notice (until the executor saw it end).",
            vec![("phase", phase.to_owned())],
            h,
            1e6,
        );
    }
    set
}

/// The body of the `http_request` fuzz target: parse, pick an answer. Returns the status.
pub fn fuzz_http_request(data: &[u8]) -> u16 {
    match http::parse_request(data) {
        Ok(Some(r)) => http::answer(Ok(r)).status,
        Ok(None) => 0,
        Err(e) => http::answer(Err(e)).status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the text format of counters, labels with escapes, and histogram series.
    #[test]
    fn renders_prometheus_text() {
        let mut set = MetricSet::default();
        set.counter("t_total", "A counter.", vec![("a", "x\"y".to_owned())], 3);
        let mut h = Histogram::latency();
        h.observe(70);
        set.histogram("t_seconds", "A histogram.", Vec::new(), &h, 1e6);
        let text = set.to_prometheus();
        assert!(text.contains("# TYPE t_total counter\nt_total{a=\"x\\\"y\"} 3\n"), "{text}");
        assert!(text.contains("t_seconds_bucket{le=\"0.00005\"} 0\n"), "{text}");
        assert!(text.contains("t_seconds_bucket{le=\"0.0001\"} 1\n"), "{text}");
        assert!(text.contains("t_seconds_bucket{le=\"+Inf\"} 1\n"), "{text}");
        assert!(text.contains("t_seconds_count 1\n"), "{text}");
    }
}

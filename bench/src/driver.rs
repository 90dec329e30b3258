//! Connections, schema setup, the loader and the per-connection request loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, anyhow};
use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

use crate::config::{Loop, Settings, Target, Workload};
use crate::layout::{ExecutorGroups, Layout};
use crate::limits;
use crate::ops::{self, Op, OpGen, TxnSend};
use crate::rng::Rng;
use crate::schedule::{Action, Pacer, Recorder, Schedule};
use crate::sql::{self, Param, Stmt};
use crate::zipf::ScrambledZipfian;

/// Open connections to one target.
pub struct Pool {
    clients: Vec<Arc<Client>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Pool {
    /// Whether any connection has been closed (by the server, or after an error).
    pub fn any_closed(&self) -> bool {
        self.clients.iter().any(|c| c.is_closed())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Opens `n` connections to `target`, each driven by its own task.
pub async fn connect(target: &Target, n: usize) -> anyhow::Result<Pool> {
    let mut pool = Pool { clients: Vec::with_capacity(n), tasks: Vec::with_capacity(n) };
    let mut config = target.config().clone();
    config.connect_timeout(Duration::from_secs(limits::CONNECT_TIMEOUT_SECS));
    for i in 0..n {
        let (client, connection) = tokio::time::timeout(
            Duration::from_secs(limits::CONNECT_TIMEOUT_SECS),
            config.connect(NoTls),
        )
        .await
        .map_err(|_| anyhow!("connection {i}: timed out after {}s", limits::CONNECT_TIMEOUT_SECS))
        .and_then(|r| r.map_err(|e| anyhow!("connection {i}: {}", describe(&e))))
        .with_context(|| format!("connecting to {} ({})", target.name(), target.display()))?;
        pool.tasks.push(tokio::spawn(async move {
            // The connection ends when the client is dropped or the server goes away; a
            // failure shows up as errors on the client's requests, where it is counted.
            let _ = connection.await;
        }));
        pool.clients.push(Arc::new(client));
    }
    Ok(pool)
}

/// The error's kind for counting: its SQLSTATE, or `connection-closed`, or `client`.
pub fn error_kind(e: &tokio_postgres::Error) -> String {
    if let Some(code) = e.code() {
        return code.code().to_owned();
    }
    if e.is_closed() {
        return "connection-closed".to_owned();
    }
    "client".to_owned()
}

/// A one-line description including the server's message and detail, if any.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
        if let Some(d) = db.detail() {
            s.push_str("; ");
            s.push_str(d);
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

fn bar(len: u64, prefix: String, template: &str, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    ProgressBar::new(len).with_style(style).with_prefix(prefix)
}

/// What loading took.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LoadReport {
    /// Target name.
    pub target: String,
    /// Documents written.
    pub docs: u64,
    /// Wall time, seconds.
    pub secs: f64,
}

/// Creates the collection (emptying an old one) and writes documents `0..docs`, spread over
/// the pool's connections in batches of `LOAD_BATCH_DOCS`: transactions of pipelined inserts
/// for PostgreSQL, multi-row inserts for Tessera (`sql::load_style`).
pub async fn load(
    target: &Target,
    pool: &Pool,
    docs: u64,
    seed: u64,
    show_progress: bool,
) -> anyhow::Result<LoadReport> {
    let first = pool.clients.first().ok_or_else(|| anyhow!("no connections"))?;
    for stmt in sql::setup(target.flavor()) {
        let mut result = first.batch_execute(stmt).await;
        if let Err(e) = &result
            && e.code() == Some(&tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED)
            && let Some(fallback) = sql::setup_fallback(stmt)
        {
            result = first.batch_execute(fallback).await;
        }
        result.map_err(|e| anyhow!("{}: setup `{stmt}`: {}", target.name(), describe(&e)))?;
    }
    let progress = bar(
        docs,
        format!("load {}", target.name()),
        "{prefix:>20} [{bar:30}] {pos}/{len} docs, eta {eta}",
        show_progress,
    );
    let started = Instant::now();
    let step = pool.clients.len().max(1);
    let mut tasks = Vec::new();
    for (i, client) in pool.clients.iter().enumerate() {
        let client = Arc::clone(client);
        let progress = progress.clone();
        let flavor = target.flavor();
        let name = target.name().to_owned();
        tasks.push(tokio::spawn(async move {
            let fail = |what: &str, e: tokio_postgres::Error| {
                anyhow!("{name}: loading ({what}): {}", describe(&e))
            };
            let style = sql::load_style(flavor);
            let insert = match style {
                sql::LoadStyle::Transaction => Some(
                    client
                        .prepare(sql::sql(flavor, Stmt::Insert))
                        .await
                        .map_err(|e| anyhow!("{name}: prepare insert: {}", describe(&e)))?,
                ),
                sql::LoadStyle::MultiRow => None,
            };
            // Multi-row statements by row count: every full batch reuses one prepared statement.
            let mut multi: BTreeMap<usize, Statement> = BTreeMap::new();
            let mut rng = Rng::stream(seed, 1_000_000 + i as u64);
            let mut keys = (i as u64..docs).step_by(step).peekable();
            while keys.peek().is_some() {
                let batch: Vec<u64> = keys.by_ref().take(limits::LOAD_BATCH_DOCS).collect();
                let rows: Vec<(String, String)> = batch
                    .iter()
                    .map(|&k| (ops::doc_id(k), ops::loaded_document(k, &mut rng)))
                    .collect();
                match &insert {
                    Some(insert) => {
                        // One transaction per batch, its inserts pipelined: join_all polls
                        // (and so sends) them in order, after BEGIN and before COMMIT.
                        client.batch_execute(sql::BEGIN).await.map_err(|e| fail("BEGIN", e))?;
                        let client = &client;
                        let inserts = rows.iter().map(|(id, doc)| async move {
                            client.execute(insert, &[&Param(id), &Param(doc)]).await
                        });
                        for (result, (id, _)) in join_all(inserts).await.into_iter().zip(&rows) {
                            result.map_err(|e| fail(id, e))?;
                        }
                        client.batch_execute(sql::COMMIT).await.map_err(|e| fail("COMMIT", e))?;
                    }
                    None => {
                        let statement = match multi.get(&rows.len()) {
                            Some(s) => s.clone(),
                            None => {
                                let s = client
                                    .prepare(&sql::multi_row_insert(rows.len()))
                                    .await
                                    .map_err(|e| fail("prepare multi-row insert", e))?;
                                multi.insert(rows.len(), s.clone());
                                s
                            }
                        };
                        let params: Vec<Param<'_>> = rows
                            .iter()
                            .flat_map(|(id, doc)| [Param(id), Param(doc)])
                            .collect();
                        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                            .iter()
                            .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                            .collect();
                        let written = client.execute(&statement, &refs).await.map_err(|e| {
                            let first = rows.first().map_or("", |(id, _)| id.as_str());
                            fail(&format!("multi-row insert from {first}"), e)
                        })?;
                        if written != rows.len() as u64 {
                            return Err(anyhow!(
                                "{name}: loading: a multi-row insert of {} documents reported {written} rows",
                                rows.len()
                            ));
                        }
                    }
                }
                progress.inc(batch.len() as u64);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await.context("loader task")??;
    }
    progress.finish_and_clear();
    Ok(LoadReport { target: target.name().to_owned(), docs, secs: started.elapsed().as_secs_f64() })
}

/// One measured slice of a workload on a target.
pub struct Slice<'a> {
    /// The target.
    pub target: &'a Target,
    /// Its connections.
    pub pool: &'a Pool,
    /// The workload.
    pub workload: Workload,
    /// Run settings.
    pub settings: &'a Settings,
    /// Unmeasured time at the start of this slice.
    pub warmup: Duration,
    /// Measured time of this slice.
    pub measured: Duration,
    /// Distinguishes the random streams and inserted ids of slices.
    pub slice_id: u64,
    /// Shared zipfian generator for the YCSB workloads.
    pub zipf: Option<Arc<ScrambledZipfian>>,
    /// Customers by executor, for the cross-fragment transfer.
    pub groups: Option<Arc<ExecutorGroups>>,
    /// Makes inserted ids unique across runs.
    pub run_nonce: u64,
    /// Draw a progress bar.
    pub show_progress: bool,
}

async fn prepare_all(
    client: &Client,
    target: &Target,
    workload: Workload,
) -> Result<BTreeMap<Stmt, Statement>, (String, String)> {
    let mut out = BTreeMap::new();
    for &stmt in sql::statements(workload) {
        let text = sql::sql(target.flavor(), stmt);
        match client.prepare(text).await {
            Ok(s) => {
                out.insert(stmt, s);
            }
            Err(e) => {
                return Err((error_kind(&e), format!("prepare `{text}`: {}", describe(&e))));
            }
        }
    }
    Ok(out)
}

/// Runs one slice on every connection of the target and returns the merged recorder.
pub async fn run_slice(slice: Slice<'_>) -> Recorder {
    let warmup_ns = u64::try_from(slice.warmup.as_nanos()).unwrap_or(u64::MAX);
    let end_ns =
        warmup_ns.saturating_add(u64::try_from(slice.measured.as_nanos()).unwrap_or(u64::MAX));
    let depth = slice.settings.depth_for(slice.workload);
    let connections = slice.pool.clients.len() as u64;

    // Prepare first, on every connection, so the clock starts with everything ready.
    let mut prepared = Vec::with_capacity(slice.pool.clients.len());
    for client in &slice.pool.clients {
        let timeout = Duration::from_secs(limits::PREPARE_TIMEOUT_SECS);
        let result =
            tokio::time::timeout(timeout, prepare_all(client, slice.target, slice.workload))
                .await
                .unwrap_or_else(|_| {
                    Err((
                        "timeout".to_owned(),
                        format!("preparing statements took longer than {timeout:?}"),
                    ))
                });
        match result {
            Ok(p) => prepared.push(p),
            Err((kind, message)) => {
                let mut r = Recorder::new(warmup_ns);
                r.error(&kind, &message);
                return r;
            }
        }
    }

    let completed = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let base = Instant::now();
    let wakers: Vec<Arc<Notify>> =
        slice.pool.clients.iter().map(|_| Arc::new(Notify::new())).collect();
    let ticker = match slice.settings.arrival {
        Loop::Open { rate_per_sec } => {
            Some(Ticker::start(base, rate_per_sec, end_ns, wakers.clone()))
        }
        Loop::Closed => None,
    };
    let mut tasks = Vec::new();
    for (i, (client, statements)) in slice.pool.clients.iter().zip(prepared).enumerate() {
        let pacer = match slice.settings.arrival {
            Loop::Closed => Pacer::closed(end_ns, depth),
            Loop::Open { rate_per_sec } => {
                Pacer::open(Schedule::new(0, rate_per_sec, i as u64, connections), end_ns, depth)
            }
        };
        let stream = slice.slice_id * limits::CONNECTIONS_MAX as u64 + i as u64;
        let op_gen = OpGen::new(
            slice.workload,
            slice.settings.docs,
            Rng::stream(slice.settings.seed, stream),
            slice.zipf.clone(),
            format!("n/{}/{}/{}", slice.run_nonce, slice.slice_id, i),
        )
        .with_groups(slice.groups.clone());
        let conn = Connection {
            drain_timeout: slice.settings.drain_timeout,
            wake: wakers.get(i).cloned(),
            client: Arc::clone(client),
            flavor: slice.target.flavor(),
            statements,
            base,
            completed: Arc::clone(&completed),
            failed: Arc::clone(&failed),
        };
        let recorder = Recorder::new(warmup_ns);
        tasks.push(tokio::spawn(conn.run(pacer, op_gen, recorder, end_ns)));
    }

    let progress = bar(
        end_ns / 1_000_000,
        format!("{} {}", slice.workload, slice.target.name()),
        "{prefix:>36} [{bar:30}] {elapsed_precise} {msg}",
        slice.show_progress,
    );
    let warmup_ms = warmup_ns / 1_000_000;
    let progress_ticker = {
        let progress = progress.clone();
        let completed = Arc::clone(&completed);
        let failed = Arc::clone(&failed);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                let ms = u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX);
                progress.set_position(ms);
                let phase = if ms < warmup_ms { "warm-up" } else { "measuring" };
                progress.set_message(format!(
                    "{phase}: {} ops, {} errors",
                    completed.load(Ordering::Relaxed),
                    failed.load(Ordering::Relaxed)
                ));
            }
        })
    };

    let mut merged = Recorder::new(warmup_ns);
    for t in tasks {
        match t.await {
            Ok(r) => merged.merge(&r),
            Err(e) => merged.error("client", &format!("connection task failed: {e}")),
        }
    }
    drop(ticker);
    progress_ticker.abort();
    progress.finish_and_clear();
    merged
}

/// Wakes open-loop connections at their due times from an OS thread. tokio's timer wheel
/// rounds every sleep up to a whole millisecond, which would add up to 1 ms of the
/// generator's own lateness to every open-loop latency; a thread sleeping with
/// `std::thread::sleep` (nanosleep) wakes within tens of microseconds. The thread follows the
/// global arrival sequence (`Schedule`): slot `s` is due at `s * 1e9 / rate` and belongs to
/// connection `s mod n`, whose `Notify` it signals.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    /// Longest single sleep, so `stop` is noticed quickly at low rates.
    const SLEEP_MAX: Duration = Duration::from_millis(10);

    fn start(base: Instant, rate_per_sec: u64, end_ns: u64, wakers: Vec<Arc<Notify>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            let base = base.into_std();
            let n = wakers.len().max(1) as u64;
            std::thread::Builder::new()
                .name("bench-ticker".into())
                .spawn(move || {
                    let mut slot = 0u64;
                    // One schedule over all slots: connection index 0 of 1 at the full rate.
                    let all = Schedule::new(0, rate_per_sec, 0, 1);
                    while !stop.load(Ordering::Relaxed) {
                        let due = all.due_ns(slot);
                        if due >= end_ns {
                            break;
                        }
                        let now = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        if due > now {
                            std::thread::sleep(
                                Duration::from_nanos(due - now).min(Self::SLEEP_MAX),
                            );
                            continue;
                        }
                        let index = usize::try_from(slot % n).unwrap_or(0);
                        if let Some(w) = wakers.get(index) {
                            w.notify_one();
                        }
                        slot += 1;
                    }
                })
                .ok()
        };
        Ticker { stop, thread }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // The thread sleeps at most SLEEP_MAX between checks of `stop`.
            let _ = t.join();
        }
    }
}

struct Completion {
    due_ns: u64,
    sent_ns: u64,
    done_ns: u64,
    result: Result<u64, (String, String)>,
    /// Transactions: attempts refused with a serialization failure and run again.
    retries: u64,
}

struct Connection {
    drain_timeout: Duration,
    /// Signalled by the `Ticker` when this connection's next open-loop request is due.
    wake: Option<Arc<Notify>>,
    client: Arc<Client>,
    /// Whose SQL a one-Query transaction block is written in.
    flavor: crate::config::Flavor,
    statements: BTreeMap<Stmt, Statement>,
    base: Instant,
    completed: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl Connection {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn statement(&self, stmt: Stmt) -> Result<&Statement, String> {
        self.statements.get(&stmt).ok_or_else(|| format!("statement {stmt:?} was not prepared"))
    }

    /// Sends one operation and returns the rows it returned or changed, and how many times a
    /// transaction was retried after a serialization failure.
    async fn execute(&self, op: &Op) -> (Result<u64, (String, String)>, u64) {
        match op {
            Op::Transfer { first, second, send } => {
                self.transaction(&[(Stmt::Debit, first), (Stmt::Credit, second)], *send).await
            }
            Op::WriteTxn { id, send } => self.transaction(&[(Stmt::Debit, id)], *send).await,
            _ => (self.execute_one(op).await, 0),
        }
    }

    /// A transaction: BEGIN, each `(statement, id)` step, COMMIT, run again from BEGIN after a
    /// serialization failure (40001, or 40P01 for a deadlock), at most `TXN_ATTEMPTS_MAX`
    /// times. Pipelined, the messages are sent before any answer is read (tokio-postgres
    /// writes requests polled together back to back); the first error in statement order is
    /// the transaction's. In one Query, the block is one simple query with the ids inlined.
    async fn transaction(
        &self,
        steps: &[(Stmt, &String)],
        send: TxnSend,
    ) -> (Result<u64, (String, String)>, u64) {
        let client = &*self.client;
        let fail = |e: tokio_postgres::Error| (error_kind(&e), describe(&e));
        let missing = |m: String| ("client".to_owned(), m);
        let mut prepared = Vec::with_capacity(steps.len());
        for (stmt, _) in steps {
            match self.statement(*stmt) {
                Ok(s) => prepared.push(s),
                Err(m) => return (Err(missing(m)), 0),
            }
        }
        let params: Vec<Param<'_>> = steps.iter().map(|(_, id)| Param(id)).collect();
        let args: Vec<[&(dyn ToSql + Sync); 1]> =
            params.iter().map(|p| [p as &(dyn ToSql + Sync)]).collect();
        let text = match send {
            TxnSend::OneQuery => {
                let literal: Vec<(Stmt, &str)> =
                    steps.iter().map(|(stmt, id)| (*stmt, id.as_str())).collect();
                sql::block(self.flavor, &literal)
            }
            TxnSend::OneByOne | TxnSend::Pipelined => String::new(),
        };
        let mut retries = 0;
        loop {
            let result = match send {
                TxnSend::Pipelined => {
                    let writes = prepared.iter().zip(&args).map(|(s, a)| client.execute(*s, a));
                    let (begin, written, commit) = futures_util::join!(
                        client.batch_execute(sql::BEGIN),
                        join_all(writes),
                        client.batch_execute(sql::COMMIT),
                    );
                    begin
                        .and_then(|()| written.into_iter().sum::<Result<u64, _>>())
                        .and_then(|n| commit.map(|()| n))
                }
                TxnSend::OneByOne => {
                    async {
                        client.batch_execute(sql::BEGIN).await?;
                        let mut n = 0;
                        for (s, a) in prepared.iter().zip(&args) {
                            n += client.execute(*s, a).await?;
                        }
                        client.batch_execute(sql::COMMIT).await?;
                        Ok::<u64, tokio_postgres::Error>(n)
                    }
                    .await
                }
                TxnSend::OneQuery => {
                    client.simple_query(&text).await.map(|messages| rows_changed(&messages))
                }
            };
            let Err(e) = result else { return (result.map_err(fail), retries) };
            if !client.is_closed() {
                // Leave the connection usable for the next transaction. A failed COMMIT
                // has already ended the transaction; the ROLLBACK then only warns.
                let _ = client.batch_execute(sql::ROLLBACK).await;
            }
            let retryable = matches!(e.code().map(|c| c.code()), Some("40001" | "40P01"));
            if !retryable || retries + 1 >= u64::from(limits::TXN_ATTEMPTS_MAX) {
                return (Err(fail(e)), retries);
            }
            retries += 1;
        }
    }

    /// Sends one single-statement operation and returns the rows it returned or changed.
    async fn execute_one(&self, op: &Op) -> Result<u64, (String, String)> {
        let client = &*self.client;
        let fail = |e: tokio_postgres::Error| (error_kind(&e), describe(&e));
        let missing = |m: String| ("client".to_owned(), m);
        match op {
            Op::Read { id } => {
                let s = self.statement(Stmt::PointRead).map_err(missing)?;
                client.query(s, &[&Param(id)]).await.map(|r| r.len() as u64).map_err(fail)
            }
            Op::Insert { id, doc } => {
                let s = self.statement(Stmt::Insert).map_err(missing)?;
                client.execute(s, &[&Param(id), &Param(doc)]).await.map_err(fail)
            }
            Op::Upsert { id, doc } => {
                let s = self.statement(Stmt::Upsert).map_err(missing)?;
                client.execute(s, &[&Param(id), &Param(doc)]).await.map_err(fail)
            }
            Op::Update { id, value } => {
                let s = self.statement(Stmt::UpdateField).map_err(missing)?;
                client.execute(s, &[&Param(id), &Param(value)]).await.map_err(fail)
            }
            Op::Content { customer } => {
                let s = self.statement(Stmt::ContentQuery).map_err(missing)?;
                client.query(s, &[&Param(customer)]).await.map(|r| r.len() as u64).map_err(fail)
            }
            Op::Scatter { tag } => {
                let s = self.statement(Stmt::ScatterQuery).map_err(missing)?;
                client.query(s, &[&Param(tag)]).await.map(|r| r.len() as u64).map_err(fail)
            }
            Op::Write { id } => {
                let s = self.statement(Stmt::Debit).map_err(missing)?;
                client.execute(s, &[&Param(id)]).await.map_err(fail)
            }
            Op::QueryWrite { id } => client
                .simple_query(&sql::inlined(self.flavor, Stmt::Debit, id))
                .await
                .map(|messages| rows_changed(&messages))
                .map_err(fail),
            Op::TwoWrites { first, second } => {
                let debit = self.statement(Stmt::Debit).map_err(missing)?;
                let credit = self.statement(Stmt::Credit).map_err(missing)?;
                let a = client.execute(debit, &[&Param(first)]).await.map_err(fail)?;
                let b = client.execute(credit, &[&Param(second)]).await.map_err(fail)?;
                Ok(a + b)
            }
            Op::Transfer { .. } | Op::WriteTxn { .. } => {
                Err(missing("a transaction is not one statement".to_owned()))
            }
        }
    }

    /// Runs one operation; returns its due, send and completion times and its result. The
    /// send time is taken at the first poll, when the request enters the connection's queue.
    async fn timed(&self, op: Op, due_ns: u64) -> Completion {
        let sent_ns = self.now_ns();
        let (result, retries) = self.execute(&op).await;
        Completion { due_ns, sent_ns, done_ns: self.now_ns(), result, retries }
    }

    /// The request loop of one connection: asks the pacer what to do, keeps up to `depth`
    /// requests in flight, records every completion, and drains (bounded) at the end.
    async fn run(
        self,
        mut pacer: Pacer,
        mut op_gen: OpGen,
        mut rec: Recorder,
        end_ns: u64,
    ) -> Recorder {
        let mut in_flight = FuturesUnordered::new();
        let end = self.base + Duration::from_nanos(end_ns);
        let drain_deadline = end + self.drain_timeout;
        let mut closed = false;
        loop {
            let now = self.now_ns();
            let action = if closed {
                // The server closed the connection: stop sending, collect what is in flight.
                if in_flight.is_empty() { Action::Done } else { Action::WaitCompletion }
            } else {
                pacer.next(now, in_flight.len())
            };
            let completion = match action {
                Action::Send { due_ns } => {
                    in_flight.push(self.timed(op_gen.next_op(), due_ns));
                    continue;
                }
                Action::Done => break,
                Action::WaitUntil { at_ns } => {
                    // The ticker's wake-up is the precise one; tokio's timer (1 ms granularity)
                    // is the fallback. A stale wake-up only makes the pacer look again.
                    let at = self.base + Duration::from_nanos(at_ns);
                    let wake = async {
                        match &self.wake {
                            Some(w) => w.notified().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = wake => continue,
                        _ = tokio::time::sleep_until(at) => continue,
                        Some(c) = in_flight.next(), if !in_flight.is_empty() => c,
                    }
                }
                Action::WaitCompletion if now >= end_ns || closed => {
                    match tokio::time::timeout_at(drain_deadline, in_flight.next()).await {
                        Ok(Some(c)) => c,
                        Ok(None) => break,
                        Err(_) => {
                            for _ in 0..in_flight.len() {
                                rec.error(
                                    "timeout",
                                    &format!(
                                        "no reply within {:?} after the run ended",
                                        self.drain_timeout
                                    ),
                                );
                                self.failed.fetch_add(1, Ordering::Relaxed);
                            }
                            break;
                        }
                    }
                }
                // Before the end: wait for a completion, but no longer than the end, so that a
                // server that stops answering cannot keep the run from ending.
                Action::WaitCompletion => {
                    match tokio::time::timeout_at(end, in_flight.next()).await {
                        Ok(Some(c)) => c,
                        Ok(None) | Err(_) => continue,
                    }
                }
            };
            rec.sent(completion.due_ns, completion.sent_ns);
            rec.retried(completion.due_ns, completion.retries);
            match completion.result {
                Ok(rows) => {
                    rec.success(completion.due_ns, completion.done_ns, rows);
                    self.completed.fetch_add(1, Ordering::Relaxed);
                }
                Err((kind, message)) => {
                    rec.error(&kind, &message);
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    if self.client.is_closed() {
                        closed = true;
                    }
                }
            }
        }
        drop(in_flight);
        // Open-loop requests due before the end that were never sent (pipeline full, or the
        // connection died) are recorded at their lower-bound latency and counted as unsent.
        for due in pacer.unsent() {
            rec.unsent(due, end_ns);
        }
        rec
    }
}

/// The layout the cross-fragment transfer plans with: the first Tessera target's
/// `SHOW FRAGMENTS`, or the node's default layout when no Tessera target is measured (so
/// PostgreSQL-only runs draw the same pairs). Also says where it came from, for the log.
pub async fn layout(targets: &[Target], pools: &[Pool]) -> anyhow::Result<(Layout, String)> {
    for (t, pool) in targets.iter().zip(pools) {
        if t.flavor() != crate::config::Flavor::Tessera {
            continue;
        }
        let client = pool.clients.first().ok_or_else(|| anyhow!("no connections"))?;
        let messages = client
            .simple_query("SHOW FRAGMENTS")
            .await
            .map_err(|e| anyhow!("{}: SHOW FRAGMENTS: {}", t.name(), describe(&e)))?;
        let mut rows = Vec::new();
        for m in &messages {
            if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                let (Some(shards), Some(executor)) = (r.get(1), r.get(2)) else {
                    return Err(anyhow!("{}: SHOW FRAGMENTS: a row without shards", t.name()));
                };
                rows.push((shards.to_owned(), executor.to_owned()));
            }
        }
        let layout = Layout::from_rows(&rows).with_context(|| t.name().to_owned())?;
        return Ok((layout, format!("SHOW FRAGMENTS of {}", t.name())));
    }
    Ok((
        Layout::even(limits::DEFAULT_LAYOUT_FRAGMENTS, limits::DEFAULT_LAYOUT_EXECUTORS),
        format!(
            "the default layout ({} fragments on {} executors)",
            limits::DEFAULT_LAYOUT_FRAGMENTS,
            limits::DEFAULT_LAYOUT_EXECUTORS
        ),
    ))
}

/// Rows the statements of one simple Query changed (the sum of their command tags' counts).
fn rows_changed(messages: &[tokio_postgres::SimpleQueryMessage]) -> u64 {
    messages
        .iter()
        .map(|m| match m {
            tokio_postgres::SimpleQueryMessage::CommandComplete(n) => *n,
            _ => 0,
        })
        .sum()
}

//! One executor's share of the node: the fragments it owns and the work that runs on them.
//!
//! Everything here runs on the owning executor: a statement's share for this executor arrives
//! either directly (the session runs here) or as one mesh call carrying every fragment of this
//! executor that the statement touches (one hop per executor, not per fragment).
//!
//! **Invariant:** between reading a document's version and enqueueing the write that depends
//! on it there is no `.await`, so storage's version check sees exactly what the statement read;
//! a conflict means another task's write was already enqueued, and the statement is re-run.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use query::exec::VerifyPartial;
use query::explain::FragmentAnalysis;
use query::plan::Statement;
use query::plan::{CollectionName, Delete, Insert, Select, Update};
use query::{Partial, PlacedDocument, WriteIntent, WritePartial};
use router::{FragmentId, ShardRange, ShardingConfig};
use storage::{AppendError, Fragment, FragmentOptions, TxId, Version, WriteBatch, WritePause};

use super::coordinator::coordinator_of;
use super::coordinator::{Coordinator, DecisionRow, MarkerEvidence, fault, marker};
use super::error::EngineError;
use super::limits::{
    AUTOCOMMIT_CONTENTION_WINDOW, TXN_FRAGMENT_OPS_MAX, TXN_HELD_WAIT_MAX, TXN_PREPARED_TIMEOUT,
    TXN_SWEEP_INTERVAL,
};
use super::reader::FragmentReader;
use super::shared::{CatalogView, Rules, Shared};
use super::txn::{FragmentWrites, OverlayReader, Reads};
use crate::catalog::CollectionEntry;
use crate::runtime::{ExecutorContext, ExecutorIndex, Mesh};

/// Times an autocommit write statement is run against one fragment when concurrent writes
/// keep changing the documents it read. Each run is cheap (local, no hop); past this the
/// client gets 40001 and should retry.
pub const WRITE_ATTEMPTS_MAX: u32 = 16;

/// Longest a conflicting write waits for the write it conflicted with to become durable
/// before it is re-run anyway. A group commit takes one fdatasync; this is far above it.
pub const WRITE_CONFLICT_WAIT_MAX: Duration = Duration::from_secs(2);

/// How long a write pauses before running again when its document is held by a prepared
/// transaction (whose commit or abort is one fdatasync away), and the unit of an autocommit
/// transaction's back-off after a conflict (multiplied by the attempt number).
pub const WRITE_CONFLICT_POLL: Duration = Duration::from_millis(1);

/// How often `Core::close_fragment` looks whether the statements still holding a fragment
/// it stopped serving are done (they finish within one statement's time).
pub const FRAGMENT_RELEASE_POLL: Duration = Duration::from_millis(1);

/// A fragment and the shard ranges of it a statement reads.
#[derive(Clone, Debug)]
pub struct Target {
    /// The fragment.
    pub fragment: FragmentId,
    /// Ranges inside the fragment's own range.
    pub ranges: Vec<ShardRange>,
}

/// Per-fragment counters of work done, for pruning checks and SHOW.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragmentCounters {
    /// Statements that ran on the fragment.
    pub statements: u64,
    /// Documents read.
    pub rows_scanned: u64,
}

/// One line of SHOW FRAGMENTS.
#[derive(Clone, Debug)]
pub struct FragmentRow {
    /// Fragment.
    pub fragment: FragmentId,
    /// Its shard range.
    pub range: ShardRange,
    /// Owning executor.
    pub executor: ExecutorIndex,
    /// Live documents.
    pub documents: u64,
    /// Log bytes of live documents.
    pub bytes: u64,
    /// Work counters.
    pub counters: FragmentCounters,
}

/// What a write statement did on this executor's fragments.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    /// Documents written or deleted.
    pub affected: u64,
    /// RETURNING rows.
    pub returning: Vec<Vec<query::Datum>>,
    /// Per fragment, for EXPLAIN ANALYZE.
    pub analysis: Vec<FragmentAnalysis>,
}

impl WriteOutcome {
    /// Adds one fragment's share: the documents it writes, its RETURNING rows and its line
    /// for EXPLAIN ANALYZE.
    pub fn add_share(
        &mut self,
        fragment: FragmentId,
        affected: u64,
        returning: Vec<Vec<query::Datum>>,
        rows_scanned: u64,
        elapsed: Duration,
    ) {
        self.affected += affected;
        self.returning.extend(returning);
        self.analysis.push(FragmentAnalysis {
            fragment,
            rows_scanned,
            rows_returned: affected,
            elapsed,
        });
    }

    /// Adds another executor's or node's outcome.
    pub fn absorb(&mut self, other: WriteOutcome) {
        self.affected += other.affected;
        self.returning.extend(other.returning);
        self.analysis.extend(other.analysis);
    }
}

/// Transaction counters of one executor (commits counted where the session runs, conflicts
/// where they are detected). `SHOW transaction_counters` sums them over executors; the
/// metrics endpoint reads them through [`Core::tx_counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxCounters {
    /// Write transactions committed with one `apply` on one fragment (no coordinator).
    pub fast_path_commits: u64,
    /// Transactions committed by two-phase commit (a COMMIT decision in the journal).
    pub two_phase_commits: u64,
    /// Read-only transactions whose reads validated.
    pub read_only_commits: u64,
    /// Of those, transactions over several fragments whose range counts and absences were
    /// held on all at once before the other checks ran (`Session::validate_reads`).
    pub read_only_holds: u64,
    /// Transactions that ended without committing (ROLLBACK, conflict, error, timeout).
    pub aborts: u64,
    /// Commits refused with 40001 because a document read or written had changed or was held.
    pub conflicts: u64,
    /// Of `conflicts`, those where a range a block scanned holds other documents than it
    /// saw (a phantom): many of them mean scans in blocks cover ranges that others write.
    pub range_conflicts: u64,
    /// Commits and autocommit writes that met a document held by a prepared transaction and
    /// waited for it to be released (`Core::wait_released`) before running again.
    pub held_waits: u64,
    /// Fragments an autocommit UPDATE or DELETE read in slices at one instant, writes of what
    /// it read held off meanwhile: by `Core::read_paused` when its share there was larger than
    /// a slice, by a prepared attempt (`Core::txn_write_prepared`) whatever its size.
    pub paused_reads: u64,
    /// Attempts of an autocommit UPDATE or DELETE over several fragments that prepared each
    /// fragment's writes at the instant it was read (`Core::txn_write_prepared`): retries
    /// after a conflict, and first attempts soon after one (`AUTOCOMMIT_CONTENTION_WINDOW`).
    /// Counted where the session runs.
    pub prepared_attempts: u64,
}

/// A prepare queued on a fragment, its durability still to be awaited.
type PrepareFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<storage::Lsn, AppendError>>>>;

/// A fragment and what one statement of a transaction does there.
#[derive(Clone, Debug)]
pub struct TxnTarget {
    /// The fragment.
    pub fragment: FragmentId,
    /// Shard ranges to read (UPDATE, DELETE, SELECT).
    pub ranges: Vec<ShardRange>,
    /// Placed documents (INSERT).
    pub docs: Vec<PlacedDocument>,
    /// The transaction's buffered writes there.
    pub writes: Option<Arc<FragmentWrites>>,
}

/// What one statement of a transaction read and would write on one fragment.
#[derive(Debug)]
pub struct TxnShare {
    /// The fragment.
    pub fragment: FragmentId,
    /// The writes, to buffer.
    pub intents: Vec<WriteIntent>,
    /// Storage versions read and ranges scanned.
    pub reads: Reads,
    /// RETURNING rows.
    pub returning: Vec<Vec<query::Datum>>,
    /// Documents read.
    pub rows_scanned: u64,
    /// Time spent evaluating, for EXPLAIN ANALYZE.
    pub elapsed: Duration,
}

/// A transaction prepared on some of this executor's fragments.
#[derive(Clone, Debug)]
pub struct PreparedTxn {
    /// The fragments.
    pub fragments: Vec<FragmentId>,
    /// Those of `fragments` only held (a read-only participant: checked and locked in memory,
    /// no PREPARE record).
    pub held: Vec<FragmentId>,
    /// Since the first prepare.
    pub since: Instant,
    /// A commit or abort is under way.
    pub finishing: bool,
    /// A one-round commit: the participants its marker names (taken from the batch this
    /// executor prepared, so phase two and the timeout need not read the Prepare record).
    pub marked: Option<Vec<FragmentId>>,
}

impl PreparedTxn {
    /// Its SHOW TRANSACTIONS states, each with its fragments: `finishing` for all of them once
    /// a commit or abort is under way; before that `prepared` for the fragments with a durable
    /// PREPARE and `held` for the read-only ones. States without fragments are left out.
    pub fn show_states(&self) -> Vec<(&'static str, Vec<FragmentId>)> {
        if self.finishing {
            return vec![("finishing", self.fragments.clone())];
        }
        let (held, prepared): (Vec<FragmentId>, Vec<FragmentId>) =
            self.fragments.iter().partition(|f| self.held.contains(f));
        [("prepared", prepared), ("held", held)]
            .into_iter()
            .filter(|(_, fragments)| !fragments.is_empty())
            .collect()
    }
}

/// One open transaction block of a session on this executor, for SHOW TRANSACTIONS.
#[derive(Clone, Debug)]
pub struct SessionTxnRow {
    /// `active`, `failed` or `committing`.
    pub state: &'static str,
    /// Fragments touched so far.
    pub fragments: Vec<FragmentId>,
    /// Since BEGIN.
    pub since: Instant,
}

/// What [`Core::txn_rows`] returns: session blocks, prepared transactions, decisions.
pub type TxnRows = (Vec<(u64, SessionTxnRow)>, Vec<(TxId, PreparedTxn)>, Vec<DecisionRow>);

/// Storage versions read, per fragment.
pub type FragmentReads = Vec<(FragmentId, Reads)>;

/// The fragments of one executor.
pub struct Core {
    index: ExecutorIndex,
    shared: Arc<Shared>,
    fragments: RefCell<BTreeMap<FragmentId, Rc<Fragment>>>,
    /// Fragments that accept no more writes (handoff fenced them; reads still run).
    fenced: RefCell<BTreeSet<FragmentId>>,
    /// Fragments being opened at runtime (a second open of one waits for the first).
    opening: RefCell<BTreeSet<FragmentId>>,
    segment_bytes: u64,
    /// The gate on group commits in flight shared by this executor's fragments.
    sync_gate: Option<storage::SyncGate>,
    counters: RefCell<BTreeMap<FragmentId, FragmentCounters>>,
    catalog_gate: glommio::sync::Semaphore,
    tx_counters: Cell<TxCounters>,
    /// When an autocommit statement over several fragments of a session here last conflicted,
    /// by collection (entries older than `AUTOCOMMIT_CONTENTION_WINDOW` dropped on insert).
    autocommit_conflict_at: RefCell<BTreeMap<String, Instant>>,
    prepared: RefCell<BTreeMap<TxId, PreparedTxn>>,
    /// Transactions of `prepared` whose documents phase two already released here (their
    /// Commit records may still be on their way to disk).
    released: RefCell<BTreeSet<TxId>>,
    /// Waits for a transaction of `prepared` to release its documents here
    /// ([`Core::wait_released`]); dropping the senders ends them.
    release_waits: RefCell<BTreeMap<TxId, Vec<flume::Sender<()>>>>,
    sessions: RefCell<BTreeMap<u64, SessionTxnRow>>,
    next_session_txn: Cell<u64>,
    coordinator: Option<Coordinator>,
    mesh: RefCell<Option<Mesh<Core>>>,
    metrics: crate::metrics::ExecutorMetrics,
    /// Transactions whose Commit records here are durable and not yet reported to the
    /// coordinator (executor 0): they ride on the next report.
    unreported: RefCell<Vec<Report>>,
    /// A report to the coordinator is in flight.
    reporting: Cell<bool>,
    /// Parsed statements by SQL text, for every session of this executor.
    parse_cache: RefCell<query::ParseCache>,
}

/// Documents one slice of a transaction block's SELECT reads, read versions its session
/// records at once, and checks of a read-only transaction validated at once on one fragment,
/// each followed by [`between_slices`]. A quarter of an autocommit slice
/// (`query::limits::STREAM_PAGE_SCANNED`): the overlay records every version it reads and
/// the session files each in the block's map, so 16,384 of them held the executor ~60 ms
/// where an autocommit slice takes a few (`scripts/bench-scan-stall.sh` with a block's
/// `count(*)`, session 25). Within `TXN_FRAGMENT_OPS_MAX`.
pub const CHECK_SLICE_OPS: usize = 4_096;

const _: () = assert!(CHECK_SLICE_OPS <= TXN_FRAGMENT_OPS_MAX);

/// What a long read does between two slices: lets the executor's other work run first. A
/// task yield alone is not enough: glommio 0.9 reaps I/O completions (another connection's
/// statement arriving) only between rounds of its task queues, which a queue with a runnable
/// task ends only at the preempt timer (100 ms); measured with `scripts/bench-scan-stall.sh`,
/// point reads beside an export waited ~110 ms at p99 with yields. Sleeping on a timer leaves
/// this task not runnable, so the round ends, completions are reaped and the statements they
/// wake run before the next slice. The timer must still be pending when first polled (a
/// glommio timer already due completes without yielding, as a nanosecond's did: no change
/// measured): `SLICE_PAUSE`.
pub async fn between_slices() {
    glommio::timer::sleep(SLICE_PAUSE).await;
}

/// One fragment's share of an autocommit write (`Core::write_fragment`).
#[derive(Clone, Copy)]
enum WriteShare<'a> {
    Insert(&'a Insert, &'a [PlacedDocument]),
    Update(&'a Update, &'a [ShardRange]),
    Delete(&'a Delete, &'a [ShardRange]),
}

/// Runs `scan` over `ranges` of `source` to its end, a slice at a time with
/// [`between_slices`] after each (`Core::select`, `Core::txn_select`).
async fn read_in_slices<'a, 's: 'a, S: query::PagedSource>(
    mut scan: query::SelectScan<'s>,
    source: &'a S,
    ranges: &[router::ShardRange],
) -> Result<Partial, EngineError> {
    while scan.read_slice(source, ranges)? {
        between_slices().await;
    }
    Ok(scan.finish())
}

/// [`read_in_slices`] for an UPDATE's or DELETE's share (`Core::txn_write`,
/// `Core::read_write_share`).
async fn write_in_slices<'a, 's: 'a, S: query::PagedSource>(
    mut scan: query::WriteScan<'s>,
    source: &'a S,
    ranges: &[router::ShardRange],
) -> Result<WritePartial, EngineError> {
    while scan.read_slice(source, ranges)? {
        between_slices().await;
    }
    Ok(scan.finish())
}

/// How a transaction's write statement reads a fragment's share (`Core::txn_write`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareRead {
    /// A block's statement on this node: an UPDATE or DELETE in slices of
    /// [`CHECK_SLICE_OPS`] documents, each at its own instant (its commit validates every
    /// version read and range counted, which are kept).
    Block,
    /// A share a node of an older build asks for (`Share::TxnWrite`, whose request does not
    /// say whether a block or an autocommit statement sent it): in one go, the executor held
    /// meanwhile, the versions read kept for the asker. A node of this build says which
    /// (`Share::TxnWriteAs`) and its share is read as one of the other three.
    Asked,
    /// The first attempt of an autocommit statement over several fragments, which checks
    /// only what it writes: at one instant, in slices under a pause of the writes of what it
    /// reads ([`Core::read_paused`]), the pause ending with the fragment's read. No versions kept.
    AutocommitPaused,
    /// That statement's later attempts when they cannot prepare as they read
    /// ([`Core::txn_write_prepared`]: an INSERT, or a map found stale): in one go. No
    /// versions kept.
    AutocommitOneGo,
}

impl ShareRead {
    /// Whether the versions of what the share read are kept for its commit.
    pub fn keeps_reads(self) -> bool {
        matches!(self, ShareRead::Block | ShareRead::Asked)
    }

    /// Documents an UPDATE's or DELETE's share reads per slice (all of them in one go).
    fn slice_docs(self) -> usize {
        match self {
            ShareRead::Block | ShareRead::AutocommitPaused => CHECK_SLICE_OPS,
            ShareRead::Asked | ShareRead::AutocommitOneGo => usize::MAX,
        }
    }
}

/// How often executor 0 deletes the markers of one-round commits every participant finished.
pub const MARKER_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// The pause between two slices of a long read (`between_slices`): long enough to be pending
/// when polled, short beside a slice's work (a page of 1,024 rows or 16,384 documents read
/// take milliseconds).
pub const SLICE_PAUSE: std::time::Duration = std::time::Duration::from_micros(10);

impl Core {
    /// Opens (recovering) the fragments this executor owns.
    pub async fn open(
        index: ExecutorIndex,
        shared: Arc<Shared>,
        owned: Vec<(FragmentId, ShardRange, std::path::PathBuf)>,
        segment_bytes: u64,
        sync_gate: Option<storage::SyncGate>,
        shutdown: &crate::runtime::Shutdown,
    ) -> Result<Core, String> {
        let mut fragments = BTreeMap::new();
        let mut pending: BTreeMap<TxId, PreparedTxn> = BTreeMap::new();
        let opened = async {
            let mut evidence = BTreeMap::new();
            for (id, range, dir) in owned {
                let started = Instant::now();
                let options = FragmentOptions {
                    segment_bytes,
                    sync_gate: sync_gate.clone(),
                    ..FragmentOptions::default()
                };
                let fragment = Fragment::open(&dir, id, range, options)
                    .await
                    .map_err(|e| format!("cannot open fragment {id} in {}: {e}", dir.display()))?;
                // storage logs the recovery itself; this adds where and how long.
                tracing::debug!(
                    fragment = %id, %range, dir = %dir.display(),
                    elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "fragment ready"
                );
                evidence.insert(id, marker_evidence(&fragment));
                fragments.insert(id, Rc::new(fragment));
            }
            Ok::<_, String>(evidence)
        }
        .await;
        // Every executor publishes what its fragments show before any resolves a one-round
        // commit in doubt (its outcome depends on the other participants' logs), also when
        // its own opening failed, so the others never wait for it.
        let (mine, failed) = match opened {
            Ok(evidence) => (evidence, None),
            Err(e) => (BTreeMap::new(), Some(e)),
        };
        shared.txn.publish_evidence(mine, shutdown.wait()).await;
        if let Some(e) = failed {
            return Err(e);
        }
        if shutdown.is_triggered() {
            return Err("stopped while the other executors opened their fragments".to_owned());
        }
        let evidence = shared.txn.evidence();
        for (id, fragment) in &fragments {
            for txid in resolve_in_doubt(&shared, fragment, &evidence).await? {
                let p = pending.entry(txid).or_insert_with(|| asking_prepared(Vec::new()));
                p.fragments.push(*id);
            }
        }
        let coordinator = if index.get() == 0 {
            let c = Coordinator::open(&shared.data_dir)
                .await
                .map_err(|e| format!("cannot open the coordinator journal: {e}"))?;
            if shared.clustered {
                c.keep_recovered(&shared.txn.recovered_commits());
            }
            Some(c)
        } else {
            None
        };
        Ok(Core {
            index,
            shared,
            fragments: RefCell::new(fragments),
            fenced: RefCell::default(),
            opening: RefCell::default(),
            segment_bytes,
            sync_gate,
            counters: RefCell::default(),
            catalog_gate: glommio::sync::Semaphore::new(1),
            tx_counters: Cell::new(TxCounters::default()),
            autocommit_conflict_at: RefCell::new(BTreeMap::new()),
            prepared: RefCell::new(pending),
            released: RefCell::default(),
            release_waits: RefCell::default(),
            sessions: RefCell::default(),
            next_session_txn: Cell::new(1),
            coordinator,
            mesh: RefCell::new(None),
            metrics: crate::metrics::ExecutorMetrics::default(),
            unreported: RefCell::default(),
            reporting: Cell::new(false),
            parse_cache: RefCell::default(),
        })
    }

    /// Starts this executor's background work once every executor is up: the timeout that
    /// resolves transactions left prepared too long. Called from the serve phase.
    pub fn start(self: &Rc<Self>, ctx: &ExecutorContext<Core>) {
        *self.mesh.borrow_mut() = Some(ctx.mesh.clone());
        let core = Rc::clone(self);
        every(TXN_SWEEP_INTERVAL, ctx, move || {
            let core = Rc::clone(&core);
            async move { core.sweep_prepared().await }
        });
        if let Some(c) = &self.coordinator {
            // Markers live at startup: every participant was resolved (durably) before any
            // executor served, so each of those transactions is finished everywhere.
            let mut found = Vec::new();
            for (fragment, e) in self.shared.txn.take_evidence() {
                found.extend(e.live.iter().map(|t| (fragment, *t)));
                for (txid, participants) in e.in_doubt {
                    found.extend(participants.into_iter().map(|p| (p, txid)));
                }
            }
            found.sort();
            found.dedup();
            c.sweep_later(found);
            let core = Rc::clone(self);
            let mesh = ctx.mesh.clone();
            every(MARKER_SWEEP_INTERVAL, ctx, move || {
                let (core, mesh) = (Rc::clone(&core), mesh.clone());
                async move { core.sweep_markers(&mesh).await }
            });
        }
    }

    /// Deletes the markers of one-round commits every participant finished (executor 0),
    /// one call per owning executor and one batch per fragment.
    async fn sweep_markers(self: &Rc<Self>, mesh: &crate::runtime::Mesh<Core>) {
        let Some(c) = &self.coordinator else { return };
        let ready = c.take_sweepable();
        if ready.is_empty() {
            return;
        }
        let Some(map) = self.shared.map() else { return };
        let mut per: BTreeMap<ExecutorIndex, Vec<(FragmentId, TxId)>> = BTreeMap::new();
        for (fragment, txid) in ready {
            if let Some(owner) = map.owner_of(fragment) {
                per.entry(ExecutorIndex::new(owner.executor.0 as usize))
                    .or_default()
                    .push((fragment, txid));
            }
        }
        for (executor, list) in per {
            let work = move |core: Rc<Core>| async move { core.delete_markers(list).await };
            let _ = if executor == self.index {
                work(Rc::clone(self)).await;
                Ok(())
            } else {
                mesh.call_background(executor, work).await
            };
        }
    }

    /// Deletes markers of this executor's fragments, one batch per fragment, each passing the
    /// two-phase gate (a backup's cut never sees one participant's marker gone and another's
    /// Prepare in doubt). A marker already gone is not an error; a failed batch leaves its
    /// markers to the next startup's sweep.
    async fn delete_markers(&self, list: Vec<(FragmentId, TxId)>) {
        // Counted as running, so shutdown closes the fragments only after these writes.
        self.shared.statements_running.fetch_add(1, Ordering::SeqCst);
        let _running = RunningGuard(&self.shared);
        let mut per: BTreeMap<FragmentId, Vec<TxId>> = BTreeMap::new();
        for (fragment, txid) in list {
            per.entry(fragment).or_default().push(txid);
        }
        for (id, txids) in per {
            let Ok(fragment) = self.fragment(id) else { continue };
            let Some(shard) = marker::shard(fragment.range()) else { continue };
            let mut batch = WriteBatch::new();
            for txid in txids {
                batch = batch.delete(marker::COLLECTION, &marker::id(txid), shard, None);
            }
            let _pass = self.shared.two_phase_gate().enter().await;
            if let Err(e) = fragment.apply(batch).await {
                tracing::warn!(fragment = %id, error = %e, "one-round commit markers not deleted; the next startup deletes them");
            }
        }
    }

    /// Parses SQL text through this executor's parse cache (what `query::parse` gives).
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, query::PlanError> {
        self.parse_cache.borrow_mut().parse(sql)
    }

    /// The parse cache's counters.
    pub fn parse_cache_stats(&self) -> query::ParseCacheStats {
        self.parse_cache.borrow().stats()
    }

    /// This executor's position.
    pub fn index(&self) -> ExecutorIndex {
        self.index
    }

    /// The node-wide state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// This executor's operator metrics.
    pub fn metrics(&self) -> &crate::metrics::ExecutorMetrics {
        &self.metrics
    }

    /// Metrics of every fragment of this executor.
    pub fn fragment_snapshots(&self) -> Vec<crate::metrics::FragmentSnapshot> {
        let counters = self.counters.borrow();
        self.fragments
            .borrow()
            .iter()
            .map(|(id, f)| {
                let c = counters.get(id).copied().unwrap_or_default();
                crate::metrics::FragmentSnapshot::of(f, c)
            })
            .collect()
    }

    /// Backup cuts of every fragment of this executor (see `engine::backup`).
    pub async fn backup_cuts(&self) -> Result<Vec<storage::BackupCut>, storage::CutError> {
        let fragments: Vec<Rc<Fragment>> = self.fragments.borrow().values().cloned().collect();
        let mut cuts = Vec::with_capacity(fragments.len());
        for f in fragments {
            cuts.push(f.backup_cut().await?);
        }
        Ok(cuts)
    }

    fn fragment(&self, id: FragmentId) -> Result<Rc<Fragment>, EngineError> {
        self.fragments
            .borrow()
            .get(&id)
            .cloned()
            .ok_or(EngineError::NotHere { fragment: id, executor: self.index })
    }

    /// Fails with `Fenced` when `id` accepts no writes (checked right before a write is
    /// evaluated; nothing awaits between this and enqueueing the batch).
    fn writable(&self, id: FragmentId) -> Result<(), EngineError> {
        if self.fenced.borrow().contains(&id) {
            return Err(EngineError::Fenced { fragment: id });
        }
        Ok(())
    }

    /// Fragment lifecycle: the directory of fragment `id` in this node's data directory.
    pub fn fragment_dir(&self, id: FragmentId) -> std::path::PathBuf {
        self.shared.data_dir.join("fragments").join(format!("${}", id.get()))
    }

    /// Whether this executor has fragment `id` open.
    pub fn has_fragment(&self, id: FragmentId) -> bool {
        self.fragments.borrow().contains_key(&id)
    }

    /// The fragments this executor has open, with their ranges.
    pub fn open_fragments(&self) -> Vec<(FragmentId, ShardRange)> {
        self.fragments.borrow().iter().map(|(id, f)| (*id, f.range())).collect()
    }

    /// The open fragment `id` itself (handoff exports from it), if this executor has it.
    pub fn fragment_handle(&self, id: FragmentId) -> Option<Rc<Fragment>> {
        self.fragments.borrow().get(&id).cloned()
    }

    /// Fragment lifecycle: opens fragment `id` holding `range` at runtime (recovering what its
    /// directory holds; an absent directory is created empty) and serves it from now on.
    /// Opening one that is already open is a no-op (its range must match).
    pub async fn open_fragment(
        &self,
        id: FragmentId,
        range: ShardRange,
    ) -> Result<(), EngineError> {
        if let Some(open) = self.fragments.borrow().get(&id) {
            return if open.range() == range {
                Ok(())
            } else {
                Err(EngineError::FragmentLifecycle(format!(
                    "fragment {id} is open with range {} here, not {range}",
                    open.range()
                )))
            };
        }
        if !self.opening.borrow_mut().insert(id) {
            return Err(EngineError::FragmentLifecycle(format!("fragment {id} is being opened")));
        }
        let dir = self.fragment_dir(id);
        let options = FragmentOptions {
            segment_bytes: self.segment_bytes,
            sync_gate: self.sync_gate.clone(),
            ..FragmentOptions::default()
        };
        let opened = Fragment::open(&dir, id, range, options).await;
        self.opening.borrow_mut().remove(&id);
        let fragment = opened.map_err(|e| {
            EngineError::FragmentLifecycle(format!(
                "cannot open fragment {id} in {}: {e}",
                dir.display()
            ))
        })?;
        // A one-round commit in doubt here can only be resolved with its other participants'
        // logs: with none of them open here, opening fails with a message naming one.
        let evidence = BTreeMap::from([(id, marker_evidence(&fragment))]);
        let asking = resolve_in_doubt(&self.shared, &fragment, &evidence)
            .await
            .map_err(EngineError::FragmentLifecycle)?;
        for txid in asking {
            let mut prepared = self.prepared.borrow_mut();
            let p = prepared.entry(txid).or_insert_with(|| asking_prepared(Vec::new()));
            p.fragments.push(id);
        }
        tracing::info!(fragment = %id, %range, executor = %self.index, "fragment opened");
        self.fragments.borrow_mut().insert(id, Rc::new(fragment));
        Ok(())
    }

    /// Fragment lifecycle: fences fragment `id`: from now on every write to it fails with
    /// `Fenced` (reads still run); returns once every write already enqueued is durable.
    pub async fn fence_fragment(&self, id: FragmentId) -> Result<(), EngineError> {
        let fragment = self.fragment(id)?;
        self.fenced.borrow_mut().insert(id);
        fragment.wait_durable(fragment.last_queued_lsn()).await?;
        Ok(())
    }

    /// Fragment lifecycle: lets fragment `id` accept writes again (a handoff that failed).
    pub fn unfence_fragment(&self, id: FragmentId) {
        self.fenced.borrow_mut().remove(&id);
    }

    /// Whether fragment `id` is fenced.
    pub fn is_fenced(&self, id: FragmentId) -> bool {
        self.fenced.borrow().contains(&id)
    }

    /// Fragment lifecycle: stops serving fragment `id`, closes it (queued writes finish) and,
    /// with `delete`, removes its directory. Statements still holding it finish first.
    pub async fn close_fragment(&self, id: FragmentId, delete: bool) -> Result<(), EngineError> {
        let Some(mut fragment) = self.fragments.borrow_mut().remove(&id) else {
            return Err(EngineError::NotHere { fragment: id, executor: self.index });
        };
        self.fenced.borrow_mut().remove(&id);
        self.counters.borrow_mut().remove(&id);
        // A statement that took the `Rc` before the removal still runs on it: wait for it.
        let fragment = loop {
            match Rc::try_unwrap(fragment) {
                Ok(f) => break f,
                Err(shared) => {
                    fragment = shared;
                    glommio::timer::sleep(FRAGMENT_RELEASE_POLL).await;
                }
            }
        };
        fragment.close().await;
        if delete {
            let dir = self.fragment_dir(id);
            glommio::executor()
                .spawn_blocking(move || std::fs::remove_dir_all(&dir))
                .await
                .map_err(|e| {
                    EngineError::FragmentLifecycle(format!("cannot delete fragment {id}: {e}"))
                })?;
        }
        tracing::info!(fragment = %id, delete, executor = %self.index, "fragment closed");
        Ok(())
    }

    fn count(&self, id: FragmentId, rows_scanned: u64) {
        self.count_read(id, 1, rows_scanned);
    }

    /// Counts `statements` (0 for a later page of one) and the documents they read.
    fn count_read(&self, id: FragmentId, statements: u64, rows_scanned: u64) {
        let mut counters = self.counters.borrow_mut();
        let c = counters.entry(id).or_default();
        c.statements += statements;
        c.rows_scanned += rows_scanned;
        self.metrics.rows_read(rows_scanned);
    }

    /// Runs a SELECT's share on each target fragment, in slices of at most
    /// `query::limits::STREAM_PAGE_SCANNED` documents with [`between_slices`] after each, so
    /// a scan of a large fragment never holds the executor for long.
    pub async fn select(
        &self,
        select: &Select,
        targets: &[Target],
    ) -> Result<(Vec<Partial>, Vec<FragmentAnalysis>), EngineError> {
        let mut partials = Vec::with_capacity(targets.len());
        let mut analysis = Vec::with_capacity(targets.len());
        for target in targets {
            let started = Instant::now();
            let fragment = self.fragment(target.fragment)?;
            let scan = query::SelectScan::new(select)?;
            let partial =
                read_in_slices(scan, &FragmentReader::new(&fragment), &target.ranges).await?;
            self.count(target.fragment, partial.rows_scanned);
            analysis.push(FragmentAnalysis {
                fragment: target.fragment,
                rows_scanned: partial.rows_scanned,
                rows_returned: partial_rows(&partial),
                elapsed: started.elapsed(),
            });
            partials.push(partial);
        }
        Ok((partials, analysis))
    }

    /// Reads one page of a streamed SELECT on one fragment, after `after`
    /// (`query::execute_select_page`); returns it and where the next starts.
    pub fn select_page(
        &self,
        select: &Select,
        target: &Target,
        after: Option<&query::ScanPos>,
    ) -> Result<(Partial, Option<query::ScanPos>), EngineError> {
        let fragment = self.fragment(target.fragment)?;
        let reader = FragmentReader::new(&fragment);
        let page = query::execute_select_page(select, &reader, &target.ranges, after)?;
        self.count_read(target.fragment, u64::from(after.is_none()), page.0.rows_scanned);
        Ok(page)
    }

    /// Runs `verify_sharding` on each target fragment.
    pub fn verify(
        &self,
        collection: &CollectionName,
        config: &ShardingConfig,
        targets: &[Target],
    ) -> Result<Vec<(String, String)>, EngineError> {
        let mut out = Vec::new();
        for target in targets {
            let fragment = self.fragment(target.fragment)?;
            let reader = FragmentReader::new(&fragment);
            let VerifyPartial { violations, rows_scanned } =
                query::exec::execute_verify_sharding(collection, config, &reader, &target.ranges)?;
            self.count(target.fragment, rows_scanned);
            out.extend(violations);
        }
        Ok(out)
    }

    /// Runs an UPDATE's share: evaluate, validate, apply durably, per fragment.
    pub async fn update(
        &self,
        update: &Update,
        targets: &[Target],
        rules: Rules<'_>,
    ) -> Result<WriteOutcome, EngineError> {
        let mut outcome = WriteOutcome::default();
        for target in targets {
            let share = WriteShare::Update(update, &target.ranges);
            self.write_fragment(target.fragment, &update.collection, rules, share, &mut outcome)
                .await?;
        }
        Ok(outcome)
    }

    /// Runs a DELETE's share, per fragment.
    pub async fn delete(
        &self,
        delete: &Delete,
        targets: &[Target],
    ) -> Result<WriteOutcome, EngineError> {
        let mut outcome = WriteOutcome::default();
        for target in targets {
            let share = WriteShare::Delete(delete, &target.ranges);
            let rules = Rules::default();
            self.write_fragment(target.fragment, &delete.collection, rules, share, &mut outcome)
                .await?;
        }
        Ok(outcome)
    }

    /// Writes placed new documents, per fragment (ids already final, shards assigned).
    pub async fn insert(
        &self,
        insert: &Insert,
        per_fragment: &[(FragmentId, Vec<PlacedDocument>)],
        rules: Rules<'_>,
    ) -> Result<WriteOutcome, EngineError> {
        let mut outcome = WriteOutcome::default();
        for (fragment, docs) in per_fragment {
            let share = WriteShare::Insert(insert, docs);
            self.write_fragment(*fragment, &insert.collection, rules, share, &mut outcome).await?;
        }
        Ok(outcome)
    }

    /// Reads an UPDATE's or DELETE's share of `fragment` at one instant without holding the
    /// executor for all of it: in one slice when it fits, else again from the start with
    /// writes of its collection's documents in `ranges` held off (`Fragment::pause_writes`),
    /// in slices with [`between_slices`] after each (counted in `TxCounters::paused_reads`).
    /// The pause is returned: writes of what was read resume when it is dropped.
    async fn read_paused<'a, 's: 'a, S: query::PagedSource>(
        &self,
        fragment: &Fragment,
        mut scan: query::WriteScan<'s>,
        source: &'a S,
        ranges: &[router::ShardRange],
    ) -> Result<(WritePartial, Option<WritePause>), EngineError> {
        if !scan.read_slice(source, ranges)? {
            return Ok((scan.finish(), None));
        }
        let (read, pause) = self.paused_read(fragment, scan.restart(), source, ranges).await?;
        Ok((read, Some(pause)))
    }

    /// Reads `scan` from its start under a pause of the writes of its collection's documents
    /// in `ranges`, taken first (it waits until every write queued before it is readable), in
    /// slices with [`between_slices`]; counted in `TxCounters::paused_reads`. The pause is
    /// returned: writes of what was read resume when it is dropped.
    async fn paused_read<'a, 's: 'a, S: query::PagedSource>(
        &self,
        fragment: &Fragment,
        scan: query::WriteScan<'s>,
        source: &'a S,
        ranges: &[router::ShardRange],
    ) -> Result<(WritePartial, WritePause), EngineError> {
        let pause = fragment.pause_writes(scan.collection().as_str(), ranges).await?;
        self.count_tx(|c| c.paused_reads += 1);
        Ok((write_in_slices(scan, source, ranges).await?, pause))
    }

    /// Reads what an autocommit write of one fragment does there. An UPDATE's or DELETE's
    /// share is read by [`Core::read_paused`]: other statements of the executor run between its
    /// slices (writes of other documents too) and the share still reads one instant, as in
    /// one go, which it needs (its batch checks only the documents it writes). The pause is
    /// returned to be dropped right before the batch is submitted, which then goes before
    /// the writes that waited.
    async fn read_write_share(
        &self,
        fragment: &Fragment,
        share: &WriteShare<'_>,
    ) -> Result<(WritePartial, Option<WritePause>), EngineError> {
        let reader = FragmentReader::new(fragment);
        let (scan, ranges) = match *share {
            WriteShare::Insert(insert, docs) => {
                return Ok((query::execute_insert(insert, &reader, docs)?, None));
            }
            WriteShare::Update(u, ranges) => (query::WriteScan::update(u, CHECK_SLICE_OPS), ranges),
            WriteShare::Delete(d, ranges) => (query::WriteScan::delete(d, CHECK_SLICE_OPS), ranges),
        };
        self.read_paused(fragment, scan, &reader, ranges).await
    }

    /// Evaluates a write on one fragment and applies its intents as one atomic batch, re-running
    /// it when a concurrent write got in first (see the module invariant).
    async fn write_fragment(
        &self,
        id: FragmentId,
        collection: &CollectionName,
        rules: Rules<'_>,
        share: WriteShare<'_>,
        outcome: &mut WriteOutcome,
    ) -> Result<(), EngineError> {
        let fragment = self.fragment(id)?;
        for attempt in 1..=WRITE_ATTEMPTS_MAX {
            self.writable(id)?;
            let started = Instant::now();
            let (read, pause) = self.read_write_share(&fragment, &share).await?;
            let WritePartial { intents, returning, rows_scanned, .. } = read;
            let affected = intents.len() as u64;
            let batch = batch_of(collection.as_str(), intents, rules)?;
            super::txn::within_fragment_limit(id, &batch)?;
            // The batch goes first once the pause ends: no `.await` before its validation.
            drop(pause);
            if !batch.is_empty() {
                let commit_started = Instant::now();
                match fragment.apply(batch).await {
                    Ok(_) => self.metrics.committed(affected, commit_started.elapsed()),
                    Err(AppendError::Conflict { collection, id: doc, expected, .. })
                        if attempt < WRITE_ATTEMPTS_MAX =>
                    {
                        tracing::debug!(fragment = %id, attempt, "write conflict; re-running");
                        self.metrics.conflict();
                        wait_visible(&fragment, &collection, &doc, expected).await;
                        continue;
                    }
                    Err(AppendError::Conflict { .. }) => {
                        self.metrics.aborted();
                        return Err(EngineError::Contention { attempts: attempt });
                    }
                    // Held by a prepared transaction: its commit or abort is one fdatasync
                    // away (or the timeout's); run again once it released the document. This
                    // statement holds nothing meanwhile, so nothing waits on it.
                    Err(AppendError::Locked { txid, .. }) if attempt < WRITE_ATTEMPTS_MAX => {
                        tracing::debug!(fragment = %id, attempt, %txid, "document held by a prepared transaction; waiting");
                        if !self.wait_released(txid).await {
                            return Err(EngineError::Contention { attempts: attempt });
                        }
                        continue;
                    }
                    Err(AppendError::Locked { .. }) => {
                        return Err(EngineError::Contention { attempts: attempt });
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            self.count(id, rows_scanned);
            outcome.add_share(id, affected, returning, rows_scanned, started.elapsed());
            return Ok(());
        }
        Err(EngineError::Contention { attempts: WRITE_ATTEMPTS_MAX })
    }

    /// Notes that an autocommit statement over several fragments of `collection`, of a
    /// session here, conflicted.
    pub fn autocommit_conflicted(&self, collection: &str) {
        let mut at = self.autocommit_conflict_at.borrow_mut();
        at.retain(|_, t| t.elapsed() < AUTOCOMMIT_CONTENTION_WINDOW);
        at.insert(collection.to_owned(), Instant::now());
    }

    /// Whether one of `collection` did within `AUTOCOMMIT_CONTENTION_WINDOW`: then the next
    /// ones prepare as they read from their first attempt.
    pub fn autocommit_contended(&self, collection: &str) -> bool {
        let at = self.autocommit_conflict_at.borrow();
        at.get(collection).is_some_and(|t| t.elapsed() < AUTOCOMMIT_CONTENTION_WINDOW)
    }

    /// Counts with `f`.
    pub fn count_tx(&self, f: impl FnOnce(&mut TxCounters)) {
        let mut c = self.tx_counters.get();
        f(&mut c);
        self.tx_counters.set(c);
    }

    /// Counts a commit that needed no coordinator: the fast path when it wrote, a read-only
    /// commit (checks only, or nothing to check) when it did not.
    pub fn count_local_commit(&self, wrote: bool) {
        if wrote {
            self.count_tx(|c| c.fast_path_commits += 1);
        } else {
            self.count_tx(|c| c.read_only_commits += 1);
        }
    }

    /// This executor's transaction counters.
    /// Transactions prepared on this executor's fragments and not yet committed or aborted.
    pub fn prepared_count(&self) -> usize {
        self.prepared.borrow().len()
    }

    pub fn tx_counters(&self) -> TxCounters {
        self.tx_counters.get()
    }

    /// The coordinator, on executor 0.
    pub fn coordinator(&self) -> Option<&Coordinator> {
        self.coordinator.as_ref()
    }

    /// A number for a new transaction block of a session here.
    pub fn next_session_txn(&self) -> u64 {
        let n = self.next_session_txn.get();
        self.next_session_txn.set(n + 1);
        n
    }

    /// Publishes (or, with `None`, removes) a session's open transaction for SHOW.
    pub fn set_session_txn(&self, number: u64, row: Option<SessionTxnRow>) {
        let mut sessions = self.sessions.borrow_mut();
        match row {
            Some(r) => {
                sessions.insert(number, r);
            }
            None => {
                sessions.remove(&number);
            }
        }
    }

    /// Transactions visible from this executor: open blocks of its sessions, transactions
    /// prepared on its fragments, decisions the coordinator still holds.
    pub fn txn_rows(&self) -> TxnRows {
        let sessions = self.sessions.borrow().iter().map(|(n, r)| (*n, r.clone())).collect();
        let prepared = self.prepared.borrow().iter().map(|(t, p)| (*t, p.clone())).collect();
        let decisions = self.coordinator.as_ref().map(Coordinator::rows).unwrap_or_default();
        (sessions, prepared, decisions)
    }

    /// Runs a SELECT's share inside a transaction: reads through the transaction's buffer,
    /// returns the storage versions read. In slices with [`between_slices`] after each, as
    /// [`Core::select`] does, so a block's large read does not hold the executor either (the
    /// overlay counts each range across its slices; see `OverlayReader`'s `scan_after`).
    pub async fn txn_select(
        &self,
        select: &Select,
        targets: &[TxnTarget],
    ) -> Result<(Vec<Partial>, FragmentReads), EngineError> {
        let mut partials = Vec::with_capacity(targets.len());
        let mut reads = Vec::with_capacity(targets.len());
        for target in targets {
            let fragment = self.fragment(target.fragment)?;
            let reader =
                OverlayReader::new(FragmentReader::new(&fragment), target.writes.as_deref());
            let scan = query::SelectScan::new(select)?.with_slice_docs(CHECK_SLICE_OPS);
            let partial = read_in_slices(scan, &reader, &target.ranges).await?;
            self.count(target.fragment, partial.rows_scanned);
            partials.push(partial);
            reads.push((target.fragment, reader.take_reads()));
        }
        Ok((partials, reads))
    }

    /// Runs a write statement's share inside a transaction: evaluates it through the buffer
    /// and validates new documents against the content configuration; writes nothing. An
    /// UPDATE or DELETE reads each fragment as `read` says: in slices of
    /// [`CHECK_SLICE_OPS`] documents with [`between_slices`] after each, as
    /// [`Core::txn_select`] does (at several instants, or at one under a pause that ends
    /// with the fragment's read), or in one go; the versions read are returned only when
    /// `read` keeps them.
    pub async fn txn_write(
        &self,
        statement: &Statement,
        targets: &[TxnTarget],
        rules: Rules<'_>,
        read: ShareRead,
    ) -> Result<Vec<TxnShare>, EngineError> {
        let mut out = Vec::with_capacity(targets.len());
        for target in targets {
            let started = Instant::now();
            let fragment = self.fragment(target.fragment)?;
            let reader =
                OverlayReader::new(FragmentReader::new(&fragment), target.writes.as_deref())
                    .keeping_reads(read.keeps_reads());
            let partial = match statement {
                Statement::Insert(i) => query::execute_insert(i, &reader, &target.docs)?,
                _ => {
                    let scan = query::WriteScan::new(statement, read.slice_docs())?;
                    if read == ShareRead::AutocommitPaused {
                        // Dropped here: the statement commits after all its fragments' reads.
                        self.read_paused(&fragment, scan, &reader, &target.ranges).await?.0
                    } else {
                        write_in_slices(scan, &reader, &target.ranges).await?
                    }
                }
            };
            for intent in &partial.intents {
                if let WriteIntent::Put { id, doc, .. } = intent {
                    rules.validate(id, doc)?;
                }
            }
            if !read.keeps_reads()
                && let Some(collection) = statement.collection()
            {
                fault::rewrite_after_read(&fragment, collection.as_str(), &partial.intents).await;
            }
            self.count(target.fragment, partial.rows_scanned);
            out.push(TxnShare {
                fragment: target.fragment,
                intents: partial.intents,
                reads: reader.take_reads(),
                returning: partial.returning,
                rows_scanned: partial.rows_scanned,
                elapsed: started.elapsed(),
            });
        }
        Ok(out)
    }

    /// An autocommit UPDATE's or DELETE's share on this executor, for an attempt after its
    /// statement conflicted (`Session::autocommit_txn`): each fragment is read at one instant,
    /// under a pause of the writes of what it reads (`Fragment::pause_writes`, in slices with
    /// [`between_slices`]), and what the statement writes there is prepared for `txid` before
    /// that instant ends (the pause dropped right before the prepare is queued, no `.await`
    /// between). A write the pause held then meets the prepared documents and
    /// waits for the decision (`AppendError::Locked`, `wait_released`) instead of going first
    /// and failing the commit that followed the read a round trip later, as it did on every
    /// attempt under a back-to-back rewriter. A fragment's written documents stay held from
    /// its prepare to phase two, while the others are read. Returns the outcome and the
    /// fragments prepared (those with writes; a fragment without writes holds nothing: the
    /// statement checks only what it writes). All or nothing: on any failure the fragments
    /// prepared here are aborted before the error returns.
    pub async fn txn_write_prepared(
        &self,
        statement: &Statement,
        targets: &[TxnTarget],
        rules: Rules<'_>,
        txid: TxId,
    ) -> Result<(WriteOutcome, Vec<FragmentId>), EngineError> {
        let mut outcome = WriteOutcome::default();
        let mut queued = Vec::with_capacity(targets.len());
        let mut failure = None;
        for target in targets {
            match self.read_and_prepare(statement, target, rules, txid, &mut outcome).await {
                Ok(Some(prepare)) => queued.push(prepare),
                Ok(None) => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        // Every prepare queued is awaited, even after a failure, so none is left running.
        let mut prepared = Vec::with_capacity(queued.len());
        let mut refused = None;
        for (fragment, prepare) in queued {
            prepared.push(fragment.id());
            match prepare.await {
                Ok(_) => fault::prepared(),
                Err(e) => refused = refused.or(Some((fragment, e))),
            }
        }
        if failure.is_none()
            && let Some((fragment, e)) = refused
        {
            failure = Some(self.txn_failure(&fragment, e).await);
        }
        match failure {
            None => Ok((outcome, prepared)),
            Some(e) => {
                if !prepared.is_empty() {
                    self.finish_txn(txid, prepared, false, None).await;
                }
                Err(e)
            }
        }
    }

    /// One fragment of [`Core::txn_write_prepared`]: reads the share, adds it to `outcome`
    /// and, when it writes, queues its prepare at once (returned to be awaited).
    async fn read_and_prepare(
        &self,
        statement: &Statement,
        target: &TxnTarget,
        rules: Rules<'_>,
        txid: TxId,
        outcome: &mut WriteOutcome,
    ) -> Result<Option<(Rc<Fragment>, PrepareFuture)>, EngineError> {
        let started = Instant::now();
        let fragment = self.fragment(target.fragment)?;
        let reader = FragmentReader::new(&fragment);
        let scan = query::WriteScan::new(statement, CHECK_SLICE_OPS)?;
        let collection = scan.collection().as_str().to_owned();
        // Paused before the read, however short: the read then sees every write queued before
        // (the pause waits until they are readable), and none is queued after it until the
        // prepare is. Unpaused, a one-slice read saw only durable documents while the
        // prepare's checks count queued writes too, so a write still in its group commit (one
        // is, nearly always, under a back-to-back rewriter) failed it.
        let (read, pause) = self.paused_read(&fragment, scan, &reader, &target.ranges).await?;
        let WritePartial { intents, returning, rows_scanned, .. } = read;
        let affected = intents.len() as u64;
        let batch = batch_of(&collection, intents, rules)?;
        super::txn::within_fragment_limit(target.fragment, &batch)?;
        self.count(target.fragment, rows_scanned);
        outcome.add_share(target.fragment, affected, returning, rows_scanned, started.elapsed());
        if batch.is_empty() {
            return Ok(None);
        }
        self.writable(target.fragment)?;
        self.prepared
            .borrow_mut()
            .entry(txid)
            .or_insert_with(|| PreparedTxn {
                fragments: Vec::new(),
                held: Vec::new(),
                since: Instant::now(),
                finishing: false,
                marked: None,
            })
            .fragments
            .push(target.fragment);
        let preparing = Rc::clone(&fragment);
        let mut prepare: PrepareFuture =
            Box::pin(async move { preparing.prepare(txid, batch).await });
        // Validated and queued by its first poll, ahead of the writes the pause held.
        drop(pause);
        if let Some(done) = futures_lite::future::poll_once(prepare.as_mut()).await {
            prepare = Box::pin(std::future::ready(done));
        }
        Ok(Some((fragment, prepare)))
    }

    /// Applies one fragment's batch of a transaction (the fast path: one atomic batch,
    /// one record unless it is large, one fdatasync; or checks only: nothing written). A conflict or a held document is 40001.
    pub async fn apply_txn(&self, id: FragmentId, batch: WriteBatch) -> Result<(), EngineError> {
        let fragment = self.fragment(id)?;
        if batch.writes() > 0 {
            self.writable(id)?;
        }
        match fragment.apply(batch).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.txn_failure(&fragment, e).await),
        }
    }

    /// Commits one fragment's batch of a transaction on this executor: a batch with writes is
    /// applied at once (the fast path); a checks-only batch is validated in slices of
    /// [`CHECK_SLICE_OPS`] with [`between_slices`] after each, so a large read's COMMIT
    /// does not hold the executor (each check stands on its own once every read is done: the
    /// documents all held the versions read at the instant the last read ended, since each
    /// still holds it later).
    pub async fn commit_fragment(
        &self,
        id: FragmentId,
        batch: WriteBatch,
    ) -> Result<(), EngineError> {
        if batch.writes() > 0 {
            return self.apply_txn(id, batch).await;
        }
        for (i, part) in batch.into_slices(CHECK_SLICE_OPS).into_iter().enumerate() {
            if i > 0 {
                between_slices().await;
            }
            self.apply_txn(id, part).await?;
        }
        Ok(())
    }

    /// The 40001 for a conflict or a held document, or the storage error. A conflict is
    /// answered only once the write it conflicted with is readable (`wait_visible`): storage
    /// checks versions against queued writes while readers see durable ones, so a client
    /// retrying at once would otherwise read the same stale version and conflict again, up to
    /// its retry limit, during one fdatasync.
    async fn txn_failure(&self, fragment: &Fragment, e: AppendError) -> EngineError {
        match e {
            AppendError::Conflict { collection, id, expected, .. } => {
                self.count_tx(|c| c.conflicts += 1);
                wait_visible(fragment, &collection, &id, expected).await;
                EngineError::TxnConflict { collection, id }
            }
            AppendError::Phantom { collection, .. } => {
                self.count_tx(|c| {
                    c.conflicts += 1;
                    c.range_conflicts += 1;
                });
                // As for a conflict: answer once the writes the range check counted are
                // readable, so a retry scans them.
                let _ = fragment.wait_durable(fragment.last_queued_lsn()).await;
                EngineError::TxnPhantom { collection }
            }
            AppendError::Locked { collection, id, txid } => {
                self.count_tx(|c| c.conflicts += 1);
                EngineError::TxnHeld { collection, id, fragment: fragment.id(), txid }
            }
            // The timeout resolved the transaction without this prepare: it was aborted.
            AppendError::TxnFenced { .. } => EngineError::TxnAborted,
            other => EngineError::Append(other),
        }
    }

    /// Phase one on this executor: prepares `txid` on each fragment (validating its checks and
    /// expected versions, durable PREPARE, documents held). A fragment whose batch is checks
    /// only (a read-only participant) is held instead (`Fragment::hold`: validated and locked
    /// in memory, no record, no fdatasync) until phase two releases it. All or nothing: on any
    /// failure the fragments already prepared are aborted and the holds released.
    pub async fn prepare_txn(
        &self,
        txid: TxId,
        batches: Vec<(FragmentId, WriteBatch)>,
    ) -> Result<(), EngineError> {
        let fragments: Vec<FragmentId> = batches.iter().map(|(f, _)| *f).collect();
        let held = batches.iter().filter(|(_, b)| b.writes() == 0).map(|(f, _)| *f).collect();
        // Only a node committing in one round prepares marked transactions while serving:
        // no scan of the batches on the journal's path.
        let marked = marker::enabled()
            .then(|| batches.iter().find_map(|(_, b)| marker::participants_in(txid, b)))
            .flatten();
        let mut owned = Vec::with_capacity(batches.len());
        for (id, batch) in batches {
            self.writable(id)?;
            owned.push((self.fragment(id)?, batch));
        }
        self.prepared.borrow_mut().insert(
            txid,
            PreparedTxn {
                fragments: fragments.clone(),
                held,
                since: Instant::now(),
                finishing: false,
                marked,
            },
        );
        let mut failure = None;
        let mut writers = Vec::with_capacity(owned.len());
        for (fragment, batch) in owned {
            if batch.writes() > 0 {
                writers.push((fragment, batch));
            } else if let Err(e) = fragment.hold(txid, batch) {
                failure = Some((fragment, e));
                break;
            }
        }
        let mut tasks = Vec::with_capacity(writers.len());
        if failure.is_none() && !writers.is_empty() {
            fault::before_prepare(self.index.get()).await;
        }
        if failure.is_none() {
            for (fragment, batch) in writers {
                tasks.push(glommio::spawn_local(async move {
                    let result = fragment.prepare(txid, batch).await;
                    (fragment, result)
                }));
            }
        }
        for task in tasks {
            match task.await {
                (_, Ok(_)) => fault::prepared(),
                (fragment, Err(e)) => failure = failure.or(Some((fragment, e))),
            }
        }
        match failure {
            None => Ok(()),
            Some((fragment, e)) => {
                self.finish_txn(txid, fragments, false, None).await;
                Err(self.txn_failure(&fragment, e).await)
            }
        }
    }

    /// Phase two on this executor: commits (visible at once; `visible` is told when every
    /// fragment's writes are readable) or aborts `txid` on `fragments`, waits for the records
    /// to be durable, and tells the coordinator after a commit that wrote Commit records here
    /// (a read-only participant's hold is only released: it has nothing to report). A fragment
    /// that no longer has the transaction (finished by the timeout, or never prepared) is
    /// skipped.
    pub async fn finish_txn(
        &self,
        txid: TxId,
        fragments: Vec<FragmentId>,
        commit: bool,
        visible: Option<flume::Sender<()>>,
    ) {
        // Counted as running, so shutdown waits for the Commit records before closing.
        self.shared.statements_running.fetch_add(1, Ordering::SeqCst);
        let _running = RunningGuard(&self.shared);
        if let Some(p) = self.prepared.borrow_mut().get_mut(&txid) {
            p.finishing = true;
        }
        // A one-round commit's participants (read before `prepared` forgets the transaction).
        let marked = if commit { self.marked_participants(txid) } else { None };
        let mut durable = Vec::with_capacity(fragments.len());
        let mut committed_here = Vec::with_capacity(fragments.len());
        for id in &fragments {
            let Ok(fragment) = self.fragment(*id) else { continue };
            if fragment.release(txid) {
                continue;
            }
            if commit {
                let result = fragment.commit_prepared_visible(txid).await;
                if result.is_ok() {
                    committed_here.push(*id);
                }
                match result {
                    // The crash point: this fragment's Commit record durable, the next
                    // fragments' not even queued.
                    Ok(d) if fault::armed() == Some(fault::Fault::DuringApply) => {
                        if d.wait().await.is_ok() {
                            fault::applied();
                        }
                    }
                    Ok(d) => durable.push(d),
                    Err(AppendError::TxnUnknown { .. }) => {}
                    Err(e) => {
                        tracing::error!(fragment = %id, %txid, error = %e, "commit of a prepared transaction failed");
                    }
                }
            } else {
                match fragment.abort_prepared(txid).await {
                    Ok(_) | Err(AppendError::TxnUnknown { .. }) => {}
                    Err(e) => {
                        tracing::error!(fragment = %id, %txid, error = %e, "abort of a prepared transaction failed");
                    }
                }
            }
        }
        // Every document of `txid` here is free again: sessions waiting for one run again.
        self.released.borrow_mut().insert(txid);
        self.release_waits.borrow_mut().remove(&txid);
        if let Some(v) = visible {
            let _ = v.send(());
        }
        let wrote = !durable.is_empty();
        let mut all_durable = true;
        for d in durable {
            match d.wait().await {
                Ok(_) => {}
                Err(e) => {
                    all_durable = false;
                    tracing::error!(%txid, error = %e, "commit record of a prepared transaction failed");
                }
            }
        }
        // No wait registered since the release above (`wait_released` answers at once while
        // `released` holds the txid), so `release_waits` has nothing left for it.
        self.prepared.borrow_mut().remove(&txid);
        self.released.borrow_mut().remove(&txid);
        match marked {
            Some(all) if all_durable => {
                self.report_finished(Report::Marked { txid, all, mine: committed_here }).await;
            }
            Some(_) => {}
            None if commit && wrote && all_durable => {
                self.report_finished(Report::Decision(txid)).await;
            }
            None => {}
        }
    }

    /// Waits until prepared transaction `txid` released its documents on this executor (its
    /// phase two here, after a commit, an abort or the timeout), at most
    /// [`TXN_HELD_WAIT_MAX`]; true when it did (or, after a short poll, when it is not
    /// tracked here). Counted in `held_waits`. Only a caller that
    /// holds no document may wait: a prepared transaction never waits on anything but its own
    /// decision, so such waits cannot form a cycle; the bound is only a backstop.
    pub async fn wait_released(&self, txid: TxId) -> bool {
        self.count_tx(|c| c.held_waits += 1);
        if self.released.borrow().contains(&txid) {
            return true;
        }
        if !self.prepared.borrow().contains_key(&txid) {
            // Held by a transaction this executor does not track (yet): poll.
            glommio::timer::sleep(WRITE_CONFLICT_POLL).await;
            return true;
        }
        let (tx, rx) = flume::bounded::<()>(1);
        self.release_waits.borrow_mut().entry(txid).or_default().push(tx);
        let released = async {
            let _ = rx.recv_async().await;
            true
        };
        let timeout = async {
            glommio::timer::sleep(TXN_HELD_WAIT_MAX).await;
            false
        };
        let released = futures_lite::future::or(released, timeout).await;
        if !released {
            cov_mark::hit!(held_wait_timed_out);
            tracing::debug!(%txid, "prepared transaction still holds its documents; giving up");
        }
        released
    }

    /// Phase two of `txid` on this executor's `fragments`, detached (the Commit records finish
    /// even if the caller goes away): returns once the writes are visible (a commit) or the
    /// holds are gone (an abort), which is when a session may answer its client.
    pub async fn finish_txn_visible(
        self: &Rc<Self>,
        txid: TxId,
        fragments: Vec<FragmentId>,
        commit: bool,
    ) {
        let (visible_tx, visible_rx) = flume::bounded(1);
        let core = Rc::clone(self);
        let done = glommio::spawn_local(async move {
            core.finish_txn(txid, fragments, commit, Some(visible_tx)).await;
        })
        .detach();
        if commit {
            let _ = visible_rx.recv_async().await;
        } else {
            let _ = done.await;
        }
    }

    /// Phase one of this executor's share and the decision in one call, on the coordinator's
    /// executor, for a session that runs elsewhere: prepares `batches` while the session
    /// prepares every other share, waits for its word on them (`others`: `true` once all are
    /// prepared; `false`, or the sender dropped, means abort), then records COMMIT (the commit
    /// point) and makes this executor's share visible. One cross-executor round trip instead
    /// of two (a prepare call, then a decision call). `Ok(true)`: committed, this share
    /// visible; `Ok(false)`: aborted (another share failed, or the timeout decided ABORT
    /// first), this share's prepares undone; `Err`: this share failed to prepare (already
    /// undone) or the decision could not be recorded (this share then stays prepared, and the
    /// timeout resolves it from the coordinator's log).
    pub async fn prepare_and_decide(
        self: &Rc<Self>,
        txid: TxId,
        batches: Vec<(FragmentId, WriteBatch)>,
        others: flume::Receiver<bool>,
        fragments: Vec<FragmentId>,
        executors: usize,
        marked: bool,
    ) -> Result<bool, EngineError> {
        let mine: Vec<FragmentId> = batches.iter().map(|(f, _)| *f).collect();
        let (own, others) = futures_lite::future::zip(
            self.prepare_txn(txid, batches),
            crate::runtime::relayed(others.recv_async()),
        )
        .await;
        // `prepare_txn` undid this share itself when it failed.
        own?;
        if others != Ok(true) {
            self.finish_txn(txid, mine, false, None).await;
            return Ok(false);
        }
        let Some(c) = self.coordinator() else {
            return Err(EngineError::Call(crate::runtime::CallError::Stopped(self.index)));
        };
        fault::before_decision().await;
        // A one-round commit (`marked`: every batch carries its marker) is committed once
        // every Prepare is durable, which the word just said: no decision to record.
        let commit = if marked {
            true
        } else {
            c.decide(self.shared.two_phase_gate(), txid, true, &fragments, executors).await?
        };
        if commit {
            fault::decided();
        }
        self.finish_txn_visible(txid, mine, commit).await;
        Ok(commit)
    }

    /// Tells the coordinator that this executor's Commit records of `txid` are durable. From
    /// another executor, one report is in flight at a time and carries every transaction
    /// finished meanwhile: one mesh call per batch, not per transaction. The caller that sends
    /// stays until nothing is left, so shutdown (which waits for running work) waits for it.
    async fn report_finished(&self, report: Report) {
        if let Some(c) = &self.coordinator {
            report.deliver(c, self.shared.two_phase_gate()).await;
            return;
        }
        self.unreported.borrow_mut().push(report);
        if self.reporting.replace(true) {
            return;
        }
        let mesh = self.mesh.borrow().clone();
        if let Some(mesh) = mesh {
            loop {
                let batch = std::mem::take(&mut *self.unreported.borrow_mut());
                if batch.is_empty() {
                    break;
                }
                let _ = mesh
                    .call_background(ExecutorIndex::new(0), move |core| async move {
                        if let Some(c) = core.coordinator() {
                            for report in batch {
                                report.deliver(c, core.shared().two_phase_gate()).await;
                            }
                        }
                    })
                    .await;
            }
        }
        self.reporting.set(false);
    }

    /// The outcome of one-round commit `txid` from its `participants` now: committed when
    /// every one holds its Prepare record durable or its marker live; aborted when one holds
    /// neither, which that participant then keeps true (`prepared_state_or_fence`: a late
    /// prepare is refused); `None` while one's Prepare is still queued, or one cannot be
    /// asked.
    async fn resolve_marked(&self, txid: TxId, participants: &[FragmentId]) -> Option<bool> {
        let map = self.shared.map()?;
        let mesh = self.mesh.borrow().clone()?;
        let mut queued = false;
        for p in participants {
            let owner = ExecutorIndex::new(map.owner_of(*p)?.executor.0 as usize);
            let p = *p;
            let state = if owner == self.index {
                self.marked_state(txid, p)
            } else {
                mesh.call_background(owner, move |core| async move { core.marked_state(txid, p) })
                    .await
                    .ok()?
            };
            match state? {
                MarkedState::Prepared | MarkedState::Committed => {}
                MarkedState::Queued => queued = true,
                MarkedState::Never => return Some(false),
            }
        }
        (!queued).then_some(true)
    }

    /// The participants one-round commit `txid` names in its marker, as prepared on this
    /// executor; `None` for a transaction with a recorded decision (or not prepared here).
    fn marked_participants(&self, txid: TxId) -> Option<Vec<FragmentId>> {
        self.prepared.borrow().get(&txid)?.marked.clone()
    }

    /// Where one-round commit `txid` stands in this executor's fragment `id` (see
    /// [`Core::resolve_marked`]); fences it there when it never prepared.
    fn marked_state(&self, txid: TxId, id: FragmentId) -> Option<MarkedState> {
        let fragment = self.fragment(id).ok()?;
        Some(match fragment.prepared_state_or_fence(txid) {
            storage::PreparedState::Durable => MarkedState::Prepared,
            storage::PreparedState::Queued => MarkedState::Queued,
            storage::PreparedState::Absent
                if fragment.get(marker::COLLECTION, &marker::id(txid)).is_some() =>
            {
                MarkedState::Committed
            }
            storage::PreparedState::Absent => MarkedState::Never,
        })
    }

    /// Asks the coordinator for the fate of `txid`, recording ABORT when it has none.
    async fn resolve_by_timeout(&self, txid: TxId) -> Result<bool, EngineError> {
        if coordinated_elsewhere(&self.shared, txid) {
            return ask_coordinator_node(coordinator_of(txid), txid).await;
        }
        let gate_shared = Arc::clone(&self.shared);
        if let Some(c) = &self.coordinator {
            return c.decide(gate_shared.txn.two_phase_gate(), txid, false, &[], 0).await;
        }
        let mesh = self.mesh.borrow().clone();
        let Some(mesh) = mesh else {
            return Err(EngineError::Call(crate::runtime::CallError::Stopped(self.index)));
        };
        mesh.call_background(ExecutorIndex::new(0), move |core| async move {
            match core.coordinator() {
                Some(c) => c.decide(gate_shared.txn.two_phase_gate(), txid, false, &[], 0).await,
                None => Err(EngineError::Call(crate::runtime::CallError::Stopped(core.index()))),
            }
        })
        .await?
    }

    /// Resolves transactions prepared here longer than `TXN_PREPARED_TIMEOUT` from the
    /// coordinator's log (abort, recorded first, when undecided).
    async fn sweep_prepared(&self) {
        let expired: Vec<(TxId, Vec<FragmentId>)> = self
            .prepared
            .borrow()
            .iter()
            .filter(|(_, p)| !p.finishing && p.since.elapsed() > TXN_PREPARED_TIMEOUT)
            .map(|(t, p)| (*t, p.fragments.clone()))
            .collect();
        for (txid, fragments) in expired {
            if let Some(participants) = self.marked_participants(txid) {
                match self.resolve_marked(txid, &participants).await {
                    Some(commit) => {
                        tracing::warn!(%txid, commit, "one-round transaction prepared too long; resolved from its participants");
                        if !commit {
                            self.count_tx(|c| c.aborts += 1);
                        }
                        self.finish_txn(txid, fragments, commit, None).await;
                    }
                    None => tracing::debug!(%txid, "one-round commit still preparing somewhere"),
                }
                continue;
            }
            match self.resolve_by_timeout(txid).await {
                Ok(commit) => {
                    tracing::warn!(%txid, commit, "transaction prepared too long; resolved from the coordinator log");
                    if !commit {
                        self.count_tx(|c| c.aborts += 1);
                    }
                    self.finish_txn(txid, fragments, commit, None).await;
                }
                Err(e) => {
                    tracing::error!(%txid, error = %e, "cannot resolve a transaction prepared too long")
                }
            }
        }
    }

    /// SHOW FRAGMENTS rows of this executor.
    pub fn fragment_rows(&self) -> Vec<FragmentRow> {
        let counters = self.counters.borrow();
        self.fragments
            .borrow()
            .iter()
            .map(|(id, f)| {
                let stats = f.totals();
                // One-round commits' markers live until their transaction's cleanup: they are
                // bookkeeping, not the user's documents (their bytes stay in `bytes`).
                let markers = f
                    .collection_docs()
                    .into_iter()
                    .find_map(|(c, n)| (c == marker::COLLECTION).then_some(n))
                    .unwrap_or(0);
                FragmentRow {
                    fragment: *id,
                    range: f.range(),
                    executor: self.index,
                    documents: stats.docs.saturating_sub(markers),
                    bytes: stats.live_bytes,
                    counters: counters.get(id).copied().unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Documents per collection over this executor's fragments (collections with none are
    /// absent).
    pub fn collection_docs(&self) -> BTreeMap<String, u64> {
        let mut docs: BTreeMap<String, u64> = BTreeMap::new();
        for f in self.fragments.borrow().values() {
            for (collection, n) in f.collection_docs() {
                *docs.entry(collection).or_default() += n;
            }
        }
        docs
    }

    /// Changes one collection's configuration durably and publishes the new catalog to every
    /// executor. Runs on executor 0 only, one change at a time. `decide` sees the current
    /// configuration and returns the entry to store (or why not).
    pub async fn change_catalog(
        &self,
        collection: String,
        decide: impl FnOnce(Option<&ShardingConfig>) -> Result<Option<CollectionEntry>, EngineError>,
    ) -> Result<(), EngineError> {
        let _turn = self
            .catalog_gate
            .acquire_permit(1)
            .await
            .map_err(|e| EngineError::Catalog(e.to_string()))?;
        let current = self.shared.catalog();
        let entry = decide(current.config(&collection))?;
        let dir = self.shared.data_dir.clone();
        let base = current.catalog().clone();
        let next = glommio::executor()
            .spawn_blocking(move || base.with_entry(&dir, &collection, entry))
            .await
            .map_err(|e| EngineError::Catalog(e.to_string()))?;
        let view = CatalogView::new(next).map_err(EngineError::Catalog)?;
        tracing::info!(version = view.catalog().version, "catalog changed");
        self.shared.install_catalog(Arc::new(view));
        Ok(())
    }

    /// Waits for every statement of the node to finish, then closes the fragments (their
    /// in-flight commits complete first). Called once, at shutdown.
    pub async fn close(&self) {
        while self.shared.statements_running.load(Ordering::SeqCst) > 0 {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        if let Some(c) = &self.coordinator {
            c.close().await;
        }
        let fragments = std::mem::take(&mut *self.fragments.borrow_mut());
        for (id, fragment) in fragments {
            match Rc::try_unwrap(fragment) {
                Ok(fragment) => {
                    fragment.close().await;
                    tracing::info!(fragment = %id, "fragment closed");
                }
                // Only a statement still holding it could; none runs now. Dropping it is safe:
                // every acknowledged write is already durable.
                Err(_) => tracing::warn!(fragment = %id, "fragment still in use at close"),
            }
        }
    }
}

/// Decrements the running-statement count when dropped.
struct RunningGuard<'s>(&'s Shared);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.statements_running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether another cluster node coordinates `txid` (its id in the txid's top bits; 0, which
/// no cluster node has, marks an id made before cross-node transactions: this node's own).
fn coordinated_elsewhere(shared: &Shared, txid: TxId) -> bool {
    let coordinator = coordinator_of(txid);
    shared.clustered && coordinator != shared.me && coordinator.0 != 0
}

/// A transaction left prepared by a crash whose coordinator is another cluster node: held
/// (its documents stay locked) until the first sweep asks that node for the decision.
fn asking_prepared(fragments: Vec<FragmentId>) -> PreparedTxn {
    let since = Instant::now().checked_sub(TXN_PREPARED_TIMEOUT).unwrap_or_else(Instant::now);
    PreparedTxn { fragments, held: Vec::new(), since, finishing: false, marked: None }
}

/// Resolves every transaction left prepared in `fragment` by a crash from the coordinator's
/// decisions (read before any executor started): a recorded COMMIT commits, anything else
/// aborts. Runs before the fragment serves traffic; waits for the records to be durable.
/// A transaction another cluster node coordinates (its id says which) stays prepared: the
/// returned ids are resolved by asking that node (`sweep_prepared`), which may be down now.
async fn resolve_in_doubt(
    shared: &Shared,
    fragment: &Fragment,
    evidence: &BTreeMap<FragmentId, MarkerEvidence>,
) -> Result<Vec<TxId>, String> {
    let mut asking = Vec::new();
    let marked = evidence.get(&fragment.id()).map(|e| &e.in_doubt);
    for txid in fragment.in_doubt() {
        if coordinated_elsewhere(shared, txid) {
            tracing::info!(fragment = %fragment.id(), %txid, coordinator = coordinator_of(txid).0, "in-doubt transaction of another node; asking it");
            asking.push(txid);
            continue;
        }
        let commit = match marked.and_then(|m| m.get(&txid)) {
            Some(participants) => marker::committed(txid, participants, evidence).map_err(|e| {
                format!("cannot resolve transaction {txid} in fragment {}: {e}", fragment.id())
            })?,
            None => shared.txn.recovered_commit(txid),
        };
        let result = if commit {
            fragment.commit_prepared(txid).await
        } else {
            fragment.abort_prepared(txid).await
        };
        result.map_err(|e| {
            format!("cannot resolve transaction {txid} in fragment {}: {e}", fragment.id())
        })?;
        tracing::info!(fragment = %fragment.id(), %txid, commit, "in-doubt transaction resolved");
    }
    Ok(asking)
}

/// Runs `work` every `period` on this executor until the node shuts down (detached).
fn every<F, Fut>(period: std::time::Duration, ctx: &ExecutorContext<Core>, work: F)
where
    F: Fn() -> Fut + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let shutdown = ctx.shutdown.clone();
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(period).await;
            if shutdown.is_triggered() {
                break;
            }
            work().await;
        }
    })
    .detach();
}

/// A one-round commit's state in one participant (`Core::marked_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkedState {
    /// Its Prepare record is durable.
    Prepared,
    /// Its Prepare record is on its way to the log.
    Queued,
    /// Committed here (its marker is live).
    Committed,
    /// Never prepared here (or aborted); fenced from now on.
    Never,
}

/// What a participant executor tells the coordinator's executor once its Commit records of a
/// transaction are durable.
#[derive(Debug)]
enum Report {
    /// Of a transaction with a recorded decision: the journal may forget it once all did.
    Decision(TxId),
    /// Of a one-round commit naming `all`, for this executor's fragments `mine`: its markers
    /// may go once every participant did.
    Marked { txid: TxId, all: Vec<FragmentId>, mine: Vec<FragmentId> },
}

impl Report {
    async fn deliver(self, c: &Coordinator, gate: &super::coordinator::TwoPhaseGate) {
        match self {
            Report::Decision(txid) => c.finished(gate, txid).await,
            Report::Marked { txid, all, mine } => c.finished_marked(txid, &all, &mine),
        }
    }
}

/// What `fragment` shows of one-round commits as opened (see [`MarkerEvidence::gather`]).
fn marker_evidence(fragment: &Fragment) -> MarkerEvidence {
    let mut live = Vec::new();
    fragment.scan(marker::COLLECTION, fragment.range(), |doc| {
        live.push(doc.id().to_owned());
        std::ops::ControlFlow::Continue(())
    });
    MarkerEvidence::gather(
        fragment.in_doubt(),
        |txid| fragment.prepared_doc(txid, marker::COLLECTION, &marker::id(txid)),
        live,
    )
}

/// Asks `node`, which coordinates `txid`, for its decision over a data connection.
async fn ask_coordinator_node(node: router::NodeId, txid: TxId) -> Result<bool, EngineError> {
    use crate::cluster::forward::{self, Reply, Share};
    let request = forward::Request {
        epoch: 0,
        catalog: 0,
        sql: String::new(),
        index: 0,
        params: Vec::new(),
        share: Share::TxnDecide { txid: txid.get() },
    };
    match forward::call(node.0, request, true).await? {
        Reply::Decided { commit } => Ok(commit),
        Reply::Failed { code, message } => {
            Err(crate::cluster::region::RegionError::Remote { code, message }.into())
        }
        other => Err(crate::cluster::region::RegionError::Forward {
            node: node.0,
            reason: format!("answered {other:?} when asked for a decision"),
        }
        .into()),
    }
}

/// Waits until `fragment`'s readable version of a document is no longer `read`, the version
/// the conflicted statement read. Storage checks versions against queued writes but readers see
/// only durable ones, so a statement re-run at once after conflicting with a queued write would
/// read the same old version and conflict again, until its attempts ran out during one
/// fdatasync. The write it conflicted with is queued at or below the fragment's last queued
/// LSN, so waiting for that LSN to be durable (storage wakes the wait from the group commit
/// that covers it, no polling) makes it readable. A fatal fragment ends the wait too (the re-run
/// then reports why). Bounded by [`WRITE_CONFLICT_WAIT_MAX`] all the same.
async fn wait_visible(fragment: &Fragment, collection: &str, doc: &str, read: Version) {
    let read = (read != Version::ABSENT).then_some(read);
    if fragment.version_of(collection, doc) != read {
        return;
    }
    let durable = async {
        let _ = fragment.wait_durable(fragment.last_queued_lsn()).await;
    };
    futures_lite::future::or(durable, glommio::timer::sleep(WRITE_CONFLICT_WAIT_MAX)).await;
}

fn partial_rows(partial: &Partial) -> u64 {
    match &partial.body {
        query::exec::PartialBody::Rows(rows) => rows.len() as u64,
        query::exec::PartialBody::Groups(groups) => groups.len() as u64,
    }
}

/// The storage batch for a statement's intents on one fragment, validating each new document
/// against the collection's content configuration first.
fn batch_of(
    collection: &str,
    intents: Vec<WriteIntent>,
    rules: Rules<'_>,
) -> Result<WriteBatch, EngineError> {
    let mut batch = WriteBatch::new();
    for intent in intents {
        batch = match intent {
            WriteIntent::Put { id, shard, version_read, doc } => {
                rules.validate(&id, &doc)?;
                // A new document must still be absent when the batch is applied.
                let expected =
                    Some(version_read.map_or(Version::ABSENT, |v| Version::new(v.get())));
                batch.put(collection, &id, shard, expected, doc)
            }
            WriteIntent::Delete { id, shard, version_read } => {
                batch.delete(collection, &id, shard, Some(Version::new(version_read.get())))
            }
        };
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(fragments: &[u32], held: &[u32], finishing: bool) -> PreparedTxn {
        PreparedTxn {
            fragments: fragments.iter().map(|&f| FragmentId::new(f)).collect(),
            held: held.iter().map(|&f| FragmentId::new(f)).collect(),
            since: Instant::now(),
            finishing,
            marked: None,
        }
    }

    fn ids(fragments: &[u32]) -> Vec<FragmentId> {
        fragments.iter().map(|&f| FragmentId::new(f)).collect()
    }

    // Checks SHOW TRANSACTIONS names what each participant fragment is: a read-only
    // participant's fragments are `held`, a writer's `prepared`, both once finishing
    // `finishing`; a state with no fragment gets no row.
    #[test]
    fn held_participants_show_as_held() {
        assert_eq!(
            prepared(&[1, 2], &[2], false).show_states(),
            vec![("prepared", ids(&[1])), ("held", ids(&[2]))]
        );
        assert_eq!(prepared(&[3], &[3], false).show_states(), vec![("held", ids(&[3]))]);
        assert_eq!(prepared(&[4], &[], false).show_states(), vec![("prepared", ids(&[4]))]);
        assert_eq!(prepared(&[1, 2], &[2], true).show_states(), vec![("finishing", ids(&[1, 2]))]);
    }
}

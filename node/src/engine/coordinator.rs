//! The two-phase-commit coordinator: a durable log of decisions on executor 0, the gate a
//! backup holds to pause new decisions, and the test-only fault hook.
//!
//! A decision record names a transaction, its outcome and its participant fragments (JSON in a
//! `storage::journal::Journal` under `<data-dir>/coordinator/`; storage knows nothing of what it
//! holds). The COMMIT record's fdatasync is a cross-fragment transaction's commit point: the
//! client is acknowledged only after it, and participants make the writes visible only after
//! it. No record means abort. A timeout that resolves an undecided transaction records ABORT
//! first, so a session that wakes up late finds the abort instead of committing.
//!
//! The journal forgets a COMMIT only once every participant executor reported its Commit
//! records durable (`finished`); an ABORT recorded by a timeout is remembered for
//! `COORDINATOR_ABORT_MEMORY`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError, RwLock};
use std::task::{Poll, Waker};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use router::FragmentId;
use serde::{Deserialize, Serialize};
use storage::{Journal, JournalError, TxId};

use super::error::EngineError;
use super::limits::{COORDINATOR_ABORT_MEMORY, COORDINATOR_JOURNAL_BYTES_MAX};

/// Where the coordinator keeps its journal, under the data directory.
pub const COORDINATOR_DIR: &str = "coordinator";

/// One decision as stored in the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// The transaction.
    pub tx: u64,
    /// Commit (`true`) or abort.
    pub commit: bool,
    /// Participant fragments.
    pub fragments: Vec<u32>,
}

impl DecisionRecord {
    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Option<DecisionRecord> {
        serde_json::from_slice(bytes).ok()
    }
}

/// One-round commits (`--one-round-commits`, on by default since session 34): a two-phase
/// commit of this node alone records no decision.
/// Each written participant's Prepare batch also puts a marker document naming every written
/// participant, and the transaction is committed once every Prepare record is durable. A
/// participant in doubt after a crash commits iff every named participant holds its Prepare
/// in doubt or its marker live (committed); a marker is deleted only once every participant's
/// Commit record is durable, so a participant with neither never prepared.
pub mod marker {
    use router::FragmentId;
    use storage::TxId;

    /// The reserved collection of markers (SQL refuses every name with its prefix).
    pub const COLLECTION: &str = "__tessera_txn";

    /// The shard a fragment's markers are put in and deleted from (any of its shards would
    /// do: a marker is never routed to, only read by recovery; one rule for both sides).
    pub fn shard(range: router::ShardRange) -> Option<router::ShardId> {
        router::ShardId::new(range.start())
    }

    /// A marker's document id.
    pub fn id(txid: TxId) -> String {
        format!("{:016x}", txid.get())
    }

    /// The transaction of a marker id.
    pub fn txid_of(id: &str) -> Option<TxId> {
        u64::from_str_radix(id, 16).ok().map(TxId::new)
    }

    /// A marker's document: the written participants.
    pub fn doc(participants: &[FragmentId]) -> serde_json::Value {
        serde_json::json!({ "participants": participants.iter().map(|f| f.get()).collect::<Vec<_>>() })
    }

    /// The participants a marker names.
    pub fn participants(doc: &serde_json::Value) -> Option<Vec<FragmentId>> {
        doc.get("participants")?
            .as_array()?
            .iter()
            .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()).map(FragmentId::new))
            .collect()
    }

    /// The participants named by the marker of one-round commit `txid` that `batch` puts, if
    /// it puts one.
    pub fn participants_in(txid: TxId, batch: &storage::WriteBatch) -> Option<Vec<FragmentId>> {
        let marker = id(txid);
        batch.ops().iter().find_map(|op| match op {
            storage::WriteOp::Put { collection, id, doc, .. }
                if collection == COLLECTION && *id == marker =>
            {
                participants(doc)
            }
            _ => None,
        })
    }

    /// The outcome of one-round commit `txid` from every fragment's evidence: committed iff
    /// every participant holds its Prepare record in doubt or its marker live. A participant
    /// that shows neither never prepared (markers are deleted only once every participant
    /// committed). A participant missing from `evidence` is an error: its log is the evidence.
    pub fn committed(
        txid: TxId,
        participants: &[FragmentId],
        evidence: &std::collections::BTreeMap<FragmentId, super::MarkerEvidence>,
    ) -> Result<bool, String> {
        let mut commit = true;
        for p in participants {
            let e = evidence
                .get(p)
                .ok_or_else(|| format!("participant fragment {p} of {txid} is not open here"))?;
            commit &= e.in_doubt.contains_key(&txid) || e.live.contains(&txid);
        }
        Ok(commit)
    }

    static ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// Whether new transactions of this node commit in one round (`--one-round-commits`).
    /// Recovery applies the rule to marked transactions either way.
    pub fn enabled() -> bool {
        ON.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets [`enabled`] (once, at startup, from the node's configuration).
    pub fn set_enabled(on: bool) {
        ON.store(on, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What one fragment showed of one-round commits when it was opened, before anything was
/// resolved: its marked transactions in doubt (with the participants their markers name) and
/// the transactions whose markers are live (committed here, not yet cleaned up).
#[derive(Debug, Clone, Default)]
pub struct MarkerEvidence {
    /// Marked transactions in doubt here, with their participants.
    pub in_doubt: BTreeMap<TxId, Vec<FragmentId>>,
    /// Transactions whose marker is live here.
    pub live: std::collections::BTreeSet<TxId>,
}

impl MarkerEvidence {
    /// The evidence of one fragment: the transactions `in_doubt` there whose Prepare carries
    /// a marker (`prepared` reads it), and the ids of its live markers.
    pub fn gather(
        in_doubt: Vec<TxId>,
        prepared: impl Fn(TxId) -> Option<serde_json::Value>,
        live: Vec<String>,
    ) -> MarkerEvidence {
        let mut evidence = MarkerEvidence::default();
        for txid in in_doubt {
            if let Some(participants) = prepared(txid).as_ref().and_then(marker::participants) {
                evidence.in_doubt.insert(txid, participants);
            }
        }
        evidence.live = live.iter().filter_map(|id| marker::txid_of(id)).collect();
        evidence
    }
}

/// Node-wide transaction state every executor reads.
#[derive(Debug, Default)]
pub struct TxnShared {
    next_txid: AtomicU64,
    recovered: RwLock<BTreeMap<TxId, bool>>,
    /// Every fragment's marker evidence, published while the executors open their fragments.
    evidence: Mutex<BTreeMap<FragmentId, MarkerEvidence>>,
    /// Executors yet to publish their evidence.
    opening: OnceLock<crate::runtime::Countdown>,
    gate: TwoPhaseGate,
}

impl TxnShared {
    /// A fresh transaction id: unique in this process, and above every id of earlier runs
    /// (they started from the clock of their own start, in microseconds, and the log's ids).
    pub fn next_txid(&self) -> TxId {
        let _ =
            self.next_txid.compare_exchange(0, clock_micros(), Ordering::SeqCst, Ordering::SeqCst);
        TxId::new(self.next_txid.fetch_add(1, Ordering::SeqCst))
    }

    /// Installs the decisions read from the coordinator journal at startup (before any
    /// executor opens its fragments) and moves the id counter past them.
    pub fn install_recovered(&self, decisions: BTreeMap<TxId, bool>) {
        let floor = decisions.keys().last().map_or(0, |t| t.get() + 1).max(clock_micros());
        self.next_txid.fetch_max(floor, Ordering::SeqCst);
        *self.recovered.write().unwrap_or_else(PoisonError::into_inner) = decisions;
    }

    /// The recovered decision of `txid`: `true` only for a recorded COMMIT.
    pub fn recovered_commit(&self, txid: TxId) -> bool {
        self.recovered.read().unwrap_or_else(PoisonError::into_inner).get(&txid) == Some(&true)
    }

    /// Expects `executors` executors to publish their fragments' marker evidence before any
    /// resolves a transaction in doubt (`publish_evidence`, `evidence_of`).
    pub fn expect_executors(&self, executors: usize) {
        let _ = self.opening.set(crate::runtime::Countdown::new(executors));
    }

    /// Publishes one executor's fragments' evidence (also when it failed to open them: an
    /// empty map), then waits until every executor published or `stop` ends.
    pub async fn publish_evidence(
        &self,
        mine: BTreeMap<FragmentId, MarkerEvidence>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        self.evidence.lock().unwrap_or_else(PoisonError::into_inner).extend(mine);
        if let Some(c) = self.opening.get() {
            c.arrive();
            futures_lite::future::or(c.wait(), stop).await;
        }
    }

    /// The published evidence of every fragment (after `publish_evidence` returned).
    pub fn evidence(&self) -> BTreeMap<FragmentId, MarkerEvidence> {
        self.evidence.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The published evidence, taken (once serving: recovery is over).
    pub fn take_evidence(&self) -> BTreeMap<FragmentId, MarkerEvidence> {
        std::mem::take(&mut *self.evidence.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The recovered COMMIT decisions.
    pub fn recovered_commits(&self) -> Vec<TxId> {
        self.recovered
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, commit)| **commit)
            .map(|(t, _)| *t)
            .collect()
    }

    /// The gate a backup holds to pause new two-phase-commit decisions.
    pub fn two_phase_gate(&self) -> &TwoPhaseGate {
        &self.gate
    }
}

/// Bits of a cluster transaction id below the id of the node that coordinates it.
const TXID_NODE_SHIFT: u32 = 52;

// Node 4095's tag is storage's id space for batches logged in parts.
const _: () = assert!(
    storage::limits::LOCAL_TXID_TAG == ((1 << (64 - TXID_NODE_SHIFT)) - 1) << TXID_NODE_SHIFT
);

/// `txid` tagged with its coordinating node (cluster nodes): the node's id in the top bits,
/// so a participant on another node knows whom to ask for the decision after a restart or
/// a timeout, from the PREPARE record alone. `None` for a node id that does not fit, and for
/// the largest one, whose tag is storage's own (`storage::limits::LOCAL_TXID_TAG`).
pub fn txid_for_node(txid: TxId, node: router::NodeId) -> Option<TxId> {
    if u64::from(node.0) >= (1 << (64 - TXID_NODE_SHIFT)) - 1 {
        return None;
    }
    let low = txid.get() & ((1u64 << TXID_NODE_SHIFT) - 1);
    Some(TxId::new(low | (u64::from(node.0) << TXID_NODE_SHIFT)))
}

/// The node that coordinates `txid` (see [`txid_for_node`]; 0 on a single node).
pub fn coordinator_of(txid: TxId) -> router::NodeId {
    router::NodeId(u32::try_from(txid.get() >> TXID_NODE_SHIFT).unwrap_or(u32::MAX))
}

fn clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
}

/// Reads the coordinator's decisions from `<data_dir>/coordinator` (blocking; once, before
/// the executors start).
pub fn read_decisions(data_dir: &Path) -> Result<BTreeMap<TxId, bool>, JournalError> {
    let records = storage::journal::read_dir_records(&data_dir.join(COORDINATOR_DIR))?;
    let mut out = BTreeMap::new();
    for r in records {
        if let Some(d) = DecisionRecord::decode(&r) {
            out.insert(TxId::new(d.tx), d.commit);
        } else {
            tracing::warn!(
                bytes = r.len(),
                "coordinator journal record is not a decision; ignored"
            );
        }
    }
    Ok(out)
}

/// Pauses new two-phase-commit decisions while held: a backup takes its cut of the fragments
/// and the coordinator journal under [`TwoPhaseGate::pause`], so every transaction in the cut
/// is either decided in the journal copy or undecided (and so aborted on restore). Usable from
/// any executor (`Send + Sync`, wakers only).
#[derive(Debug, Default)]
pub struct TwoPhaseGate {
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    paused: bool,
    deciding: usize,
    waiters: Vec<Waker>,
}

/// Held while one decision is being recorded.
#[derive(Debug)]
pub struct DecisionPass<'g>(&'g TwoPhaseGate);

/// Held by a backup: no decision is recorded until it is dropped.
#[derive(Debug)]
pub struct GatePause<'g>(&'g TwoPhaseGate);

impl TwoPhaseGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self) {
        let waiters = std::mem::take(&mut self.lock().waiters);
        for w in waiters {
            w.wake();
        }
    }

    /// Waits while a backup holds the gate, then lets one decision through.
    pub async fn enter(&self) -> DecisionPass<'_> {
        std::future::poll_fn(|cx| {
            let mut st = self.lock();
            if st.paused {
                st.waiters.push(cx.waker().clone());
                Poll::Pending
            } else {
                st.deciding += 1;
                Poll::Ready(())
            }
        })
        .await;
        DecisionPass(self)
    }

    /// Stops new decisions and waits for those being recorded to finish. One pause at a time.
    pub async fn pause(&self) -> GatePause<'_> {
        std::future::poll_fn(|cx| {
            let mut st = self.lock();
            if st.paused {
                st.waiters.push(cx.waker().clone());
                Poll::Pending
            } else {
                st.paused = true;
                Poll::Ready(())
            }
        })
        .await;
        // From here a cancelled pause un-pauses again (the guard's drop).
        let guard = GatePause(self);
        std::future::poll_fn(|cx| {
            let mut st = self.lock();
            if st.deciding == 0 {
                Poll::Ready(())
            } else {
                st.waiters.push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        guard
    }
}

impl Drop for DecisionPass<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.deciding = st.deciding.saturating_sub(1);
        drop(st);
        self.0.wake();
    }
}

impl Drop for GatePause<'_> {
    fn drop(&mut self) {
        self.0.lock().paused = false;
        self.0.wake();
    }
}

/// A decision the coordinator still needs.
#[derive(Debug)]
struct Kept {
    commit: bool,
    record: Vec<u8>,
    /// Participant executors whose Commit records are not known durable yet.
    outstanding: usize,
    fragments: Vec<FragmentId>,
    at: Instant,
}

/// One row of SHOW TRANSACTIONS from the coordinator.
#[derive(Debug, Clone)]
pub struct DecisionRow {
    /// The transaction.
    pub txid: TxId,
    /// Its outcome.
    pub commit: bool,
    /// Participants.
    pub fragments: Vec<FragmentId>,
    /// Since the decision.
    pub age: std::time::Duration,
}

/// The decision log, on executor 0.
pub struct Coordinator {
    journal: Journal,
    kept: RefCell<BTreeMap<TxId, Kept>>,
    /// The journal is rewritten once it holds more bytes than this.
    journal_bytes_max: u64,
    /// The next rewrite starts past this many bytes: `journal_bytes_max`, or twice what the
    /// last rewrite kept, so decisions that must be kept do not make every finish rewrite.
    rewrite_at: Cell<u64>,
    /// A rewrite is under way or waiting for its turn: nobody else starts one.
    rewriting: Cell<bool>,
    /// Rewrites done since open.
    rewrites: Cell<u64>,
    /// One-round commits whose participants have not all reported their Commit records
    /// durable: the participants still to report.
    marked: RefCell<BTreeMap<TxId, std::collections::BTreeSet<FragmentId>>>,
    /// Markers whose every participant's Commit record is durable: ready to delete.
    sweepable: RefCell<Vec<(FragmentId, TxId)>>,
}

/// Clears [`Coordinator::rewriting`] however the rewrite ends (also when its future is dropped).
struct Rewriting<'c>(&'c Cell<bool>);

impl Drop for Rewriting<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator").finish_non_exhaustive()
    }
}

impl Coordinator {
    /// Opens the journal in `<data_dir>/coordinator`. Decisions recovered from it were already
    /// applied by the executors' recovery (`TxnShared::install_recovered`), so none is kept.
    pub async fn open(data_dir: &Path) -> Result<Coordinator, JournalError> {
        Coordinator::open_with_limit(data_dir, COORDINATOR_JOURNAL_BYTES_MAX).await
    }

    /// As [`Coordinator::open`], rewriting the journal past `journal_bytes_max` bytes.
    pub async fn open_with_limit(
        data_dir: &Path,
        journal_bytes_max: u64,
    ) -> Result<Coordinator, JournalError> {
        let (journal, records) = Journal::open(&data_dir.join(COORDINATOR_DIR)).await?;
        tracing::debug!(records = records.len(), "coordinator journal open");
        Ok(Coordinator {
            journal,
            kept: RefCell::new(BTreeMap::new()),
            journal_bytes_max,
            rewrite_at: Cell::new(journal_bytes_max),
            rewriting: Cell::new(false),
            rewrites: Cell::new(0),
            marked: RefCell::default(),
            sweepable: RefCell::default(),
        })
    }

    /// Keeps the recovered COMMIT decisions `txids` in the journal from now on (a cluster
    /// node: a participant on another node may still hold one prepared and ask for it after
    /// this node restarted; nothing reports those participants finished, so a journal rewrite
    /// keeps these records for good).
    pub fn keep_recovered(&self, txids: &[TxId]) {
        let mut kept = self.kept.borrow_mut();
        for txid in txids {
            let record =
                DecisionRecord { tx: txid.get(), commit: true, fragments: Vec::new() }.encode();
            kept.entry(*txid).or_insert(Kept {
                commit: true,
                record,
                outstanding: 1,
                fragments: Vec::new(),
                at: Instant::now(),
            });
        }
    }

    /// Records `commit` for `txid` unless a decision is already known (then that one stands)
    /// and returns the decision in force, durable. `executors` participant executors will
    /// each report `finished` after a commit.
    pub async fn decide(
        &self,
        gate: &TwoPhaseGate,
        txid: TxId,
        commit: bool,
        fragments: &[FragmentId],
        executors: usize,
    ) -> Result<bool, EngineError> {
        let _pass = gate.enter().await;
        let (decision, record) = {
            let mut kept = self.kept.borrow_mut();
            match kept.get(&txid) {
                Some(k) => (k.commit, k.record.clone()),
                None => {
                    let record = DecisionRecord {
                        tx: txid.get(),
                        commit,
                        fragments: fragments.iter().map(|f| f.get()).collect(),
                    }
                    .encode();
                    kept.insert(
                        txid,
                        Kept {
                            commit,
                            record: record.clone(),
                            outstanding: executors,
                            fragments: fragments.to_vec(),
                            at: Instant::now(),
                        },
                    );
                    (commit, record)
                }
            }
        };
        // Appending the same record again for a known decision makes sure it is durable: the
        // journal writes in order, so this append's fdatasync covers the first one.
        self.journal.append(&record).await.map_err(EngineError::Journal)?;
        Ok(decision)
    }

    /// One participant executor's Commit (or Abort) records of `txid` are durable. A journal
    /// rewrite this triggers passes the gate like a decision, so a backup's cut never sees the
    /// journal's files change under it.
    pub async fn finished(&self, gate: &TwoPhaseGate, txid: TxId) {
        {
            let mut kept = self.kept.borrow_mut();
            if let Some(k) = kept.get_mut(&txid)
                && k.commit
            {
                k.outstanding = k.outstanding.saturating_sub(1);
                if k.outstanding == 0 {
                    kept.remove(&txid);
                }
            }
        }
        // One rewrite at a time, started by the first caller to see the journal too big. Every
        // caller that finished meanwhile saw the same size; had each started its own rewrite,
        // they would all run back to back (dozens, each with its own fdatasyncs and directory
        // syncs) while decisions wait behind them.
        if self.journal.bytes() > self.rewrite_at.get() && !self.rewriting.replace(true) {
            let _rewriting = Rewriting(&self.rewriting);
            let _pass = gate.enter().await;
            // What to keep is read once appends are held off, so a decision recorded while
            // this waited for its turn is not lost.
            let result = self
                .journal
                .rewrite_with(|| {
                    let mut kept = self.kept.borrow_mut();
                    kept.retain(|_, k| k.commit || k.at.elapsed() < COORDINATOR_ABORT_MEMORY);
                    kept.values().map(|k| k.record.clone()).collect()
                })
                .await;
            match result {
                Ok(()) => {
                    self.rewrites.set(self.rewrites.get() + 1);
                    let kept = self.journal.bytes();
                    self.rewrite_at.set(self.journal_bytes_max.max(kept.saturating_mul(2)));
                    tracing::debug!("coordinator journal rewritten");
                }
                Err(e) => tracing::error!(error = %e, "coordinator journal rewrite failed"),
            }
        }
    }

    /// Participant fragments `mine` of one-round commit `txid` (which names `all`) have
    /// their Commit records durable. Once every participant did, the markers may go.
    pub fn finished_marked(&self, txid: TxId, all: &[FragmentId], mine: &[FragmentId]) {
        let mut marked = self.marked.borrow_mut();
        let left = marked.entry(txid).or_insert_with(|| all.iter().copied().collect());
        for f in mine {
            left.remove(f);
        }
        if left.is_empty() {
            marked.remove(&txid);
            self.sweepable.borrow_mut().extend(all.iter().map(|f| (*f, txid)));
        }
    }

    /// Markers ready to delete (every participant finished), taken.
    pub fn take_sweepable(&self) -> Vec<(FragmentId, TxId)> {
        std::mem::take(&mut *self.sweepable.borrow_mut())
    }

    /// Markers found live at startup (every participant was resolved before serving): to
    /// delete like any finished transaction's.
    pub fn sweep_later(&self, markers: impl IntoIterator<Item = (FragmentId, TxId)>) {
        self.sweepable.borrow_mut().extend(markers);
    }

    /// Journal rewrites done since open.
    pub fn journal_rewrites(&self) -> u64 {
        self.rewrites.get()
    }

    /// Bytes in the journal's current file.
    pub fn journal_bytes(&self) -> u64 {
        self.journal.bytes()
    }

    /// The journal's current file and the end of its records: a backup's cut copies that
    /// file only to there (see `backup::take_cut`).
    pub fn journal_tail(&self) -> Option<(PathBuf, u64)> {
        self.journal.tail_file()
    }

    /// Decisions still held, for SHOW TRANSACTIONS.
    pub fn rows(&self) -> Vec<DecisionRow> {
        self.kept
            .borrow()
            .iter()
            .map(|(txid, k)| DecisionRow {
                txid: *txid,
                commit: k.commit,
                fragments: k.fragments.clone(),
                age: k.at.elapsed(),
            })
            .collect()
    }

    /// Closes the journal.
    pub async fn close(&self) {
        self.journal.close().await;
    }
}

/// Test-only crash points in two-phase commit, armed by the environment variable
/// `TESSERA_FAULT` (never set in production): `2pc-after-prepare:<k>` aborts the process once
/// `k` participant fragments have a durable PREPARE, `2pc-after-decision` right after a COMMIT
/// decision is durable, `2pc-during-apply` once the first participant fragment's Commit record
/// is durable (the fragments after it not yet committed), and `2pc-stall-before-decision`
/// makes a session sleep past the prepared-transaction timeout before deciding (no crash),
/// `2pc-stall-before-prepare` makes executor 1 sleep as long before preparing its share, and
/// `2pc-pause-before-decision` makes it sleep three quarters of `TXN_HELD_WAIT_MAX` there
/// (within what a session meeting its documents waits for them).
/// `autocommit-rewrite-after-read` rewrites a document between an autocommit share's read and
/// its commit (`rewrite_after_read`); it may be armed beside one of the others, comma-separated.
/// Compiled in so the end-to-end crash tests run the real binary.
pub mod fault {
    use super::*;

    /// The crash points.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Fault {
        /// After `k` durable prepares.
        AfterPrepare(usize),
        /// After a durable COMMIT decision.
        AfterDecision,
        /// After the first durable Commit record of a decided transaction.
        DuringApply,
        /// Not a crash: the session sleeps between its prepares and its decision for longer
        /// than the prepared-transaction timeout, so the timeout resolves the transaction first.
        StallBeforeDecision,
        /// Not a crash: the session sleeps between its prepares and its decision for less
        /// than a commit meeting its documents waits for them.
        PauseBeforeDecision,
        /// Not a crash: executor 1 sleeps past the prepared-transaction timeout before it
        /// prepares its share, so the other shares' timeout finds it never prepared.
        StallBeforePrepare,
        /// Not a crash: after each autocommit share of a fragment is read, and before the
        /// statement commits, the first document it writes there is rewritten (as a writer
        /// rewriting it back to back would), durably, before the share returns.
        RewriteAfterRead,
    }

    static ARMED: OnceLock<Vec<Fault>> = OnceLock::new();
    static PREPARED: AtomicUsize = AtomicUsize::new(0);

    /// The armed faults, read once: `TESSERA_FAULT` is one fault or several separated by
    /// commas (`autocommit-rewrite-after-read` beside one crash point, say).
    fn armed_all() -> &'static [Fault] {
        ARMED.get_or_init(|| {
            let Ok(v) = std::env::var("TESSERA_FAULT") else { return Vec::new() };
            let mut faults = Vec::new();
            for name in v.split(',') {
                let fault = match name {
                    "2pc-after-decision" => Some(Fault::AfterDecision),
                    "2pc-during-apply" => Some(Fault::DuringApply),
                    "2pc-stall-before-decision" => Some(Fault::StallBeforeDecision),
                    "2pc-pause-before-decision" => Some(Fault::PauseBeforeDecision),
                    "2pc-stall-before-prepare" => Some(Fault::StallBeforePrepare),
                    "autocommit-rewrite-after-read" => Some(Fault::RewriteAfterRead),
                    other => other
                        .strip_prefix("2pc-after-prepare:")
                        .and_then(|k| k.parse().ok())
                        .map(Fault::AfterPrepare),
                };
                match fault {
                    Some(f) => faults.push(f),
                    None => {
                        tracing::warn!(value = %name, "TESSERA_FAULT not understood; not armed")
                    }
                }
            }
            faults
        })
    }

    /// The armed crash or stall point (the first of them), if any.
    pub fn armed() -> Option<Fault> {
        armed_all().iter().copied().find(|f| *f != Fault::RewriteAfterRead)
    }

    fn crash(point: &str) {
        tracing::warn!(point, "TESSERA_FAULT: aborting the process (test-only fault hook)");
        std::process::abort();
    }

    /// A participant fragment's PREPARE is durable.
    pub fn prepared() {
        if let Some(Fault::AfterPrepare(k)) = armed()
            && PREPARED.fetch_add(1, Ordering::SeqCst) + 1 >= k
        {
            crash("2pc-after-prepare");
        }
    }

    /// A COMMIT decision is durable.
    pub fn decided() {
        if armed() == Some(Fault::AfterDecision) {
            crash("2pc-after-decision");
        }
    }

    /// Between a session's prepares and its decision.
    pub async fn before_decision() {
        if armed() == Some(Fault::StallBeforeDecision) {
            tracing::warn!("TESSERA_FAULT: stalling before the decision (test-only fault hook)");
            let stall = super::super::limits::TXN_PREPARED_TIMEOUT * 2
                + super::super::limits::TXN_SWEEP_INTERVAL * 2;
            glommio::timer::sleep(stall).await;
        }
        if armed() == Some(Fault::PauseBeforeDecision) {
            tracing::warn!("TESSERA_FAULT: pausing before the decision (test-only fault hook)");
            glommio::timer::sleep(super::super::limits::TXN_HELD_WAIT_MAX * 3 / 4).await;
        }
    }

    /// Before executor `index` prepares its share of a transaction.
    pub async fn before_prepare(index: usize) {
        if index == 1 && armed() == Some(Fault::StallBeforePrepare) {
            tracing::warn!("TESSERA_FAULT: stalling before a prepare (test-only fault hook)");
            let stall = super::super::limits::TXN_PREPARED_TIMEOUT * 2
                + super::super::limits::TXN_SWEEP_INTERVAL * 2;
            glommio::timer::sleep(stall).await;
        }
    }

    /// An autocommit share of `fragment` was read (`Core::txn_write`), its commit still to
    /// come: rewrites the first document it writes with its stored content (a new version,
    /// nothing else changed), no version expected, and returns once that write is durable.
    pub async fn rewrite_after_read(
        fragment: &storage::Fragment,
        collection: &str,
        intents: &[query::WriteIntent],
    ) {
        if !armed_all().contains(&Fault::RewriteAfterRead) {
            return;
        }
        let first = intents.iter().find_map(|i| match i {
            query::WriteIntent::Put { id, shard, .. } => Some((id, *shard)),
            query::WriteIntent::Delete { .. } => None,
        });
        let Some((id, shard)) = first else { return };
        let Some(doc) = fragment.get(collection, id).map(|d| d.doc().to_serde()) else { return };
        let batch = storage::WriteBatch::new().put(collection, id, shard, None, doc);
        match fragment.apply(batch).await {
            Ok(_) => tracing::debug!(%id, "TESSERA_FAULT: rewrote a document after its read"),
            Err(e) => tracing::warn!(%id, error = %e, "TESSERA_FAULT: rewrite after read failed"),
        }
    }

    /// A participant fragment's Commit record is durable.
    pub fn applied() {
        if armed() == Some(Fault::DuringApply) {
            crash("2pc-during-apply");
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_lite::future::{block_on, poll_once};

    use super::*;

    // Checks a pause waits for the decision in progress, holds off new ones until dropped, and
    // that a pause cancelled while waiting leaves the gate open.
    #[test]
    fn unit_gate_pause_holds_off_decisions() {
        let gate = TwoPhaseGate::default();
        block_on(async {
            let pass = gate.enter().await;
            let mut pause = Box::pin(gate.pause());
            assert!(poll_once(pause.as_mut()).await.is_none(), "waits for the decision");
            drop(pass);
            let held = pause.await;
            let mut enter = Box::pin(gate.enter());
            assert!(poll_once(enter.as_mut()).await.is_none(), "no decision while paused");
            drop(held);
            let pass = enter.await;
            let mut cancelled = Box::pin(gate.pause());
            assert!(poll_once(cancelled.as_mut()).await.is_none());
            drop(cancelled);
            drop(pass);
            let _again = gate.enter().await;
        });
    }

    // Checks that the participants finishing while the journal is over its limit rewrite it
    // once, not once each (session 7 saw 33-66 rewrites in a row under 32 clients); that the
    // rewrite keeps the decisions still needed; and that when those fill more than half the
    // limit, the next rewrite waits until the journal has doubled instead of coming with the
    // next finish.
    #[test]
    fn unit_journal_over_limit_is_rewritten_once() {
        super::super::on_executor_with_dir("coordinator-rewrite", |d| async move {
            let limit = 64 << 10;
            let c = Coordinator::open_with_limit(&d, limit).await.expect("open");
            let gate = TwoPhaseGate::default();
            let frags = [FragmentId::new(0), FragmentId::new(1)];
            let decide = |t: u64| {
                // Two participant executors, so one finish leaves the decision kept.
                c.decide(&gate, TxId::new(t), true, &frags, 2)
            };
            let mut txid = 0;
            while c.journal_bytes() <= limit {
                txid += 1;
                decide(txid).await.expect("decide");
            }
            let (c, gate) = (std::rc::Rc::new(c), std::rc::Rc::new(gate));
            let finish_all = |ts: std::ops::RangeInclusive<u64>| {
                let tasks: Vec<_> = ts
                    .map(|t| {
                        let (c, gate) = (c.clone(), gate.clone());
                        glommio::spawn_local(async move {
                            c.finished(&gate, TxId::new(t)).await;
                        })
                    })
                    .collect();
                async move {
                    for t in tasks {
                        t.await;
                    }
                }
            };
            finish_all(1..=txid).await;
            assert_eq!(c.journal_rewrites(), 1, "one rewrite for {txid} finishes at once");
            let kept = c.journal_bytes();
            assert!(kept < limit / 2, "the rewrite kept the {txid} decisions only: {kept}");
            // Keep decisions until a rewrite keeps more than 0.6 of the limit.
            let step = |t: u64| {
                let (c, gate) = (c.clone(), gate.clone());
                async move {
                    c.decide(&gate, TxId::new(t), true, &frags, 2).await.expect("decide");
                    c.finished(&gate, TxId::new(t)).await;
                }
            };
            loop {
                let rewrites = c.journal_rewrites();
                txid += 1;
                step(txid).await;
                if c.journal_rewrites() > rewrites && c.journal_bytes() > limit * 6 / 10 {
                    break;
                }
            }
            // Each decision now appends one 4 KiB chunk. Appending 0.9 of what was kept
            // passes the limit but not twice the kept bytes: no rewrite.
            let (kept, rewrites) = (c.journal_bytes(), c.journal_rewrites());
            for _ in 0..kept * 9 / 10 / 4096 {
                txid += 1;
                step(txid).await;
            }
            assert!(c.journal_bytes() > limit, "past the limit: {}", c.journal_bytes());
            assert_eq!(c.journal_rewrites(), rewrites, "kept {kept}: no rewrite per finish");
            c.close().await;
        });
    }

    // Checks the markers' collection is one SQL refuses, and marker ids and documents round
    // trip.
    #[test]
    fn unit_markers_are_reserved_and_round_trip() {
        assert!(marker::COLLECTION.starts_with(query::limits::RESERVED_COLLECTION_PREFIX));
        let txid = TxId::new(0x1234_5678_9abc);
        assert_eq!(marker::txid_of(&marker::id(txid)), Some(txid));
        assert_eq!(marker::txid_of("not hex"), None);
        let parts = [FragmentId::new(0), FragmentId::new(7)];
        assert_eq!(marker::participants(&marker::doc(&parts)), Some(parts.to_vec()));
        assert_eq!(marker::participants(&serde_json::json!({"participants": [-1]})), None);
        let batch = storage::WriteBatch::new()
            .put("c", "a", router::ShardId::new(0).unwrap(), None, serde_json::json!({}))
            .put(
                marker::COLLECTION,
                &marker::id(txid),
                router::ShardId::new(0).unwrap(),
                None,
                marker::doc(&parts),
            );
        assert_eq!(marker::participants_in(txid, &batch), Some(parts.to_vec()));
        assert_eq!(marker::participants_in(TxId::new(1), &batch), None, "another transaction's");
    }

    // Checks the one-round rule: committed iff every participant holds its Prepare in doubt
    // or its marker live; a participant with neither aborts; one not read is an error.
    #[test]
    fn unit_one_round_rule() {
        let (a, b, t) = (FragmentId::new(0), FragmentId::new(1), TxId::new(9));
        let mut evidence = BTreeMap::new();
        let mut in_doubt = MarkerEvidence::default();
        in_doubt.in_doubt.insert(t, vec![a, b]);
        evidence.insert(a, in_doubt.clone());
        evidence.insert(b, MarkerEvidence::default());
        assert_eq!(marker::committed(t, &[a, b], &evidence), Ok(false));
        let mut live = MarkerEvidence::default();
        live.live.insert(t);
        evidence.insert(b, live);
        assert_eq!(marker::committed(t, &[a, b], &evidence), Ok(true));
        evidence.insert(b, in_doubt);
        assert_eq!(marker::committed(t, &[a, b], &evidence), Ok(true));
        evidence.remove(&b);
        assert!(marker::committed(t, &[a, b], &evidence).is_err());
    }

    // Checks decision records round-trip through their bytes and junk is refused.
    #[test]
    fn unit_decision_record_round_trips() {
        let d = DecisionRecord { tx: 42, commit: true, fragments: vec![0, 3] };
        assert_eq!(DecisionRecord::decode(&d.encode()), Some(d));
        assert_eq!(DecisionRecord::decode(b"not json"), None);
    }

    // Checks transaction ids grow, start above every recovered one, and that only a recorded
    // COMMIT reads as commit.
    #[test]
    fn unit_txids_pass_recovered_decisions() {
        let t = TxnShared::default();
        let high = TxId::new(u64::MAX / 4);
        t.install_recovered(BTreeMap::from([(high, true), (TxId::new(7), false)]));
        let a = t.next_txid();
        let b = t.next_txid();
        assert!(a > high);
        assert!(b > a);
        assert!(t.recovered_commit(high));
        assert!(!t.recovered_commit(TxId::new(7)));
        assert!(!t.recovered_commit(TxId::new(8)));
    }
}

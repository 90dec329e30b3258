//! The public face of the crate: [`Fragment`] and the types its methods take and return.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::rc::Rc;
use std::task::Waker;

use glommio::task::JoinHandle;
use router::{FragmentId, ShardId, ShardRange};

use crate::disk::{ChunkIo, Disk, DiskFile, DmaDisk};
use crate::error::{AppendError, CompactError, ImportError, InputError, OpenError};
use crate::export::Export;
use crate::format::frame_bytes;
use crate::index::{Index, Loc, ShardStats};
use crate::keyhash::KeyedState;
use crate::limits::{
    BATCH_BYTES_MAX, BATCH_OPS_MAX, BLOCK_BYTES, CHUNK_HEADER_BYTES, COLLECTION_BYTES_MAX,
    COMPACT_DEAD_BYTES_DEFAULT, DOC_BYTES_MAX, GROUP_COMMIT_BATCH_BYTES_MAX, ID_BYTES_MAX,
    LAZY_RECORD_WAIT, LOCAL_TXID_TAG, QUEUE_BYTES_MAX, RECORD_BYTES_MAX, RECORD_OPS_MAX,
    SEGMENT_BYTES_DEFAULT, SEGMENT_HEADER_BYTES,
};
use crate::log::{Completion, Effect, OpMeta, Pending};
use crate::record::{ArchivedPutOp, DeleteOp, Op, PutOp, Record, RecordBody};
use crate::segment::Segment;
use crate::value::{ArchivedJsonValue, JsonValue};
use crate::{Lsn, TxId, Version, doc_key};

/// How a fragment is opened.
#[derive(Clone)]
pub struct FragmentOptions {
    /// Preallocated size of each segment, a multiple of 4 KiB in
    /// `SEGMENT_BYTES_MIN ..= SEGMENT_BYTES_MAX`.
    pub segment_bytes: u64,
    /// Dead log bytes (overwritten or deleted documents, finished transactions) above which a
    /// write starts a background compaction, when they are also at least half the log.
    /// `u64::MAX` turns automatic compaction off.
    pub compact_dead_bytes_min: u64,
    /// The file system under the log ([`DmaDisk`] outside tests).
    pub disk: Rc<dyn Disk>,
    /// Split waves of runnable writers (default off): the group-commit writer's task queue is
    /// latency-sensitive, and while recent chunks were big and fast a chunk starts on
    /// glommio's blocking thread before the wave that fills it has run, so its fdatasync
    /// overlaps the rest of the wave (`log::waves_split`). Off, the writer runs in the plain
    /// writers' queue (`log::spawn_writer`), after the round's other tasks, and every chunk
    /// goes by `chunk_io`. Measured on a shared
    /// machine it cost about 10% more executor CPU per write without a shown latency gain
    /// (BENCHMARKS.md, "storage: ack p99 at 256 writers (session 4, branch `wal`)").
    pub split_waves: bool,
    /// The executor-wide gate on group commits in flight, shared by the fragments of one
    /// executor (`syncgate`); `None`: this fragment starts its chunks without asking.
    pub sync_gate: Option<crate::SyncGate>,
    /// How a chunk's write and fdatasync run when waves are not split: `ChunkIo::Now` (the
    /// default) as one `pwrite` + `fdatasync` job on glommio's blocking thread, `ChunkIo::Ring`
    /// as an io_uring write, then an io_uring fdatasync (BENCHMARKS.md, "session 10": under
    /// load the job took less node CPU per transaction and per autocommit write; alone, one
    /// operation at a time, it costs the same).
    pub chunk_io: ChunkIo,
    /// How long lazy records alone (phase two's Commit records) wait in an idle log for a
    /// record that starts a chunk to carry them ([`LAZY_RECORD_WAIT`] by default).
    pub lazy_record_wait: std::time::Duration,
}

impl Default for FragmentOptions {
    fn default() -> Self {
        FragmentOptions {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            compact_dead_bytes_min: COMPACT_DEAD_BYTES_DEFAULT,
            disk: Rc::new(DmaDisk),
            split_waves: false,
            sync_gate: None,
            chunk_io: ChunkIo::default(),
            lazy_record_wait: LAZY_RECORD_WAIT,
        }
    }
}

impl std::fmt::Debug for FragmentOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FragmentOptions")
            .field("segment_bytes", &self.segment_bytes)
            .field("compact_dead_bytes_min", &self.compact_dead_bytes_min)
            .field("split_waves", &self.split_waves)
            .field("sync_gate", &self.sync_gate)
            .field("chunk_io", &self.chunk_io)
            .field("lazy_record_wait", &self.lazy_record_wait)
            .finish_non_exhaustive()
    }
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Write a whole document.
    Put {
        /// The collection.
        collection: String,
        /// The document id (case kept; looked up case-insensitively).
        id: String,
        /// The document's shard (the router's answer for `id`).
        shard: ShardId,
        /// `None`: write whatever is there. `Some(Version::ABSENT)`: only if the document does
        /// not exist. `Some(v)`: only if the current version is `v`.
        expected_version: Option<Version>,
        /// The document.
        doc: serde_json::Value,
    },
    /// Delete a document (deleting a missing document is not an error).
    Delete {
        /// The collection.
        collection: String,
        /// The document id.
        id: String,
        /// The document's shard.
        shard: ShardId,
        /// As for `Put`.
        expected_version: Option<Version>,
    },
    /// Validate without writing: the batch fails with `Conflict` unless the document's current
    /// version is `expected_version` (`Version::ABSENT`: the document must not exist), and with
    /// `Locked` while a prepared transaction holds it. Never logged. In `prepare`, the document
    /// stays locked against writers until the transaction commits or aborts (in memory only:
    /// recovery resolves every prepared transaction before the fragment serves traffic), so the
    /// value read stays current up to the commit point.
    Check {
        /// The collection.
        collection: String,
        /// The document id.
        id: String,
        /// The document's shard.
        shard: ShardId,
        /// The version that was read.
        expected_version: Version,
    },
}

impl WriteOp {
    /// Whether this is a check that the document does not exist (`Version::ABSENT`).
    pub fn is_absence_check(&self) -> bool {
        matches!(self, WriteOp::Check { expected_version, .. } if *expected_version == Version::ABSENT)
    }
}

/// The writes of one transaction: applied all or nothing, with one log record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteBatch {
    ops: Vec<WriteOp>,
    scans: Vec<ScanCheck>,
}

/// A range of a collection a transaction scanned to the end, with how many documents it held
/// then (phantom protection). Validated with the batch, never logged: the batch fails with
/// `Phantom` unless the collection still has exactly `docs` documents whose shard is in
/// `range` (queued writes included), and with `Locked` while a prepared transaction writes
/// there. The documents the scan returned are checked one by one (`WriteOp::Check`), so an
/// unchanged count means no document entered the range. In `prepare` and `hold` the range
/// stays locked until the transaction finishes: a write placing a document in it (a new one,
/// or one moved there) fails with `Locked` (in memory only, as a check's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanCheck {
    /// The collection.
    pub collection: String,
    /// The shards scanned (within the fragment's range).
    pub range: ShardRange,
    /// Documents the range held when it was scanned.
    pub docs: u64,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Adds an operation.
    pub fn push(&mut self, op: WriteOp) {
        self.ops.push(op);
    }

    /// Adds a put (builder style).
    pub fn put(
        mut self,
        collection: &str,
        id: &str,
        shard: ShardId,
        expected_version: Option<Version>,
        doc: serde_json::Value,
    ) -> WriteBatch {
        self.ops.push(WriteOp::Put {
            collection: collection.to_owned(),
            id: id.to_owned(),
            shard,
            expected_version,
            doc,
        });
        self
    }

    /// Adds a delete (builder style).
    pub fn delete(
        mut self,
        collection: &str,
        id: &str,
        shard: ShardId,
        expected_version: Option<Version>,
    ) -> WriteBatch {
        self.ops.push(WriteOp::Delete {
            collection: collection.to_owned(),
            id: id.to_owned(),
            shard,
            expected_version,
        });
        self
    }

    /// Adds a check (builder style): see [`WriteOp::Check`].
    pub fn check(
        mut self,
        collection: &str,
        id: &str,
        shard: ShardId,
        expected_version: Version,
    ) -> WriteBatch {
        self.ops.push(WriteOp::Check {
            collection: collection.to_owned(),
            id: id.to_owned(),
            shard,
            expected_version,
        });
        self
    }

    /// Adds a scanned range (builder style): see [`ScanCheck`].
    pub fn scan(mut self, collection: &str, range: ShardRange, docs: u64) -> WriteBatch {
        self.scans.push(ScanCheck { collection: collection.to_owned(), range, docs });
        self
    }

    /// The scanned ranges to validate.
    pub fn scans(&self) -> &[ScanCheck] {
        &self.scans
    }

    /// Number of operations that write (puts and deletes, not checks).
    pub fn writes(&self) -> usize {
        self.ops.iter().filter(|op| !matches!(op, WriteOp::Check { .. })).count()
    }

    /// The operations.
    pub fn ops(&self) -> &[WriteOp] {
        &self.ops
    }

    /// The batch in slices of at most `max` operations for validating a checks-only batch in
    /// parts, with the scanned ranges and every `ABSENT` check in the first slice (which may
    /// hold more than `max` for them alone). Those are the checks a change can undo unseen (a
    /// document inserted and deleted again leaves a count, or an absence, as it was, where a
    /// document's version never comes back): validated at one instant, before any versioned
    /// check, the range counts and absences are what they were read as at that instant, and
    /// every versioned check that passes later was current then too. Order is otherwise kept.
    pub fn into_slices(self, max: usize) -> Vec<WriteBatch> {
        let max = max.max(1);
        let (mut first, rest): (Vec<WriteOp>, Vec<WriteOp>) =
            self.ops.into_iter().partition(WriteOp::is_absence_check);
        let mut rest = rest.into_iter();
        first.extend(rest.by_ref().take(max.saturating_sub(first.len())));
        if first.is_empty() && self.scans.is_empty() {
            return Vec::new();
        }
        let mut slices = vec![WriteBatch { ops: first, scans: self.scans }];
        loop {
            let slice: Vec<WriteOp> = rest.by_ref().take(max).collect();
            if slice.is_empty() {
                return slices;
            }
            slices.push(WriteBatch { ops: slice, scans: Vec::new() });
        }
    }

    /// Number of operations (scanned ranges not included).
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are neither operations nor scanned ranges.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.scans.is_empty()
    }
}

/// What a durable write produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// The record's log position.
    pub lsn: Lsn,
    /// The new version of each operation's document, in batch order (a delete's version is
    /// its tombstone's).
    pub versions: Vec<Version>,
}

/// A stored document, read in place from the log's mapping: no copy, no deserialization. Holds
/// the segment's mapping alive, so it stays valid while compaction removes the file.
pub struct DocRef<'f> {
    _seg: Rc<Segment>,
    put: NonNull<ArchivedPutOp>,
    version: Version,
    _fragment: PhantomData<&'f ()>,
}

impl std::fmt::Debug for DocRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocRef").field("id", &self.id()).field("version", &self.version).finish()
    }
}

impl<'f> DocRef<'f> {
    pub(crate) fn new(loc: &Loc, version: Version) -> Option<DocRef<'f>> {
        let put = loc.seg.record(loc.span)?.body.put_at(usize::try_from(loc.op).ok()?)?;
        Some(DocRef {
            _seg: loc.seg.clone(),
            put: NonNull::from(put),
            version,
            _fragment: PhantomData,
        })
    }

    fn put(&self) -> &ArchivedPutOp {
        // SAFETY: `put` points into the read-only mapping of `_seg`, which this DocRef keeps
        // alive; the mapping never moves and its record bytes never change (see
        // `segment`), and the pointer came from a validated record (`archive`).
        unsafe { self.put.as_ref() }
    }

    /// The document id as first written.
    pub fn id(&self) -> &str {
        self.put().id.as_str()
    }

    /// The collection.
    pub fn collection(&self) -> &str {
        self.put().collection.as_str()
    }

    /// The document's shard.
    pub fn shard(&self) -> ShardId {
        ShardId::from_u64_mod(u64::from(self.put().shard.to_native()))
    }

    /// The document's version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The archived document; implements `router::doc::DocValue`.
    pub fn doc(&self) -> &ArchivedJsonValue {
        &self.put().doc
    }
}

/// Where a resumable scan stopped: the shard and lower-cased id of the last document visited.
/// A caller may also build one from a document it visited (`router::doc_key` of its id) to
/// resume after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanCursor {
    /// The document's shard.
    pub shard: ShardId,
    /// Its lower-cased id.
    pub key: String,
}

/// Counters of a fragment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FragmentStats {
    /// Live documents.
    pub docs: u64,
    /// Log bytes of live documents.
    pub live_bytes: u64,
    /// Log bytes of everything else (old versions, tombstones, transaction records).
    pub dead_bytes: u64,
    /// Segment files.
    pub segments: u64,
    /// Torn tails truncated at open.
    pub torn_tails: u64,
    /// The last durable LSN.
    pub lsn_durable: u64,
    /// Completed compactions since open.
    pub compactions: u64,
    /// Live documents and bytes per shard (shards with documents only).
    pub shards: BTreeMap<ShardId, ShardStats>,
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactStats {
    /// Segments replaced.
    pub segments_removed: u64,
    /// Records written to the compacted segment.
    pub records_written: u64,
    /// Log bytes before.
    pub bytes_before: u64,
    /// Log bytes after.
    pub bytes_after: u64,
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportStats {
    /// Documents written.
    pub docs: u64,
}

/// A prepared (phase one) distributed transaction, or a batch logged in parts whose Commit
/// record is on its way (`TxId::is_local`).
#[derive(Debug)]
pub(crate) struct Prepared {
    /// Its Prepare records, in log order: one unless the batch was too large for one record.
    pub parts: Vec<PreparedPart>,
    /// A commit or abort is on its way to the log.
    pub finishing: bool,
    /// Lock keys of the documents its checks hold (in memory only, never logged).
    pub read_locks: Vec<String>,
}

/// One Prepare record of a prepared transaction.
#[derive(Debug)]
pub(crate) struct PreparedPart {
    /// Where the record is, once durable.
    pub loc: Option<Loc>,
    /// Its writes, in record order.
    pub ops: Vec<OpMeta>,
}

impl Prepared {
    /// Every Prepare record is durable.
    pub fn durable(&self) -> bool {
        self.parts.iter().all(|p| p.loc.is_some())
    }

    /// Its writes, in log order.
    pub fn ops(&self) -> impl Iterator<Item = &OpMeta> {
        self.parts.iter().flat_map(|p| p.ops.iter())
    }
}

/// A queued Commit record whose writes are already visible: [`CommitDurable::wait`] returns
/// once the record is durable.
#[must_use = "the commit is durable only once `wait` returns"]
pub struct CommitDurable {
    done: Rc<Completion>,
}

impl std::fmt::Debug for CommitDurable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitDurable").finish_non_exhaustive()
    }
}

/// Where a transaction's Prepare stands in a fragment ([`Fragment::prepared_state_or_fence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreparedState {
    /// Prepared, its record durable (in doubt until committed or aborted).
    Durable,
    /// Prepared, its record on its way to the log.
    Queued,
    /// Not prepared here (never, or already committed or aborted); now fenced.
    Absent,
}

impl CommitDurable {
    /// Waits for the Commit record's fdatasync.
    pub async fn wait(self) -> Result<Lsn, AppendError> {
        self.done.wait().await
    }
}

/// The segment being appended to.
pub(crate) struct Active {
    pub seg: Rc<Segment>,
    pub file: Rc<dyn DiskFile>,
    /// Offset after the last durable chunk (block-aligned): the durable prefix.
    pub pos: u64,
    /// Offset of the next chunk (block-aligned): `pos` plus the chunks in flight.
    pub next: u64,
}

impl Active {
    /// The log appends to `seg` from `pos` on (its durable end), staged in memory
    /// (`Segment::stage`; a segment that cannot be staged is read through its file).
    pub fn new(seg: Rc<Segment>, file: Rc<dyn DiskFile>, pos: u64) -> Active {
        if let Err(e) = seg.stage(pos) {
            tracing::warn!(path = %seg.path().display(), error = %e, "staging the active segment failed; reading it through its file");
        }
        Active { seg, file, pos, next: pos }
    }
}

/// Mutable state of a fragment. Never borrowed across an `.await`.
pub(crate) struct State {
    pub index: Index,
    pub txns: BTreeMap<TxId, Prepared>,
    /// Keys locked by prepared transactions: `collection \0 key` to the transaction.
    pub locks: HashMap<String, TxId, KeyedState>,
    /// Versions of writes queued but not yet durable (`None`: a delete) with the shard
    /// written, by lock key. Keyed hasher (`keyhash`): two probes per write.
    pub pending: HashMap<Rc<str>, PendingWrite, KeyedState>,
    /// Ranges scanned by prepared or held transactions ([`ScanCheck`]): no other writer may
    /// place a document in one until its transaction finishes. Usually empty.
    pub range_locks: Vec<RangeLock>,
    pub next_lsn: u64,
    pub lsn_durable: u64,
    pub queue: VecDeque<Pending>,
    /// Frame bytes of the queue.
    pub queue_bytes: usize,
    /// Records of the queue that start a chunk of their own (all but lazy ones: see
    /// `Pending::lazy`).
    pub queue_eager: usize,
    /// The frames of the queued records, back to back, in queue order (see `log::stage_frame`),
    /// from `staged_head` on: the bytes before it went into chunks already.
    pub staged: rkyv::util::AlignedVec,
    /// Bytes at the front of `staged` already copied into chunks (`log::take_staged`).
    pub staged_head: usize,
    pub fatal: Option<String>,
    pub active: Option<Active>,
    /// Every segment, in log order, the active one last.
    pub segments: Vec<Rc<Segment>>,
    /// Frame bytes of every record in `segments`.
    pub log_bytes: u64,
    pub torn_tails: u64,
    pub generation: u64,
    pub compactions: u64,
}

/// The last queued write of a document not yet durable: its version (`ABSENT`: a delete) and
/// the shard it writes. 16 bytes, as the plain `Option<Version>` it replaced: the map is
/// probed twice per write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PendingWrite {
    version: Version,
    pub shard: ShardId,
}

impl PendingWrite {
    pub fn new(version: Option<Version>, shard: ShardId) -> PendingWrite {
        PendingWrite { version: version.unwrap_or(Version::ABSENT), shard }
    }

    /// The version written, `None` for a delete.
    pub fn version(self) -> Option<Version> {
        (self.version != Version::ABSENT).then_some(self.version)
    }
}

/// A range a prepared or held transaction scanned ([`ScanCheck`]).
#[derive(Debug, Clone)]
pub(crate) struct RangeLock {
    pub txid: TxId,
    pub collection: String,
    pub range: ShardRange,
}

/// Locks the ranges `txid` scanned ([`ScanCheck`]) until [`unlock_ranges`].
fn lock_ranges(st: &mut State, txid: TxId, scans: Vec<ScanCheck>) {
    st.range_locks.extend(scans.into_iter().map(|s| RangeLock {
        txid,
        collection: s.collection,
        range: s.range,
    }));
}

/// Releases every range `txid` locked.
pub(crate) fn unlock_ranges(st: &mut State, txid: TxId) {
    if !st.range_locks.is_empty() {
        st.range_locks.retain(|l| l.txid != txid);
    }
}

/// `Locked` when a document of `collection` placed in `shard` would enter a range another
/// transaction scanned and still holds.
fn validate_placement(
    st: &State,
    collection: &str,
    id: &str,
    shard: ShardId,
) -> Result<(), AppendError> {
    match st.range_locks.iter().find(|l| l.collection == collection && l.range.contains(shard)) {
        Some(l) => Err(AppendError::Locked {
            collection: collection.to_owned(),
            id: id.to_owned(),
            txid: l.txid,
        }),
        None => Ok(()),
    }
}

/// Validates a scanned range ([`ScanCheck`]): `Locked` while a prepared transaction writes in
/// it, `Phantom` unless it holds as many documents as when it was scanned (durable index plus
/// queued writes, as readers will see them once durable).
fn validate_scan(st: &State, scan: &ScanCheck) -> Result<(), AppendError> {
    let collection = scan.collection.as_str();
    for (txid, txn) in &st.txns {
        if let Some(m) =
            txn.ops().find(|m| m.collection() == collection && scan.range.contains(m.shard))
        {
            return Err(AppendError::Locked {
                collection: collection.to_owned(),
                id: m.key().to_owned(),
                txid: *txid,
            });
        }
    }
    let in_range =
        |key: &str| st.index.get(collection, key).is_some_and(|e| scan.range.contains(e.shard));
    let mut found = st.index.count(collection, scan.range) as i64;
    for (lk, p) in &st.pending {
        let Some(key) = lk.strip_prefix(collection).and_then(|k| k.strip_prefix('\0')) else {
            continue;
        };
        let after = p.version().is_some() && scan.range.contains(p.shard);
        found += i64::from(after) - i64::from(in_range(key));
    }
    let expected = i64::try_from(scan.docs).unwrap_or(i64::MAX);
    if found != expected {
        return Err(AppendError::Phantom {
            collection: collection.to_owned(),
            range: scan.range,
            expected: scan.docs,
            found: u64::try_from(found).unwrap_or(0),
        });
    }
    Ok(())
}

pub(crate) struct Inner {
    pub id: FragmentId,
    pub range: ShardRange,
    pub dir: PathBuf,
    pub options: FragmentOptions,
    pub st: RefCell<State>,
    pub writer_waker: Cell<Option<Waker>>,
    pub space_waiters: RefCell<VecDeque<Waker>>,
    /// Tasks in [`Fragment::wait_durable`]: woken after every group commit and on failure.
    pub durable_waiters: RefCell<VecDeque<Waker>>,
    /// Held by the writer while chunks are in flight, and by compaction while it rolls the
    /// segment.
    pub log_lock: glommio::sync::Semaphore,
    /// Compaction tasks waiting for `log_lock`: the writer lets its chunks finish and yields.
    pub seal_waiting: Cell<u32>,
    pub closing: Cell<bool>,
    pub compacting: Cell<bool>,
    pub compaction_task: RefCell<Option<JoinHandle<()>>>,
    /// The next segment, zero-filled ahead of time under a temporary name.
    pub spare: RefCell<Option<crate::segment::Prepared>>,
    pub spare_busy: Cell<bool>,
    pub spare_task: RefCell<Option<JoinHandle<()>>>,
    /// The pace of the spare being zero-filled, if any: the group commit grants it bytes.
    pub spare_pace: RefCell<Option<Rc<crate::segment::FillPace>>>,
    /// The directory's lock file, held (flock) while the fragment is open.
    pub lock: RefCell<Option<std::fs::File>>,
    /// Group-commit I/O counters (`Fragment::io_stats`).
    pub io: crate::iostats::IoCounters,
    /// Record-less holds ([`Fragment::hold`]): each transaction's lock keys in `State::locks`.
    /// Memory only: a restart forgets them.
    pub holds: RefCell<HashMap<TxId, Vec<String>>>,
    /// Transactions whose Prepare this fragment refuses (`prepared_state_or_fence`).
    pub fenced: RefCell<std::collections::HashSet<TxId>>,
    /// Chunks the writer has in flight (set by the writer).
    pub in_flight: Cell<usize>,
    /// The writer task runs in the latency-sensitive writers' queue and splits waves
    /// (`split_waves`, `log::spawn_writer`).
    pub writer_splits_waves: Cell<bool>,
    /// Moving average of a chunk's write + fdatasync time, in microseconds (set by the writer).
    pub chunk_micros: Cell<u64>,
    /// Records in the last chunk made durable (set by the writer).
    pub chunk_records: Cell<usize>,
    /// The documents a pause holds still ([`Fragment::pause_writes`]), and who waits for it
    /// to end (writers of them and the next pause).
    pub paused: RefCell<Option<Paused>>,
    pub pause_waiters: RefCell<VecDeque<Waker>>,
}

/// Validates the document `lk` (`lock_key` of `collection` and `key`) one operation names:
/// `Locked` when a transaction holds or has prepared it; with an `expected` version,
/// `Conflict` when its current one is not that (this batch's earlier ops in `overlay`, if any, first,
/// then the queued writes, then the durable index).
fn validate_doc(
    st: &State,
    overlay: Option<&HashMap<Rc<str>, Option<Version>>>,
    lk: &str,
    collection: &str,
    id: &str,
    key: &str,
    expected: Option<Version>,
) -> Result<(), AppendError> {
    if let Some(&txid) = st.locks.get(lk) {
        return Err(AppendError::Locked {
            collection: collection.to_owned(),
            id: id.to_owned(),
            txid,
        });
    }
    let Some(expected) = expected else { return Ok(()) };
    let current = match overlay
        .and_then(|o| o.get(lk).copied())
        .or_else(|| st.pending.get(lk).map(|p| p.version()))
    {
        Some(v) => v,
        None => st.index.get(collection, key).map(|e| e.version),
    };
    let ok =
        if expected == Version::ABSENT { current.is_none() } else { current == Some(expected) };
    if !ok {
        return Err(AppendError::Conflict {
            collection: collection.to_owned(),
            id: id.to_owned(),
            expected,
            found: current,
        });
    }
    Ok(())
}

/// [`Fragment::prepared_doc`] over a fragment's state (the offline reader's too).
pub(crate) fn prepared_doc_in(
    st: &State,
    txid: TxId,
    collection: &str,
    id: &str,
) -> Option<serde_json::Value> {
    let txn = st.txns.get(&txid)?;
    let lk = lock_key(collection, &doc_key(id));
    for part in &txn.parts {
        let Some(loc) = &part.loc else { continue };
        for (op, meta) in part.ops.iter().enumerate() {
            if *meta.lk == *lk && meta.put {
                let at = Loc { seg: loc.seg.clone(), span: loc.span, op: u32::try_from(op).ok()? };
                return DocRef::new(&at, meta.version).map(|d| d.doc().to_serde());
            }
        }
    }
    None
}

pub(crate) fn lock_key(collection: &str, key: &str) -> String {
    let mut k = String::with_capacity(collection.len() + key.len() + 1);
    k.push_str(collection);
    k.push('\0');
    k.push_str(key);
    k
}

/// What a pause holds still ([`Fragment::pause_writes`]): one collection's documents in some
/// shard ranges.
#[derive(Debug)]
pub(crate) struct Paused {
    collection: String,
    ranges: Vec<ShardRange>,
}

impl Paused {
    fn covers(&self, collection: &str, shard: ShardId) -> bool {
        self.collection == collection && self.ranges.iter().any(|r| r.contains(shard))
    }
}

/// Writes of some documents of a fragment held off while this lives
/// ([`Fragment::pause_writes`]); dropping it lets them go.
#[must_use = "writes resume when the pause is dropped"]
pub struct WritePause {
    inner: Rc<Inner>,
}

impl Drop for WritePause {
    fn drop(&mut self) {
        self.inner.paused.borrow_mut().take();
        for waker in self.inner.pause_waiters.borrow_mut().drain(..) {
            waker.wake();
        }
    }
}

impl std::fmt::Debug for WritePause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WritePause").field("fragment", &self.inner.id).finish()
    }
}

/// One fragment: a contiguous shard range with its own log and index, owned by one executor.
pub struct Fragment {
    pub(crate) inner: Rc<Inner>,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Fragment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fragment")
            .field("id", &self.inner.id)
            .field("range", &self.inner.range)
            .finish_non_exhaustive()
    }
}

/// How `submit` records the batch.
pub(crate) enum Kind {
    Autocommit,
    Prepare(TxId),
}

impl Fragment {
    /// Opens (or creates) the fragment stored in `dir`: scans its segments, checks every
    /// record, truncates a torn tail, rebuilds the index and starts the group-commit writer.
    /// Must run inside a glommio executor.
    pub async fn open(
        dir: &Path,
        id: FragmentId,
        range: ShardRange,
        options: FragmentOptions,
    ) -> Result<Fragment, OpenError> {
        let lock = lock_dir(dir, id)?;
        let state = crate::recovery::recover(dir, id, &options).await?;
        let inner = Rc::new(Inner {
            id,
            range,
            dir: dir.to_path_buf(),
            options,
            st: RefCell::new(state),
            writer_waker: Cell::new(None),
            space_waiters: RefCell::new(VecDeque::new()),
            durable_waiters: RefCell::new(VecDeque::new()),
            log_lock: glommio::sync::Semaphore::new(1),
            seal_waiting: Cell::new(0),
            closing: Cell::new(false),
            compacting: Cell::new(false),
            compaction_task: RefCell::new(None),
            spare: RefCell::new(None),
            spare_busy: Cell::new(false),
            spare_task: RefCell::new(None),
            spare_pace: RefCell::new(None),
            lock: RefCell::new(Some(lock)),
            io: crate::iostats::IoCounters::default(),
            holds: RefCell::new(HashMap::new()),
            fenced: RefCell::default(),
            in_flight: Cell::new(0),
            writer_splits_waves: Cell::new(false),
            chunk_micros: Cell::new(0),
            chunk_records: Cell::new(0),
            paused: RefCell::new(None),
            pause_waiters: RefCell::new(VecDeque::new()),
        });
        let split = inner.options.split_waves;
        let (writer, own_queue) = crate::log::spawn_writer(&inner, split);
        inner.writer_splits_waves.set(split && own_queue);
        let st = inner.st.borrow();
        tracing::info!(
            fragment = %id,
            docs = st.index.docs(),
            segments = st.segments.len(),
            torn_tails = st.torn_tails,
            lsn = st.lsn_durable,
            "fragment opened"
        );
        drop(st);
        Ok(Fragment { inner, writer: Some(writer) })
    }

    /// This fragment's id.
    pub fn id(&self) -> FragmentId {
        self.inner.id
    }

    /// This fragment's shard range.
    pub fn range(&self) -> ShardRange {
        self.inner.range
    }

    /// Applies a batch atomically. Returns once the fdatasync covering it completed: `Ok` means
    /// durable. On `Conflict`/`Locked`/input errors nothing was written.
    pub async fn apply(&self, batch: WriteBatch) -> Result<CommitInfo, AppendError> {
        let n = batch.len();
        let done = self.submit(batch, Kind::Autocommit).await?;
        let lsn = done.wait().await?;
        Ok(CommitInfo { lsn, versions: vec![Version::new(lsn.get()); n] })
    }

    /// Phase one of a distributed transaction: validates the batch like `apply`, writes a
    /// durable Prepare record and locks the documents; the writes stay invisible until
    /// `commit_prepared`. Writes to a locked document fail with `Locked`.
    pub async fn prepare(&self, txid: TxId, batch: WriteBatch) -> Result<Lsn, AppendError> {
        let done = self.submit(batch, Kind::Prepare(txid)).await?;
        done.wait().await
    }

    /// Commits a prepared transaction and returns once its Commit record is durable. The
    /// writes become visible earlier, when the record is queued (see
    /// [`Fragment::commit_prepared_visible`]).
    pub async fn commit_prepared(&self, txid: TxId) -> Result<Lsn, AppendError> {
        self.commit_prepared_visible(txid).await?.wait().await
    }

    /// Queues a prepared transaction's Commit record and makes its writes visible at once,
    /// without waiting for that record's fdatasync; the returned [`CommitDurable`] tells when
    /// it is durable. Only for a caller whose commit decision is already durable elsewhere (a
    /// coordinator log): if the node crashes before the Commit record is durable, the
    /// transaction is in doubt again after recovery and must be committed from that decision.
    /// Readers may have seen its writes by then, which is why the decision must be durable
    /// first. A transaction whose Prepare record is not durable yet becomes visible when its
    /// Commit record is.
    pub async fn commit_prepared_visible(&self, txid: TxId) -> Result<CommitDurable, AppendError> {
        self.ready_to_write(|st, paused| Self::prepared_touches(st, paused, txid)).await?;
        let done = {
            let mut st = self.inner.st.borrow_mut();
            self.check_open(&st)?;
            let Some(txn) = st.txns.get_mut(&txid).filter(|t| !t.finishing) else {
                return Err(AppendError::TxnUnknown { txid });
            };
            txn.finishing = true;
            let lsn = st.next_lsn;
            let record = Record { lsn, body: RecordBody::Commit { txid: txid.get() } };
            // Lazy: nobody waits on this record for an answer (the decision is durable), so
            // it rides in the next chunk another record starts (`Pending::lazy`).
            let done = self.enqueue_as(&mut st, record, Effect::Commit(txid), true)?;
            // Visible on enqueue: the index points at the durable Prepare record; the Commit
            // record's effect finds the transaction gone and only counts its bytes.
            if st.txns.get(&txid).is_some_and(Prepared::durable) {
                crate::log::finish_prepared(&mut st, txid, true);
            }
            done
        };
        self.wake_writer();
        Ok(CommitDurable { done })
    }

    /// Abandons a prepared transaction (durably).
    pub async fn abort_prepared(&self, txid: TxId) -> Result<Lsn, AppendError> {
        self.finish_prepared(txid, false).await
    }

    /// Holds the documents of a checks-only batch for `txid` without writing a record: every
    /// check is validated as in [`Fragment::prepare`] (`Conflict` on a changed version, `Locked`
    /// on a document another transaction holds or has prepared), then the documents stay
    /// locked in memory until [`Fragment::release`]. Meanwhile writes to them and checks of
    /// them fail with `Locked`, as against a prepare's checks. No fdatasync, nothing logged:
    /// after a restart the hold is gone, which is safe because a read-only participant has
    /// nothing to recover (the transaction's writers resolve from their own prepares). The
    /// caller releases it on every outcome (commit, abort, timeout). All or nothing: on an
    /// error nothing is held. Not bounded by `BATCH_OPS_MAX` (nothing is logged): the caller
    /// bounds how many documents one transaction reads.
    pub fn hold(&self, txid: TxId, batch: WriteBatch) -> Result<(), AppendError> {
        let WriteBatch { ops, scans } = batch;
        if ops.is_empty() && scans.is_empty() {
            return Err(InputError::BatchSize { ops: 0, max: BATCH_OPS_MAX }.into());
        }
        let st = self.inner.st.borrow();
        self.check_open(&st)?;
        let mut holds = self.inner.holds.borrow_mut();
        if st.txns.contains_key(&txid) || holds.contains_key(&txid) {
            return Err(AppendError::TxnExists { txid });
        }
        let mut keys = Vec::with_capacity(ops.len());
        for op in &ops {
            let WriteOp::Check { collection, id, shard, expected_version } = op else {
                let writes = ops.iter().filter(|o| !matches!(o, WriteOp::Check { .. })).count();
                return Err(InputError::HoldWrites { writes }.into());
            };
            check_names(collection, id)?;
            if !self.inner.range.contains(*shard) {
                return Err(AppendError::WrongShard {
                    fragment: self.inner.id,
                    range: self.inner.range,
                    shard: *shard,
                });
            }
            let key = doc_key(id);
            let lk = lock_key(collection, &key);
            // Queued writes count, as in `submit`: a hold must not pass on a version that a
            // write already on its way to the log replaces.
            validate_doc(&st, None, &lk, collection, id, &key, Some(*expected_version))?;
            keys.push(lk);
        }
        for scan in &scans {
            self.check_scan(scan)?;
            validate_scan(&st, scan)?;
        }
        drop(st);
        let mut st = self.inner.st.borrow_mut();
        for lk in &keys {
            st.locks.insert(lk.clone(), txid);
        }
        lock_ranges(&mut st, txid, scans);
        holds.insert(txid, keys);
        Ok(())
    }

    /// Releases the hold of `txid` ([`Fragment::hold`]); `false` when this fragment holds
    /// nothing for it (never held, or released already).
    pub fn release(&self, txid: TxId) -> bool {
        let Some(keys) = self.inner.holds.borrow_mut().remove(&txid) else {
            return false;
        };
        let mut st = self.inner.st.borrow_mut();
        for lk in keys {
            crate::log::unlock_key(&mut st, &lk, txid);
        }
        unlock_ranges(&mut st, txid);
        true
    }

    /// Transactions holding documents here without a record ([`Fragment::hold`]).
    pub fn held(&self) -> Vec<TxId> {
        let mut held: Vec<TxId> = self.inner.holds.borrow().keys().copied().collect();
        held.sort_unstable();
        held
    }

    /// Prepared transactions with no commit or abort yet: after a restart, the node asks the
    /// coordinator log for each one's fate.
    pub fn in_doubt(&self) -> Vec<TxId> {
        self.inner.st.borrow().txns.keys().copied().filter(|t| !t.is_local()).collect()
    }

    /// The document prepared transaction `txid` writes to `collection` / `id` here, read from
    /// its durable Prepare record (a transaction in doubt after recovery, say): `None` when it
    /// is not prepared here, its record is not durable yet, or it writes no document there
    /// (a delete included).
    pub fn prepared_doc(
        &self,
        txid: TxId,
        collection: &str,
        id: &str,
    ) -> Option<serde_json::Value> {
        prepared_doc_in(&self.inner.st.borrow(), txid, collection, id)
    }

    /// Where transaction `txid`'s Prepare stands here, for a resolver that decides from every
    /// participant's Prepare: durable, queued, or absent, in which case the fragment refuses
    /// it from now on (`TxnFenced`), so the resolver's "never prepared" stays true. Checked
    /// and fenced in one step: a prepare is either queued before or refused after.
    pub fn prepared_state_or_fence(&self, txid: TxId) -> PreparedState {
        let st = self.inner.st.borrow();
        match st.txns.get(&txid) {
            Some(txn) if txn.durable() => PreparedState::Durable,
            Some(_) => PreparedState::Queued,
            None => {
                self.inner.fenced.borrow_mut().insert(txid);
                PreparedState::Absent
            }
        }
    }

    async fn finish_prepared(&self, txid: TxId, commit: bool) -> Result<Lsn, AppendError> {
        self.ready_to_write(|st, paused| Self::prepared_touches(st, paused, txid)).await?;
        let done = {
            let mut st = self.inner.st.borrow_mut();
            self.check_open(&st)?;
            let Some(txn) = st.txns.get_mut(&txid).filter(|t| !t.finishing) else {
                return Err(AppendError::TxnUnknown { txid });
            };
            txn.finishing = true;
            let lsn = st.next_lsn;
            let body = if commit {
                RecordBody::Commit { txid: txid.get() }
            } else {
                RecordBody::Abort { txid: txid.get() }
            };
            let effect = if commit { Effect::Commit(txid) } else { Effect::Abort(txid) };
            self.enqueue(&mut st, Record { lsn, body }, effect)?
        };
        self.hand_to_writer().await;
        done.wait().await
    }

    /// Validates and enqueues one batch. No `.await` between the version checks and the
    /// enqueue, so no other writer can slip in between. A batch of checks only (autocommit)
    /// writes nothing and completes at once. A batch too large for one record is logged in
    /// parts (`Parts`): Prepare records, and for an autocommit batch its Commit record right
    /// behind them; the completion returned is the last record's.
    async fn submit(&self, batch: WriteBatch, kind: Kind) -> Result<Rc<Completion>, AppendError> {
        let WriteBatch { ops, scans } = batch;
        let scans_only = ops.is_empty() && !scans.is_empty() && matches!(kind, Kind::Autocommit);
        if (ops.is_empty() && !scans_only) || ops.len() > BATCH_OPS_MAX {
            return Err(InputError::BatchSize { ops: ops.len(), max: BATCH_OPS_MAX }.into());
        }
        if let Kind::Prepare(txid) = kind
            && txid.is_local()
        {
            return Err(AppendError::TxnExists { txid });
        }
        for scan in &scans {
            self.check_scan(scan)?;
        }
        // Convert documents first: pure work, no state involved. Each write's part (record)
        // is chosen here too, from the converted sizes.
        let mut docs = Vec::with_capacity(ops.len());
        let mut parts = Parts::new(self.part_bytes());
        for op in &ops {
            let (collection, id, shard) = op_names(op);
            check_names(collection, id)?;
            if !self.inner.range.contains(shard) {
                return Err(AppendError::WrongShard {
                    fragment: self.inner.id,
                    range: self.inner.range,
                    shard,
                });
            }
            let doc = match op {
                WriteOp::Put { doc, .. } => {
                    let value = JsonValue::from_serde(doc)?;
                    let bytes = archived_bytes_estimate(&value);
                    if bytes > DOC_BYTES_MAX {
                        return Err(InputError::DocTooLarge { bytes, max: DOC_BYTES_MAX }.into());
                    }
                    parts.add(bytes + collection.len() + id.len());
                    Some(value)
                }
                WriteOp::Delete { .. } => {
                    parts.add(collection.len() + id.len());
                    None
                }
                WriteOp::Check { .. } => None,
            };
            docs.push(doc);
        }
        if parts.bytes > BATCH_BYTES_MAX {
            return Err(InputError::BatchBytes { bytes: parts.bytes, max: BATCH_BYTES_MAX }.into());
        }
        let touches = |_: &State, paused: &Paused| {
            // A check writes nothing: it never waits.
            ops.iter().filter(|op| !matches!(op, WriteOp::Check { .. })).any(|op| {
                let (collection, _, shard) = op_names(op);
                paused.covers(collection, shard)
            })
        };
        self.ready_to_write(touches).await?;
        let done = {
            let mut st = self.inner.st.borrow_mut();
            self.check_open(&st)?;
            if let Kind::Prepare(txid) = kind
                && st.txns.contains_key(&txid)
            {
                return Err(AppendError::TxnExists { txid });
            }
            if let Kind::Prepare(txid) = kind
                && self.inner.fenced.borrow().contains(&txid)
            {
                return Err(AppendError::TxnFenced { txid });
            }
            // Scanned ranges first, against the state before this batch's own writes.
            for scan in &scans {
                validate_scan(&st, scan)?;
            }
            // Optimistic concurrency: every expected version against the durable index, the
            // queued writes and the earlier ops of this batch (`overlay`, multi-op batches).
            // A write's version is its record's LSN.
            let mut overlay: HashMap<Rc<str>, Option<Version>> = HashMap::new();
            let mut read_locks = Vec::new();
            let lsn = st.next_lsn;
            let mut metas = Vec::with_capacity(ops.len());
            let mut lk = String::new();
            let mut writes = 0;
            for op in &ops {
                let (collection, id, expected, put) = match op {
                    WriteOp::Put { collection, id, expected_version, .. } => {
                        (collection, id, *expected_version, Some(true))
                    }
                    WriteOp::Delete { collection, id, expected_version, .. } => {
                        (collection, id, *expected_version, Some(false))
                    }
                    WriteOp::Check { collection, id, expected_version, .. } => {
                        (collection, id, Some(*expected_version), None)
                    }
                };
                let key = doc_key(id);
                lk.clear();
                // One allocation at most, not one per push.
                lk.reserve(collection.len() + 1 + key.len());
                lk.push_str(collection);
                lk.push('\0');
                lk.push_str(&key);
                if put == Some(true) && !st.range_locks.is_empty() {
                    validate_placement(&st, collection, id, op_names(op).2)?;
                }
                validate_doc(&st, Some(&overlay), &lk, collection, id, &key, expected)?;
                let Some(put) = put else {
                    read_locks.push(lk.clone());
                    continue;
                };
                let version = Version::new(lsn + parts.of(writes));
                writes += 1;
                let shared: Rc<str> = Rc::from(lk.as_str());
                if ops.len() > 1 {
                    overlay.insert(shared.clone(), put.then_some(version));
                }
                metas.push(OpMeta::with_lock_key(
                    shared,
                    collection.len(),
                    op_names(op).2,
                    version,
                    put,
                ));
            }
            let mut rec_ops: Vec<Op> = ops
                .into_iter()
                .zip(docs)
                .filter(|(op, _)| !matches!(op, WriteOp::Check { .. }))
                .zip(&metas)
                .map(|((op, doc), meta)| {
                    let version = meta.version.get();
                    match (op, doc) {
                        (WriteOp::Put { collection, id, shard, .. }, Some(doc)) => {
                            Op::Put(PutOp { collection, id, shard: shard.get(), version, doc })
                        }
                        (
                            WriteOp::Put { collection, id, shard, .. }
                            | WriteOp::Delete { collection, id, shard, .. }
                            | WriteOp::Check { collection, id, shard, .. },
                            _,
                        ) => Op::Delete(DeleteOp { collection, id, shard: shard.get(), version }),
                    }
                })
                .collect();
            let one = |body| Record { lsn, body };
            let done = match kind {
                Kind::Autocommit if rec_ops.is_empty() => {
                    // Checks only: validated above, nothing to log.
                    let done = Rc::new(Completion::default());
                    done.complete(Ok(Lsn::new(st.lsn_durable)));
                    return Ok(done);
                }
                Kind::Autocommit if rec_ops.len() == 1 => {
                    let body = match rec_ops.pop() {
                        Some(Op::Put(p)) => RecordBody::Put(p),
                        Some(Op::Delete(d)) => RecordBody::Delete(d),
                        None => {
                            return Err(InputError::BatchSize { ops: 0, max: BATCH_OPS_MAX }.into());
                        }
                    };
                    self.enqueue(&mut st, one(body), Effect::Ops(metas))?
                }
                Kind::Autocommit if parts.count() == 1 => {
                    self.enqueue(&mut st, one(RecordBody::Batch(rec_ops)), Effect::Ops(metas))?
                }
                Kind::Autocommit => {
                    // Too large for one record: prepared in parts under a local id and
                    // committed right behind them; visible once the Commit record is durable.
                    let txid = TxId::new(LOCAL_TXID_TAG | (lsn & !LOCAL_TXID_TAG));
                    let mut records = parts.prepares(txid, rec_ops, metas);
                    records.push((RecordBody::Commit { txid: txid.get() }, Effect::Commit(txid)));
                    self.enqueue_all(&mut st, records)?
                }
                Kind::Prepare(txid) if parts.count() == 1 => {
                    let body = RecordBody::Prepare { txid: txid.get(), ops: rec_ops };
                    self.enqueue(&mut st, one(body), Effect::Prepare(txid, metas))?
                }
                Kind::Prepare(txid) => {
                    self.enqueue_all(&mut st, parts.prepares(txid, rec_ops, metas))?
                }
            };
            match kind {
                Kind::Prepare(txid) => {
                    // Prepared writes are invisible: the locks taken by `enqueue_all` keep other
                    // writers away, and so do the checks' locks.
                    for lk in &read_locks {
                        st.locks.insert(lk.clone(), txid);
                    }
                    if let Some(txn) = st.txns.get_mut(&txid) {
                        txn.read_locks = read_locks;
                    }
                    lock_ranges(&mut st, txid, scans);
                }
                Kind::Autocommit => {
                    let State { queue, pending, txns, .. } = &mut *st;
                    let pend = |m: &OpMeta| {
                        (m.lk.clone(), PendingWrite::new(m.put.then_some(m.version), m.shard))
                    };
                    // In batch order: a document written twice keeps its last write.
                    match queue.back().map(|p| &p.effect) {
                        Some(Effect::Ops(metas)) => pending.extend(metas.iter().map(pend)),
                        Some(Effect::Commit(txid)) => {
                            if let Some(txn) = txns.get_mut(txid) {
                                // Its Commit record is queued: no commit or abort may follow.
                                txn.finishing = true;
                                pending.extend(txn.ops().map(pend));
                            }
                        }
                        _ => {}
                    }
                }
            }
            done
        };
        self.hand_to_writer().await;
        Ok(done)
    }

    /// Archived bytes (estimated) of one part of a batch: well inside what one record may be
    /// (`RECORD_BYTES_MAX`, or a small segment's chunk), so the estimate's error never matters.
    fn part_bytes(&self) -> usize {
        let cap = chunk_capacity(self.inner.options.segment_bytes);
        RECORD_BYTES_MAX.min(usize::try_from(cap).unwrap_or(usize::MAX)) / 2
    }

    /// Serializes `record` into the staging buffer and puts it in the queue (see
    /// [`Fragment::enqueue_all`]).
    fn enqueue(
        &self,
        st: &mut State,
        record: Record,
        effect: Effect,
    ) -> Result<Rc<Completion>, AppendError> {
        self.enqueue_as(st, record, effect, false)
    }

    /// [`Fragment::enqueue`], the record `lazy` or not (`Pending::lazy`).
    fn enqueue_as(
        &self,
        st: &mut State,
        record: Record,
        effect: Effect,
        lazy: bool,
    ) -> Result<Rc<Completion>, AppendError> {
        let (payload_len, frame_len) = self.stage(st, &record)?;
        Ok(self.push(st, record.lsn, payload_len, frame_len, effect, lazy))
    }

    /// Serializes the records (numbered from `next_lsn` on) into the staging buffer and puts
    /// them in the queue, all or none: on an error nothing is queued. Returns the last
    /// record's completion.
    fn enqueue_all(
        &self,
        st: &mut State,
        records: Vec<(RecordBody, Effect)>,
    ) -> Result<Rc<Completion>, AppendError> {
        let staged_before = st.staged.len();
        let mut staged = Vec::with_capacity(records.len());
        for (i, (body, effect)) in records.into_iter().enumerate() {
            let record = Record { lsn: st.next_lsn + i as u64, body };
            match self.stage(st, &record) {
                Ok((payload_len, frame_len)) => {
                    staged.push((record.lsn, payload_len, frame_len, effect))
                }
                Err(e) => {
                    st.staged.resize(staged_before, 0);
                    return Err(e);
                }
            }
        }
        let mut done = None;
        for (lsn, payload_len, frame_len, effect) in staged {
            done = Some(self.push(st, lsn, payload_len, frame_len, effect, false));
        }
        done.ok_or_else(|| InputError::BatchSize { ops: 0, max: BATCH_OPS_MAX }.into())
    }

    /// Appends `record`'s frame to the staging buffer (nothing queued yet); returns its payload
    /// and frame lengths. On an error the buffer is as before.
    fn stage(&self, st: &mut State, record: &Record) -> Result<(usize, usize), AppendError> {
        let cap = chunk_capacity(self.inner.options.segment_bytes);
        let max = RECORD_BYTES_MAX.min(usize::try_from(cap).unwrap_or(usize::MAX));
        let payload_len = crate::log::stage_frame(&mut st.staged, record)
            .map_err(|bytes| InputError::RecordTooLarge { bytes, max })?;
        let frame_len = frame_bytes(payload_len);
        if ((CHUNK_HEADER_BYTES + frame_len) as u64).next_multiple_of(BLOCK_BYTES) > cap {
            let keep = st.staged.len() - frame_len;
            st.staged.resize(keep, 0);
            return Err(InputError::RecordTooLarge { bytes: payload_len, max }.into());
        }
        Ok((payload_len, frame_len))
    }

    /// Queues the record `lsn` (the next one) whose frame `stage` left in the staging buffer.
    /// Registers a Prepare record's part with its transaction, and takes its locks unless the
    /// transaction is a local batch (whose caller sets pending versions). A `lazy` record
    /// waits for another record's chunk, or `lazy_record_wait` in an idle log (`Pending::lazy`).
    fn push(
        &self,
        st: &mut State,
        lsn: u64,
        payload_len: usize,
        frame_len: usize,
        effect: Effect,
        lazy: bool,
    ) -> Rc<Completion> {
        assert_eq!(lsn, st.next_lsn);
        if let Effect::Prepare(txid, metas) = &effect {
            if !txid.is_local() {
                for m in metas {
                    st.locks.insert(m.lk.to_string(), *txid);
                }
            }
            let txn = st.txns.entry(*txid).or_insert_with(|| Prepared {
                parts: Vec::new(),
                finishing: false,
                read_locks: Vec::new(),
            });
            txn.parts.push(PreparedPart { loc: None, ops: metas.clone() });
        }
        st.next_lsn += 1;
        let done = Rc::new(Completion::default());
        st.queue_bytes += frame_len;
        st.queue_eager += usize::from(!lazy);
        st.queue.push_back(Pending {
            lsn,
            frame_len,
            payload_len,
            effect,
            lazy,
            done: done.clone(),
        });
        done
    }

    /// A scanned range names a collection and lies within this fragment.
    fn check_scan(&self, scan: &ScanCheck) -> Result<(), AppendError> {
        check_collection(&scan.collection)?;
        let (mine, range) = (self.inner.range, scan.range);
        // Its first shard if that one is outside, else its last (outside or not).
        let edge = if range.start() < mine.start() { range.start() } else { range.end() - 1 };
        match ShardId::new(edge) {
            Some(shard) if !mine.contains(shard) => {
                Err(AppendError::WrongShard { fragment: self.inner.id, range: mine, shard })
            }
            _ => Ok(()),
        }
    }

    fn check_open(&self, st: &State) -> Result<(), AppendError> {
        if let Some(reason) = &st.fatal {
            return Err(AppendError::Fatal { fragment: self.inner.id, reason: reason.clone() });
        }
        if self.inner.closing.get() {
            return Err(AppendError::Closed { fragment: self.inner.id });
        }
        Ok(())
    }

    /// Backpressure: waits while the queue holds `QUEUE_BYTES_MAX` or more.
    async fn wait_for_space(&self) -> Result<(), AppendError> {
        std::future::poll_fn(|cx| {
            let st = self.inner.st.borrow();
            if let Err(e) = self.check_open(&st) {
                return std::task::Poll::Ready(Err(e));
            }
            if st.queue_bytes < QUEUE_BYTES_MAX {
                return std::task::Poll::Ready(Ok(()));
            }
            self.inner.space_waiters.borrow_mut().push_back(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }

    /// Waits until a write may be validated and queued: room in the queue
    /// ([`Fragment::wait_for_space`]) and no pause holding still a document it writes
    /// (`touches`, asked of the pause on: [`Fragment::pause_writes`]). The caller validates
    /// and queues right after, with no `.await` in between.
    async fn ready_to_write(
        &self,
        touches: impl Fn(&State, &Paused) -> bool,
    ) -> Result<(), AppendError> {
        loop {
            self.wait_for_space().await?;
            let blocked = match &*self.inner.paused.borrow() {
                Some(paused) => touches(&self.inner.st.borrow(), paused),
                None => false,
            };
            if !blocked {
                return Ok(());
            }
            cov_mark::hit!(write_waits_for_pause);
            self.pause_ended().await;
        }
    }

    /// Whether the prepared transaction `txid` writes a document `paused` holds still.
    fn prepared_touches(st: &State, paused: &Paused, txid: TxId) -> bool {
        st.txns.get(&txid).is_some_and(|t| t.ops().any(|m| paused.covers(m.collection(), m.shard)))
    }

    /// Waits until no pause is on.
    async fn pause_ended(&self) {
        std::future::poll_fn(|cx| {
            if self.inner.paused.borrow().is_none() {
                return std::task::Poll::Ready(());
            }
            self.inner.pause_waiters.borrow_mut().push_back(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }

    /// Holds off every new write of a document of `collection` in `ranges` on this fragment
    /// (a batch, a prepare, a prepared transaction's commit or abort writing one waits) until
    /// the returned guard is dropped, once every write queued before is durable and readable:
    /// a reader of those documents holding it sees one instant's state across slices it
    /// yields between, while reads go on, writes of other documents too, and writes of them
    /// wait, as they would for a read in one go. For a long read that must stand for one
    /// instant (an autocommit UPDATE or DELETE read in slices); drop the guard right before
    /// submitting what it decided, which then goes first (no `.await` before its validation).
    /// One pause at a time: a second waits for the first to end, and lets the writes that
    /// waited for it go first.
    pub async fn pause_writes(
        &self,
        collection: &str,
        ranges: &[ShardRange],
    ) -> Result<WritePause, AppendError> {
        loop {
            self.pause_ended().await;
            // Writes woken by the end of the last pause are queued to run: behind them.
            glommio::executor().yield_now().await;
            if self.inner.paused.borrow().is_none() {
                break;
            }
        }
        self.check_open(&self.inner.st.borrow())?;
        *self.inner.paused.borrow_mut() =
            Some(Paused { collection: collection.to_owned(), ranges: ranges.to_vec() });
        let pause = WritePause { inner: Rc::clone(&self.inner) };
        self.wait_durable(self.last_queued_lsn()).await?;
        Ok(pause)
    }

    fn wake_writer(&self) {
        wake_writer(&self.inner);
    }

    /// Wakes the writer for a record just queued. When no chunk is in flight (the disk is
    /// idle) and waves are split (`log::waves_split`), also yields this task queue so the
    /// writer's queue runs now and starts a chunk, rather than after every other runnable task
    /// of this queue (see `log::spawn_writer`): the chunk's fdatasync then overlaps the rest of
    /// the wave. With a chunk in flight the writer takes the queued records when that chunk
    /// completes.
    async fn hand_to_writer(&self) {
        self.wake_writer();
        if self.inner.in_flight.get() == 0 && crate::log::waves_split(&self.inner) {
            cov_mark::hit!(writer_runs_before_the_wave_ends);
            glommio::executor().yield_task_queue_now().await;
        }
    }

    /// The LSN of the last write accepted into the log queue, durable or not (`Lsn::new(0)`
    /// before the first write). Every write that a failed version check saw queued is at or
    /// below it.
    pub fn last_queued_lsn(&self) -> Lsn {
        Lsn::new(self.inner.st.borrow().next_lsn.saturating_sub(1))
    }

    /// Whether the next segment (the spare) is being zero-filled in the background now: its
    /// writes share the disk with the log's chunks (see `IoStats::fdatasync_micros_filling`).
    pub fn spare_filling(&self) -> bool {
        self.inner.spare_pace.borrow().is_some()
    }

    /// The LSN up to which every record is durable and readable.
    pub fn durable_lsn(&self) -> Lsn {
        Lsn::new(self.inner.st.borrow().lsn_durable)
    }

    /// Waits until every record up to `lsn` is durable and visible to reads, woken by the
    /// group commit that covers it (no polling). An `lsn` past [`Fragment::last_queued_lsn`]
    /// at the time of the call is taken as that LSN: this never waits for writes not yet
    /// submitted. Fails with `Fatal` if the log stopped before reaching it.
    pub async fn wait_durable(&self, lsn: Lsn) -> Result<(), AppendError> {
        let target = lsn.get().min(self.last_queued_lsn().get());
        std::future::poll_fn(|cx| {
            let st = self.inner.st.borrow();
            if st.lsn_durable >= target {
                return std::task::Poll::Ready(Ok(()));
            }
            if let Some(reason) = &st.fatal {
                return std::task::Poll::Ready(Err(AppendError::Fatal {
                    fragment: self.inner.id,
                    reason: reason.clone(),
                }));
            }
            self.inner.durable_waiters.borrow_mut().push_back(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }

    /// The current version of a document, for optimistic concurrency.
    pub fn version_of(&self, collection: &str, id: &str) -> Option<Version> {
        self.inner.st.borrow().index.get(collection, &doc_key(id)).map(|e| e.version)
    }

    /// Reads a document in place (ids are case-insensitive). No copy, no deserialization.
    pub fn get(&self, collection: &str, id: &str) -> Option<DocRef<'_>> {
        let st = self.inner.st.borrow();
        let entry = st.index.get(collection, &doc_key(id))?;
        DocRef::new(&entry.loc, entry.version)
    }

    /// Visits the documents of `collection` whose shard is in `range`, in (shard, lower-cased
    /// id) order, until `visit` breaks. Runs without yielding: bound long scans by breaking and
    /// resuming with a narrower range.
    pub fn scan<'f>(
        &'f self,
        collection: &str,
        range: ShardRange,
        mut visit: impl FnMut(DocRef<'f>) -> ControlFlow<()>,
    ) {
        let st = self.inner.st.borrow();
        for (_, entry) in st.index.scan(collection, range) {
            if let Some(doc) = DocRef::new(&entry.loc, entry.version)
                && visit(doc).is_break()
            {
                return;
            }
        }
    }

    /// Like `scan`, but resumable: starts strictly after `cursor` (when given) and returns the
    /// cursor of the document at which `visit` broke, or `None` once the range is exhausted.
    /// Lets a caller visit a large range in slices and yield to other tasks in between.
    pub fn scan_from<'f>(
        &'f self,
        collection: &str,
        range: ShardRange,
        cursor: Option<&ScanCursor>,
        mut visit: impl FnMut(DocRef<'f>) -> ControlFlow<()>,
    ) -> Option<ScanCursor> {
        let st = self.inner.st.borrow();
        let after = cursor.map(|c| (c.shard, c.key.as_str()));
        for (key, entry) in st.index.scan_after(collection, range, after) {
            if let Some(doc) = DocRef::new(&entry.loc, entry.version)
                && visit(doc).is_break()
            {
                return Some(ScanCursor { shard: entry.shard, key: key.to_owned() });
            }
        }
        None
    }

    /// Names of collections that have documents, sorted.
    pub fn collections(&self) -> Vec<String> {
        self.inner.st.borrow().index.collections().map(str::to_owned).collect()
    }

    /// Collections that have documents, with how many each has here, sorted by name.
    pub fn collection_docs(&self) -> Vec<(String, u64)> {
        let st = self.inner.st.borrow();
        st.index.collection_docs().map(|(c, n)| (c.to_owned(), n)).collect()
    }

    /// Counters, including per-shard document counts and bytes.
    pub fn stats(&self) -> FragmentStats {
        let shards = self.inner.st.borrow().index.shards_in(ShardRange::ALL);
        FragmentStats { shards, ..self.totals() }
    }

    /// Per-shard counters for the shards of `range` that have documents.
    pub fn shard_stats(&self, range: ShardRange) -> BTreeMap<ShardId, ShardStats> {
        self.inner.st.borrow().index.shards_in(range)
    }

    /// Why the fragment stopped accepting writes, if it did.
    pub fn fatal(&self) -> Option<String> {
        self.inner.st.borrow().fatal.clone()
    }

    /// Rewrites the live records of every sealed segment into one compacted segment and
    /// removes the old files. Writers keep going meanwhile (into the active segment).
    pub async fn compact(&self) -> Result<CompactStats, CompactError> {
        crate::compaction::compact(self.inner.clone()).await
    }

    /// A stream of the documents whose shard is in `range`, as framed records (see FORMAT.md).
    pub fn export(&self, range: ShardRange) -> Export {
        Export::new(self.inner.clone(), range)
    }

    /// Imports one chunk of an export stream: every document becomes a put here (new versions).
    pub async fn import(&self, chunk: &[u8]) -> Result<ImportStats, ImportError> {
        crate::export::import(self, chunk).await
    }

    /// Stops accepting writes, lets queued writes finish, waits for a running compaction and
    /// closes the files.
    pub async fn close(mut self) {
        self.inner.closing.set(true);
        self.wake_writer();
        wake_all(&self.inner.space_waiters);
        if let Some(writer) = self.writer.take() {
            writer.await;
        }
        let compaction = self.inner.compaction_task.borrow_mut().take();
        if let Some(task) = compaction {
            task.await;
        }
        // A spare still being zero-filled stops (its temporary file goes below, or at the next
        // open) instead of writing the rest of its zeros at full speed now.
        if let Some(pace) = self.inner.spare_pace.borrow().as_ref() {
            pace.stop();
        }
        let spare_task = self.inner.spare_task.borrow_mut().take();
        if let Some(task) = spare_task {
            task.await;
        }
        let spare = self.inner.spare.borrow_mut().take();
        if let Some(spare) = spare {
            crate::log::discard_spare(&self.inner, spare).await;
        }
        let file = self.inner.st.borrow_mut().active.take().map(|a| a.file);
        // Release the directory even if an `Export` still holds the fragment's state.
        drop(self.inner.lock.borrow_mut().take());
        if let Some(file) = file
            && let Err(e) = file.close().await
        {
            tracing::warn!(fragment = %self.inner.id, error = %e, "closing segment failed");
        }
    }
}

impl Drop for Fragment {
    fn drop(&mut self) {
        // The writer task ends once it sees `closing`; it holds the files until then.
        self.inner.closing.set(true);
        if let Some(w) = self.inner.writer_waker.take() {
            w.wake();
        }
        // A spare's paced fill would wait for grants that no longer come, holding the
        // fragment's state (and its directory lock) forever.
        if let Some(pace) = self.inner.spare_pace.borrow().as_ref() {
            pace.stop();
        }
    }
}

/// Takes the directory's lock file (`LOCK`, flock), so one directory has one owner at a time.
/// Blocking calls: once, at open.
fn lock_dir(dir: &Path, fragment: FragmentId) -> Result<std::fs::File, OpenError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::Io { fragment, path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked { fragment, path }),
        Err(std::fs::TryLockError::Error(e)) => Err(io(&path)(e)),
    }
}

/// Wakes the fragment's writer task if it waits.
pub(crate) fn wake_writer(inner: &Inner) {
    if let Some(w) = inner.writer_waker.take() {
        w.wake();
    }
}

pub(crate) fn wake_all(waiters: &RefCell<VecDeque<Waker>>) {
    let woken: Vec<Waker> = waiters.borrow_mut().drain(..).collect();
    for w in woken {
        w.wake();
    }
}

/// Largest chunk (header included, block-aligned) a segment of `segment_bytes` can carry.
pub(crate) fn chunk_capacity(segment_bytes: u64) -> u64 {
    (GROUP_COMMIT_BATCH_BYTES_MAX as u64).min(segment_bytes.saturating_sub(SEGMENT_HEADER_BYTES))
}

/// Estimated archived bytes of one write beyond its document and names (the op, its strings'
/// headers, its version and shard): only cuts parts earlier, never decides a limit alone.
const OP_OVERHEAD_BYTES: usize = 64;

/// How `submit` cuts a batch's writes into records: a new part starts past
/// [`RECORD_OPS_MAX`] writes or past `budget` estimated archived bytes. Nearly every batch
/// is one part.
struct Parts {
    budget: usize,
    /// Estimated archived bytes of every write.
    bytes: usize,
    /// Index (among the writes) where each part after the first starts.
    starts: Vec<usize>,
    writes: usize,
    part_writes: usize,
    part_bytes: usize,
}

impl Parts {
    fn new(budget: usize) -> Parts {
        Parts { budget, bytes: 0, starts: Vec::new(), writes: 0, part_writes: 0, part_bytes: 0 }
    }

    /// The next write, of `bytes` estimated document and name bytes.
    fn add(&mut self, bytes: usize) {
        let bytes = bytes + OP_OVERHEAD_BYTES;
        if self.part_writes > 0
            && (self.part_writes == RECORD_OPS_MAX || self.part_bytes + bytes > self.budget)
        {
            self.starts.push(self.writes);
            self.part_writes = 0;
            self.part_bytes = 0;
        }
        self.part_writes += 1;
        self.part_bytes += bytes;
        self.bytes += bytes;
        self.writes += 1;
    }

    fn count(&self) -> usize {
        self.starts.len() + 1
    }

    /// The part of write `write` (0-based), which is its record's offset from the first.
    fn of(&self, write: usize) -> u64 {
        self.starts.partition_point(|&start| start <= write) as u64
    }

    /// One Prepare record per part, the ops and their metadata split alike.
    fn prepares(
        &self,
        txid: TxId,
        mut ops: Vec<Op>,
        mut metas: Vec<OpMeta>,
    ) -> Vec<(RecordBody, Effect)> {
        let mut records = Vec::with_capacity(self.count());
        for &start in self.starts.iter().rev() {
            let tail_ops = ops.split_off(start);
            let tail_metas = metas.split_off(start);
            records.push((
                RecordBody::Prepare { txid: txid.get(), ops: tail_ops },
                Effect::Prepare(txid, tail_metas),
            ));
        }
        records.push((RecordBody::Prepare { txid: txid.get(), ops }, Effect::Prepare(txid, metas)));
        records.reverse();
        records
    }
}

/// Collection, id and shard of any op.
fn op_names(op: &WriteOp) -> (&String, &String, ShardId) {
    match op {
        WriteOp::Put { collection, id, shard, .. }
        | WriteOp::Delete { collection, id, shard, .. }
        | WriteOp::Check { collection, id, shard, .. } => (collection, id, *shard),
    }
}

fn check_names(collection: &str, id: &str) -> Result<(), InputError> {
    check_collection(collection)?;
    if id.is_empty() {
        return Err(InputError::IdEmpty);
    }
    if id.len() > ID_BYTES_MAX {
        return Err(InputError::IdTooLong { bytes: id.len(), max: ID_BYTES_MAX });
    }
    Ok(())
}

fn check_collection(collection: &str) -> Result<(), InputError> {
    if collection.is_empty() || collection.len() > COLLECTION_BYTES_MAX {
        return Err(InputError::CollectionName {
            bytes: collection.len(),
            max: COLLECTION_BYTES_MAX,
        });
    }
    Ok(())
}

/// The document size the limit applies to: bytes of every string and member name plus the
/// size of one archived node per value. Close to the archived size, and cheap to compute.
fn archived_bytes_estimate(value: &JsonValue) -> usize {
    let node = std::mem::size_of::<ArchivedJsonValue>();
    match value {
        JsonValue::String(s) => node + s.len(),
        JsonValue::Array(items) => node + items.iter().map(archived_bytes_estimate).sum::<usize>(),
        JsonValue::Object(members) => {
            node + members
                .iter()
                .map(|m| node + m.key.len() + archived_bytes_estimate(&m.value))
                .sum::<usize>()
        }
        _ => node,
    }
}

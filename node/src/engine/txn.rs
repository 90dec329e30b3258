//! A transaction's state in its session: buffered writes and recorded read versions, per
//! fragment, and the overlay that lets the transaction read its own writes.
//!
//! Writes are buffered per fragment as the final state of each document (`Buffered`: the new
//! document, or `None` for a delete) with the version it had in storage when the transaction
//! first touched it (`base`). Each statement ships the buffer of the fragments it touches to
//! their owners (an `Arc`, no copy) where an [`OverlayReader`] serves reads from the buffer
//! first and from storage otherwise, recording the storage version of every document it
//! returns. At commit, every fragment's buffer and reads become one storage batch: writes with
//! their `base` as expected version, reads not overwritten as checks.
//!
//! **Phantoms:** a scan that ran to the end of a shard range records the range and how many
//! stored documents it held (`ScanRecord`), besides the version of each document it
//! returned. At commit the range becomes a `storage::ScanCheck`: the owner fails the commit
//! (40001) if the range now holds another number of documents, and a prepare or hold keeps
//! other writers from placing documents there until the decision. Every document the scan
//! visited is checked on its own, so an unchanged count means nothing entered the range. A
//! scan cut short by a LIMIT records no range: any rows that still match are a valid answer.
//! Point reads of missing documents are protected by an `ABSENT` check.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use query::plan::CollectionName;
use query::{DocVersion, FragmentSource, PagedSource, ScanPos, SourceDoc, WriteIntent};
use router::doc::{DocValue, ValueKind};
use router::{FragmentId, ShardId, ShardRange};
use storage::{ArchivedJsonValue, Version, WriteBatch};

use super::error::EngineError;
use super::limits::{TXN_FRAGMENT_OPS_MAX, TXN_READS_MAX, TXN_WRITE_BYTES_MAX, TXN_WRITES_MAX};
use super::reader::FragmentReader;

/// The version an overlay reports for a document buffered by the transaction itself; an
/// intent carrying it refers to the buffered entry, whose `base` stays the storage version.
pub const BUFFERED_VERSION: DocVersion = DocVersion::new(u64::MAX);

/// A document key inside one fragment: collection and lower-cased id.
pub type DocKey = (String, String);

/// One buffered write: the document's final state in the transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffered {
    /// The id as written.
    pub id: String,
    /// Its shard.
    pub shard: ShardId,
    /// Its storage version when the transaction first read it (`ABSENT`: it did not exist).
    pub base: Version,
    /// The new document, or `None` for a delete.
    pub doc: Option<serde_json::Value>,
}

/// The buffered writes of one fragment, shipped to its owner with each statement.
#[derive(Clone, Debug, Default)]
pub struct FragmentWrites {
    /// By key.
    pub docs: BTreeMap<DocKey, Buffered>,
}

/// A storage version a statement read inside a transaction.
#[derive(Clone, Debug)]
pub struct ReadRecord {
    /// Collection.
    pub collection: String,
    /// Lower-cased id.
    pub key: String,
    /// Id as read (or as asked, for a missing document).
    pub id: String,
    /// Shard.
    pub shard: ShardId,
    /// Version seen (`ABSENT`: not there).
    pub version: Version,
}

/// A shard range of one collection that a statement scanned to its end inside a
/// transaction, with how many stored documents it held then (see the module's phantoms).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScanRecord {
    /// Collection.
    pub collection: String,
    /// The shards scanned.
    pub range: ShardRange,
    /// Stored documents in the range at the scan (the transaction's own writes not counted).
    pub docs: u64,
}

/// What one statement read on one fragment.
#[derive(Clone, Debug, Default)]
pub struct Reads {
    /// Storage versions of the documents it read (or found missing).
    pub docs: Vec<ReadRecord>,
    /// Ranges it scanned to the end.
    pub scans: Vec<ScanRecord>,
}

/// The first version a transaction read of each document of one fragment, by collection and
/// lower-cased id: a hash table of the records themselves (the key is not copied out of them)
/// keyed like storage's id index (`storage::keyed_state`: ids come from clients). A block
/// reading a whole fragment files every document here; an ordered map of copied keys cost a
/// third of such a read's CPU in string comparisons (BENCHMARKS.md, session 25). Iteration
/// order is the table's: a commit's versioned checks come in no particular order (each stands
/// on its own; absences go first, `FragmentTxn::ops`).
#[derive(Clone)]
pub struct ReadSet {
    hasher: storage::KeyedState,
    /// Each record with its key's hash (growth moves entries without hashing them again).
    table: hashbrown::HashTable<(u64, ReadRecord)>,
}

impl Default for ReadSet {
    fn default() -> ReadSet {
        ReadSet { hasher: storage::keyed_state(), table: hashbrown::HashTable::new() }
    }
}

impl std::fmt::Debug for ReadSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl ReadSet {
    fn hash(&self, collection: &str, key: &str) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one((collection, key))
    }

    /// The record of `key` (lower-cased id) in `collection`.
    pub fn get(&self, collection: &str, key: &str) -> Option<&ReadRecord> {
        let hash = self.hash(collection, key);
        self.table
            .find(hash, |(h, r)| *h == hash && r.key == key && r.collection == collection)
            .map(|(_, r)| r)
    }

    /// Files `record` unless its document was read before (the first version read stands);
    /// `admit` runs first for a new one and may refuse it. True when filed.
    pub fn insert_first<E>(
        &mut self,
        record: ReadRecord,
        admit: impl FnOnce() -> Result<(), E>,
    ) -> Result<bool, E> {
        let hash = self.hash(&record.collection, &record.key);
        let entry = self.table.entry(
            hash,
            |(h, r)| *h == hash && r.key == record.key && r.collection == record.collection,
            |(h, _)| *h,
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(_) => Ok(false),
            hashbrown::hash_table::Entry::Vacant(slot) => {
                admit()?;
                slot.insert((hash, record));
                Ok(true)
            }
        }
    }

    /// Every record, in the table's order.
    pub fn iter(&self) -> impl Iterator<Item = &ReadRecord> {
        self.table.iter().map(|(_, r)| r)
    }

    /// Documents filed.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

/// One fragment's part of a transaction.
#[derive(Clone, Debug, Default)]
pub struct FragmentTxn {
    /// First version read of each document read from storage.
    pub reads: ReadSet,
    /// Ranges scanned to the end (each distinct record once).
    pub scans: BTreeSet<ScanRecord>,
    /// Buffered writes.
    pub writes: Arc<FragmentWrites>,
}

/// The state of an open transaction block (or of one autocommit statement's transaction).
#[derive(Debug)]
pub struct Txn {
    /// Session-local number, for SHOW TRANSACTIONS.
    pub number: u64,
    /// When BEGIN ran.
    pub started: Instant,
    /// Per fragment touched.
    pub fragments: BTreeMap<FragmentId, FragmentTxn>,
    reads: usize,
    writes: usize,
    /// What the buffered writes hold in memory: `query::json_bytes` of every buffered document
    /// and `entry_bytes` of its entry (`TXN_WRITE_BYTES_MAX`).
    write_bytes: usize,
}

impl Txn {
    /// An empty transaction.
    pub fn new(number: u64) -> Txn {
        Txn {
            number,
            started: Instant::now(),
            fragments: BTreeMap::new(),
            reads: 0,
            writes: 0,
            write_bytes: 0,
        }
    }

    /// The buffer of `fragment` to ship with a statement (empty when untouched).
    pub fn writes_of(&self, fragment: FragmentId) -> Option<Arc<FragmentWrites>> {
        self.fragments.get(&fragment).map(|f| Arc::clone(&f.writes))
    }

    /// Whether no statement has touched a fragment yet (so it read and wrote nothing: both
    /// are counted only for a fragment `absorb` entered).
    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty()
    }

    /// Whether any document is buffered.
    pub fn has_writes(&self) -> bool {
        self.writes > 0
    }

    /// Records what a statement read and wrote on one fragment.
    pub fn absorb(
        &mut self,
        fragment: FragmentId,
        collection: &str,
        reads: Reads,
        intents: Vec<WriteIntent>,
    ) -> Result<(), EngineError> {
        let f = self.fragments.entry(fragment).or_default();
        for s in reads.scans {
            // A scanned range counts as one read against the limit.
            if !f.scans.contains(&s) {
                count_read(&mut self.reads)?;
                f.scans.insert(s);
            }
        }
        for r in reads.docs {
            f.reads.insert_first(r, || count_read(&mut self.reads))?;
        }
        if intents.is_empty() {
            return Ok(());
        }
        let FragmentTxn { reads: first_reads, writes, .. } = f;
        let writes = Arc::make_mut(writes);
        for intent in intents {
            let (id, shard, read, doc) = match intent {
                WriteIntent::Put { id, shard, version_read, doc } => {
                    (id, shard, version_read, Some(doc))
                }
                WriteIntent::Delete { id, shard, version_read } => {
                    (id, shard, Some(version_read), None)
                }
            };
            let key = (collection.to_owned(), storage::doc_key(&id).into_owned());
            let bytes = doc.as_ref().map_or(0, query::json_bytes);
            match writes.docs.get_mut(&key) {
                Some(entry) => {
                    // Already buffered: the base stays the storage version first seen.
                    let before = entry.doc.as_ref().map_or(0, query::json_bytes);
                    self.write_bytes = held_bytes(self.write_bytes.saturating_sub(before), bytes)?;
                    entry.doc = doc;
                    entry.id = id;
                }
                None => {
                    if self.writes >= TXN_WRITES_MAX {
                        return Err(EngineError::TxnLimit {
                            what: "documents written",
                            max: TXN_WRITES_MAX,
                        });
                    }
                    let entry = entry_bytes(&key, &id);
                    self.write_bytes = held_bytes(self.write_bytes, entry.saturating_add(bytes))?;
                    self.writes += 1;
                    let base = match (first_reads.get(&key.0, &key.1), read) {
                        (_, Some(v)) if v == BUFFERED_VERSION => {
                            return Err(EngineError::Exec(query::ExecError::WrongStatement {
                                what: "a buffered version without a buffered document",
                            }));
                        }
                        // An earlier statement of the block read it: the write must expect
                        // that version, not the one this statement saw, or a commit by
                        // another session in between would be overwritten unnoticed.
                        (Some(first), _) => first.version,
                        (None, Some(v)) => Version::new(v.get()),
                        (None, None) => Version::ABSENT,
                    };
                    writes.docs.insert(key, Buffered { id, shard, base, doc });
                }
            }
        }
        Ok(())
    }

    /// The storage batch of each fragment at commit: writes expect their base version; reads
    /// of documents not written become checks.
    pub fn batches(&self) -> BTreeMap<FragmentId, WriteBatch> {
        let mut out = BTreeMap::new();
        for (fragment, f) in &self.fragments {
            if let Some(batch) = f.batch_slices(usize::MAX).next() {
                out.insert(*fragment, batch);
            }
        }
        out
    }

    /// Whether committing writes anything (a put or a delete on some fragment), or only
    /// validates what was read.
    pub fn writes_anything(&self) -> bool {
        self.fragments.values().any(|f| f.writes.docs.values().any(|b| b.op() != BufferedOp::Check))
    }
}

/// What one buffered document becomes in the commit batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BufferedOp {
    Put,
    Delete,
    /// Inserted, then deleted: nothing to write, but it must still be absent.
    Check,
}

impl Buffered {
    fn op(&self) -> BufferedOp {
        match (&self.doc, self.base) {
            (Some(_), _) => BufferedOp::Put,
            (None, base) if base == Version::ABSENT => BufferedOp::Check,
            (None, _) => BufferedOp::Delete,
        }
    }
}

/// One operation of a fragment's commit batch, borrowed from the transaction.
enum TxnOp<'a> {
    Write(&'a str, &'a Buffered),
    Read(&'a ReadRecord),
    Scan(&'a ScanRecord),
}

impl TxnOp<'_> {
    /// Whether a change could undo it unseen: a range's count or a document's absence.
    fn undoable(op: &TxnOp<'_>) -> bool {
        match op {
            TxnOp::Scan(_) => true,
            TxnOp::Write(_, b) => b.op() == BufferedOp::Check,
            TxnOp::Read(r) => r.version == Version::ABSENT,
        }
    }

    fn add_to(self, batch: WriteBatch) -> WriteBatch {
        match self {
            TxnOp::Write(collection, b) => match (b.op(), &b.doc) {
                (BufferedOp::Put, Some(doc)) => {
                    batch.put(collection, &b.id, b.shard, Some(b.base), doc.clone())
                }
                (BufferedOp::Check, _) => batch.check(collection, &b.id, b.shard, Version::ABSENT),
                _ => batch.delete(collection, &b.id, b.shard, Some(b.base)),
            },
            TxnOp::Read(r) => batch.check(&r.collection, &r.id, r.shard, r.version),
            TxnOp::Scan(s) => batch.scan(&s.collection, s.range, s.docs),
        }
    }
}

impl FragmentTxn {
    /// The operations of this part's commit batch: first the ranges scanned and the checks
    /// that a document is absent (an inserted-then-deleted buffered one, a point read that
    /// found none), then the writes expecting their base version, then checks of the other
    /// reads not written.
    fn ops(&self) -> impl Iterator<Item = TxnOp<'_>> {
        // Written documents, borrowed: reads are many where blocks read much, writes few.
        let written: HashSet<(&str, &str)> =
            self.writes.docs.keys().map(|(c, k)| (c.as_str(), k.as_str())).collect();
        let unwritten = move |r: &&ReadRecord| {
            written.is_empty() || !written.contains(&(r.collection.as_str(), r.key.as_str()))
        };
        let absent = |absent: bool| {
            let unwritten = unwritten.clone();
            self.reads
                .iter()
                .filter(move |r| (r.version == Version::ABSENT) == absent)
                .filter(unwritten)
                .map(TxnOp::Read)
        };
        let writes = |check: bool| {
            self.writes
                .docs
                .iter()
                .filter(move |(_, b)| (b.op() == BufferedOp::Check) == check)
                .map(|((c, _), b)| TxnOp::Write(c, b))
        };
        self.scans
            .iter()
            .map(TxnOp::Scan)
            .chain(writes(true))
            .chain(absent(true))
            .chain(writes(false))
            .chain(absent(false))
    }

    /// This part's commit batch in batches built as they are taken (a read-only commit
    /// validates a large read a slice at a time without first copying every version read:
    /// `Session::validate_reads`): the first holds the ranges scanned and every absence
    /// check (more than `max` if they are), then other operations up to `max`; the others
    /// at most `max` each. As `storage::WriteBatch::into_slices` cuts a batch, and for its
    /// reason: a range's count and an absence can be undone unseen between two instants (a
    /// document inserted and deleted again), a version cannot, so the former are validated
    /// together at the first instant. None when the part has nothing.
    pub fn batch_slices(&self, max: usize) -> impl Iterator<Item = WriteBatch> + '_ {
        slices(self.ops(), max)
    }

    /// Operations of this part's commit batch, at most (reads later written are counted).
    pub fn ops_len(&self) -> usize {
        self.scans.len() + self.writes.docs.len() + self.reads.len()
    }

    /// Whether this part scanned a range or found a document absent (what `undoable_batch`
    /// holds), without building the batch: they come first in `ops`.
    pub fn has_undoable(&self) -> bool {
        self.ops().next().is_some_and(|op| TxnOp::undoable(&op))
    }

    /// The ranges scanned and absence checks of this part, as one batch (None without any):
    /// what a read-only commit over several fragments holds on each before validating the
    /// rest (`Session::validate_reads`).
    pub fn undoable_batch(&self) -> Option<WriteBatch> {
        slices(self.ops().take_while(TxnOp::undoable), usize::MAX).next()
    }

    /// The rest of this part's batch, without what `undoable_batch` holds, in slices of at
    /// most `max`.
    pub fn versioned_slices(&self, max: usize) -> impl Iterator<Item = WriteBatch> + '_ {
        slices(self.ops().skip_while(TxnOp::undoable), max)
    }
}

/// `ops` in batches built as they are taken: the leading undoable operations all in the first
/// (`FragmentTxn::batch_slices`), then at most `max` per batch.
fn slices<'a>(
    ops: impl Iterator<Item = TxnOp<'a>> + 'a,
    max: usize,
) -> impl Iterator<Item = WriteBatch> + 'a {
    let max = max.max(1);
    let mut ops = ops.peekable();
    let mut first = true;
    std::iter::from_fn(move || {
        ops.peek()?;
        let mut batch = WriteBatch::new();
        let mut taken = 0;
        if std::mem::take(&mut first) {
            while let Some(op) = ops.next_if(TxnOp::undoable) {
                batch = op.add_to(batch);
                taken += 1;
            }
        }
        let rest = ops.by_ref().take(max.saturating_sub(taken));
        Some(rest.fold(batch, |batch, op| op.add_to(batch)))
    })
}

/// Counts one more distinct read of a transaction, within [`TXN_READS_MAX`].
fn count_read(reads: &mut usize) -> Result<(), EngineError> {
    if *reads >= TXN_READS_MAX {
        return Err(EngineError::TxnLimit { what: "documents read", max: TXN_READS_MAX });
    }
    *reads += 1;
    Ok(())
}

/// A document seen through the overlay: stored (archived, read in place) or buffered.
#[derive(Clone, Copy)]
pub enum OverlayDoc<'a> {
    /// From storage.
    Stored(&'a ArchivedJsonValue),
    /// From the transaction's buffer.
    Buffered(&'a serde_json::Value),
}

impl<'a> DocValue<'a> for OverlayDoc<'a> {
    fn kind(self) -> ValueKind {
        match self {
            OverlayDoc::Stored(d) => d.kind(),
            OverlayDoc::Buffered(d) => d.kind(),
        }
    }

    fn as_bool(self) -> Option<bool> {
        match self {
            OverlayDoc::Stored(d) => d.as_bool(),
            OverlayDoc::Buffered(d) => DocValue::as_bool(d),
        }
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            OverlayDoc::Stored(d) => d.as_i64(),
            OverlayDoc::Buffered(d) => DocValue::as_i64(d),
        }
    }

    fn as_f64(self) -> Option<f64> {
        match self {
            OverlayDoc::Stored(d) => d.as_f64(),
            OverlayDoc::Buffered(d) => DocValue::as_f64(d),
        }
    }

    fn as_str(self) -> Option<&'a str> {
        match self {
            OverlayDoc::Stored(d) => d.as_str(),
            OverlayDoc::Buffered(d) => DocValue::as_str(d),
        }
    }

    fn field(self, name: &str) -> Option<Self> {
        match self {
            OverlayDoc::Stored(d) => d.field(name).map(OverlayDoc::Stored),
            OverlayDoc::Buffered(d) => DocValue::field(d, name).map(OverlayDoc::Buffered),
        }
    }

    fn len(self) -> usize {
        match self {
            OverlayDoc::Stored(d) => d.len(),
            OverlayDoc::Buffered(d) => DocValue::len(d),
        }
    }

    fn element(self, index: usize) -> Option<Self> {
        match self {
            OverlayDoc::Stored(d) => d.element(index).map(OverlayDoc::Stored),
            OverlayDoc::Buffered(d) => d.element(index).map(OverlayDoc::Buffered),
        }
    }

    fn for_each_member(self, visit: &mut dyn FnMut(&'a str, Self)) {
        match self {
            OverlayDoc::Stored(d) => d.for_each_member(&mut |k, v| visit(k, OverlayDoc::Stored(v))),
            OverlayDoc::Buffered(d) => {
                d.for_each_member(&mut |k, v| visit(k, OverlayDoc::Buffered(v)))
            }
        }
    }
}

/// `FragmentSource` over a fragment plus a transaction's buffered writes for it, recording the
/// storage version of every document it hands out.
pub struct OverlayReader<'f> {
    inner: FragmentReader<'f>,
    writes: Option<&'f FragmentWrites>,
    reads: RefCell<Reads>,
    /// Whether `reads` records anything (`keeping_reads`).
    keep: bool,
    /// Per range a slice stopped in (`PagedSource::scan_after`): the stored documents it
    /// counted there, for the slice that resumes it.
    partial_counts: RefCell<Vec<(String, ShardRange, u64)>>,
}

impl<'f> OverlayReader<'f> {
    /// An overlay of `writes` over `inner`.
    pub fn new(inner: FragmentReader<'f>, writes: Option<&'f FragmentWrites>) -> OverlayReader<'f> {
        OverlayReader {
            inner,
            writes,
            reads: RefCell::new(Reads::default()),
            keep: true,
            partial_counts: RefCell::new(Vec::new()),
        }
    }

    /// With `keep` false, records no versions read and no ranges scanned (`take_reads` gives
    /// none): for a statement whose commit checks only what it writes.
    pub fn keeping_reads(mut self, keep: bool) -> OverlayReader<'f> {
        self.keep = keep;
        self
    }

    /// The storage versions read and the ranges scanned so far.
    pub fn take_reads(&self) -> Reads {
        std::mem::take(&mut *self.reads.borrow_mut())
    }

    fn record(&self, collection: &str, id: &str, shard: ShardId, version: Version) {
        if !self.keep {
            return;
        }
        self.reads.borrow_mut().docs.push(ReadRecord {
            collection: collection.to_owned(),
            key: storage::doc_key(id).into_owned(),
            id: id.to_owned(),
            shard,
            version,
        });
    }

    fn buffered(&self, collection: &str, key: &str) -> Option<&'f Buffered> {
        self.writes?.docs.get(&(collection.to_owned(), key.to_owned()))
    }
}

fn stored<'a>(doc: SourceDoc<'a, &'a ArchivedJsonValue>) -> SourceDoc<'a, OverlayDoc<'a>> {
    SourceDoc {
        id: doc.id,
        shard: doc.shard,
        version: doc.version,
        doc: OverlayDoc::Stored(doc.doc),
    }
}

fn buffered_doc(b: &Buffered) -> Option<SourceDoc<'_, OverlayDoc<'_>>> {
    let doc = b.doc.as_ref()?;
    Some(SourceDoc {
        id: &b.id,
        shard: b.shard,
        version: BUFFERED_VERSION,
        doc: OverlayDoc::Buffered(doc),
    })
}

impl<'f> FragmentSource for OverlayReader<'f> {
    type Doc<'a>
        = OverlayDoc<'a>
    where
        Self: 'a;

    fn get<'a>(
        &'a self,
        collection: &CollectionName,
        id: &str,
    ) -> Option<SourceDoc<'a, Self::Doc<'a>>> {
        let key = storage::doc_key(id);
        if let Some(b) = self.buffered(collection.as_str(), &key) {
            return buffered_doc(b);
        }
        match self.inner.get(collection, id) {
            Some(doc) => {
                self.record(
                    collection.as_str(),
                    doc.id,
                    doc.shard,
                    Version::new(doc.version.get()),
                );
                Some(stored(doc))
            }
            None => {
                // A missing document is a read too: it must still be missing at commit.
                if let Ok(placement) = router::shard_of(id)
                    && let Some(shard) = placement.shard()
                    && self.inner.range().contains(shard)
                {
                    self.record(collection.as_str(), id, shard, Version::ABSENT);
                }
                None
            }
        }
    }

    fn scan<'a>(
        &'a self,
        collection: &CollectionName,
        ranges: &[ShardRange],
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    ) {
        self.scan_after(collection, ranges, None, visit);
    }
}

impl<'f> PagedSource for OverlayReader<'f> {
    /// A scan in slices (`query::SelectScan::read_slice`), each resuming after the last
    /// document the one before visited, buffered or stored. A range's stored documents are
    /// counted across its slices, and it is recorded as scanned once its last slice reached
    /// its end: the commit's checks then hold as for a scan in one go (module docs), whatever
    /// was written between the slices. A document changed behind the position after it was
    /// read fails its version check; one added behind it or removed ahead of it, never read,
    /// changes the range's count against the documents the slices read.
    fn scan_after<'a>(
        &'a self,
        collection: &CollectionName,
        ranges: &[ShardRange],
        after: Option<&ScanPos>,
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    ) {
        for range in ranges {
            // Ranges come sorted: those wholly before the position are done (and recorded).
            let Some(resume) = query::resume_point(after, *range) else { continue };
            if self.scan_range(collection, *range, resume, visit).is_break() {
                return;
            }
        }
    }
}

impl<'f> OverlayReader<'f> {
    /// Visits `range`'s documents after `after` (all of them without), the buffer's merged
    /// with storage's in (shard, key) order, and records the range once its end is reached;
    /// `Break` when `visit` stopped the scan (the stored documents counted so far are kept
    /// for the slice that resumes it).
    fn scan_range<'a>(
        &'a self,
        collection: &CollectionName,
        range: ShardRange,
        after: Option<&ScanPos>,
        visit: &mut dyn FnMut(SourceDoc<'a, OverlayDoc<'a>>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let name = collection.as_str();
        let past = |shard: ShardId, key: &str| {
            after.is_none_or(|p| (shard, key) > (p.shard, p.key.as_str()))
        };
        // Buffered documents of this range still ahead, in storage's (shard, key) order.
        let mut pending: Vec<(ShardId, &'f str, &'f Buffered)> = self
            .writes
            .map(|w| {
                w.docs
                    .iter()
                    .filter(|((c, k), b)| c == name && range.contains(b.shard) && past(b.shard, k))
                    .map(|((_, k), b)| (b.shard, k.as_str(), b))
                    .collect()
            })
            .unwrap_or_default();
        pending.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let mut pending = pending.into_iter().peekable();
        let mut stopped = false;
        // Stored documents of the range, shadowed by the buffer or not (with those of the
        // earlier slices of this range).
        let mut stored_docs = match after {
            Some(_) => self.take_partial_count(name, range),
            None => 0,
        };
        self.inner.scan_after(collection, std::slice::from_ref(&range), after, &mut |doc| {
            let key = storage::doc_key(doc.id);
            // Buffered documents that sort before this one come first. A stop among them
            // leaves this one to the next slice, uncounted.
            while let Some(&(shard, k, b)) = pending.peek() {
                if (shard, k) >= (doc.shard, key.as_ref()) {
                    break;
                }
                pending.next();
                if let Some(d) = buffered_doc(b)
                    && visit(d).is_break()
                {
                    stopped = true;
                    return ControlFlow::Break(());
                }
            }
            stored_docs += 1;
            if let Some(&(shard, k, b)) = pending.peek()
                && (shard, k) == (doc.shard, key.as_ref())
            {
                // The transaction's own version replaces (or hides) the stored one.
                pending.next();
                if let Some(d) = buffered_doc(b)
                    && visit(d).is_break()
                {
                    stopped = true;
                    return ControlFlow::Break(());
                }
                return ControlFlow::Continue(());
            }
            self.record(name, doc.id, doc.shard, Version::new(doc.version.get()));
            let flow = visit(stored(doc));
            stopped = flow.is_break();
            flow
        });
        if !stopped {
            for (_, _, b) in pending {
                if let Some(d) = buffered_doc(b)
                    && visit(d).is_break()
                {
                    stopped = true;
                    break;
                }
            }
        }
        if stopped {
            self.partial_counts.borrow_mut().push((name.to_owned(), range, stored_docs));
            return ControlFlow::Break(());
        }
        // The range was read to its end: no document may enter it before the commit.
        if !self.keep {
            return ControlFlow::Continue(());
        }
        self.reads.borrow_mut().scans.push(ScanRecord {
            collection: name.to_owned(),
            range,
            docs: stored_docs,
        });
        ControlFlow::Continue(())
    }

    /// The stored documents an earlier slice counted in `range` before it stopped (0 when
    /// none did).
    fn take_partial_count(&self, collection: &str, range: ShardRange) -> u64 {
        let mut counts = self.partial_counts.borrow_mut();
        match counts.iter().position(|(c, r, _)| c == collection && *r == range) {
            Some(i) => counts.swap_remove(i).2,
            None => 0,
        }
    }
}

/// What one buffered write holds in memory besides its document: the map's entry (key and
/// [`Buffered`]) and the collection name, key and id it owns (the document: `query::json_bytes`).
fn entry_bytes(key: &DocKey, id: &str) -> usize {
    std::mem::size_of::<(DocKey, Buffered)>() + key.0.len() + key.1.len() + id.len()
}

/// The bytes a transaction's buffer holds after adding a document of `bytes` to `held`, or
/// the limit error past `TXN_WRITE_BYTES_MAX`.
fn held_bytes(held: usize, bytes: usize) -> Result<usize, EngineError> {
    let total = held.saturating_add(bytes);
    if total > TXN_WRITE_BYTES_MAX {
        return Err(EngineError::TxnLimit {
            what: "bytes of documents written",
            max: TXN_WRITE_BYTES_MAX,
        });
    }
    Ok(total)
}

/// A commit's batch on one fragment within `TXN_FRAGMENT_OPS_MAX`: a batch that writes is one
/// storage batch (a checks-only one is validated in slices, or held without a record), so
/// past the limit the commit is refused before anything is written, saying what to do.
pub fn within_fragment_limit(fragment: FragmentId, batch: &WriteBatch) -> Result<(), EngineError> {
    if batch.writes() > 0 && batch.len() > TXN_FRAGMENT_OPS_MAX {
        return Err(EngineError::FragmentOpsLimit {
            fragment,
            ops: batch.len(),
            max: TXN_FRAGMENT_OPS_MAX,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use storage::WriteOp;

    use super::*;

    fn shard() -> ShardId {
        ShardId::from_u64_mod(7)
    }

    fn read(id: &str, v: u64) -> ReadRecord {
        ReadRecord {
            collection: "c".into(),
            key: id.to_lowercase(),
            id: id.into(),
            shard: shard(),
            version: Version::new(v),
        }
    }

    fn docs(docs: Vec<ReadRecord>) -> Reads {
        Reads { docs, scans: Vec::new() }
    }

    fn put(id: &str, read: Option<DocVersion>, v: i64) -> WriteIntent {
        WriteIntent::Put {
            id: id.into(),
            shard: shard(),
            version_read: read,
            doc: serde_json::json!({ "v": v }),
        }
    }

    // Checks how buffered writes fold into one batch: an insert then update then delete of the
    // same id becomes an ABSENT check; an update keeps the storage version first read; a read
    // not written becomes a check; a read then written is only the write.
    #[test]
    fn unit_buffer_folds_into_batches() {
        let f = FragmentId::new(1);
        let mut t = Txn::new(1);
        t.absorb(f, "c", Reads::default(), vec![put("New", None, 1)]).expect("insert");
        t.absorb(f, "c", Reads::default(), vec![put("new", Some(BUFFERED_VERSION), 2)])
            .expect("update");
        let del = WriteIntent::Delete {
            id: "NEW".into(),
            shard: shard(),
            version_read: BUFFERED_VERSION,
        };
        t.absorb(f, "c", Reads::default(), vec![del]).expect("delete");
        t.absorb(f, "c", docs(vec![read("Old", 5), read("Seen", 9)]), vec![]).expect("reads");
        t.absorb(f, "c", Reads::default(), vec![put("Old", Some(DocVersion::new(5)), 3)])
            .expect("update old");
        t.absorb(f, "c", Reads::default(), vec![put("old", Some(BUFFERED_VERSION), 4)])
            .expect("again");
        assert!(t.has_writes());
        let batches = t.batches();
        let ops = batches.get(&f).expect("one batch").ops().to_vec();
        assert_eq!(ops.len(), 3, "{ops:?}");
        assert!(ops.iter().any(|op| matches!(op,
            WriteOp::Check { id, expected_version, .. } if id == "NEW" && *expected_version == Version::ABSENT)));
        assert!(ops.iter().any(|op| matches!(op,
            WriteOp::Put { id, expected_version: Some(v), doc, .. }
                if id == "old" && *v == Version::new(5) && doc["v"] == 4)));
        assert!(ops.iter().any(|op| matches!(op,
            WriteOp::Check { id, expected_version, .. } if id == "Seen" && *expected_version == Version::new(9))));
    }

    // Checks a part's commit batch taken in slices (a read-only commit's rounds): together the
    // slices are the whole batch's operations in its order; the first holds the scanned range
    // and both absence checks (the inserted-then-deleted document, the point read that found
    // none) however small `max`, then fills up to `max`; the others hold at most `max`. A read
    // then written is only its write; an empty part has no slice. A commit that only checks
    // writes nothing (`writes_anything`), one with a put does.
    #[test]
    fn unit_batch_slices_split_the_whole_batch() {
        let f = FragmentId::new(1);
        let mut t = Txn::new(1);
        let range = ShardRange::new(0, 100).expect("range");
        let scans = vec![ScanRecord { collection: "c".into(), range, docs: 10 }];
        let mut read_docs: Vec<ReadRecord> =
            (0..10).map(|i| read(&format!("r{i}"), i + 1)).collect();
        read_docs.push(ReadRecord { version: Version::ABSENT, ..read("gone", 1) });
        t.absorb(f, "c", Reads { docs: read_docs, scans }, vec![put("New", None, 1)])
            .expect("scan and insert");
        let del = WriteIntent::Delete {
            id: "new".into(),
            shard: shard(),
            version_read: BUFFERED_VERSION,
        };
        t.absorb(f, "c", Reads::default(), vec![del]).expect("delete");
        assert!(!t.writes_anything(), "an insert deleted again and reads: checks only");
        t.absorb(f, "c", Reads::default(), vec![put("R3", Some(DocVersion::new(4)), 2)])
            .expect("update a read document");
        assert!(t.writes_anything());
        let whole = t.batches().remove(&f).expect("a batch");
        assert_eq!(whole.len(), 12, "two absence checks, the put, nine reads: {whole:?}");
        assert_eq!(whole.scans().len(), 1);
        let part = t.fragments.get(&f).expect("part");
        for max in [1, 2, 3, 4, 13, 100] {
            let slices: Vec<WriteBatch> = part.batch_slices(max).collect();
            let first = &slices[0];
            assert_eq!(first.scans(), whole.scans(), "the range first, max {max}");
            assert_eq!(first.len() + 1, max.clamp(3, 13), "max {max}");
            assert!(first.ops()[..2].iter().all(WriteOp::is_absence_check), "max {max}");
            assert!(
                slices[1..].iter().all(|b| b.scans().is_empty() && (1..=max).contains(&b.len())),
                "max {max}"
            );
            let ops: Vec<WriteOp> = slices.iter().flat_map(|b| b.ops().to_vec()).collect();
            assert_eq!(ops, whole.ops(), "max {max}");
        }
        let held = part.undoable_batch().expect("the range and two absences");
        assert_eq!((held.scans(), held.len()), (whole.scans(), 2));
        let rest: Vec<WriteOp> = part.versioned_slices(4).flat_map(|b| b.ops().to_vec()).collect();
        assert_eq!([held.ops(), &rest].concat(), whole.ops(), "held, then the rest");
        assert_eq!(FragmentTxn::default().batch_slices(4).count(), 0);
        assert!(FragmentTxn::default().undoable_batch().is_none());
        assert!(part.has_undoable() && !FragmentTxn::default().has_undoable());
        assert!(!Txn::new(2).writes_anything());
    }

    // Checks scanned ranges reach the commit batch once each (a repeated scan with the same
    // count is one check, a different count a second one), also on a fragment only read, and
    // count against the read limit.
    #[test]
    fn unit_scans_become_scan_checks() {
        let f = FragmentId::new(1);
        let g = FragmentId::new(2);
        let range = ShardRange::new(0, 100).expect("range");
        let scan = |docs| ScanRecord { collection: "c".into(), range, docs };
        let mut t = Txn::new(1);
        let reads = |docs: u64| Reads { docs: Vec::new(), scans: vec![scan(docs)] };
        t.absorb(f, "c", reads(2), vec![put("n", None, 1)]).expect("scan and insert");
        t.absorb(f, "c", reads(2), vec![]).expect("same scan again");
        t.absorb(g, "c", reads(0), vec![]).expect("an empty range elsewhere");
        let batches = t.batches();
        assert_eq!(batches.get(&f).expect("f").scans().len(), 1);
        let on_g = batches.get(&g).expect("a fragment only scanned has a batch");
        assert_eq!(on_g.writes(), 0);
        assert_eq!(on_g.scans()[0].docs, 0);
        t.absorb(f, "c", reads(3), vec![]).expect("the range changed between two scans");
        assert_eq!(t.batches().get(&f).expect("f").scans().len(), 2);
        let mut full = Txn::new(2);
        let many = Reads { docs: Vec::new(), scans: (0..TXN_READS_MAX as u64).map(scan).collect() };
        full.absorb(f, "c", many, vec![]).expect("up to the limit");
        let e = full.absorb(f, "c", reads(u64::MAX), vec![]);
        assert!(matches!(e, Err(EngineError::TxnLimit { max: TXN_READS_MAX, .. })), "{e:?}");
    }

    // Checks a buffered version with nothing buffered is refused rather than guessed.
    #[test]
    fn unit_buffered_version_needs_a_buffered_document() {
        let mut t = Txn::new(1);
        let e = t.absorb(
            FragmentId::new(0),
            "c",
            Reads::default(),
            vec![put("x", Some(BUFFERED_VERSION), 1)],
        );
        assert!(e.is_err());
    }

    // Checks the write bound: past TXN_WRITES_MAX buffered documents the statement fails
    // with a limit error naming it, instead of growing.
    #[test]
    fn unit_write_buffer_is_bounded() {
        let mut t = Txn::new(1);
        let f = FragmentId::new(0);
        let intents: Vec<WriteIntent> =
            (0..TXN_WRITES_MAX).map(|i| put(&format!("d{i}"), None, 0)).collect();
        t.absorb(f, "c", Reads::default(), intents).expect("up to the limit");
        let e = t.absorb(f, "c", Reads::default(), vec![put("one-more", None, 0)]);
        assert!(matches!(e, Err(EngineError::TxnLimit { max: TXN_WRITES_MAX, .. })), "{e:?}");
        t.absorb(f, "c", Reads::default(), vec![put("d0", Some(BUFFERED_VERSION), 1)])
            .expect("rewriting a buffered document needs no room");
    }

    // Checks the byte bound: documents past TXN_WRITE_BYTES_MAX in all fail the statement with
    // a limit error naming it; a rewritten document counts once, as last written, so shrinking
    // one makes room again.
    #[test]
    fn unit_write_buffer_bytes_are_bounded() {
        let mut t = Txn::new(1);
        let f = FragmentId::new(0);
        let big = |id: &str, read: Option<DocVersion>, len: usize| WriteIntent::Put {
            id: id.into(),
            shard: shard(),
            version_read: read,
            doc: serde_json::json!({ "s": "x".repeat(len) }),
        };
        let each = TXN_WRITE_BYTES_MAX / 8;
        for i in 0..7 {
            t.absorb(f, "c", Reads::default(), vec![big(&format!("d{i}"), None, each)])
                .expect("fits");
        }
        let e = t.absorb(f, "c", Reads::default(), vec![big("d7", None, each)]);
        assert!(
            matches!(e, Err(EngineError::TxnLimit { what: "bytes of documents written", .. })),
            "{e:?}"
        );
        t.absorb(f, "c", Reads::default(), vec![big("d0", Some(BUFFERED_VERSION), each)])
            .expect("rewriting a document at the same size");
        t.absorb(f, "c", Reads::default(), vec![big("d0", Some(BUFFERED_VERSION), 10)])
            .expect("shrinking it");
        t.absorb(f, "c", Reads::default(), vec![big("d7", None, each)]).expect("the room it left");
    }

    // Checks what a buffered write counts against TXN_WRITE_BYTES_MAX: its document as held in
    // memory (`query::json_bytes`) and its entry (key, id, `Buffered`); rewriting it changes
    // only the document's share, and a delete keeps the entry alone.
    #[test]
    fn unit_write_buffer_counts_documents_and_entries() {
        let mut t = Txn::new(1);
        let f = FragmentId::new(0);
        let key: DocKey = ("c".into(), "d0".into());
        let entry = entry_bytes(&key, "D0");
        assert!(entry > std::mem::size_of::<Buffered>(), "{entry}");
        t.absorb(f, "c", Reads::default(), vec![put("D0", None, 1)]).expect("fits");
        let doc = serde_json::json!({ "v": 1 });
        assert_eq!(t.write_bytes, entry + query::json_bytes(&doc));
        let big = serde_json::json!({ "v": 1, "s": "x".repeat(1_000) });
        let rewrite = WriteIntent::Put {
            id: "D0".into(),
            shard: shard(),
            version_read: Some(BUFFERED_VERSION),
            doc: big.clone(),
        };
        t.absorb(f, "c", Reads::default(), vec![rewrite]).expect("fits");
        assert_eq!(t.write_bytes, entry + query::json_bytes(&big));
        let delete =
            WriteIntent::Delete { id: "D0".into(), shard: shard(), version_read: BUFFERED_VERSION };
        t.absorb(f, "c", Reads::default(), vec![delete]).expect("fits");
        assert_eq!(t.write_bytes, entry);
    }

    // Checks the lost-update case: a block reads a document at version 5, another session
    // commits version 8, the block's UPDATE then reads 8; the write must still expect 5 (the
    // first read), so the commit conflicts instead of overwriting the other commit.
    #[test]
    fn unit_write_expects_the_first_read_version() {
        let mut t = Txn::new(1);
        let f = FragmentId::new(0);
        t.absorb(f, "c", docs(vec![read("k", 5)]), vec![]).expect("select");
        t.absorb(f, "c", docs(vec![read("k", 8)]), vec![put("k", Some(DocVersion::new(8)), 1)])
            .expect("update");
        let batches = t.batches();
        let ops = batches.get(&f).expect("batch").ops().to_vec();
        assert_eq!(ops.len(), 1, "{ops:?}");
        assert!(
            matches!(&ops[0], WriteOp::Put { expected_version: Some(v), .. } if *v == Version::new(5)),
            "{ops:?}"
        );
    }

    /// A small deterministic generator (xorshift).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    // Checks a block's read in slices against writes that land between its slices: a
    // document added behind the position and one removed ahead of it (neither ever read)
    // make the commit's checks fail (the range's count differs from what the slices read),
    // and so does a document rewritten after a slice read it (its version); with nothing
    // written between the slices the same read commits.
    #[test]
    fn sliced_read_fails_its_commit_after_writes_between_slices() {
        with_fragment("sliced", |fragment, range| async move {
            let collection = CollectionName::new("c");
            let shard_of = |id: &str| router::shard_of(id).expect("id").shard().expect("hash");
            let pos = |id: &str| (shard_of(id), id.to_lowercase());
            for i in 0..20 {
                let id = format!("d{i}");
                let batch = WriteBatch::new().put("c", &id, shard_of(&id), None, json(i));
                fragment.apply(batch).await.expect("put");
            }
            // Reads the range in two slices, running `between` after the first (which
            // stops at the document `stop` sorts to), and commits its checks.
            let read_and_commit = |between: WriteBatch, stop: usize| {
                let fragment = &fragment;
                let collection = &collection;
                async move {
                    let reader = OverlayReader::new(FragmentReader::new(fragment), None);
                    let mut first = Vec::new();
                    reader.scan_after(collection, &[range], None, &mut |d| {
                        first.push(pos(d.id));
                        if first.len() == stop {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    });
                    let (shard, key) = first.last().cloned().expect("a first slice");
                    if !between.is_empty() {
                        fragment.apply(between).await.expect("the write between slices");
                    }
                    let after = ScanPos { shard, key };
                    reader.scan_after(collection, &[range], Some(&after), &mut |_| {
                        ControlFlow::Continue(())
                    });
                    let mut t = Txn::new(1);
                    t.absorb(FragmentId::new(0), "c", reader.take_reads(), Vec::new())
                        .expect("absorbs");
                    let batch = t.batches().remove(&FragmentId::new(0)).expect("checks");
                    fragment.apply(batch).await
                }
            };
            read_and_commit(WriteBatch::new(), 10).await.expect("nothing written between");
            // In scan order: the first ten are read by the first slice.
            let mut order: Vec<String> = (0..20).map(|i| format!("d{i}")).collect();
            order.sort_by_key(|id| pos(id));
            let behind = (0..)
                .map(|i| format!("new{i}"))
                .find(|id| pos(id) < pos(&order[9]))
                .expect("an id behind");
            let ahead = &order[15];
            let between = WriteBatch::new()
                .put("c", &behind, shard_of(&behind), None, json(100))
                .delete("c", ahead, shard_of(ahead), None);
            let e = read_and_commit(between, 10).await.expect_err("a phantom");
            assert!(matches!(e, storage::AppendError::Phantom { .. }), "{e:?}");
            // A document the first slice read, rewritten before the second.
            let read = &order[3];
            let between = WriteBatch::new().put("c", read, shard_of(read), None, json(7));
            let e = read_and_commit(between, 10).await.expect_err("a conflict");
            assert!(matches!(e, storage::AppendError::Conflict { .. }), "{e:?}");
            fragment
        });

        fn json(v: i64) -> serde_json::Value {
            serde_json::json!({ "v": v })
        }
    }

    // Model test of the overlay against a BTreeMap oracle: random stored documents, random
    // buffered puts and deletes over them and new ids; a full scan must return exactly the
    // oracle's documents in storage's (shard, key) order, buffered values replacing stored
    // ones and buffered deletes hiding them; a scan stopped early returns the oracle's prefix;
    // only stored documents actually returned are recorded as reads; a scan to the end records
    // its range with the stored documents it held, one cut short records none; point reads
    // agree.
    #[test]
    fn model_overlay_matches_oracle() {
        with_fragment("overlay", |fragment, range| async move {
            let collection = CollectionName::new("c");
            for seed in 1..=20u64 {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
                let shard_of =
                    |id: &str| router::shard_of(id).expect("id").shard().expect("hashed");
                // Storage: ids s{seed}-{i}, a random half of 0..30.
                let mut oracle: BTreeMap<(ShardId, String), i64> = BTreeMap::new();
                for i in 0..30 {
                    if rng.below(2) == 0 {
                        let id = format!("S{seed}-{i}");
                        let batch = WriteBatch::new().put(
                            "c",
                            &id,
                            shard_of(&id),
                            None,
                            serde_json::json!({ "v": i }),
                        );
                        fragment.apply(batch).await.expect("put");
                        oracle.insert((shard_of(&id), id.to_lowercase()), i);
                    }
                }
                // Buffer: random puts and deletes over 0..40 (some stored, some new).
                let mut writes = FragmentWrites::default();
                for i in 0..40 {
                    let id = format!("s{seed}-{i}");
                    let key = id.to_lowercase();
                    let doc = match rng.below(3) {
                        0 => continue,
                        1 => None,
                        _ => Some(serde_json::json!({ "v": 1000 + i })),
                    };
                    let shard = shard_of(&id);
                    match &doc {
                        Some(_) => oracle.insert((shard, key.clone()), 1000 + i),
                        None => oracle.remove(&(shard, key.clone())),
                    };
                    let b = Buffered { id, shard, base: Version::ABSENT, doc };
                    writes.docs.insert(("c".to_owned(), key), b);
                }
                let expected: Vec<(String, i64)> = oracle
                    .iter()
                    .filter(|((_, k), _)| k.starts_with(&format!("s{seed}-")))
                    .map(|((_, k), v)| (k.clone(), *v))
                    .collect();
                let reader = OverlayReader::new(FragmentReader::new(&fragment), Some(&writes));
                let mut seen = Vec::new();
                let prefix = format!("s{seed}-");
                reader.scan(&collection, &[range], &mut |d| {
                    let key = d.id.to_lowercase();
                    if key.starts_with(&prefix) {
                        seen.push((key, d.doc.field("v").and_then(|v| v.as_i64()).unwrap_or(-1)));
                    }
                    ControlFlow::Continue(())
                });
                assert_eq!(seen, expected, "seed {seed}");
                let reads = reader.take_reads();
                assert!(reads.docs.iter().all(|r| {
                    !writes.docs.contains_key(&(r.collection.clone(), r.key.clone()))
                }));
                // The full scan records its range with every stored document of it,
                // shadowed by the buffer or not.
                let mut stored = 0u64;
                fragment.scan("c", range, |_| {
                    stored += 1;
                    ControlFlow::Continue(())
                });
                let scanned = ScanRecord { collection: "c".into(), range, docs: stored };
                assert_eq!(reads.scans, vec![scanned.clone()], "seed {seed}");
                // In slices of 1 to 5 documents, each resuming after the last one the
                // slice before visited (buffered or stored): the same documents in the
                // same order, the same versions recorded, the range recorded once with
                // the same count, however the slice ends fall among buffered documents.
                let paged = OverlayReader::new(FragmentReader::new(&fragment), Some(&writes));
                let (mut got, mut after) = (Vec::new(), None::<ScanPos>);
                loop {
                    let mut left = 1 + rng.below(5);
                    let mut last = None;
                    paged.scan_after(&collection, &[range], after.as_ref(), &mut |d| {
                        got.push((
                            d.id.to_lowercase(),
                            d.doc.field("v").and_then(|v| v.as_i64()).unwrap_or(-1),
                        ));
                        last = Some(ScanPos {
                            shard: d.shard,
                            key: router::doc_key(d.id).into_string(),
                        });
                        left -= 1;
                        if left == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
                    });
                    match last {
                        Some(pos) if left == 0 => after = Some(pos),
                        _ => break,
                    }
                }
                let whole: Vec<(String, i64)> = {
                    let mut v = Vec::new();
                    let again = OverlayReader::new(FragmentReader::new(&fragment), Some(&writes));
                    again.scan(&collection, &[range], &mut |d| {
                        v.push((
                            d.id.to_lowercase(),
                            d.doc.field("v").and_then(|v| v.as_i64()).unwrap_or(-1),
                        ));
                        ControlFlow::Continue(())
                    });
                    v
                };
                assert_eq!(got, whole, "seed {seed}: paged against whole");
                let paged_reads = paged.take_reads();
                let versions = |r: &Reads| -> Vec<(String, ShardId, Version)> {
                    r.docs.iter().map(|d| (d.key.clone(), d.shard, d.version)).collect()
                };
                assert_eq!(versions(&paged_reads), versions(&reads), "seed {seed}: versions");
                assert_eq!(paged_reads.scans, vec![scanned], "seed {seed}: range recorded");
                // Early stop: the first k documents overall.
                let all: Vec<String> = {
                    let mut v = Vec::new();
                    reader.scan(&collection, &[range], &mut |d| {
                        v.push(d.id.to_lowercase());
                        ControlFlow::Continue(())
                    });
                    v
                };
                let k = usize::try_from(rng.below(all.len() as u64 + 1)).expect("small");
                let mut first = Vec::new();
                let _ = reader.take_reads();
                reader.scan(&collection, &[range], &mut |d| {
                    if first.len() == k {
                        return ControlFlow::Break(());
                    }
                    first.push(d.id.to_lowercase());
                    ControlFlow::Continue(())
                });
                assert_eq!(first, all[..k], "seed {seed} stop after {k}");
                // A scan cut short records no range; one that reached the end does.
                let scans = reader.take_reads().scans;
                assert_eq!(scans.is_empty(), k < all.len(), "seed {seed} stop after {k}");
                // Point reads agree with the oracle.
                for i in 0..40 {
                    let id = format!("S{seed}-{i}");
                    let got = reader
                        .get(&collection, &id)
                        .map(|d| d.doc.field("v").and_then(|v| v.as_i64()).unwrap_or(-1));
                    let want = oracle.get(&(shard_of(&id), id.to_lowercase())).copied();
                    assert_eq!(got, want, "seed {seed} get {id}");
                }
            }
            fragment
        });
    }

    /// Runs `test` on a glommio executor over a fresh fragment of every shard (its directory
    /// a temporary one named after `name`, removed after), then closes the fragment `test`
    /// hands back.
    fn with_fragment<F, Fut>(name: &str, test: F)
    where
        F: FnOnce(storage::Fragment, ShardRange) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = storage::Fragment>,
    {
        let dir = std::env::temp_dir().join(format!("tessera-{name}-{}", std::process::id()));
        let path = dir.clone();
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(1 << 20)
            .preempt_timer(std::time::Duration::from_secs(60))
            .spawn(move || async move {
                let range = ShardRange::new(0, router::SHARD_COUNT).expect("full range");
                let options =
                    storage::FragmentOptions { segment_bytes: 1 << 20, ..Default::default() };
                let fragment = storage::Fragment::open(&path, FragmentId::new(0), range, options)
                    .await
                    .expect("open");
                test(fragment, range).await.close().await;
            })
            .expect("spawn executor")
            .join()
            .expect("executor thread");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Offline, read-only access to a fragment directory: `verify` (every segment header, chunk,
//! frame CRC and rkyv validation, LSN order, the tail rule, then a cross-check of the rebuilt
//! index against the records it points at) and reading documents for `dump`.
//!
//! Nothing here writes: leftover `.tmp` files are ignored, files a compacted segment replaces
//! are skipped (recovery would remove them), and a torn tail is reported, not zeroed. It runs
//! on any thread (no glommio). The fragment's `LOCK` is taken shared when the file exists, so a
//! directory that an open `Fragment` (a running node) holds is refused with
//! `OpenError::Locked`, and a node cannot open the fragment while it is being read.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use router::{FragmentId, ShardRange};

use crate::error::OpenError;
use crate::format::{Damage, TailWindow, classify_tail};
use crate::fragment::{DocRef, State};
use crate::record::ArchivedRecordBody;
use crate::recovery::{ReplayedSegment, corruption, empty_state, io_err, replay_segment};
use crate::segment::{Segment, parse_file_name};
use crate::{TxId, doc_key};

/// Damaged or stray bytes after the last valid chunk of the last segment: the interrupted,
/// never-acknowledged last write. Recovery zeroes them at the next open; not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment.
    pub segment: PathBuf,
    /// Where the log ends.
    pub offset: u64,
    /// Why the scan stopped there (`None`: stray non-zero bytes after a clean end).
    pub damage: Option<Damage>,
}

/// What `verify` found in a healthy fragment directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// The fragment.
    pub fragment: FragmentId,
    /// Segment files read.
    pub segments: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Records validated and replayed.
    pub records: u64,
    /// Live documents after replay.
    pub docs: u64,
    /// The last LSN of the log.
    pub last_lsn: u64,
    /// Prepared transactions without an outcome.
    pub in_doubt: u64,
    /// Batches logged in parts whose Commit record is missing (a crash interrupted them
    /// before they were acknowledged): not applied, as recovery drops them.
    pub unfinished_batches: u64,
    /// A torn tail recovery would truncate, if any.
    pub torn_tail: Option<TornTail>,
}

/// A fragment directory read without modifying it.
pub struct OfflineFragment {
    st: State,
    report: VerifyReport,
    _lock: Option<std::fs::File>,
}

impl std::fmt::Debug for OfflineFragment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfflineFragment").field("report", &self.report).finish_non_exhaustive()
    }
}

/// Checks a fragment directory read-only: `Ok` with a report when recovery would open it
/// (perhaps truncating a torn tail), `Err(OpenError::Corruption { segment, offset, .. })` at the
/// first damage that is not a torn tail.
pub fn verify_dir(dir: &Path, id: FragmentId) -> Result<VerifyReport, OpenError> {
    OfflineFragment::open(dir, id).map(|f| f.report)
}

/// The segment files recovery would use, in log order (see `recovery::list_segments`).
fn list(dir: &Path, id: FragmentId) -> Result<Vec<(u64, u64, PathBuf)>, OpenError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(id, dir))? {
        let path = entry.map_err(io_err(id, dir))?.path();
        if let Some((seq, generation)) =
            path.file_name().and_then(|n| n.to_str()).and_then(parse_file_name)
        {
            files.push((seq, generation, path));
        }
    }
    files.sort();
    if let Some((cseq, cgen)) =
        files.iter().filter(|f| f.1 > 0).max_by_key(|f| f.1).map(|f| (f.0, f.1))
    {
        files.retain(|f| !(f.0 <= cseq && f.1 < cgen));
    }
    let mut expected = match files.first() {
        Some((seq, generation, _)) if *generation > 0 => Some(seq + 1),
        _ => Some(0),
    };
    for (i, (seq, generation, path)) in files.iter().enumerate() {
        if i == 0 && *generation > 0 {
            continue;
        }
        if *generation != 0 || Some(*seq) != expected {
            return Err(corruption(id, path, 0, Damage::SegmentSequence));
        }
        expected = seq.checked_add(1);
    }
    Ok(files)
}

fn lock_shared(dir: &Path, id: FragmentId) -> Result<Option<std::fs::File>, OpenError> {
    let path = dir.join("LOCK");
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(id, &path)(e)),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked { fragment: id, path }),
        Err(std::fs::TryLockError::Error(e)) => Err(io_err(id, &path)(e)),
    }
}

/// What follows the last valid chunk of the last normal segment, read-only (the rule of
/// `recovery::check_tail`).
fn tail(
    id: FragmentId,
    seg: &Segment,
    end: u64,
    last_lsn: u64,
    damage: Option<Damage>,
) -> Result<Option<TornTail>, OpenError> {
    let TailWindow { dirty, .. } =
        classify_tail(seg.bytes(), end, seg.header().salt, last_lsn, damage)
            .map_err(|(at, what)| corruption(id, seg.path(), at, what))?;
    if damage.is_none() && !dirty {
        return Ok(None);
    }
    Ok(Some(TornTail { segment: seg.path().to_path_buf(), offset: end, damage }))
}

impl OfflineFragment {
    /// Reads and checks the fragment in `dir` (see [`verify_dir`]) and keeps its index for
    /// reading documents.
    pub fn open(dir: &Path, id: FragmentId) -> Result<OfflineFragment, OpenError> {
        let lock = lock_shared(dir, id)?;
        let files = list(dir, id)?;
        let mut st = empty_state();
        let mut prev_lsn = 0u64;
        let mut records = 0u64;
        let mut bytes_total = 0u64;
        let mut torn_tail = None;
        let count = files.len();
        for (i, (seq, generation, path)) in files.into_iter().enumerate() {
            let ReplayedSegment { seg, end, tail_allowed } = replay_segment(
                &mut st,
                id,
                (seq, generation, path),
                i + 1 == count,
                &mut prev_lsn,
                &mut records,
            )?;
            bytes_total += seg.len();
            if tail_allowed {
                torn_tail = tail(id, &seg, end.offset, end.last_lsn, end.damage)?;
            }
            st.segments.push(seg);
        }
        let unfinished_batches = crate::recovery::drop_unfinished_batches(&mut st) as u64;
        check_index(&st, id)?;
        let report = VerifyReport {
            fragment: id,
            segments: st.segments.len() as u64,
            bytes: bytes_total,
            records,
            docs: st.index.docs(),
            last_lsn: prev_lsn,
            in_doubt: st.txns.len() as u64,
            unfinished_batches,
            torn_tail,
        };
        st.lsn_durable = prev_lsn;
        Ok(OfflineFragment { st, report, _lock: lock })
    }

    /// What the check found.
    pub fn report(&self) -> &VerifyReport {
        &self.report
    }

    /// Prepared transactions without an outcome in this fragment's log: their writes are not
    /// among the documents until [`OfflineFragment::commit_in_doubt`] applies them.
    pub fn in_doubt(&self) -> Vec<TxId> {
        self.st.txns.keys().copied().collect()
    }

    /// Applies the writes of the in-doubt transactions that `committed` says were committed
    /// (the coordinator's decision, which a crash or a backup cut can hold without this
    /// fragment's Commit record), in memory only, as recovery would; the others stay out (as
    /// recovery aborts an undecided one). Returns how many were applied.
    pub fn commit_in_doubt(&mut self, committed: impl Fn(TxId) -> bool) -> u64 {
        let mut applied = 0;
        for txid in self.in_doubt() {
            if committed(txid) {
                crate::log::finish_prepared(&mut self.st, txid, true);
                applied += 1;
            }
        }
        applied
    }

    /// As [`crate::Fragment::prepared_doc`]: the document in-doubt transaction `txid` writes
    /// to `collection` / `id` here.
    pub fn prepared_doc(
        &self,
        txid: TxId,
        collection: &str,
        id: &str,
    ) -> Option<serde_json::Value> {
        crate::fragment::prepared_doc_in(&self.st, txid, collection, id)
    }

    /// Names of collections that have documents, sorted.
    pub fn collections(&self) -> Vec<String> {
        self.st.index.collections().map(str::to_owned).collect()
    }

    /// Visits the documents of `collection` whose shard is in `range`, in (shard, lower-cased
    /// id) order, until `visit` breaks.
    pub fn scan<'f>(
        &'f self,
        collection: &str,
        range: ShardRange,
        mut visit: impl FnMut(DocRef<'f>) -> ControlFlow<()>,
    ) {
        for (_, entry) in self.st.index.scan(collection, range) {
            if let Some(doc) = DocRef::new(&entry.loc, entry.version)
                && visit(doc).is_break()
            {
                return;
            }
        }
    }
}

/// Every index entry must resolve to a put of the same collection, key and version.
fn check_index(st: &State, id: FragmentId) -> Result<(), OpenError> {
    for (collection, key, entry) in st.index.iter() {
        let record = entry.loc.seg.record(entry.loc.span);
        let ok = DocRef::new(&entry.loc, entry.version).is_some_and(|doc| {
            doc.collection() == collection
                && doc_key(doc.id()) == key
                && record.is_some_and(|r| match &r.body {
                    // A committed prepare's ops carry the version of the prepare record.
                    ArchivedRecordBody::Prepare { .. } => true,
                    _ => r.lsn.to_native() == entry.version.get(),
                })
        });
        if !ok {
            let offset = entry.loc.span.offset();
            return Err(corruption(id, entry.loc.seg.path(), offset, Damage::IndexMismatch));
        }
    }
    Ok(())
}

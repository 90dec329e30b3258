//! Opening a fragment: list and order the segment files, finish or undo an interrupted
//! compaction or segment creation, scan every record (CRC, then bytecheck once), replay the
//! records into the index, and decide what a damaged spot means.
//!
//! The rule: the chunk being written at the moment of a crash may be torn (any subset of its
//! blocks reached the disk) and was never acknowledged. So damage, or non-zero bytes, within
//! one maximal chunk (`GROUP_COMMIT_BATCH_BYTES_MAX`) after the last valid chunk of the last
//! segment is a torn tail: it is counted, logged and zeroed (durably) before writes resume.
//! Anything else is corruption and the fragment refuses to open, naming segment and offset:
//! damage in any other segment, a valid chunk (of this segment's salt, with a later LSN)
//! anywhere after the damaged spot, non-zero bytes beyond the torn window, a gap in LSNs or in
//! the segment sequence.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use router::{FragmentId, ShardId};

use crate::disk::Disk;
use crate::error::OpenError;
use crate::format::{
    Damage, FORMAT_VERSION, LsnRule, RecordAt, ScanEnd, SegmentHeader, SegmentKind, TailWindow,
    classify_tail, scan_segment,
};
use crate::fragment::{Active, FragmentOptions, State};
use crate::index::Index;
use crate::keyhash::keyed_state;
use crate::limits::{BLOCK_BYTES, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES};
use crate::log::{Effect, OpMeta, apply_effect, new_salt};
use crate::record::{ArchivedDeleteOp, ArchivedOp, ArchivedPutOp, ArchivedRecordBody};
use crate::segment::{Segment, create_preallocated, parse_file_name};
use crate::{TxId, Version, doc_key};

/// Bytes zeroed per write when cleaning a torn tail.
const ZERO_BYTES: usize = 1 << 20;

pub(crate) fn io_err(
    fragment: FragmentId,
    path: &Path,
) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |source| OpenError::Io { fragment, path: path.to_path_buf(), source }
}

pub(crate) fn corruption(
    fragment: FragmentId,
    segment: &Path,
    offset: u64,
    what: Damage,
) -> OpenError {
    OpenError::Corruption { fragment, segment: segment.to_path_buf(), offset, what }
}

/// A segment [`replay_segment`] read, and where its valid records end.
pub(crate) struct ReplayedSegment {
    /// The mapped segment.
    pub seg: Rc<Segment>,
    /// Where the scan stopped.
    pub end: ScanEnd,
    /// The segment is the last and a normal one: a damaged chunk at `end` is a torn tail.
    pub tail_allowed: bool,
}

/// Maps one segment (`seq`, `generation`, `path` as listed), checks its header against the
/// fragment and the listing, replays its records into `st` and checks where they end: damage
/// is corruption unless it is a torn tail of the last normal segment; LSNs continue from
/// `prev_lsn`, which moves past the segment. Shared by recovery and the offline verifier.
pub(crate) fn replay_segment(
    st: &mut State,
    id: FragmentId,
    (seq, generation, path): (u64, u64, PathBuf),
    last: bool,
    prev_lsn: &mut u64,
    records: &mut u64,
) -> Result<ReplayedSegment, OpenError> {
    let (map, path) = Segment::map_unchecked_header(&path).map_err(io_err(id, &path))?;
    let header = SegmentHeader::decode(&map).map_err(|d| corruption(id, &path, 0, d))?;
    if header.fragment != id.get() {
        return Err(OpenError::WrongFragment {
            fragment: id,
            segment: path,
            found: FragmentId::new(header.fragment),
        });
    }
    if header.seq != seq || header.generation != generation {
        return Err(corruption(id, &path, 0, Damage::HeaderField));
    }
    let seg = Rc::new(Segment::from_map(map, path, header));
    let (rule, start) = match header.kind {
        SegmentKind::Compacted => (LsnRule::NonDecreasing, 0),
        SegmentKind::Normal => (LsnRule::Contiguous, *prev_lsn),
    };
    let end = scan_segment(seg.bytes(), &header, rule, start, |rec| {
        *records += 1;
        replay(st, &seg, rec);
    });
    let tail_allowed = last && header.kind == SegmentKind::Normal;
    if let Some(damage) = end.damage
        && (damage == Damage::LsnGap || !tail_allowed)
    {
        return Err(corruption(id, seg.path(), end.offset, damage));
    }
    *prev_lsn = match header.kind {
        SegmentKind::Compacted => {
            if end.last_lsn > header.lsn_through {
                return Err(corruption(id, seg.path(), end.offset, Damage::LsnOrder));
            }
            header.lsn_through
        }
        SegmentKind::Normal => end.last_lsn,
    };
    Ok(ReplayedSegment { seg, end, tail_allowed })
}

pub(crate) fn empty_state() -> State {
    State {
        index: Index::default(),
        txns: BTreeMap::new(),
        locks: HashMap::with_hasher(keyed_state()),
        pending: HashMap::with_hasher(keyed_state()),
        range_locks: Vec::new(),
        next_lsn: 1,
        lsn_durable: 0,
        queue: VecDeque::new(),
        queue_bytes: 0,
        queue_eager: 0,
        staged: rkyv::util::AlignedVec::new(),
        staged_head: 0,
        fatal: None,
        active: None,
        segments: Vec::new(),
        log_bytes: 0,
        torn_tails: 0,
        generation: 0,
        compactions: 0,
    }
}

fn meta_put(p: &ArchivedPutOp) -> OpMeta {
    OpMeta::new(
        p.collection.as_str(),
        &doc_key(p.id.as_str()),
        ShardId::from_u64_mod(u64::from(p.shard.to_native())),
        Version::new(p.version.to_native()),
        true,
    )
}

fn meta_delete(d: &ArchivedDeleteOp) -> OpMeta {
    OpMeta::new(
        d.collection.as_str(),
        &doc_key(d.id.as_str()),
        ShardId::from_u64_mod(u64::from(d.shard.to_native())),
        Version::new(d.version.to_native()),
        false,
    )
}

fn meta_op(op: &ArchivedOp) -> OpMeta {
    match op {
        ArchivedOp::Put(p) => meta_put(p),
        ArchivedOp::Delete(d) => meta_delete(d),
    }
}

/// Applies one validated record found by recovery.
pub(crate) fn replay(st: &mut State, seg: &Rc<Segment>, rec: RecordAt<'_>) {
    let effect = match &rec.record.body {
        ArchivedRecordBody::Put(p) => Effect::Ops(vec![meta_put(p)]),
        ArchivedRecordBody::Delete(d) => Effect::Ops(vec![meta_delete(d)]),
        ArchivedRecordBody::Batch(ops) => Effect::Ops(ops.iter().map(meta_op).collect()),
        ArchivedRecordBody::Prepare { txid, ops } => {
            Effect::Prepare(TxId::new(txid.to_native()), ops.iter().map(meta_op).collect())
        }
        ArchivedRecordBody::Commit { txid } => Effect::Commit(TxId::new(txid.to_native())),
        ArchivedRecordBody::Abort { txid } => Effect::Abort(TxId::new(txid.to_native())),
    };
    apply_effect(st, &effect, seg, rec.span);
}

/// Drops every batch logged in parts (`TxId::is_local`) whose Commit record is not in the log:
/// the crash came before it was durable, so it was never acknowledged, and nothing else can
/// commit it. Its records stay as dead bytes until compaction. Returns how many.
pub(crate) fn drop_unfinished_batches(st: &mut State) -> usize {
    let unfinished: Vec<TxId> = st.txns.keys().copied().filter(|t| t.is_local()).collect();
    for txid in &unfinished {
        crate::log::finish_prepared(st, *txid, false);
    }
    unfinished.len()
}

/// Lists segment files, removing leftovers of interrupted creations and compactions.
async fn list_segments(
    dir: &Path,
    id: FragmentId,
    disk: &dyn Disk,
) -> Result<Vec<(u64, u64, PathBuf)>, OpenError> {
    let mut files = Vec::new();
    let mut removed = false;
    // Blocking directory listing: once, at open, before the fragment serves anything.
    for entry in std::fs::read_dir(dir).map_err(io_err(id, dir))? {
        let entry = entry.map_err(io_err(id, dir))?;
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        if name.ends_with(".tmp") {
            disk.remove(&path).await.map_err(io_err(id, &path))?;
            removed = true;
        } else if let Some((seq, generation)) = parse_file_name(&name) {
            files.push((seq, generation, path));
        }
    }
    files.sort();
    // The newest compacted segment replaces every older file at or below its sequence number:
    // it was made durable and renamed into place before any of them was removed.
    if let Some((cseq, cgen)) =
        files.iter().filter(|f| f.1 > 0).max_by_key(|f| f.1).map(|f| (f.0, f.1))
    {
        let mut keep = Vec::new();
        for f in files {
            if f.0 <= cseq && f.1 < cgen {
                disk.remove(&f.2).await.map_err(io_err(id, &f.2))?;
                removed = true;
            } else {
                keep.push(f);
            }
        }
        files = keep;
    }
    if removed {
        disk.sync_dir(dir).await.map_err(io_err(id, dir))?;
    }
    // What is left: an optional compacted segment, then normal ones numbered without gaps.
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

/// Rebuilds a fragment's state from its directory.
pub(crate) async fn recover(
    dir: &Path,
    id: FragmentId,
    options: &FragmentOptions,
) -> Result<State, OpenError> {
    let segment_bytes = options.segment_bytes;
    if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&segment_bytes)
        || !segment_bytes.is_multiple_of(BLOCK_BYTES)
    {
        return Err(OpenError::SegmentSize { fragment: id, segment_bytes });
    }
    std::fs::create_dir_all(dir).map_err(io_err(id, dir))?;
    let disk = &*options.disk;
    let started = std::time::Instant::now();
    let files = list_segments(dir, id, disk).await?;
    let mut records = 0u64;
    let mut torn_bytes = 0u64;
    let mut st = empty_state();
    let mut prev_lsn = 0u64;
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
        if tail_allowed {
            torn_bytes =
                check_tail(&mut st, id, &seg, end.offset, end.last_lsn, end.damage, disk).await?;
            // A segment of an older format is sealed: new records go to a new segment, whose
            // header says which format they are in.
            if SegmentHeader::version_of(seg.bytes()) == Some(FORMAT_VERSION) {
                let file = disk.open(seg.path()).await.map_err(io_err(id, seg.path()))?;
                st.active = Some(Active::new(seg.clone(), file, end.offset));
            } else {
                cov_mark::hit!(old_format_segment_sealed);
            }
        }
        st.segments.push(seg);
        glommio::executor().yield_if_needed().await;
    }
    let unfinished_batches = drop_unfinished_batches(&mut st);
    if st.active.is_none() {
        let seq = st.segments.last().map_or(0, |s| s.header().seq + 1);
        let header = SegmentHeader {
            fragment: id.get(),
            kind: SegmentKind::Normal,
            seq,
            generation: 0,
            salt: new_salt(),
            lsn_through: 0,
        };
        let (seg, file) =
            create_preallocated(disk, dir, header, segment_bytes).await.map_err(io_err(id, dir))?;
        st.segments.push(seg.clone());
        st.active = Some(Active::new(seg, file, SEGMENT_HEADER_BYTES));
    }
    st.generation = st.segments.first().map_or(0, |s| s.header().generation);
    st.next_lsn = prev_lsn + 1;
    st.lsn_durable = prev_lsn;
    tracing::info!(
        fragment = %id,
        records,
        torn_bytes,
        unfinished_batches,
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "fragment recovered"
    );
    Ok(st)
}

/// Decides what the bytes after the last valid chunk of the last segment mean (see the module
/// docs), and cleans a torn tail.
async fn check_tail(
    st: &mut State,
    id: FragmentId,
    seg: &Rc<Segment>,
    end: u64,
    last_lsn: u64,
    damage: Option<Damage>,
    disk: &dyn Disk,
) -> Result<u64, OpenError> {
    let TailWindow { window_end, dirty } =
        classify_tail(seg.bytes(), end, seg.header().salt, last_lsn, damage)
            .map_err(|(at, what)| corruption(id, seg.path(), at, what))?;
    if damage.is_none() && !dirty {
        return Ok(0);
    }
    cov_mark::hit!(torn_tail_truncated);
    st.torn_tails += 1;
    tracing::warn!(
        fragment = %id,
        segment = %seg.path().display(),
        offset = end,
        damage = ?damage,
        "torn tail truncated (an unacknowledged write was interrupted)"
    );
    // Zero the torn window durably, so the next chunk lands on clean blocks.
    let file = disk.open(seg.path()).await.map_err(io_err(id, seg.path()))?;
    let mut at = end;
    let stop = window_end as u64;
    while at < stop {
        let len = usize::try_from((stop - at).min(ZERO_BYTES as u64)).unwrap_or(ZERO_BYTES);
        let mut buf = file.alloc(len);
        buf.as_bytes_mut().fill(0);
        file.write_at(buf, at).await.map_err(io_err(id, seg.path()))?;
        at += len as u64;
    }
    file.fdatasync().await.map_err(io_err(id, seg.path()))?;
    file.close().await.map_err(io_err(id, seg.path()))?;
    Ok(stop - end)
}

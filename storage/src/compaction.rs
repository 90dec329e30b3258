//! Compaction: rewrite the live records of every sealed segment into one compacted segment and
//! remove the old files, without stopping writers.
//!
//! Steps, each crash-safe:
//! 1. Under the log lock, roll the active segment if it holds records, so every record up to
//!    `lsn_through` lies in sealed segments (the prefix) and new writes go elsewhere.
//! 2. Snapshot the live documents and in-doubt prepared transactions located in the prefix.
//! 3. Write them, in LSN order, into `<last seq>-<generation+1>.seg.tmp`, fdatasync it, rename
//!    it into place and sync the directory. This rename is the commit point: recovery treats the
//!    compacted file as replacing every file with a lower (seq, generation); before the rename,
//!    recovery removes the `.tmp` file and the old segments stay authoritative.
//! 4. Point the index at the new copies (only entries still at the version snapshotted: writes
//!    made meanwhile win), then remove the old files and sync the directory.
//!
//! Tombstones are not carried over: every older version of a deleted document is in the prefix
//! too, and goes with it. Readers holding a `DocRef` into an old segment keep its mapping alive.

use std::collections::HashSet;
use std::rc::Rc;

use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;

use crate::archive::{self, RecordSpan};
use crate::error::{AppendError, CompactError};
use crate::format::{ChunkHeader, SegmentHeader, SegmentKind, encode_frame, frame_bytes};
use crate::fragment::{CompactStats, Inner};
use crate::index::Loc;
use crate::limits::{
    BLOCK_BYTES, CHUNK_HEADER_BYTES, GROUP_COMMIT_BATCH_BYTES_MAX, SEGMENT_HEADER_BYTES,
    YIELD_EVERY_ITEMS,
};
use crate::log::{new_salt, roll};
use crate::record::{PutOp, Record, RecordBody};
use crate::segment::{Segment, file_name};
use crate::value::JsonValue;
use crate::{TxId, Version};

enum Item {
    Doc {
        collection: Box<str>,
        key: Box<str>,
        version: Version,
        loc: Loc,
    },
    /// One Prepare record (part `part`) of an in-doubt transaction.
    Txn {
        txid: TxId,
        part: usize,
        lsn: u64,
        loc: Loc,
    },
}

impl Item {
    fn lsn(&self) -> u64 {
        match self {
            Item::Doc { version, .. } => version.get(),
            Item::Txn { lsn, .. } => *lsn,
        }
    }
}

/// Starts a background compaction (the write path calls this past the dead-bytes threshold).
pub(crate) fn spawn(inner: Rc<Inner>) {
    if inner.compacting.replace(true) {
        return;
    }
    let task_inner = inner.clone();
    let task = glommio::spawn_local(async move {
        if let Err(e) = run(&task_inner).await {
            tracing::warn!(fragment = %task_inner.id, error = %e, "background compaction failed");
        }
        task_inner.compacting.set(false);
    })
    .detach();
    *inner.compaction_task.borrow_mut() = Some(task);
}

/// Compacts now; returns at once with empty stats when a compaction is already running.
pub(crate) async fn compact(inner: Rc<Inner>) -> Result<CompactStats, CompactError> {
    if inner.compacting.replace(true) {
        return Ok(CompactStats::default());
    }
    let result = run(&inner).await;
    inner.compacting.set(false);
    result
}

fn io_err(inner: &Inner, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> CompactError {
    let fragment = inner.id;
    let path = path.to_path_buf();
    move |source| CompactError::Io { fragment, path, source }
}

/// Compaction's wait for the log lock, counted in `seal_waiting` so the writer lets go of it.
/// Dropping it (lock taken, or the wait abandoned) uncounts it and wakes the writer, which
/// waits for exactly that before it takes the lock again.
struct SealWaiting<'a>(&'a Inner);

impl<'a> SealWaiting<'a> {
    fn new(inner: &'a Inner) -> SealWaiting<'a> {
        inner.seal_waiting.set(inner.seal_waiting.get() + 1);
        crate::fragment::wake_writer(inner);
        SealWaiting(inner)
    }
}

impl Drop for SealWaiting<'_> {
    fn drop(&mut self) {
        self.0.seal_waiting.set(self.0.seal_waiting.get().saturating_sub(1));
        crate::fragment::wake_writer(self.0);
    }
}

async fn run(inner: &Rc<Inner>) -> Result<CompactStats, CompactError> {
    let closed = || CompactError::Append(AppendError::Closed { fragment: inner.id });
    // 1. Seal.
    let lsn_through = {
        // The writer holds the lock while chunks are in flight; ask it to let go.
        let waiting = SealWaiting::new(inner);
        let permit = inner.log_lock.acquire_permit(1).await;
        drop(waiting);
        let permit = permit.map_err(|_| closed())?;
        if let Some(reason) = inner.st.borrow().fatal.clone() {
            return Err(AppendError::Fatal { fragment: inner.id, reason }.into());
        }
        let has_data =
            inner.st.borrow().active.as_ref().is_some_and(|a| a.pos > SEGMENT_HEADER_BYTES);
        if has_data {
            roll(inner).await.map_err(io_err(inner, &inner.dir))?;
        }
        let lsn = inner.st.borrow().lsn_durable;
        drop(permit);
        lsn
    };
    // 2. Snapshot.
    let (prefix, generation, mut items) = {
        let st = inner.st.borrow();
        let count = st.segments.len().saturating_sub(1);
        let prefix: Vec<Rc<Segment>> = st.segments.iter().take(count).cloned().collect();
        let uids: HashSet<u64> = prefix.iter().map(|s| s.uid()).collect();
        let mut items: Vec<Item> = st
            .index
            .iter()
            .filter(|(_, _, e)| uids.contains(&e.loc.seg.uid()))
            .map(|(c, k, e)| Item::Doc {
                collection: c.into(),
                key: k.into(),
                version: e.version,
                loc: e.loc.clone(),
            })
            .collect();
        for (txid, txn) in &st.txns {
            for (part, loc) in txn.parts.iter().enumerate().filter_map(|(i, p)| {
                p.loc.as_ref().filter(|l| uids.contains(&l.seg.uid())).map(|l| (i, l))
            }) {
                let lsn = loc.seg.record(loc.span).map_or(0, |r| r.lsn.to_native());
                items.push(Item::Txn { txid: *txid, part, lsn, loc: loc.clone() });
            }
        }
        (prefix, st.generation + 1, items)
    };
    let Some(last_seq) = prefix.last().map(|s| s.header().seq) else {
        return Ok(CompactStats::default());
    };
    items.sort_by_key(Item::lsn);
    let bytes_before = inner.st.borrow().log_bytes;

    // 3. Write the compacted segment.
    let header = SegmentHeader {
        fragment: inner.id.get(),
        kind: SegmentKind::Compacted,
        seq: last_seq,
        generation,
        salt: new_salt(),
        lsn_through,
    };
    let name = file_name(last_seq, generation);
    let path = inner.dir.join(&name);
    let tmp = inner.dir.join(format!("{name}.tmp"));
    let disk = inner.options.disk.clone();
    let file = disk.create(&tmp).await.map_err(io_err(inner, &tmp))?;
    let written = write_items(inner, &*file, &header, &items).await;
    let written = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = file.close().await;
            let _ = disk.remove(&tmp).await;
            return Err(e);
        }
    };
    file.fdatasync().await.map_err(io_err(inner, &tmp))?;
    file.close().await.map_err(io_err(inner, &tmp))?;
    disk.rename(&tmp, &path).await.map_err(io_err(inner, &tmp))?;
    disk.sync_dir(&inner.dir).await.map_err(io_err(inner, &inner.dir))?;
    let seg = Rc::new(Segment::map(&path, header).map_err(io_err(inner, &path))?);

    // 4. Swap, then remove the old files.
    let old_uids: HashSet<u64> = prefix.iter().map(|s| s.uid()).collect();
    {
        let mut st = inner.st.borrow_mut();
        for (item, span) in items.iter().zip(&written) {
            let bytes = frame_bytes(span.len()) as u64;
            seg.add_record_bytes(bytes);
            let loc = Loc { seg: seg.clone(), span: *span, op: 0 };
            match item {
                Item::Doc { collection, key, version, .. } => {
                    st.index.relocate(collection, key, *version, loc, bytes);
                }
                Item::Txn { txid, part, .. } => {
                    if let Some(p) = st.txns.get_mut(txid).and_then(|t| t.parts.get_mut(*part))
                        && p.loc.as_ref().is_some_and(|l| old_uids.contains(&l.seg.uid()))
                    {
                        p.loc = Some(loc);
                    }
                }
            }
        }
        st.segments.retain(|s| !old_uids.contains(&s.uid()));
        st.segments.insert(0, seg.clone());
        st.log_bytes = st.segments.iter().map(|s| s.record_bytes()).sum();
        st.generation = generation;
        st.compactions += 1;
    }
    for old in &prefix {
        disk.remove(old.path()).await.map_err(io_err(inner, old.path()))?;
    }
    disk.sync_dir(&inner.dir).await.map_err(io_err(inner, &inner.dir))?;
    let bytes_after = inner.st.borrow().log_bytes;
    tracing::info!(
        fragment = %inner.id,
        segments_removed = prefix.len(),
        records = written.len(),
        bytes_before,
        bytes_after,
        "compacted"
    );
    Ok(CompactStats {
        segments_removed: prefix.len() as u64,
        records_written: written.len() as u64,
        bytes_before,
        bytes_after,
    })
}

/// The record that carries `item` into the compacted segment.
fn rebuild(item: &Item) -> Option<Record> {
    match item {
        Item::Doc { loc, version, .. } => {
            let put = loc.seg.record(loc.span)?.body.put_at(usize::try_from(loc.op).ok()?)?;
            let doc = rkyv::deserialize::<JsonValue, RkyvError>(&put.doc).ok()?;
            Some(Record {
                lsn: version.get(),
                body: RecordBody::Put(PutOp {
                    collection: put.collection.as_str().to_owned(),
                    id: put.id.as_str().to_owned(),
                    shard: put.shard.to_native(),
                    version: version.get(),
                    doc,
                }),
            })
        }
        Item::Txn { loc, .. } => {
            rkyv::deserialize::<Record, RkyvError>(loc.seg.record(loc.span)?).ok()
        }
    }
}

/// Writes the header block and the items as chunks; returns each item's span.
async fn write_items(
    inner: &Inner,
    file: &dyn crate::disk::DiskFile,
    header: &SegmentHeader,
    items: &[Item],
) -> Result<Vec<RecordSpan>, CompactError> {
    let path = inner.dir.clone();
    let block = usize::try_from(BLOCK_BYTES).unwrap_or(4096);
    let mut head = file.alloc(block);
    head.as_bytes_mut().fill(0);
    if let Some(h) = head.as_bytes_mut().get_mut(..header.encode().len()) {
        h.copy_from_slice(&header.encode());
    }
    file.write_at(head, 0).await.map_err(io_err(inner, &path))?;
    let mut pos = SEGMENT_HEADER_BYTES;
    let mut spans = Vec::with_capacity(items.len());
    let mut chunk: Vec<(u64, AlignedVec)> = Vec::new();
    let mut used = CHUNK_HEADER_BYTES;
    for (i, item) in items.iter().enumerate() {
        if i % YIELD_EVERY_ITEMS == 0 {
            glommio::executor().yield_if_needed().await;
            if inner.closing.get() {
                return Err(AppendError::Closed { fragment: inner.id }.into());
            }
        }
        let record = rebuild(item).ok_or(CompactError::Io {
            fragment: inner.id,
            path: path.clone(),
            source: std::io::Error::other("a live record could not be re-read"),
        })?;
        let payload = rkyv::to_bytes::<RkyvError>(&record).map_err(|e| CompactError::Io {
            fragment: inner.id,
            path: path.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let need = frame_bytes(payload.len());
        if used + need > GROUP_COMMIT_BATCH_BYTES_MAX && !chunk.is_empty() {
            pos = write_chunk(inner, file, header.salt, pos, &mut chunk, &mut spans).await?;
            used = CHUNK_HEADER_BYTES;
        }
        used += need;
        chunk.push((record.lsn, payload));
    }
    if !chunk.is_empty() {
        write_chunk(inner, file, header.salt, pos, &mut chunk, &mut spans).await?;
    }
    Ok(spans)
}

async fn write_chunk(
    inner: &Inner,
    file: &dyn crate::disk::DiskFile,
    salt: u64,
    pos: u64,
    chunk: &mut Vec<(u64, AlignedVec)>,
    spans: &mut Vec<RecordSpan>,
) -> Result<u64, CompactError> {
    let frames: usize = chunk.iter().map(|(_, p)| frame_bytes(p.len())).sum();
    let header = ChunkHeader {
        lsn_first: chunk.first().map_or(0, |c| c.0),
        lsn_last: chunk.last().map_or(0, |c| c.0),
        frames_bytes: u32::try_from(frames).unwrap_or(u32::MAX),
        record_count: u32::try_from(chunk.len()).unwrap_or(u32::MAX),
    };
    let total = (CHUNK_HEADER_BYTES + frames)
        .next_multiple_of(usize::try_from(BLOCK_BYTES).unwrap_or(4096));
    let mut buf = file.alloc(total);
    let b = buf.as_bytes_mut();
    b.fill(0);
    if let Some(h) = b.get_mut(..CHUNK_HEADER_BYTES) {
        h.copy_from_slice(&header.encode(salt));
    }
    let mut at = CHUNK_HEADER_BYTES;
    let base = usize::try_from(pos).unwrap_or(usize::MAX);
    for (_, payload) in chunk.drain(..) {
        let n = frame_bytes(payload.len());
        if let Some(out) = b.get_mut(at..at + n) {
            let off = encode_frame(&payload, out);
            spans.push(archive::written(base + at + off, payload.len()));
        }
        at += n;
    }
    file.write_at(buf, pos).await.map_err(io_err(inner, &inner.dir))?;
    Ok(pos + total as u64)
}

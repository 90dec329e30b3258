//! A small generic durable journal: opaque records appended with group commit, read back in
//! order at open. The node keeps its two-phase-commit decisions here; storage knows nothing of
//! what a record means.
//!
//! ```text
//! journal file (named journal-<seq:016x>.jrn, created whole by rename after fdatasync)
//! +--------------------------------------------------------------+ 0
//! | journal header (32 bytes used, rest of the block zero)       |
//! |  magic "TESSJRN\0" | version u32 | crc u32 | seq u64 | salt u64 |
//! +--------------------------------------------------------------+ 4096
//! | chunk: one group-commit write, block-aligned, exactly as in  |
//! |  a fragment segment (chunk header, frames, zero padding);     |
//! |  "LSNs" number the file's records from 1, contiguously       |
//! +--------------------------------------------------------------+
//! | chunk ...                                                    |
//! +--------------------------------------------------------------+
//! | zeros up to the end of the file (preallocated, see below)    |
//! +--------------------------------------------------------------+
//! ```
//!
//! The header CRC covers bytes `0..12` and `16..32`. Reading stops at the first chunk that does
//! not check out: when only zeros follow, that is the clean end; otherwise, when no valid chunk
//! follows it, it is a torn tail (the last write, never acknowledged) and is dropped; when one
//! does, the journal is corrupt.
//!
//! Files are zero-filled ahead of the tail ([`JOURNAL_PREALLOC_BYTES`] at creation, again
//! whenever less than [`JOURNAL_PREALLOC_LOW_BYTES`] remain after a group commit), so an append
//! overwrites blocks already in the file: its fdatasync does not write the inode for a size
//! change, and its O_DIRECT write is not an extending one. Files of format version 1 written
//! before preallocation (no zeros after the last chunk) read exactly as before; a reader
//! without the zero rule reads a preallocated file's records all the same, calling the zeros a
//! torn tail, so the version stays 1. Opening always copies
//! the records recovered into a fresh file (`seq + 1`) and removes the old one, so a torn tail
//! never stays under later appends. [`Journal::rewrite`] does the same with the records the
//! caller still needs, which is how a journal forgets.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::disk::{ChunkIo, Disk, DiskFile, DmaDisk};
use crate::error::JournalError;
use crate::format::{ChunkHeader, Damage, decode_frame, encode_frame, frame_bytes};
use crate::limits::{
    BLOCK_BYTES, CHUNK_HEADER_BYTES, JOURNAL_CHUNK_BYTES_MAX, JOURNAL_PREALLOC_BYTES,
    JOURNAL_PREALLOC_LOW_BYTES, JOURNAL_QUEUE_RECORDS_MAX, JOURNAL_RECORD_BYTES_MAX,
};

/// The journal format version.
pub const JOURNAL_VERSION: u32 = 1;

/// The magic at the start of a journal file.
pub const JOURNAL_MAGIC: [u8; 8] = *b"TESSJRN\0";

/// Bytes of the header that are used (the rest of its block is zero).
pub const JOURNAL_HEADER_USED_BYTES: usize = 32;

const HEADER_BLOCK: usize = 4096;
const _: () = assert!(HEADER_BLOCK as u64 == BLOCK_BYTES);

/// What a journal file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalImage {
    /// The file's sequence number.
    pub seq: u64,
    /// The file's salt (chunk headers of other files do not pass).
    pub salt: u64,
    /// The records, in append order.
    pub records: Vec<Vec<u8>>,
    /// Offset after the last valid chunk.
    pub end: u64,
    /// Whether a torn tail was dropped (zeros after the last chunk are no torn tail).
    pub torn: bool,
}

fn crc(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

fn encode_header(seq: u64, salt: u64) -> [u8; JOURNAL_HEADER_USED_BYTES] {
    let mut b = [0u8; JOURNAL_HEADER_USED_BYTES];
    b[0..8].copy_from_slice(&JOURNAL_MAGIC);
    b[8..12].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
    b[16..24].copy_from_slice(&seq.to_le_bytes());
    b[24..32].copy_from_slice(&salt.to_le_bytes());
    let c = crc(&[&b[0..12], &b[16..32]]);
    b[12..16].copy_from_slice(&c.to_le_bytes());
    b
}

/// Reads a whole journal file image. Never panics, whatever the bytes (fuzzed).
pub fn read_journal(bytes: &[u8]) -> Result<JournalImage, (u64, Damage)> {
    let h = bytes.get(..HEADER_BLOCK).ok_or((0, Damage::ShortFile))?;
    if h.get(0..8) != Some(&JOURNAL_MAGIC[..]) {
        return Err((0, Damage::HeaderMagic));
    }
    let version = u32_at(h, 8).ok_or((0, Damage::ShortFile))?;
    let stored = u32_at(h, 12).ok_or((0, Damage::ShortFile))?;
    let (Some(a), Some(b)) = (h.get(0..12), h.get(16..JOURNAL_HEADER_USED_BYTES)) else {
        return Err((0, Damage::ShortFile));
    };
    if stored != crc(&[a, b]) {
        return Err((0, Damage::HeaderCrc));
    }
    if version != JOURNAL_VERSION {
        return Err((0, Damage::HeaderVersion(version)));
    }
    if h.get(JOURNAL_HEADER_USED_BYTES..).is_some_and(|rest| rest.iter().any(|&x| x != 0)) {
        return Err((0, Damage::Padding));
    }
    let seq = u64_at(h, 16).ok_or((0, Damage::ShortFile))?;
    let salt = u64_at(h, 24).ok_or((0, Damage::ShortFile))?;
    let mut records = Vec::new();
    let mut at = HEADER_BLOCK;
    let mut next = 1u64;
    loop {
        if at >= bytes.len() {
            return Ok(JournalImage { seq, salt, records, end: at as u64, torn: false });
        }
        match read_chunk(bytes, at, salt, next) {
            Ok((chunk, end)) => {
                next += chunk.len() as u64;
                records.extend(chunk);
                at = end;
            }
            Err(damage) => {
                if bytes.get(at..).is_some_and(|rest| rest.iter().all(|&x| x == 0)) {
                    cov_mark::hit!(journal_zeroed_end);
                    return Ok(JournalImage { seq, salt, records, end: at as u64, torn: false });
                }
                // Torn tail, unless a valid chunk with later records follows.
                let mut probe = at + HEADER_BLOCK;
                while probe < bytes.len() {
                    if let Some(c) = ChunkHeader::decode(bytes, probe, salt)
                        && c.lsn_first >= next
                    {
                        cov_mark::hit!(journal_damage_before_valid_chunk);
                        return Err((at as u64, damage));
                    }
                    probe += HEADER_BLOCK;
                }
                cov_mark::hit!(journal_torn_tail);
                return Ok(JournalImage { seq, salt, records, end: at as u64, torn: true });
            }
        }
    }
}

/// One chunk at `at`: its records and the offset after its padding.
fn read_chunk(
    bytes: &[u8],
    at: usize,
    salt: u64,
    next: u64,
) -> Result<(Vec<Vec<u8>>, usize), Damage> {
    let header = ChunkHeader::decode(bytes, at, salt).ok_or(Damage::ChunkHeader)?;
    if header.lsn_first != next
        || header.lsn_last - header.lsn_first + 1 != u64::from(header.record_count)
    {
        return Err(Damage::LsnOrder);
    }
    let frames = usize::try_from(header.frames_bytes).map_err(|_| Damage::FrameLength)?;
    let limit = at
        .checked_add(CHUNK_HEADER_BYTES)
        .and_then(|x| x.checked_add(frames))
        .ok_or(Damage::FrameLength)?;
    if limit > bytes.len() || limit - at > JOURNAL_CHUNK_BYTES_MAX {
        return Err(Damage::FrameLength);
    }
    let mut records = Vec::new();
    let mut pos = at + CHUNK_HEADER_BYTES;
    for _ in 0..header.record_count {
        let f = decode_frame(bytes, pos, limit)?;
        if f.len > JOURNAL_RECORD_BYTES_MAX {
            return Err(Damage::FrameLength);
        }
        records.push(bytes.get(f.offset..f.offset + f.len).ok_or(Damage::FrameLength)?.to_vec());
        pos = f.end;
    }
    if pos != limit {
        return Err(Damage::FrameLength);
    }
    let end = limit.next_multiple_of(HEADER_BLOCK);
    let pad = bytes.get(limit..end).ok_or(Damage::FrameLength)?;
    if pad.iter().any(|&x| x != 0) {
        return Err(Damage::Padding);
    }
    Ok((records, end))
}

/// The bytes of one chunk holding `records` (numbered from `first`), padded to a block.
fn encode_chunk(records: &[Vec<u8>], first: u64, salt: u64, out: &mut [u8]) {
    let frames: usize = records.iter().map(|r| frame_bytes(r.len())).sum();
    let header = ChunkHeader {
        lsn_first: first,
        lsn_last: first + records.len() as u64 - 1,
        frames_bytes: u32::try_from(frames).unwrap_or(u32::MAX),
        record_count: u32::try_from(records.len()).unwrap_or(u32::MAX),
    };
    out.fill(0);
    if let Some(h) = out.get_mut(..CHUNK_HEADER_BYTES) {
        h.copy_from_slice(&header.encode(salt));
    }
    let mut at = CHUNK_HEADER_BYTES;
    for r in records {
        let n = frame_bytes(r.len());
        if let Some(slot) = out.get_mut(at..at + n) {
            encode_frame(r, slot);
        }
        at += n;
    }
}

fn chunk_len(records: &[Vec<u8>]) -> usize {
    let frames: usize = records.iter().map(|r| frame_bytes(r.len())).sum();
    (CHUNK_HEADER_BYTES + frames).next_multiple_of(HEADER_BLOCK)
}

/// Where an appender waits for its record's fdatasync.
#[derive(Default)]
struct Slot {
    result: RefCell<Option<Result<(), JournalError>>>,
    waker: Cell<Option<Waker>>,
}

impl Slot {
    fn complete(&self, result: Result<(), JournalError>) {
        *self.result.borrow_mut() = Some(result);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    async fn wait(&self) -> Result<(), JournalError> {
        std::future::poll_fn(|cx| match self.result.borrow_mut().take() {
            Some(r) => Poll::Ready(r),
            None => {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

struct Tail {
    file: Rc<dyn DiskFile>,
    path: PathBuf,
    seq: u64,
    salt: u64,
    /// Offset of the next chunk.
    pos: u64,
    /// Number of the next record.
    next: u64,
    /// Bytes in the file: everything past `pos` is zeros.
    allocated: u64,
}

/// A durable journal of opaque records in one directory, used by one executor.
pub struct Journal {
    dir: PathBuf,
    disk: Rc<dyn Disk>,
    tail: RefCell<Option<Tail>>,
    queue: RefCell<Vec<(Vec<u8>, Rc<Slot>)>>,
    leader: Cell<bool>,
    /// Held around each write + fdatasync and around a rewrite.
    io: glommio::sync::Semaphore,
    fatal: RefCell<Option<String>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("dir", &self.dir).finish_non_exhaustive()
    }
}

fn file_name(seq: u64) -> String {
    format!("journal-{seq:016x}.jrn")
}

fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("journal-")?.strip_suffix(".jrn")?;
    u64::from_str_radix(hex, 16).ok()
}

impl Journal {
    /// Opens (or creates) the journal in `dir` on the real disk. Returns the records recovered.
    pub async fn open(dir: &Path) -> Result<(Journal, Vec<Vec<u8>>), JournalError> {
        Journal::open_with(dir, Rc::new(DmaDisk)).await
    }

    /// As [`Journal::open`], on the given disk. Listing and reading the old file are blocking
    /// calls, made once, at open.
    pub async fn open_with(
        dir: &Path,
        disk: Rc<dyn Disk>,
    ) -> Result<(Journal, Vec<Vec<u8>>), JournalError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(seq) = parse_name(&name) {
                found.push((seq, entry.path()));
            } else if name.ends_with(".tmp") {
                // A rewrite that did not finish: its file was never renamed into place.
                std::fs::remove_file(entry.path()).map_err(io(&entry.path()))?;
            }
        }
        found.sort();
        let (records, seq) = match found.last() {
            Some((seq, path)) => {
                let bytes = std::fs::read(path).map_err(io(path))?;
                let image = read_journal(&bytes).map_err(|(offset, what)| {
                    JournalError::Corruption { path: path.clone(), offset, what }
                })?;
                if image.torn {
                    tracing::info!(path = %path.display(), end = image.end, "journal torn tail dropped");
                }
                (image.records, *seq)
            }
            None => (Vec::new(), 0),
        };
        let journal = Journal {
            dir: dir.to_path_buf(),
            disk,
            tail: RefCell::new(None),
            queue: RefCell::new(Vec::new()),
            leader: Cell::new(false),
            io: glommio::sync::Semaphore::new(1),
            fatal: RefCell::new(None),
        };
        journal.install(seq + 1, &records).await?;
        for (_, old) in &found {
            journal.disk.remove(old).await.map_err(io(old))?;
        }
        journal.disk.sync_dir(dir).await.map_err(io(dir))?;
        tracing::info!(dir = %dir.display(), records = records.len(), "journal opened");
        Ok((journal, records))
    }

    /// Writes a new file `seq` holding `records`, durably, and makes it the tail.
    async fn install(&self, seq: u64, records: &[Vec<u8>]) -> Result<(), JournalError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, source }
        };
        let salt = crate::log::new_salt() ^ seq.rotate_left(32);
        let path = self.dir.join(file_name(seq));
        let tmp = self.dir.join(format!("{}.tmp", file_name(seq)));
        let file = self.disk.create(&tmp).await.map_err(io(&tmp))?;
        let mut pos = 0u64;
        let mut buf = file.alloc(HEADER_BLOCK);
        {
            let b = buf.as_bytes_mut();
            b.fill(0);
            if let Some(h) = b.get_mut(..JOURNAL_HEADER_USED_BYTES) {
                h.copy_from_slice(&encode_header(seq, salt));
            }
        }
        file.write_at(buf, pos).await.map_err(io(&tmp))?;
        pos += BLOCK_BYTES;
        let mut next = 1u64;
        for group in groups(records) {
            let len = chunk_len(group);
            let mut buf = file.alloc(len);
            encode_chunk(group, next, salt, buf.as_bytes_mut());
            file.write_at(buf, pos).await.map_err(io(&tmp))?;
            pos += len as u64;
            next += group.len() as u64;
        }
        zero_fill(file.as_ref(), pos).await.map_err(io(&tmp))?;
        let allocated = pos + JOURNAL_PREALLOC_BYTES as u64;
        file.fdatasync().await.map_err(io(&tmp))?;
        self.disk.rename(&tmp, &path).await.map_err(io(&tmp))?;
        self.disk.sync_dir(&self.dir).await.map_err(io(&self.dir))?;
        let old =
            self.tail.borrow_mut().replace(Tail { file, path, seq, salt, pos, next, allocated });
        if let Some(old) = old {
            let _ = old.file.close().await;
            self.disk.remove(&old.path).await.map_err(io(&old.path))?;
            self.disk.sync_dir(&self.dir).await.map_err(io(&self.dir))?;
        }
        Ok(())
    }

    /// Appends one record; returns once it is durable. Concurrent appends share one write and
    /// one fdatasync (group commit).
    pub async fn append(&self, record: &[u8]) -> Result<(), JournalError> {
        if record.is_empty() || record.len() > JOURNAL_RECORD_BYTES_MAX {
            return Err(JournalError::RecordSize {
                bytes: record.len(),
                max: JOURNAL_RECORD_BYTES_MAX,
            });
        }
        if let Some(reason) = self.fatal.borrow().clone() {
            return Err(JournalError::Fatal { reason });
        }
        let slot = Rc::new(Slot::default());
        {
            let mut q = self.queue.borrow_mut();
            if q.len() >= JOURNAL_QUEUE_RECORDS_MAX {
                return Err(JournalError::QueueFull { max: JOURNAL_QUEUE_RECORDS_MAX });
            }
            q.push((record.to_vec(), slot.clone()));
        }
        if !self.leader.replace(true) {
            self.lead().await;
            self.leader.set(false);
        }
        slot.wait().await
    }

    /// Writes queued records until the queue is empty.
    async fn lead(&self) {
        loop {
            let Ok(permit) = self.io.acquire_permit(1).await else { return };
            let batch: Vec<(Vec<u8>, Rc<Slot>)> = {
                let mut q = self.queue.borrow_mut();
                let mut bytes = CHUNK_HEADER_BYTES;
                let mut n = 0;
                for (r, _) in q.iter() {
                    bytes += frame_bytes(r.len());
                    if bytes.next_multiple_of(HEADER_BLOCK) > JOURNAL_CHUNK_BYTES_MAX {
                        break;
                    }
                    n += 1;
                }
                q.drain(..n).collect()
            };
            if batch.is_empty() {
                return;
            }
            let result = self.write_batch(&batch).await;
            drop(permit);
            if let Err(e) = &result {
                self.stop(e);
            }
            for (_, slot) in &batch {
                slot.complete(match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(JournalError::Fatal { reason: e.to_string() }),
                });
            }
            if result.is_err() {
                self.fail_queued();
                return;
            }
            // The batch is acknowledged; zeros written now (not synced: the next batch's
            // fdatasync carries them and the new size) delay only the next batch, once per
            // JOURNAL_PREALLOC_BYTES of chunks.
            if let Err(e) = self.extend_if_low().await {
                self.stop(&e);
                self.fail_queued();
                return;
            }
        }
    }

    /// Marks the journal stopped after a failed write.
    fn stop(&self, e: &JournalError) {
        let reason = e.to_string();
        tracing::error!(%reason, "journal write failed; journal stops");
        *self.fatal.borrow_mut() = Some(reason);
    }

    /// Fails every queued append (the journal stopped).
    fn fail_queued(&self) {
        let rest: Vec<_> = self.queue.borrow_mut().drain(..).collect();
        for (_, slot) in rest {
            slot.complete(Err(JournalError::Fatal {
                reason: self.fatal.borrow().clone().unwrap_or_default(),
            }));
        }
    }

    async fn write_batch(&self, batch: &[(Vec<u8>, Rc<Slot>)]) -> Result<(), JournalError> {
        let records: Vec<Vec<u8>> = batch.iter().map(|(r, _)| r.clone()).collect();
        let (file, path, pos, next, salt) = {
            let tail = self.tail.borrow();
            let Some(t) = tail.as_ref() else {
                return Err(JournalError::Fatal { reason: "journal is closed".to_owned() });
            };
            (t.file.clone(), t.path.clone(), t.pos, t.next, t.salt)
        };
        let len = chunk_len(&records);
        let mut buf = file.alloc(len);
        encode_chunk(&records, next, salt, buf.as_bytes_mut());
        let io = |source| JournalError::Io { path: path.clone(), source };
        // The default chunk path, as the fragment logs' (`FragmentOptions::chunk_io`): one job
        // on the blocking thread, the executor does not wake between write and fdatasync.
        file.write_and_sync(buf, pos, ChunkIo::default()).await.map_err(io)?;
        if let Some(t) = self.tail.borrow_mut().as_mut() {
            t.pos = pos + len as u64;
            t.next = next + records.len() as u64;
            t.allocated = t.allocated.max(t.pos);
        }
        Ok(())
    }

    /// Writes [`JOURNAL_PREALLOC_BYTES`] of zeros past the end of the file when fewer than
    /// [`JOURNAL_PREALLOC_LOW_BYTES`] remain past the tail.
    async fn extend_if_low(&self) -> Result<(), JournalError> {
        let _permit = self
            .io
            .acquire_permit(1)
            .await
            .map_err(|e| JournalError::Fatal { reason: e.to_string() })?;
        let (file, path, allocated) = {
            let tail = self.tail.borrow();
            let Some(t) = tail.as_ref() else { return Ok(()) };
            if t.allocated - t.pos >= JOURNAL_PREALLOC_LOW_BYTES as u64 {
                return Ok(());
            }
            (t.file.clone(), t.path.clone(), t.allocated)
        };
        cov_mark::hit!(journal_extended);
        zero_fill(file.as_ref(), allocated)
            .await
            .map_err(|source| JournalError::Io { path, source })?;
        if let Some(t) = self.tail.borrow_mut().as_mut() {
            t.allocated = allocated + JOURNAL_PREALLOC_BYTES as u64;
        }
        Ok(())
    }

    /// Replaces the journal's content with `keep` (durably, atomically: a crash leaves either
    /// the old file or the new one). Appends wait meanwhile. This is how the journal forgets
    /// records the caller no longer needs.
    pub async fn rewrite(&self, keep: &[Vec<u8>]) -> Result<(), JournalError> {
        self.rewrite_with(|| keep.to_vec()).await
    }

    /// Like [`Journal::rewrite`], with the records to keep computed by `keep` once no append
    /// can be written any more until the rewrite is done: every record acknowledged before
    /// `keep` runs is in the old file, so a caller that decides from its own state what to
    /// keep loses nothing appended meanwhile (records queued but not written yet go to the
    /// new file after it).
    pub async fn rewrite_with(
        &self,
        keep: impl FnOnce() -> Vec<Vec<u8>>,
    ) -> Result<(), JournalError> {
        let _permit = self
            .io
            .acquire_permit(1)
            .await
            .map_err(|e| JournalError::Fatal { reason: e.to_string() })?;
        if let Some(reason) = self.fatal.borrow().clone() {
            return Err(JournalError::Fatal { reason });
        }
        let keep = keep();
        if let Some(k) = keep.iter().find(|k| k.is_empty() || k.len() > JOURNAL_RECORD_BYTES_MAX) {
            return Err(JournalError::RecordSize { bytes: k.len(), max: JOURNAL_RECORD_BYTES_MAX });
        }
        let seq = self.tail.borrow().as_ref().map_or(1, |t| t.seq + 1);
        self.install(seq, &keep).await
    }

    /// Bytes of the current file's header and chunks (not the zeros preallocated after them).
    pub fn bytes(&self) -> u64 {
        self.tail.borrow().as_ref().map_or(0, |t| t.pos)
    }

    /// The current file and the offset after its last chunk written: what a copy of the
    /// journal taken now holds (the zeros preallocated past it would take in appends made
    /// after the copy started). `None` once closed.
    pub fn tail_file(&self) -> Option<(PathBuf, u64)> {
        self.tail.borrow().as_ref().map(|t| (t.path.clone(), t.pos))
    }

    /// Closes the file; appends fail afterwards.
    pub async fn close(&self) {
        let _permit = self.io.acquire_permit(1).await;
        let tail = self.tail.borrow_mut().take();
        if let Some(t) = tail {
            let _ = t.file.close().await;
        }
    }
}

/// Reads the records of the journal in `dir` without changing anything (blocking std::fs: for
/// a caller that needs them before any executor runs). A missing directory holds no records.
pub fn read_dir_records(dir: &Path) -> Result<Vec<Vec<u8>>, JournalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| JournalError::Io { path, source }
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(dir)(e)),
    };
    let mut newest: Option<(u64, PathBuf)> = None;
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        if let Some(seq) = parse_name(&entry.file_name().to_string_lossy())
            && newest.as_ref().is_none_or(|(s, _)| seq > *s)
        {
            newest = Some((seq, entry.path()));
        }
    }
    let Some((_, path)) = newest else { return Ok(Vec::new()) };
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    let image = read_journal(&bytes).map_err(|(offset, what)| JournalError::Corruption {
        path: path.clone(),
        offset,
        what,
    })?;
    Ok(image.records)
}

/// Writes [`JOURNAL_PREALLOC_BYTES`] of zeros at `at` (not synced), with the disk's zero
/// writer (on the real disk: from a static block of zeros, no buffer zeroed per extension).
async fn zero_fill(file: &dyn DiskFile, at: u64) -> std::io::Result<()> {
    file.write_zeros_now(at, JOURNAL_PREALLOC_BYTES).await
}

/// Splits records into groups that each fit one chunk.
fn groups(records: &[Vec<u8>]) -> Vec<&[Vec<u8>]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = CHUNK_HEADER_BYTES;
    for (i, r) in records.iter().enumerate() {
        let more = frame_bytes(r.len());
        if i > start && (bytes + more).next_multiple_of(HEADER_BLOCK) > JOURNAL_CHUNK_BYTES_MAX {
            if let Some(g) = records.get(start..i) {
                out.push(g);
            }
            start = i;
            bytes = CHUNK_HEADER_BYTES;
        }
        bytes += more;
    }
    if let Some(g) = records.get(start..).filter(|g| !g.is_empty()) {
        out.push(g);
    }
    out
}

/// The body of the `journal_reader` fuzz target: any bytes, no panic, and whatever is read
/// back re-encodes to a file that reads the same.
pub fn fuzz_journal_reader(bytes: &[u8]) {
    if let Ok(image) = read_journal(bytes) {
        let mut again = vec![0u8; HEADER_BLOCK];
        if let Some(h) = again.get_mut(..JOURNAL_HEADER_USED_BYTES) {
            h.copy_from_slice(&encode_header(image.seq, image.salt));
        }
        let mut next = 1;
        for group in groups(&image.records) {
            let mut chunk = vec![0u8; chunk_len(group)];
            encode_chunk(group, next, image.salt, &mut chunk);
            next += group.len() as u64;
            again.extend_from_slice(&chunk);
        }
        let reread = read_journal(&again).map(|i| i.records);
        assert_eq!(reread.as_ref().ok(), Some(&image.records), "journal re-encoding differs");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(records: &[Vec<u8>]) -> Vec<u8> {
        let salt = 0x5eed;
        let mut out = vec![0u8; HEADER_BLOCK];
        out[..JOURNAL_HEADER_USED_BYTES].copy_from_slice(&encode_header(7, salt));
        // One chunk per record, as separate appends make.
        for (i, r) in records.iter().enumerate() {
            let one = std::slice::from_ref(r);
            let mut chunk = vec![0u8; chunk_len(one)];
            encode_chunk(one, i as u64 + 1, salt, &mut chunk);
            out.extend_from_slice(&chunk);
        }
        out
    }

    fn recs(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("record {i}").into_bytes()).collect()
    }

    // Checks that a well-formed image reads back every record in order.
    #[test]
    fn unit_reads_back_records() {
        let r = recs(3);
        let img = read_journal(&image(&r)).expect("valid");
        assert_eq!(img.records, r);
        assert!(!img.torn);
        assert_eq!(img.seq, 7);
    }

    // Cuts the image at every offset inside the last chunk: always a torn tail that drops the
    // last record only, never an error; a cut inside earlier chunks drops those records.
    #[test]
    fn unit_torn_tail_at_every_offset() {
        cov_mark::check!(journal_torn_tail);
        let r = recs(3);
        let full = image(&r);
        for cut in HEADER_BLOCK..full.len() {
            let img = read_journal(&full[..cut]).expect("a cut is a torn tail");
            let whole_chunks = (cut - HEADER_BLOCK) / HEADER_BLOCK;
            assert_eq!(img.records, r[..whole_chunks], "cut at {cut}");
            assert_eq!(
                img.torn,
                !(cut - HEADER_BLOCK).is_multiple_of(HEADER_BLOCK),
                "cut at {cut}"
            );
        }
        assert!(read_journal(&full[..HEADER_BLOCK - 1]).is_err(), "a short header is damage");
    }

    /// Flips every bit of the first 64 bytes of each of the 3 chunks of `full` (holding `r`):
    /// a flip in the last chunk is a torn tail keeping the first two records, in an earlier
    /// chunk it is corruption.
    fn flip_chunk_heads(full: &[u8], r: &[Vec<u8>]) {
        for chunk in 0..3 {
            let base = HEADER_BLOCK * (chunk + 1);
            for byte in base..base + 64 {
                for bit in 0..8 {
                    let mut b = full.to_vec();
                    b[byte] ^= 1 << bit;
                    match read_journal(&b) {
                        Ok(img) => {
                            assert_eq!(chunk, 2, "flip at {byte}:{bit} passed in chunk {chunk}");
                            assert_eq!(img.records, r[..2]);
                            assert!(img.torn);
                        }
                        Err(_) => assert!(chunk < 2, "flip at {byte}:{bit} in the last chunk"),
                    }
                }
            }
        }
    }

    // Flips every bit of the first 64 bytes of each chunk and of the header: a flip in the
    // last chunk is a torn tail, in an earlier chunk or the header it is corruption.
    #[test]
    fn unit_bit_flips() {
        cov_mark::check!(journal_damage_before_valid_chunk);
        let r = recs(3);
        let full = image(&r);
        flip_chunk_heads(&full, &r);
        for byte in 0..JOURNAL_HEADER_USED_BYTES {
            let mut b = full.clone();
            b[byte] ^= 1;
            assert!(read_journal(&b).is_err(), "header flip at {byte} passed");
        }
    }

    /// `image` followed by the zeros a preallocated file holds past its last chunk.
    fn preallocated(records: &[Vec<u8>]) -> Vec<u8> {
        zero_filled(records, JOURNAL_PREALLOC_BYTES)
    }

    // The image of `records` followed by `zeros` zero bytes.
    fn zero_filled(records: &[Vec<u8>], zeros: usize) -> Vec<u8> {
        let mut out = image(records);
        out.resize(out.len() + zeros, 0);
        out
    }

    // Checks that zeros after the last chunk are the clean end of a preallocated file, not a
    // torn tail, also for a file holding no chunk yet.
    #[test]
    fn unit_preallocated_zeros_are_clean_end() {
        cov_mark::check!(journal_zeroed_end);
        let r = recs(3);
        let img = read_journal(&preallocated(&r)).expect("valid");
        assert_eq!(img.records, r);
        assert!(!img.torn);
        assert_eq!(img.end, image(&r).len() as u64);
        let empty = read_journal(&preallocated(&[])).expect("valid");
        assert!(empty.records.is_empty() && !empty.torn);
        assert_eq!(empty.end, HEADER_BLOCK as u64);
    }

    // Keeps only the first `cut` bytes of a preallocated image's chunks, zeros after (a write
    // that reached the disk in part, over preallocated zeros): each chunk whose bytes all
    // survived is read, a chunk with some of its bytes is a torn tail, never an error.
    #[test]
    fn unit_preallocated_torn_tail_at_every_offset() {
        let r = recs(3);
        // A few blocks of zeros stand for the preallocated megabyte: the reader treats any
        // length of zeros alike, and copying a megabyte per cut took a minute.
        let full = zero_filled(&r, 4 * HEADER_BLOCK);
        let chunks_end = image(&r).len();
        // Offset after the last non-zero byte of each chunk: its bytes beyond are zeros anyway.
        let data_end: Vec<usize> = (0..r.len())
            .map(|i| {
                let base = HEADER_BLOCK * (i + 1);
                let block = &full[base..base + HEADER_BLOCK];
                base + block.iter().rposition(|&x| x != 0).map_or(0, |p| p + 1)
            })
            .collect();
        for cut in HEADER_BLOCK..=chunks_end {
            let mut b = full.clone();
            b[cut..].fill(0);
            let img = read_journal(&b).expect("a cut is a torn tail");
            let whole = data_end.iter().take_while(|&&e| e <= cut).count();
            assert_eq!(img.records, r[..whole], "cut at {cut}");
            let base = HEADER_BLOCK * (whole + 1);
            assert_eq!(img.torn, cut > base, "cut at {cut}");
        }
    }

    // Flips bits in each chunk of a preallocated image and in the zeros after it: damage in
    // the last chunk or in the zeros is a torn tail that keeps every earlier record, damage
    // in an earlier chunk is corruption.
    #[test]
    fn unit_preallocated_bit_flips() {
        let r = recs(3);
        let full = preallocated(&r);
        flip_chunk_heads(&full, &r);
        let zeros_from = image(&r).len();
        for byte in [zeros_from, zeros_from + 1, zeros_from + 5000, full.len() - 1] {
            let mut b = full.clone();
            b[byte] = 0x80;
            let img = read_journal(&b).expect("junk after the last chunk is a torn tail");
            assert_eq!(img.records, r);
            assert!(img.torn, "junk at {byte}");
        }
    }

    // Checks that a valid chunk written after zeros (a lost write, then a later one) is
    // corruption, not a clean end: the zero rule needs zeros to the end of the file.
    #[test]
    fn unit_valid_chunk_after_zeros_is_corruption() {
        let r = recs(3);
        let mut b = preallocated(&r);
        b[HEADER_BLOCK * 2..HEADER_BLOCK * 3].fill(0);
        assert!(read_journal(&b).is_err());
    }

    // Checks the fuzz body on a valid image and on junk.
    #[test]
    fn unit_fuzz_body_round_trips() {
        fuzz_journal_reader(&image(&recs(5)));
        fuzz_journal_reader(&preallocated(&recs(5)));
        fuzz_journal_reader(&[0u8; 5000]);
        fuzz_journal_reader(b"TESSJRN\0");
    }

    // Checks chunk grouping keeps every record, in order, each group within a chunk.
    #[test]
    fn unit_groups_fit_chunks() {
        let big: Vec<Vec<u8>> = (1..=40u8).map(|i| vec![i; 60_000]).collect();
        let gs = groups(&big);
        assert!(gs.len() > 1);
        assert_eq!(gs.iter().map(|g| g.len()).sum::<usize>(), 40);
        assert!(gs.iter().all(|g| chunk_len(g) <= JOURNAL_CHUNK_BYTES_MAX));
    }
}

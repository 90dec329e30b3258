//! One segment file: its header, its read-only shared mapping, and how it is created.
//!
//! **Reading the active tail.** Every segment, the active one included, is read through one
//! `MAP_SHARED` read-only mapping of its full preallocated size, made once, so the mapping never
//! moves and references into it stay valid for the life of the `Segment`. The log writes the
//! same file with O_DIRECT. Linux keeps the two coherent: a direct write first writes back and
//! then invalidates the page-cache pages of its range (unmapping them from every mapping), and
//! invalidates them again when it completes, so the next access through the mapping faults the
//! new bytes in from disk. The log reads a record through the mapping only after the write (and
//! the fdatasync) that carries it completed, and a block holding a chunk is never written again.
//! The test `mapping_sees_direct_writes` checks this on the real file system.
//!
//! **Keeping the active segment's future blocks out of the page cache.** A fault on a mapping
//! normally reads around the faulting page (the device's read-ahead, 8 MiB here), which pulls
//! the zeroed blocks ahead of the tail into the page cache. A direct write over cached pages
//! cannot be issued without blocking (io_uring gets `EAGAIN` from `kiocb_invalidate_pages`), so
//! io_uring hands it to an io-wq worker thread, which invalidates the pages and unmaps them
//! from every mapping (a TLB shootdown on every CPU running the process). So the active
//! segment is mapped with `MADV_RANDOM` (a fault reads only its own page; `set_appending`),
//! and each chunk, once durable, is read into the page cache ahead of its first read with
//! `MADV_WILLNEED` on exactly its blocks (`written`), which starts the reads and returns. A
//! sealed segment goes back to normal read-around. These are hints: a failed `madvise` costs
//! speed, never correctness, and is only logged.

use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Poll, Waker};

use memmap2::{Advice, Mmap};

use crate::archive::{self, RecordSpan};
use crate::disk::{Disk, DiskFile};
use crate::format::{SEGMENT_HEADER_USED_BYTES, SegmentHeader};
use crate::limits::{BLOCK_BYTES, SPARE_FILL_PIECE_BYTES};
use crate::record::ArchivedRecord;

/// Bytes written per call while zero-filling a new segment.
const ZERO_FILL_BYTES: usize = 1 << 20;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A mapped segment file.
pub struct Segment {
    uid: u64,
    path: PathBuf,
    header: SegmentHeader,
    map: Mmap,
    /// Frame bytes of the records applied from this segment (for dead-byte accounting).
    record_bytes: Cell<u64>,
    /// Debug builds: spans (offset, length) already validated by a read of this segment.
    #[cfg(debug_assertions)]
    checked: std::cell::RefCell<std::collections::HashSet<(u64, usize)>>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("path", &self.path).field("header", &self.header).finish()
    }
}

/// The file name of segment `seq`, generation `generation`.
pub fn file_name(seq: u64, generation: u64) -> String {
    format!("{seq:016x}-{generation:04x}.seg")
}

/// Parses a segment file name into (seq, generation).
pub fn parse_file_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".seg")?;
    let (seq, generation) = stem.split_once('-')?;
    if seq.len() != 16 || generation.len() < 4 {
        return None;
    }
    Some((u64::from_str_radix(seq, 16).ok()?, u64::from_str_radix(generation, 16).ok()?))
}

impl Segment {
    /// Maps an existing segment file (blocking: called at open and after creating a file).
    pub fn map(path: &Path, header: SegmentHeader) -> io::Result<Segment> {
        let file = std::fs::File::open(path)?;
        // SAFETY: the mapping is read-only and shared. Bytes of this file that hold records
        // are never modified after their write completed (chunks go to zeroed blocks that are
        // never rewritten; compaction writes new files; torn-tail cleanup happens before any
        // record past the tail is read). Other processes do not write our segment files.
        let map = unsafe { Mmap::map(&file)? };
        Ok(Segment::from_map(map, path.to_path_buf(), header))
    }

    /// Maps a file and reads its header (recovery).
    pub fn map_unchecked_header(path: &Path) -> io::Result<(Mmap, PathBuf)> {
        let file = std::fs::File::open(path)?;
        // SAFETY: as in `map`.
        let map = unsafe { Mmap::map(&file)? };
        Ok((map, path.to_path_buf()))
    }

    /// Wraps an existing mapping whose header was decoded.
    pub fn from_map(map: Mmap, path: PathBuf, header: SegmentHeader) -> Segment {
        Segment {
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            path,
            header,
            map,
            record_bytes: Cell::new(0),
            #[cfg(debug_assertions)]
            checked: std::cell::RefCell::default(),
        }
    }

    /// A process-wide unique number.
    pub fn uid(&self) -> u64 {
        self.uid
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header.
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// The whole mapped file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Size of the file.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Whether the file is empty (never, for a valid segment).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Frame bytes of the records applied from this segment.
    pub fn record_bytes(&self) -> u64 {
        self.record_bytes.get()
    }

    /// Counts `bytes` more record bytes in this segment.
    pub fn add_record_bytes(&self, bytes: u64) {
        self.record_bytes.set(self.record_bytes.get() + bytes);
    }

    /// Whether the log appends to this segment (see the module comment): `MADV_RANDOM` while it
    /// does, normal read-around once it is sealed. Turning it on also drops the page-cache pages
    /// past `durable_end` that a read of the file (recovery's scan) brought in, so the first
    /// chunks after opening do not find cached zeros in their way.
    pub fn set_appending(&self, appending: bool, durable_end: u64) {
        let advice = if appending { Advice::Random } else { Advice::Normal };
        hint(self.map.advise(advice), "MADV_RANDOM/NORMAL", &self.path);
        if appending {
            self.drop_cached_after(durable_end);
        }
    }

    /// Starts reading the chunk just made durable at `offset` (`len` bytes) into the page cache,
    /// so the first read of one of its records does not wait for the disk. Does not block on
    /// the reads.
    pub fn written(&self, offset: u64, len: u64) {
        let (Ok(offset), Ok(len)) = (usize::try_from(offset), usize::try_from(len)) else { return };
        if offset.saturating_add(len) > self.map.len() {
            return;
        }
        hint(self.map.advise_range(Advice::WillNeed, offset, len), "MADV_WILLNEED", &self.path);
    }

    /// Drops this file's cached pages from `offset` (rounded up to a block) to its end: they
    /// hold no record, only zeros (or a torn tail already cut off).
    fn drop_cached_after(&self, offset: u64) {
        let start = offset.next_multiple_of(BLOCK_BYTES);
        let Ok(start_at) = usize::try_from(start) else { return };
        if start_at >= self.map.len() {
            return;
        }
        // SAFETY: MADV_DONTNEED on a shared read-only file mapping only removes this process's
        // page-table entries for the range; the next access faults the file's bytes in again.
        // No reference into the range exists: it lies past the last record.
        let zapped = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                start_at,
                self.map.len() - start_at,
            )
        };
        hint(zapped, "MADV_DONTNEED", &self.path);
        let dropped = std::fs::File::open(&self.path).and_then(|file| {
            use std::os::fd::AsRawFd;
            let len = i64::try_from(self.len() - start).unwrap_or(i64::MAX);
            let start = i64::try_from(start).unwrap_or(i64::MAX);
            // SAFETY: a plain system call on a file descriptor this function owns.
            let rc = unsafe {
                libc::posix_fadvise(file.as_raw_fd(), start, len, libc::POSIX_FADV_DONTNEED)
            };
            if rc == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(rc)) }
        });
        hint(dropped, "POSIX_FADV_DONTNEED", &self.path);
    }

    /// The record at `span`, which must come from this segment. Release builds trust the span
    /// (see `archive`); debug builds validate it with bytecheck on its first read from this
    /// segment, once, so a span used with the wrong segment is caught while reading all the
    /// documents of a large batch record stays linear.
    pub fn record(&self, span: RecordSpan) -> Option<&ArchivedRecord> {
        #[cfg(debug_assertions)]
        {
            let key = (span.offset(), span.len());
            if !self.checked.borrow().contains(&key) {
                cov_mark::hit!(segment_span_validated);
                let offset = usize::try_from(span.offset()).ok()?;
                archive::check(&self.map, offset, span.len()).ok()?;
                self.checked.borrow_mut().insert(key);
            }
        }
        archive::record(&self.map, span)
    }
}

/// Logs a failed page-cache hint (they affect speed only).
fn hint(result: io::Result<()>, what: &str, path: &Path) {
    if let Err(e) = result {
        tracing::debug!(path = %path.display(), error = %e, "{what} failed");
    }
}

/// A zero-filled, durable segment file under a temporary name, ready to be installed.
pub struct Prepared {
    /// The header written in it.
    pub header: SegmentHeader,
    /// Its temporary path.
    pub tmp: PathBuf,
    /// Its writable file.
    pub file: Rc<dyn DiskFile>,
}

/// How a background zero-fill (the spare segment's) may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PaceMode {
    /// A piece waits until the log granted its bytes.
    Paced,
    /// Full speed (the spare is late: the log already rolled without it).
    Unpaced,
    /// Stop before the next piece (the fragment closes).
    Stopped,
}

/// Paces the zero-fill of a spare segment: the group commit grants bytes as it makes chunks
/// durable (`grant`), and the fill writes a piece of `SPARE_FILL_PIECE_BYTES` only out of
/// granted bytes. So the spare's zeros go to the disk in small pieces between the log's
/// chunks, in proportion to the log's own writes, instead of as one burst of the whole segment
/// that every fdatasync in the meantime waits behind.
pub struct FillPace {
    budget: Cell<u64>,
    mode: Cell<PaceMode>,
    waker: Cell<Option<Waker>>,
}

impl std::fmt::Debug for FillPace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FillPace")
            .field("budget", &self.budget.get())
            .field("mode", &self.mode.get())
            .finish()
    }
}

impl Default for FillPace {
    fn default() -> Self {
        FillPace { budget: Cell::new(0), mode: Cell::new(PaceMode::Paced), waker: Cell::new(None) }
    }
}

impl FillPace {
    /// Lets the fill write `bytes` more.
    pub fn grant(&self, bytes: u64) {
        self.budget.set(self.budget.get().saturating_add(bytes));
        self.wake();
    }

    /// Lets the fill run at full speed from now on.
    pub fn unpace(&self) {
        if self.mode.get() == PaceMode::Paced {
            self.mode.set(PaceMode::Unpaced);
        }
        self.wake();
    }

    /// Makes the fill stop before its next piece (`prepare_zeroed` then fails).
    pub fn stop(&self) {
        self.mode.set(PaceMode::Stopped);
        self.wake();
    }

    fn wake(&self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Waits until at least `least` bytes may be written, then takes what the budget holds,
    /// at most `most` bytes and whole blocks (`least` and `most` are block multiples): the fill
    /// writes every granted byte in one write when its task gets to run, so it keeps up with
    /// the log however rarely that is (with 256 runnable writers, once per wave). `None` once
    /// stopped; `most` once unpaced.
    async fn take(&self, least: u64, most: u64) -> Option<u64> {
        let mut waited = false;
        std::future::poll_fn(|cx| match self.mode.get() {
            PaceMode::Stopped => Poll::Ready(None),
            PaceMode::Unpaced => Poll::Ready(Some(most)),
            PaceMode::Paced if self.budget.get() >= least => {
                let budget = self.budget.get();
                let bytes = (budget - budget % BLOCK_BYTES).clamp(least, most);
                self.budget.set(budget - bytes);
                if waited {
                    cov_mark::hit!(spare_fill_waited_for_the_log);
                }
                Poll::Ready(Some(bytes))
            }
            PaceMode::Paced => {
                waited = true;
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

/// Writes header and zeros to `tmp` and fdatasyncs it (the slow half of segment creation).
/// With `pace`, in pieces of `SPARE_FILL_PIECE_BYTES` to `ZERO_FILL_BYTES`, each once `pace`
/// granted it (all of the budget at once, so the fill keeps pace with the log); fails with
/// `ErrorKind::Interrupted` if `pace` is stopped first (the file stays, under its temporary
/// name, which recovery removes).
pub async fn prepare_zeroed(
    disk: &dyn Disk,
    tmp: PathBuf,
    header: SegmentHeader,
    bytes: u64,
    pace: Option<&FillPace>,
) -> io::Result<Prepared> {
    assert!(bytes.is_multiple_of(BLOCK_BYTES));
    let file = disk.create(&tmp).await?;
    let mut offset = 0u64;
    while offset < bytes {
        let rest = bytes - offset;
        let len = match pace {
            Some(pace) => {
                let least = rest.min(SPARE_FILL_PIECE_BYTES as u64);
                let Some(len) = pace.take(least, rest.min(ZERO_FILL_BYTES as u64)).await else {
                    cov_mark::hit!(spare_fill_stopped);
                    let _ = file.close().await;
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "zero-fill stopped"));
                };
                len
            }
            None => rest.min(ZERO_FILL_BYTES as u64),
        };
        let len = usize::try_from(len).map_err(|_| io::Error::other("fill length"))?;
        if offset > 0 && pace.is_some() {
            // Started now, while the writers that the last chunk woke run, instead of with the
            // next chunk's write at the end of their wave; no buffer zeroed on this thread.
            file.write_zeros_now(offset, len).await?;
        } else {
            let mut buf = file.alloc(len);
            let b = buf.as_bytes_mut();
            b.fill(0);
            if offset == 0
                && let Some(head) = b.get_mut(..SEGMENT_HEADER_USED_BYTES)
            {
                head.copy_from_slice(&header.encode());
            }
            file.write_at(buf, offset).await?;
        }
        offset += len as u64;
    }
    file.fdatasync().await?;
    Ok(Prepared { header, tmp, file })
}

/// Renames a prepared file into place, syncs the directory and maps it (the fast half).
pub async fn install(
    disk: &dyn Disk,
    dir: &Path,
    prepared: Prepared,
) -> io::Result<(Rc<Segment>, Rc<dyn DiskFile>)> {
    let path = dir.join(file_name(prepared.header.seq, prepared.header.generation));
    disk.rename(&prepared.tmp, &path).await?;
    disk.sync_dir(dir).await?;
    let segment = Segment::map(&path, prepared.header)?;
    Ok((Rc::new(segment), prepared.file))
}

/// Creates a segment durably: writes header and zeros to `<name>.tmp`, fdatasyncs it, renames
/// it into place and syncs the directory. Returns the mapped segment and its writable file.
pub async fn create_preallocated(
    disk: &dyn Disk,
    dir: &Path,
    header: SegmentHeader,
    bytes: u64,
) -> io::Result<(Rc<Segment>, Rc<dyn DiskFile>)> {
    let tmp = dir.join(format!("{}.tmp", file_name(header.seq, header.generation)));
    let prepared = prepare_zeroed(disk, tmp, header, bytes, None).await?;
    install(disk, dir, prepared).await
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn poll_take(pace: &FillPace, least: u64, most: u64) -> Poll<Option<u64>> {
        let mut fut = pin!(pace.take(least, most));
        fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    // A paced fill waits for `least` granted bytes, then takes all of its budget in whole
    // blocks up to `most`; unpaced it takes `most`, stopped nothing.
    #[test]
    fn unit_fill_takes_its_whole_budget() {
        let block = BLOCK_BYTES;
        let pace = FillPace::default();
        pace.grant(block);
        assert_eq!(poll_take(&pace, 2 * block, 8 * block), Poll::Pending, "below the least");
        pace.grant(4 * block + 100);
        assert_eq!(poll_take(&pace, 2 * block, 8 * block), Poll::Ready(Some(5 * block)));
        assert_eq!(pace.budget.get(), 100, "the part block stays");
        pace.grant(20 * block);
        assert_eq!(poll_take(&pace, 2 * block, 8 * block), Poll::Ready(Some(8 * block)));
        assert_eq!(pace.budget.get(), 12 * block + 100);
        let pace = FillPace::default();
        pace.unpace();
        assert_eq!(poll_take(&pace, 2 * block, 8 * block), Poll::Ready(Some(8 * block)));
        pace.stop();
        assert_eq!(poll_take(&pace, 2 * block, 8 * block), Poll::Ready(None));
    }
}

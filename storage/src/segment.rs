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
//! **The active segment is staged in memory.** Reading the segment the log appends to through
//! its file mapping costs twice. A fault reads around the faulting page (the device's
//! read-ahead, 8 MiB here), pulling the zeroed blocks ahead of the tail into the page cache; a
//! direct write over cached pages cannot be issued without blocking (io_uring gets `EAGAIN`
//! from `kiocb_invalidate_pages`), so io_uring hands it to an io-wq worker thread, which
//! invalidates the pages and unmaps them from every mapping (a TLB shootdown on every CPU
//! running the process). And the first read of a record just written faults it in from disk.
//! So while the log appends to a segment, its mapping's address range is backed by anonymous
//! memory instead (`stage`): the prefix already durable is copied in once, and the log copies
//! each chunk in as it writes it to the file (`stage_chunk`), so reads of recent records never
//! touch the file and the file's pages past the tail are never cached. When the log moves on
//! (`seal`), the file's own shared mapping replaces the anonymous memory at the same address,
//! holding the same bytes, so references into the segment stay valid and the memory goes back.
//! Memory: up to one segment (`--segment-bytes`) per fragment. A segment whose staging failed
//! is read through its file as before (slower, equally correct).
//!
//! Readers only ever see `[0, readable)`, the durable prefix of a staged segment: the log
//! writes staged bytes past it, and no slice ever covers them.

use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Poll, Waker};

use memmap2::Mmap;

use crate::archive::{self, RecordSpan};
use crate::disk::{Disk, DiskFile};
use crate::format::{SEGMENT_HEADER_USED_BYTES, SegmentHeader};
use crate::hugepages;
use crate::limits::{BLOCK_BYTES, SEGMENT_HEADER_BYTES, SPARE_FILL_PIECE_BYTES};
use crate::pagecache;
use crate::record::ArchivedRecord;

/// Bytes of a staged segment backed with pages per job (`populate_ahead`): one huge page.
const STAGE_POPULATE_BYTES: usize = 2 << 20;

/// How far past the log's last chunk a staged segment's pages are backed (`populate_ahead`).
const STAGE_POPULATE_AHEAD_BYTES: usize = 8 << 20;

/// `MADV_POPULATE_WRITE` (Linux 5.14; not in the `libc` crate): fault pages in, writable.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Bytes written per call while zero-filling a new segment.
const ZERO_FILL_BYTES: usize = 1 << 20;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A mapped segment file.
pub struct Segment {
    uid: u64,
    path: PathBuf,
    header: SegmentHeader,
    /// Owns the address range (unmapped on drop) that `stage` and `seal` re-back.
    map: Mmap,
    /// Start of the range, as a pointer writes may go through once staged.
    base: Cell<*mut u8>,
    /// Whether the range is backed by the log's staged copy (see the module comment).
    staged: Cell<bool>,
    /// Bytes readers may see: all of them, or a staged segment's durable prefix.
    readable: Cell<usize>,
    /// A staged segment's bytes from the start already backed by pages (`populate_ahead`),
    /// raised by the stager's job that backs them.
    populated: Arc<AtomicUsize>,
    /// How far the last job sent to the stager backs them: a job is running while
    /// `populated` is short of it.
    requested: Cell<usize>,
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
        let (base, readable) = (map.as_ptr().cast_mut(), map.len());
        Segment {
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            path,
            header,
            map,
            base: Cell::new(base),
            staged: Cell::new(false),
            readable: Cell::new(readable),
            populated: Arc::new(AtomicUsize::new(0)),
            requested: Cell::new(0),
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

    /// The bytes readers may see: the whole mapped file, or a staged segment's durable prefix.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `base` points at the mapping of `self.map.len()` bytes this segment owns, and
        // bytes below `readable` are never written again (only staged bytes past it are).
        unsafe { std::slice::from_raw_parts(self.base.get(), self.readable.get()) }
    }

    /// Size of the file.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Whether the file is empty (never, for a valid segment).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Frame bytes of the records applied from this segment.
    pub fn record_bytes(&self) -> u64 {
        self.record_bytes.get()
    }

    /// Counts `bytes` more record bytes in this segment.
    pub fn add_record_bytes(&self, bytes: u64) {
        self.record_bytes.set(self.record_bytes.get() + bytes);
    }

    /// Whether the log's chunks are staged in memory (see the module comment).
    pub fn is_staged(&self) -> bool {
        self.staged.get()
    }

    /// Backs this segment's address range with anonymous memory holding its durable prefix
    /// `[0, durable_end)`, for the log to append to (see the module comment), and drops the
    /// file's cached pages past that prefix (recovery's scan read some). A failure leaves the
    /// segment read through its file and is returned.
    pub fn stage(&self, durable_end: u64) -> io::Result<()> {
        if self.staged.get() {
            return Ok(());
        }
        let len = self.map.len();
        let end = usize::try_from(durable_end).ok().filter(|e| *e <= len).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "durable end past the segment")
        })?;
        // A fresh anonymous mapping gets the prefix, then moves over the file mapping's range
        // in one `mremap`, so the range is never left unmapped.
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let fresh = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if fresh == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Records in 2 MiB pages (`hugepages`); the advice moves with the pages at a roll.
        // SAFETY: `fresh` is the mapping of `len` bytes made above.
        if let Err(e) = unsafe { hugepages::advise(fresh, len) } {
            tracing::debug!(path = %self.path.display(), error = %e, "MADV_HUGEPAGE failed");
        }
        let prefix = self.file_prefix(end);
        let end = prefix.len();
        // SAFETY: `fresh` has `len >= end` writable bytes; `prefix` is `end` readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(prefix.as_ptr(), fresh.cast::<u8>(), end) };
        // SAFETY: moves `fresh` over this segment's own mapping (same length), which it replaces;
        // no reference into the segment outlives this call (`&self` methods hand out none past
        // it), and the bytes of `[0, end)` are the same before and after.
        let base = match unsafe { move_over(fresh, len, self.base.get()) } {
            Ok(base) => base,
            Err(e) => {
                // SAFETY: unmaps the mapping made above, which was not moved.
                unsafe { libc::munmap(fresh, len) };
                return Err(e);
            }
        };
        self.base.set(base);
        self.staged.set(true);
        self.readable.set(end);
        self.drop_cached_after(end as u64);
        Ok(())
    }

    /// The first `end` bytes of a segment still read through its file (`end <= len`), faulting
    /// in only their own pages: a read-around would start reads of the blocks past them, still
    /// in flight (so not dropped) when `drop_cached_after` runs once the segment is staged.
    fn file_prefix(&self, end: usize) -> &[u8] {
        if let Err(e) = self.map.advise(memmap2::Advice::Random) {
            tracing::debug!(path = %self.path.display(), error = %e, "MADV_RANDOM failed");
        }
        self.bytes().get(..end).unwrap_or_default()
    }

    /// Copies a chunk the log is writing at `offset` into a staged segment (nothing otherwise).
    pub fn stage_chunk(&self, offset: u64, chunk: &[u8]) {
        if !self.staged.get() {
            return;
        }
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        assert!(
            at >= self.readable.get() && at.saturating_add(chunk.len()) <= self.map.len(),
            "a staged chunk must go past the durable prefix and inside the segment"
        );
        let end = at + chunk.len();
        self.populate_ahead(end);
        // SAFETY: the range is inside the writable anonymous mapping (checked above) and past
        // `readable`, so no slice handed out covers it.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), self.base.get().add(at), chunk.len())
        };
    }

    /// Keeps the staged range backed with pages up to `STAGE_POPULATE_AHEAD_BYTES` past `end`
    /// (the end of the chunk being staged), `STAGE_POPULATE_BYTES` per `MADV_POPULATE_WRITE`,
    /// one job at a time per segment, on the process's stager thread (`send_to_stager`):
    /// backing fresh memory zeroes it, and a 2 MiB page the guest had not used cost 5.6 ms on
    /// dev-2c (BENCHMARKS.md, "Session 35"), which the executor would otherwise pay inside a
    /// chunk's launch, and which on the executor's blocking threads held up chunks' writes.
    /// A chunk that outruns the jobs faults its own pages in as it is copied. Pages handed on
    /// by `take_staging_from` cost a job a page-table walk.
    fn populate_ahead(&self, end: usize) {
        let done = self.populated.load(Ordering::Acquire);
        if done < self.requested.get() {
            // A job is running (or, with no stager, never will: no more are sent).
            return;
        }
        let len = self.map.len();
        let from = done.max(end - end % STAGE_POPULATE_BYTES);
        if from >= len || from >= end.saturating_add(STAGE_POPULATE_AHEAD_BYTES) {
            return;
        }
        let to = (from - from % STAGE_POPULATE_BYTES + STAGE_POPULATE_BYTES).min(len);
        self.requested.set(to);
        send_to_stager(StageJob::Populate {
            addr: self.base.get() as usize + from,
            len: to - from,
            to,
            populated: self.populated.clone(),
        });
    }

    /// Bytes of a staged segment from its start already backed with pages by the stager.
    pub fn populated_through(&self) -> usize {
        self.populated.load(Ordering::Acquire)
    }

    /// Makes `[0, end)` of a staged segment readable: its chunks are durable.
    pub fn set_readable(&self, end: u64) {
        if self.staged.get() {
            let end = usize::try_from(end).unwrap_or(usize::MAX).min(self.map.len());
            self.readable.set(self.readable.get().max(end));
        }
    }

    /// Hands `old`'s staged memory to this segment, the next one the log appends to, and seals
    /// `old` (see the module comment): the pages `old` staged move to this segment's range and
    /// `old`'s file mapping takes their place, so a roll neither frees a segment's worth of
    /// pages nor faults new ones in (each first touch of a fresh page costs a page fault and a
    /// zeroed page). Bytes of `old` left in the moved pages lie past this segment's readable
    /// prefix, which only this segment's own chunks overwrite. Returns false, changing
    /// nothing, when it cannot (either segment not in the expected state, sizes differ, a
    /// mapping failed); the caller then stages and seals the usual way.
    pub fn take_staging_from(&self, old: &Segment) -> bool {
        let len = self.map.len();
        let Ok(header) = usize::try_from(SEGMENT_HEADER_BYTES) else { return false };
        if self.staged.get() || !old.staged.get() || old.map.len() != len || len < header {
            return false;
        }
        let head = self.file_prefix(header).to_vec();
        let Ok(sealed) = map_file_anywhere(&old.path, len) else { return false };
        // SAFETY: moves `old`'s private anonymous pages over this segment's file mapping (same
        // length), leaving `old`'s range mapped, empty. Nothing refers to this segment's bytes
        // yet (it has no record), and nothing runs on `old`'s range before the next call fills it.
        let moved = unsafe {
            libc::mremap(
                old.base.get().cast::<libc::c_void>(),
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP,
                self.base.get().cast::<libc::c_void>(),
            )
        };
        if moved == libc::MAP_FAILED {
            // SAFETY: unmaps the mapping made above.
            unsafe { libc::munmap(sealed, len) };
            return false;
        }
        // SAFETY: as in `seal`: `old`'s file holds every byte it staged (no chunk in flight).
        let old_base = match unsafe { move_over(sealed, len, old.base.get()) } {
            Ok(base) => base,
            Err(e) => {
                // `old`'s range is mapped but empty: its records would read as zeros. Moving the
                // pages back could fail the same way, so stop rather than serve wrong bytes.
                tracing::error!(path = %old.path.display(), error = %e, "sealing a segment after handing its memory on failed");
                std::process::abort();
            }
        };
        old.base.set(old_base);
        old.staged.set(false);
        old.readable.set(len);
        let base = moved.cast::<u8>();
        // SAFETY: `base` is now this segment's writable anonymous range of `len >= header` bytes.
        unsafe { std::ptr::copy_nonoverlapping(head.as_ptr(), base, header) };
        self.base.set(base);
        self.staged.set(true);
        self.readable.set(header);
        self.drop_cached_after(SEGMENT_HEADER_BYTES);
        true
    }

    /// The log no longer appends to this staged segment: the file's shared mapping replaces the
    /// anonymous memory at the same address. Every chunk written is durable by then, so the
    /// file holds the same bytes. On failure the segment stays staged (correct, holding its
    /// memory) and the failure is logged.
    pub fn seal(&self) {
        if !self.staged.get() {
            return;
        }
        let len = self.map.len();
        let mapped = map_file_anywhere(&self.path, len).and_then(|fresh| {
            // SAFETY: as in `stage`: same length, same bytes, replaces our own mapping.
            let moved = unsafe { move_over(fresh, len, self.base.get()) };
            if moved.is_err() {
                // SAFETY: unmaps the mapping made above, which was not moved.
                unsafe { libc::munmap(fresh, len) };
            }
            moved
        });
        match mapped {
            Ok(base) => {
                self.base.set(base);
                self.staged.set(false);
                self.readable.set(len);
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "sealing a staged segment failed; it keeps its memory");
            }
        }
    }

    /// Drops this file's cached pages from `offset` (rounded up to a block) to its end: they
    /// hold no record, only zeros (or a torn tail already cut off), and this segment no longer
    /// maps them.
    fn drop_cached_after(&self, offset: u64) {
        let start = offset.next_multiple_of(BLOCK_BYTES);
        if start >= self.len() {
            return;
        }
        let dropped = std::fs::File::open(&self.path).and_then(|file| {
            pagecache::advise(&file, start, self.len() - start, pagecache::Advice::DontNeed)
        });
        if let Err(e) = dropped {
            tracing::debug!(path = %self.path.display(), error = %e, "POSIX_FADV_DONTNEED failed");
        }
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
                archive::check(self.bytes(), offset, span.len()).ok()?;
                self.checked.borrow_mut().insert(key);
            }
        }
        archive::record(self.bytes(), span)
    }
}

/// Work for the stager thread.
enum StageJob {
    /// One `MADV_POPULATE_WRITE` for a staged segment (`Segment::populate_ahead`): `len` bytes
    /// at `addr`, after which the segment's backed prefix reaches `to`.
    ///
    /// The job holds the range's address, not the segment: if a roll or a seal replaces the
    /// mapping while the job waits or runs, or a drop unmaps it, the advice finds another
    /// mapping there or none. `MADV_POPULATE_WRITE` changes no byte of any mapping (it backs
    /// missing pages with zeroed ones and fails on read-only ones), so at worst it backs
    /// memory nobody uses.
    Populate { addr: usize, len: usize, to: usize, populated: Arc<AtomicUsize> },
    /// Answers once every job sent before it is done (`wait_for_stager`).
    Flush(std::sync::mpsc::Sender<()>),
}

/// The process's stager thread: backs staged segments' pages ahead of the log, off the
/// executors and their blocking threads. Started on first use, it runs as long as the process.
/// Returns false when it cannot take the job (no thread): then chunks fault their own pages in,
/// as before any advice.
fn send_to_stager(job: StageJob) -> bool {
    static JOBS: std::sync::OnceLock<Option<std::sync::mpsc::Sender<StageJob>>> =
        std::sync::OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<StageJob>();
        let started = std::thread::Builder::new().name("tessera-stager".into()).spawn(move || {
            run_where_the_process_may();
            rx.into_iter().for_each(run_stage_job);
        });
        match started {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(error = %e, "no stager thread; chunks fault their staged pages in");
                None
            }
        }
    });
    jobs.as_ref().is_some_and(|jobs| jobs.send(job).is_ok())
}

/// Gives the calling thread the process's own CPUs (its main thread's): the stager starts on an
/// executor's thread, and on a pinned executor it would otherwise share that one CPU with it.
fn run_where_the_process_may() {
    // SAFETY: `cpu_set_t` is plain bytes, all zeros a valid empty set; the calls read and
    // write only `set`, whose size they are given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(libc::getpid(), size, &mut set) != 0
            || libc::sched_setaffinity(0, size, &set) != 0
        {
            tracing::debug!(error = %io::Error::last_os_error(), "the stager keeps its CPUs");
        }
    }
}

fn run_stage_job(job: StageJob) {
    match job {
        StageJob::Populate { addr, len, to, populated } => {
            // SAFETY: an advice on a range of this process's address space; it changes no byte
            // of whatever is mapped there (see `StageJob`).
            let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_POPULATE_WRITE) };
            if rc != 0 {
                // The chunks' first touches fault the pages in, as without it.
                tracing::debug!(error = %io::Error::last_os_error(), "MADV_POPULATE_WRITE failed");
            }
            populated.store(to, Ordering::Release);
        }
        StageJob::Flush(done) => {
            let _ = done.send(());
        }
    }
}

/// Blocks the calling thread until the stager has done every job sent before (none, when it
/// has no thread). For tests: what a staged segment's pages are backed with then is settled.
pub fn wait_for_stager() {
    let (tx, rx) = std::sync::mpsc::channel();
    if send_to_stager(StageJob::Flush(tx)) {
        let _ = rx.recv();
    }
}

/// A new shared read-only mapping of the file at `path` (`len` bytes) where the kernel puts it.
fn map_file_anywhere(path: &Path, len: usize) -> io::Result<*mut libc::c_void> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path)?;
    // SAFETY: a new mapping; the file descriptor may close after it.
    let fresh = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if fresh == libc::MAP_FAILED { Err(io::Error::last_os_error()) } else { Ok(fresh) }
}

/// Moves the mapping at `from` (`len` bytes) to `to`, replacing what was mapped there; returns
/// `to` as the system call gave it back (a pointer writes may go through).
///
/// # Safety
/// `from` and `to` must each start a mapping of `len` bytes; nothing may refer to `to`'s bytes
/// in a way the replacement's bytes would break.
unsafe fn move_over(from: *mut libc::c_void, len: usize, to: *mut u8) -> io::Result<*mut u8> {
    // SAFETY: per the caller's contract.
    let got = unsafe {
        libc::mremap(
            from,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to.cast::<libc::c_void>(),
        )
    };
    if got == libc::MAP_FAILED { Err(io::Error::last_os_error()) } else { Ok(got.cast::<u8>()) }
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

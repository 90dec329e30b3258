//! The narrow interface between the log and the file system, so tests can put faults under it.
//!
//! [`DmaDisk`] is the real thing: glommio DMA files (O_DIRECT), one io_uring per executor.
//! [`FaultyDisk`] wraps it for tests: it remembers which writes are not yet covered by an
//! fdatasync, can fail fdatasync after a number of calls, and after the fragment is closed it
//! "crashes" the files: drops unsynced writes, or tears the last one, on the real files.
//!
//! Namespace operations (create, rename, remove) are made durable by `sync_dir`; `FaultyDisk`
//! does not model losing them (segment creation and compaction sync the directory before they
//! depend on a name).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use glommio::io::{DmaBuffer, DmaFile, OpenOptions};

/// A boxed, single-threaded I/O future.
pub type IoFuture<'a, T> = Pin<Box<dyn Future<Output = io::Result<T>> + 'a>>;

/// A file the log writes with O_DIRECT. Buffers must come from [`DiskFile::alloc`], offsets and
/// lengths must be multiples of `BLOCK_BYTES`.
pub trait DiskFile {
    /// An aligned buffer of `bytes` bytes (contents unspecified).
    fn alloc(&self, bytes: usize) -> DmaBuffer;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: DmaBuffer, offset: u64) -> IoFuture<'_, ()>;
    /// Makes every completed write durable.
    fn fdatasync(&self) -> IoFuture<'_, ()>;
    /// Writes all of `buf` at `offset`, then makes every completed write durable: one chunk
    /// of the log, and where its time went. `how` is a hint (see [`ChunkIo`]); by default
    /// `write_at` then `fdatasync`.
    fn write_and_sync(
        &self,
        buf: DmaBuffer,
        offset: u64,
        how: ChunkIo,
    ) -> IoFuture<'_, ChunkTimes> {
        let _ = how;
        write_then_sync(self, buf, offset)
    }
    /// Writes `len` zero bytes at `offset` (both multiples of `limits::BLOCK_BYTES`), started
    /// at once rather than when the executor next hands its ring requests to the kernel, and
    /// without the caller's thread zeroing a buffer: on [`DmaDisk`], `pwrite`s on glommio's
    /// blocking thread from a static block of zeros. For a spare segment's zero-fill, which
    /// should overlap the CPU of the tasks running now instead of meeting the next chunk's
    /// write on the disk. By default a zeroed buffer through `write_at`.
    fn write_zeros_now(&self, offset: u64, len: usize) -> IoFuture<'_, ()> {
        Box::pin(async move {
            let mut buf = self.alloc(len);
            buf.as_bytes_mut().fill(0);
            self.write_at(buf, offset).await
        })
    }
    /// Closes the file.
    fn close(self: Rc<Self>) -> IoFuture<'static, ()>;
}

/// Where the time of one chunk's write and fdatasync went ([`DiskFile::write_and_sync`]), so
/// the log can tell the disk's share of a slow group commit from the executor's
/// (`IoStats::chunk_phases`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkTimes {
    /// From the job's submission to a blocking thread starting it (`ChunkIo::Now`; zero on
    /// the ring, where the executor issues the write itself).
    pub waited: Duration,
    /// The write.
    pub written: Duration,
    /// The fdatasync.
    pub synced: Duration,
}

impl ChunkTimes {
    /// The times of a chunk submitted at `submitted`, started at `start`, whose write ended at
    /// `written` and whose fdatasync ends now.
    fn until_now(submitted: Instant, start: Instant, written: Instant) -> ChunkTimes {
        ChunkTimes {
            waited: start.saturating_duration_since(submitted),
            written: written.saturating_duration_since(start),
            synced: written.elapsed(),
        }
    }
}

/// `write_at` then `fdatasync`: [`DiskFile::write_and_sync`]'s default, and `ChunkIo::Ring`.
fn write_then_sync<F: DiskFile + ?Sized>(
    file: &F,
    buf: DmaBuffer,
    offset: u64,
) -> IoFuture<'_, ChunkTimes> {
    Box::pin(async move {
        let start = Instant::now();
        file.write_at(buf, offset).await?;
        let written = Instant::now();
        file.fdatasync().await?;
        Ok(ChunkTimes::until_now(start, start, written))
    })
}

/// How [`DiskFile::write_and_sync`] runs a chunk's write and fdatasync on [`DmaDisk`]. The
/// default, `Now`, is what the fragment logs (`FragmentOptions::chunk_io`) and the journal use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkIo {
    /// On the executor's io_uring: the write, then (once the executor has seen it complete)
    /// the fdatasync, which io_uring always hands to one of its io-wq worker threads; glommio
    /// 0.9.0 hands each request to the kernel only once the executor's runnable tasks have run.
    Ring,
    /// Started at once on glommio's blocking thread as one job (`pwrite` + `fdatasync`), and
    /// its completion interrupts the running task queue when the caller's queue is
    /// latency-sensitive; a thread handoff each way, and no executor wake in between
    /// (cheaper under load on this project's machine: BENCHMARKS.md, "session 10").
    #[default]
    Now,
}

/// File system operations the storage crate needs.
pub trait Disk {
    /// Creates (or truncates) a file for writing.
    fn create<'a>(&'a self, path: &'a Path) -> IoFuture<'a, Rc<dyn DiskFile>>;
    /// Opens an existing file for writing.
    fn open<'a>(&'a self, path: &'a Path) -> IoFuture<'a, Rc<dyn DiskFile>>;
    /// Renames a file.
    fn rename<'a>(&'a self, from: &'a Path, to: &'a Path) -> IoFuture<'a, ()>;
    /// Removes a file.
    fn remove<'a>(&'a self, path: &'a Path) -> IoFuture<'a, ()>;
    /// Makes the directory's entries durable (after create, rename, remove).
    fn sync_dir<'a>(&'a self, dir: &'a Path) -> IoFuture<'a, ()>;
}

/// The real disk: glommio DMA files.
#[derive(Debug, Default, Clone, Copy)]
pub struct DmaDisk;

struct DmaDiskFile {
    file: DmaFile,
    /// The same open file (a dup of its descriptor) for `write_and_sync` on glommio's blocking
    /// thread, made on first use (`ChunkIo::Now` only); shared with that thread, so it stays
    /// open until the thread is done with it.
    sync_file: std::cell::OnceCell<Arc<std::fs::File>>,
}

impl DmaDiskFile {
    fn new(file: DmaFile) -> DmaDiskFile {
        DmaDiskFile { file, sync_file: std::cell::OnceCell::new() }
    }

    /// The dup of the descriptor for the blocking thread, made on first use.
    fn sync_file(&self) -> io::Result<Arc<std::fs::File>> {
        use std::os::fd::{AsRawFd, BorrowedFd};
        if let Some(file) = self.sync_file.get() {
            return Ok(file.clone());
        }
        // SAFETY: `self.file` owns this descriptor and keeps it open for the duration of the
        // call; the borrow ends with `try_clone_to_owned`, which dups it.
        let dup = unsafe { BorrowedFd::borrow_raw(self.file.as_raw_fd()) }.try_clone_to_owned()?;
        Ok(self.sync_file.get_or_init(|| Arc::new(std::fs::File::from(dup))).clone())
    }
}

impl DmaDiskFile {
    /// `pwrite` of all of `buf` at `offset`, then an fdatasync, on glommio's blocking thread.
    fn on_blocking_thread(&self, buf: DmaBuffer, offset: u64) -> IoFuture<'_, ChunkTimes> {
        let file = match self.sync_file() {
            Ok(file) => file,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        Box::pin(async move {
            let (addr, len) = (buf.as_ptr() as usize, buf.len());
            let done = Arc::new(AtomicBool::new(false));
            let lent = Lent { _buf: buf, done: done.clone() };
            let submitted = Instant::now();
            let result = glommio::executor()
                .spawn_blocking(move || -> io::Result<ChunkTimes> {
                    let _finish = SetOnDrop(done);
                    let start = Instant::now();
                    // SAFETY: `addr..addr + len` is the DmaBuffer held by `lent`, which is not
                    // touched by anyone else and not freed before `_finish` is dropped at the
                    // end of this closure (`Lent::drop` waits for it).
                    let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
                    std::os::unix::fs::FileExt::write_all_at(&*file, bytes, offset)?;
                    let written = Instant::now();
                    file.sync_data()?;
                    Ok(ChunkTimes::until_now(submitted, start, written))
                })
                .await;
            drop(lent);
            result
        })
    }
}

/// Zeros for `write_zeros_now`, aligned for O_DIRECT: read-only, shared by every thread.
#[repr(C, align(4096))]
struct Zeros([u8; 256 << 10]);

static ZEROS: Zeros = Zeros([0; 256 << 10]);

/// A chunk buffer lent to the blocking thread. Dropping it (the write's future dropped before
/// the thread finished) waits for the thread, so the memory is never freed under a write.
struct Lent {
    _buf: DmaBuffer,
    done: Arc<AtomicBool>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        while !self.done.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }
}

/// Sets its flag when dropped: when the blocking thread's closure ran, or was dropped unrun.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl DiskFile for DmaDiskFile {
    fn alloc(&self, bytes: usize) -> DmaBuffer {
        self.file.alloc_dma_buffer(bytes)
    }

    fn write_at(&self, buf: DmaBuffer, offset: u64) -> IoFuture<'_, ()> {
        Box::pin(async move {
            let len = buf.len();
            let written = self.file.write_at(buf, offset).await.map_err(io::Error::from)?;
            if written != len {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write: {written} of {len} bytes at {offset}"),
                ));
            }
            Ok(())
        })
    }

    fn fdatasync(&self) -> IoFuture<'_, ()> {
        Box::pin(async move { self.file.fdatasync().await.map_err(io::Error::from) })
    }

    /// `ChunkIo::Now` runs on glommio's blocking thread (`pwrite` then `fdatasync`), not on
    /// the executor's io_uring: glommio hands queued ring requests to the kernel only between
    /// task-queue runs, so a chunk built while many writers are runnable would wait for all of
    /// them before its write even starts. The thread starts at once; its completion wakes the
    /// executor through the writer's latency-sensitive task queue (`log::spawn_writer`).
    fn write_and_sync(
        &self,
        buf: DmaBuffer,
        offset: u64,
        how: ChunkIo,
    ) -> IoFuture<'_, ChunkTimes> {
        if how == ChunkIo::Ring {
            return write_then_sync(self, buf, offset);
        }
        self.on_blocking_thread(buf, offset)
    }

    fn write_zeros_now(&self, offset: u64, len: usize) -> IoFuture<'_, ()> {
        let file = match self.sync_file() {
            Ok(file) => file,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        Box::pin(async move {
            glommio::executor()
                .spawn_blocking(move || {
                    let mut at = 0;
                    while at < len {
                        let n = (len - at).min(ZEROS.0.len());
                        let zeros = ZEROS.0.get(..n).unwrap_or_default();
                        std::os::unix::fs::FileExt::write_all_at(
                            &*file,
                            zeros,
                            offset + at as u64,
                        )?;
                        at += n;
                    }
                    Ok(())
                })
                .await
        })
    }

    fn close(self: Rc<Self>) -> IoFuture<'static, ()> {
        Box::pin(async move {
            match Rc::try_unwrap(self) {
                Ok(this) => this.file.close().await.map_err(io::Error::from),
                // Another holder keeps it open; it closes when the last one drops.
                Err(_) => Ok(()),
            }
        })
    }
}

/// `path` made absolute against the working directory. glommio 0.9.0 opens paths with
/// `openat(-1, …)` rather than `AT_FDCWD`, so a relative path fails with EBADF (`tessera serve
/// --data-dir ./d`); every path handed to glommio goes through here.
fn absolute(path: &Path) -> io::Result<std::borrow::Cow<'_, Path>> {
    if path.is_absolute() {
        Ok(std::borrow::Cow::Borrowed(path))
    } else {
        std::path::absolute(path).map(std::borrow::Cow::Owned)
    }
}

thread_local! {
    /// Devices (`st_dev`) for which this thread's glommio reactor has been kept off its
    /// IOPOLL ring (see [`keep_off_poll_ring`]).
    static POLL_RING_OFF: RefCell<std::collections::HashSet<u64>> = RefCell::default();
}

/// Keeps glommio's IOPOLL ring out of this executor's writes to `path`'s device.
///
/// glommio 0.9.0 sends every DMA write of a device that passes its iopoll probe to its IOPOLL
/// ring, and an executor with a request in flight there busy-polls instead of sleeping. On a
/// virtio disk without poll queues the probe passes anyway, so the owner of a fragment spun for
/// the whole of every segment write and took the CPU from the other executor and the client: a
/// single client's insert on a 2-executor node averaged 0.86 ms against 0.21 ms off the ring
/// (BENCHMARKS.md, "hop2"). glommio has no switch for it; its decision is a read probe on the
/// first file it opens per device and thread, remembered for that thread. Opening an existing
/// file write-only makes that probe's read fail (EBADF), and glommio then keeps the device off
/// the poll ring on this thread (it logs that at ERROR under `glommio::reactor`, which the node's
/// log filter drops). Runs once per thread and device, before the first real open.
async fn keep_off_poll_ring(path: &Path, create: bool) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // The device of the file, or of its directory when it is about to be created.
    let of = if create { path.parent().unwrap_or(path) } else { path };
    let dev = std::fs::metadata(of)?.dev();
    if POLL_RING_OFF.with(|d| d.borrow().contains(&dev)) {
        return Ok(());
    }
    if create {
        // The probe needs an existing file; create (and truncate) is what follows anyway.
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
    }
    let probe = OpenOptions::new().write(true).dma_open(path).await.map_err(io::Error::from)?;
    probe.close().await.map_err(io::Error::from)?;
    POLL_RING_OFF.with(|d| d.borrow_mut().insert(dev));
    Ok(())
}

impl Disk for DmaDisk {
    fn create<'a>(&'a self, path: &'a Path) -> IoFuture<'a, Rc<dyn DiskFile>> {
        Box::pin(async move {
            let path = absolute(path)?;
            keep_off_poll_ring(&path, true).await?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .dma_open(&path)
                .await
                .map_err(io::Error::from)?;
            Ok(Rc::new(DmaDiskFile::new(file)) as Rc<dyn DiskFile>)
        })
    }

    fn open<'a>(&'a self, path: &'a Path) -> IoFuture<'a, Rc<dyn DiskFile>> {
        Box::pin(async move {
            let path = absolute(path)?;
            keep_off_poll_ring(&path, false).await?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .dma_open(&path)
                .await
                .map_err(io::Error::from)?;
            Ok(Rc::new(DmaDiskFile::new(file)) as Rc<dyn DiskFile>)
        })
    }

    fn rename<'a>(&'a self, from: &'a Path, to: &'a Path) -> IoFuture<'a, ()> {
        Box::pin(async move {
            glommio::io::rename(absolute(from)?, absolute(to)?).await.map_err(io::Error::from)
        })
    }

    fn remove<'a>(&'a self, path: &'a Path) -> IoFuture<'a, ()> {
        Box::pin(async move { glommio::io::remove(absolute(path)?).await.map_err(io::Error::from) })
    }

    fn sync_dir<'a>(&'a self, dir: &'a Path) -> IoFuture<'a, ()> {
        Box::pin(async move {
            let d = glommio::io::Directory::open(absolute(dir)?).await.map_err(io::Error::from)?;
            d.sync().await.map_err(io::Error::from)?;
            d.close().await.map_err(io::Error::from)
        })
    }
}

/// What a simulated crash does to writes no fdatasync covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Every unsynced write is lost.
    DropUnsynced,
    /// Unsynced writes survive except the last, of which only the first `keep_bytes` survive.
    TearLast {
        /// Bytes of the last write that reach the disk.
        keep_bytes: usize,
    },
    /// Unsynced writes survive (the page cache happened to write them back).
    KeepUnsynced,
}

#[derive(Debug, Default)]
struct FaultState {
    fdatasyncs: Cell<u64>,
    fail_fdatasync_after: Cell<Option<u64>>,
    /// The one fdatasync call (by number) that fails; the ones after it succeed again.
    fail_one_fdatasync: Cell<Option<u64>>,
    next_file: Cell<u64>,
    /// Current path of every file opened through this disk (renames update it).
    paths: RefCell<Vec<Rc<RefCell<PathBuf>>>>,
    /// Unsynced writes: (file number, path, offset, length), oldest first.
    unsynced: RefCell<Vec<(u64, PathBuf, u64, usize)>>,
}

/// A test disk over the real one: fails fdatasync on request and simulates crashes.
#[derive(Debug, Clone, Default)]
pub struct FaultyDisk {
    state: Rc<FaultState>,
}

struct FaultyFile {
    inner: Rc<dyn DiskFile>,
    number: u64,
    path: Rc<RefCell<PathBuf>>,
    state: Rc<FaultState>,
}

impl FaultyDisk {
    /// A disk that behaves like [`DmaDisk`] until told otherwise.
    pub fn new() -> FaultyDisk {
        FaultyDisk::default()
    }

    /// Lets `n` more fdatasync calls succeed; every later one fails with EIO.
    pub fn fail_fdatasync_after(&self, n: u64) {
        self.state.fail_fdatasync_after.set(Some(self.state.fdatasyncs.get() + n));
    }

    /// Lets `n` more fdatasync calls succeed, fails the next one with EIO, and lets every
    /// later one succeed again (a transient device error: a later fdatasync must not be taken
    /// to cover what the failed one did not).
    pub fn fail_one_fdatasync_after(&self, n: u64) {
        self.state.fail_one_fdatasync.set(Some(self.state.fdatasyncs.get() + n + 1));
    }

    /// Number of fdatasync calls so far.
    pub fn fdatasyncs(&self) -> u64 {
        self.state.fdatasyncs.get()
    }

    /// Number of writes no fdatasync covers yet.
    pub fn unsynced_writes(&self) -> usize {
        self.state.unsynced.borrow().len()
    }

    /// Applies a crash to the real files: call after the fragment is closed (or dropped and
    /// its files closed). Writes in segments only ever go to zeroed blocks, so losing a write
    /// means zeroing its range. Uses blocking std::fs: test code, outside any executor's hot path.
    pub fn crash(&self, mode: CrashMode) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let unsynced = std::mem::take(&mut *self.state.unsynced.borrow_mut());
        let last = unsynced.len().checked_sub(1);
        for (i, (_, path, offset, len)) in unsynced.into_iter().enumerate() {
            let keep = match mode {
                CrashMode::DropUnsynced => 0,
                CrashMode::KeepUnsynced => len,
                CrashMode::TearLast { keep_bytes } if Some(i) == last => keep_bytes.min(len),
                CrashMode::TearLast { .. } => len,
            };
            if keep == len || !path.exists() {
                continue;
            }
            let file = std::fs::OpenOptions::new().write(true).open(&path)?;
            file.write_all_at(&vec![0u8; len - keep], offset + keep as u64)?;
            file.sync_all()?;
        }
        Ok(())
    }
}

impl DiskFile for FaultyFile {
    fn alloc(&self, bytes: usize) -> DmaBuffer {
        self.inner.alloc(bytes)
    }

    fn write_at(&self, buf: DmaBuffer, offset: u64) -> IoFuture<'_, ()> {
        Box::pin(async move {
            let len = buf.len();
            self.inner.write_at(buf, offset).await?;
            let path = self.path.borrow().clone();
            self.state.unsynced.borrow_mut().push((self.number, path, offset, len));
            Ok(())
        })
    }

    fn fdatasync(&self) -> IoFuture<'_, ()> {
        Box::pin(async move {
            let n = self.state.fdatasyncs.get() + 1;
            self.state.fdatasyncs.set(n);
            if self.state.fail_fdatasync_after.get().is_some_and(|limit| n > limit)
                || self.state.fail_one_fdatasync.get() == Some(n)
            {
                return Err(io::Error::from_raw_os_error(5));
            }
            self.inner.fdatasync().await?;
            self.state.unsynced.borrow_mut().retain(|w| w.0 != self.number);
            Ok(())
        })
    }

    fn close(self: Rc<Self>) -> IoFuture<'static, ()> {
        let inner = self.inner.clone();
        drop(self);
        inner.close()
    }
}

impl Disk for FaultyDisk {
    fn create<'a>(&'a self, path: &'a Path) -> IoFuture<'a, Rc<dyn DiskFile>> {
        Box::pin(async move {
            let inner = DmaDisk.create(path).await?;
            Ok(self.wrap(inner, path))
        })
    }

    fn open<'a>(&'a self, path: &'a Path) -> IoFuture<'a, Rc<dyn DiskFile>> {
        Box::pin(async move {
            let inner = DmaDisk.open(path).await?;
            Ok(self.wrap(inner, path))
        })
    }

    fn rename<'a>(&'a self, from: &'a Path, to: &'a Path) -> IoFuture<'a, ()> {
        Box::pin(async move {
            DmaDisk.rename(from, to).await?;
            for w in self.state.unsynced.borrow_mut().iter_mut() {
                if w.1 == from {
                    w.1 = to.to_path_buf();
                }
            }
            for p in self.state.paths.borrow().iter() {
                let matches = *p.borrow() == from;
                if matches {
                    *p.borrow_mut() = to.to_path_buf();
                }
            }
            Ok(())
        })
    }

    fn remove<'a>(&'a self, path: &'a Path) -> IoFuture<'a, ()> {
        DmaDisk.remove(path)
    }

    fn sync_dir<'a>(&'a self, dir: &'a Path) -> IoFuture<'a, ()> {
        DmaDisk.sync_dir(dir)
    }
}

impl FaultyDisk {
    fn wrap(&self, inner: Rc<dyn DiskFile>, path: &Path) -> Rc<dyn DiskFile> {
        let number = self.state.next_file.get();
        self.state.next_file.set(number + 1);
        let path = Rc::new(RefCell::new(path.to_path_buf()));
        self.state.paths.borrow_mut().push(path.clone());
        Rc::new(FaultyFile { inner, number, path, state: self.state.clone() })
    }
}

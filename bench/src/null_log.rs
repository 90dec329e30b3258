//! The durable null server's log (`pg-null-server --durable`): every write statement's bytes
//! are appended to a preallocated, zero-filled file and answered only after a group-committed
//! fdatasync that covers them. Writers that arrive while a sync is in flight join the next
//! group: the best any server can do with one log. What a durable server costs beyond this is
//! its own work.
//!
//! Two implementations of the same group commit:
//! - [`GroupLog`]: a syncer thread (PostgreSQL's WAL writer) writes each group with `pwrite`
//!   (buffered as PostgreSQL's WAL by default, or `O_DIRECT`) and `fdatasync`; blocking writers wait on a condvar ([`GroupLog::wait`]), async writers
//!   (the epoll loops) on a waker ([`GroupLog::synced`]).
//! - [`LocalLog`]: one glommio executor's log (Tessera's model): `O_DIRECT` writes of whole
//!   4 KiB blocks through [`glommio::io::DmaFile`] and `fdatasync`, led by the first writer
//!   that finds no sync in flight. For one log for the whole node, the other executors hold a
//!   [`RemoteLog`] that forwards their groups over glommio shared channels to the owner
//!   ([`serve_forwarded`]), which acknowledges them once synced.
//!
//! Both keep their place in the file with a [`Cursor`]: the file is a ring of
//! [`NULL_LOG_BYTES`](crate::limits::NULL_LOG_BYTES) bytes (a recycled WAL segment), so a
//! write never extends it and fdatasync has no metadata to write.

use std::cell::RefCell;
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::limits::{NULL_LOG_BLOCK_BYTES, NULL_LOG_ZERO_CHUNK_BYTES};

/// Counters of a durable null server (all of its logs together).
#[derive(Debug, Default)]
pub struct DurableStats {
    /// Write statements appended to a log.
    pub appended: AtomicU64,
    /// Write statements covered by a completed fdatasync.
    pub synced: AtomicU64,
    /// Write statements answered (each after the fdatasync that covers it).
    pub acked: AtomicU64,
    /// fdatasyncs completed (one per group).
    pub fdatasyncs: AtomicU64,
    /// Bytes written to the logs (with `O_DIRECT`, the re-written partial block included).
    pub bytes_written: AtomicU64,
}

impl DurableStats {
    /// A snapshot: (appended, synced, acked, fdatasyncs).
    pub fn snapshot(&self) -> (u64, u64, u64, u64) {
        (
            self.appended.load(Ordering::SeqCst),
            self.synced.load(Ordering::SeqCst),
            self.acked.load(Ordering::SeqCst),
            self.fdatasyncs.load(Ordering::SeqCst),
        )
    }
}

/// Why a durable write was not acknowledged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// Creating or zero-filling the log file failed.
    #[error("preparing log {path}: {source}")]
    Prepare {
        /// The log file.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A write or fdatasync failed; the log accepts nothing more (as a database panics).
    #[error("log write or fdatasync failed: {reason}")]
    Failed {
        /// What failed (the first error, kept for every later writer).
        reason: String,
    },
}

/// Creates `path` (replacing it) as `bytes` zero bytes, written and synced, so later writes
/// overwrite allocated blocks and never change the file's size.
pub fn prepare_file(path: &Path, bytes: u64) -> Result<(), LogError> {
    let prepare = || -> io::Result<()> {
        let file = File::create(path)?;
        let zeros = vec![0u8; NULL_LOG_ZERO_CHUNK_BYTES];
        let mut at = 0u64;
        while at < bytes {
            let n = usize::try_from(bytes - at).unwrap_or(usize::MAX).min(zeros.len());
            file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        file.sync_all()
    };
    prepare().map_err(|source| LogError::Prepare { path: path.to_owned(), source })
}

/// Where the next group goes in a ring file of `capacity` bytes, for writes aligned to
/// `align` bytes (1 for buffered writes, the block size for `O_DIRECT`).
///
/// With `align > 1` the partial last block is kept and written again, from its start,
/// together with the next group (as PostgreSQL re-writes a partial WAL page), so the log
/// stays dense; a [`Cursor::padded`] one starts every group on a fresh block instead, so
/// that groups in flight together never write the same block. A group that would run past
/// the end starts again at offset 0.
#[derive(Debug)]
pub struct Cursor {
    capacity: u64,
    align: u64,
    /// Start every group on a fresh block (no partial block is written twice).
    padded: bool,
    /// Logical end of the log: where the next record's first byte goes.
    end: u64,
    /// The bytes of the partial block that ends at `end` (`end % align` of them).
    tail: Vec<u8>,
}

impl Cursor {
    /// A cursor at offset 0. `align` must divide `capacity` (both limits constants).
    pub fn new(capacity: u64, align: u64) -> Self {
        Cursor { capacity, align: align.max(1), padded: false, end: 0, tail: Vec::new() }
    }

    /// A cursor that starts every group on a fresh block.
    pub fn padded(capacity: u64, align: u64) -> Self {
        Cursor { padded: true, ..Cursor::new(capacity, align) }
    }

    /// The write for a group of `records`: (file offset, bytes to write there). The bytes
    /// start at an aligned offset and, with `align > 1`, are padded with zeros to a whole
    /// number of blocks.
    pub fn place(&mut self, records: &[u8]) -> (u64, Vec<u8>) {
        let records_len = records.len() as u64;
        // (A group larger than the whole ring would extend the file; groups are a few KiB.)
        if self.end + records_len > self.capacity {
            self.end = 0;
            self.tail.clear();
        }
        let start = self.end - self.tail.len() as u64;
        let mut bytes = std::mem::take(&mut self.tail);
        bytes.extend_from_slice(records);
        self.end += records_len;
        if self.align > 1 {
            let padded = (bytes.len() as u64).div_ceil(self.align) * self.align;
            if self.padded {
                self.end = start + padded;
            } else {
                let keep = usize::try_from(self.end % self.align).unwrap_or(0);
                self.tail = bytes[bytes.len() - keep..].to_vec();
            }
            bytes.resize(usize::try_from(padded).unwrap_or(bytes.len()), 0);
        }
        (start, bytes)
    }
}

/// Where a [`GroupLog`] writes: the file, or a test double.
pub trait Sink: Send + 'static {
    /// Writes `bytes` at `offset` and makes them durable (fdatasync).
    fn write_and_sync(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;

    /// The alignment of offsets and lengths it needs (1: any).
    fn align(&self) -> u64 {
        1
    }
}

/// A log file written with `pwrite`, buffered or `O_DIRECT`, and made durable with
/// `fdatasync`.
#[derive(Debug)]
pub struct FileSink {
    file: File,
    /// `O_DIRECT`: whole blocks from an aligned buffer.
    direct: bool,
    /// Room for an aligned copy of a group (`O_DIRECT` only).
    scratch: Vec<u8>,
}

impl FileSink {
    /// Opens a file made by [`prepare_file`] for writing, with `O_DIRECT` if `direct`.
    pub fn open(path: &Path, direct: bool) -> Result<Self, LogError> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut options = std::fs::OpenOptions::new();
        options.write(true);
        if direct {
            options.custom_flags(libc::O_DIRECT);
        }
        let file = options
            .open(path)
            .map_err(|source| LogError::Prepare { path: path.to_owned(), source })?;
        Ok(FileSink { file, direct, scratch: Vec::new() })
    }
}

impl Sink for FileSink {
    fn write_and_sync(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if self.direct {
            // O_DIRECT needs an aligned buffer: copy into the aligned part of the scratch.
            let block = usize::try_from(NULL_LOG_BLOCK_BYTES).unwrap_or(4096);
            self.scratch.resize(bytes.len() + block, 0);
            let start = self.scratch.as_ptr().align_offset(block);
            let aligned = &mut self.scratch[start..start + bytes.len()];
            aligned.copy_from_slice(bytes);
            self.file.write_all_at(aligned, offset)?;
        } else {
            self.file.write_all_at(bytes, offset)?;
        }
        self.file.sync_data()
    }

    fn align(&self) -> u64 {
        if self.direct { NULL_LOG_BLOCK_BYTES } else { 1 }
    }
}

/// A writer's place in a log: the number of statements appended up to and including its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

#[derive(Debug, Default)]
struct GroupState {
    /// Records appended since the syncer took the last group.
    pending: Vec<u8>,
    /// Statements appended so far (the last ticket handed out).
    appended: u64,
    /// Statements covered by a completed fdatasync.
    synced: u64,
    /// Async writers waiting, with their tickets.
    wakers: Vec<(Ticket, Waker)>,
    /// The first write or sync error; nothing is acknowledged after it.
    failed: Option<String>,
}

/// A log with a syncer thread: writers append under a mutex; the syncer takes everything
/// appended so far as one group, writes and syncs it without the lock, then wakes the writers
/// it covered. Writers that append while a sync is in flight make up the next group.
#[derive(Debug)]
pub struct GroupLog {
    state: Mutex<GroupState>,
    /// Signals the syncer that records are pending.
    work: Condvar,
    /// Signals blocking writers that a group finished.
    done: Condvar,
    stats: Arc<DurableStats>,
}

impl GroupLog {
    /// Starts the syncer thread (named `name`) writing to `sink`, a ring of `capacity` bytes.
    pub fn start(
        sink: impl Sink,
        capacity: u64,
        name: String,
        stats: Arc<DurableStats>,
    ) -> io::Result<Arc<GroupLog>> {
        let log = Arc::new(GroupLog {
            state: Mutex::new(GroupState::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            stats,
        });
        let syncer = Arc::clone(&log);
        std::thread::Builder::new().name(name).spawn(move || syncer.run(sink, capacity))?;
        Ok(log)
    }

    fn lock(&self) -> MutexGuard<'_, GroupState> {
        // A panic while holding the lock cannot leave the counters half-updated.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends `records` (the bytes of `statements` write statements); the ticket is covered
    /// once a later group's fdatasync completes.
    pub fn append(&self, records: &[u8], statements: u64) -> Ticket {
        let mut state = self.lock();
        state.pending.extend_from_slice(records);
        state.appended += statements;
        let ticket = Ticket(state.appended);
        drop(state);
        self.stats.appended.fetch_add(statements, Ordering::Relaxed);
        self.work.notify_one();
        ticket
    }

    /// Whether `ticket` is covered by a completed fdatasync (an error if the log failed).
    pub fn is_synced(&self, ticket: Ticket) -> Result<bool, LogError> {
        let state = self.lock();
        covered(&state, ticket)
    }

    /// Blocks until `ticket` is durable.
    pub fn wait(&self, ticket: Ticket) -> Result<(), LogError> {
        let mut state = self.lock();
        while !covered(&state, ticket)? {
            state = self.done.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        Ok(())
    }

    /// Resolves once `ticket` is durable (for async writers on any runtime whose wakers may
    /// be woken from another thread).
    pub fn synced(&self, ticket: Ticket) -> Synced<'_> {
        Synced { log: self, ticket }
    }

    fn run(&self, mut sink: impl Sink, capacity: u64) {
        let mut cursor = Cursor::new(capacity, sink.align());
        loop {
            let mut state = self.lock();
            while state.pending.is_empty() {
                state = self.work.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            let records = std::mem::take(&mut state.pending);
            let upto = state.appended;
            drop(state);
            let (offset, bytes) = cursor.place(&records);
            let result = sink.write_and_sync(offset, &bytes);
            let mut state = self.lock();
            let woken = match result {
                Ok(()) => {
                    let newly = upto - state.synced;
                    state.synced = upto;
                    self.stats.synced.fetch_add(newly, Ordering::Relaxed);
                    self.stats.fdatasyncs.fetch_add(1, Ordering::Relaxed);
                    self.stats.bytes_written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    let (woken, waiting) = std::mem::take(&mut state.wakers)
                        .into_iter()
                        .partition(|(ticket, _)| ticket.0 <= upto);
                    state.wakers = waiting;
                    woken
                }
                Err(e) => {
                    state.failed = Some(e.to_string());
                    std::mem::take(&mut state.wakers)
                }
            };
            let stop = state.failed.is_some();
            drop(state);
            self.done.notify_all();
            for (_, waker) in woken {
                waker.wake();
            }
            if stop {
                return;
            }
        }
    }
}

fn covered(state: &GroupState, ticket: Ticket) -> Result<bool, LogError> {
    if state.synced >= ticket.0 {
        return Ok(true);
    }
    match &state.failed {
        Some(reason) => Err(LogError::Failed { reason: reason.clone() }),
        None => Ok(false),
    }
}

/// [`GroupLog::synced`]'s future.
#[derive(Debug)]
pub struct Synced<'a> {
    log: &'a GroupLog,
    ticket: Ticket,
}

impl Future for Synced<'_> {
    type Output = Result<(), LogError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.log.lock();
        match covered(&state, self.ticket) {
            Ok(true) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(e)),
            Ok(false) => {
                let ticket = self.ticket;
                match state.wakers.iter_mut().find(|(t, w)| *t == ticket && w.will_wake(cx.waker()))
                {
                    Some(_) => {}
                    None => state.wakers.push((ticket, cx.waker().clone())),
                }
                Poll::Pending
            }
        }
    }
}

#[derive(Debug, Default)]
struct LocalState {
    pending: Vec<u8>,
    appended: u64,
    synced: u64,
    /// The groups being written and synced, oldest first: (ticket count up to and including
    /// the group, finished). A finished group counts as synced once all older ones are.
    in_flight: std::collections::VecDeque<(u64, bool)>,
    /// Groups finished (synced or failed).
    generation: u64,
    /// Writers waiting for the group in flight to finish.
    wakers: Vec<Waker>,
    failed: Option<String>,
}

/// One glommio executor's log: `O_DIRECT` block writes and fdatasync through glommio's
/// io_uring, on the executor's own thread. The first writer that finds no sync in flight
/// leads: it writes and syncs everything appended so far, then wakes the others; a woken
/// writer that is not yet covered leads the next group. With `syncs_in_flight > 1` up to
/// that many groups are written and synced at once (as Tessera's
/// `--max-syncs-per-executor`), each on blocks of its own.
pub struct LocalLog {
    file: glommio::io::DmaFile,
    syncs_in_flight: usize,
    cursor: RefCell<Cursor>,
    state: RefCell<LocalState>,
    stats: Arc<DurableStats>,
}

impl std::fmt::Debug for LocalLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLog").field("state", &self.state).finish_non_exhaustive()
    }
}

impl LocalLog {
    /// Opens `path` (made by [`prepare_file`], `capacity` bytes) for `O_DIRECT` writes, with
    /// up to `syncs_in_flight` (at least 1) groups written and synced at once.
    pub async fn open(
        path: &Path,
        capacity: u64,
        syncs_in_flight: usize,
        stats: Arc<DurableStats>,
    ) -> Result<Rc<LocalLog>, LogError> {
        let syncs_in_flight = syncs_in_flight.max(1);
        let cursor = if syncs_in_flight > 1 {
            Cursor::padded(capacity, NULL_LOG_BLOCK_BYTES)
        } else {
            Cursor::new(capacity, NULL_LOG_BLOCK_BYTES)
        };
        let file = glommio::io::OpenOptions::new()
            .write(true)
            .dma_open(path)
            .await
            .map_err(|e| LogError::Prepare { path: path.to_owned(), source: e.into() })?;
        Ok(Rc::new(LocalLog {
            file,
            syncs_in_flight,
            cursor: RefCell::new(cursor),
            state: RefCell::new(LocalState::default()),
            stats,
        }))
    }

    /// Appends `records` (the bytes of `statements` write statements).
    pub fn append(&self, records: &[u8], statements: u64) -> Ticket {
        let mut state = self.state.borrow_mut();
        state.pending.extend_from_slice(records);
        state.appended += statements;
        self.stats.appended.fetch_add(statements, Ordering::Relaxed);
        Ticket(state.appended)
    }

    /// Resolves once `ticket` is durable, leading groups while none is in flight.
    pub async fn commit(&self, ticket: Ticket) -> Result<(), LogError> {
        loop {
            let lead = {
                let mut state = self.state.borrow_mut();
                if state.synced >= ticket.0 {
                    return Ok(());
                }
                if let Some(reason) = &state.failed {
                    return Err(LogError::Failed { reason: reason.clone() });
                }
                if state.in_flight.len() >= self.syncs_in_flight || state.pending.is_empty() {
                    // Full, or this writer's records are in a group in flight.
                    Err(state.generation)
                } else {
                    let upto = state.appended;
                    state.in_flight.push_back((upto, false));
                    Ok((std::mem::take(&mut state.pending), upto))
                }
            };
            match lead {
                Ok((records, upto)) => self.sync_group(&records, upto).await,
                Err(generation) => GroupDone { log: self, generation }.await,
            }
        }
    }

    async fn sync_group(&self, records: &[u8], upto: u64) {
        let (offset, bytes) = self.cursor.borrow_mut().place(records);
        let mut buffer = self.file.alloc_dma_buffer(bytes.len());
        buffer.as_bytes_mut().copy_from_slice(&bytes);
        let result = match self.file.write_at(buffer, offset).await {
            Ok(n) if n == bytes.len() => self.file.fdatasync().await,
            Ok(n) => Err(glommio::GlommioError::IoError(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short O_DIRECT write: {n} of {} bytes", bytes.len()),
            ))),
            Err(e) => Err(e),
        };
        let mut state = self.state.borrow_mut();
        match result {
            Ok(()) => {
                self.stats.fdatasyncs.fetch_add(1, Ordering::Relaxed);
                self.stats.bytes_written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                if let Some(group) = state.in_flight.iter_mut().find(|(u, _)| *u == upto) {
                    group.1 = true;
                }
                // Synced up to the newest group whose older groups all finished.
                while let Some(&(done_upto, true)) = state.in_flight.front() {
                    state.in_flight.pop_front();
                    self.stats.synced.fetch_add(done_upto - state.synced, Ordering::Relaxed);
                    state.synced = done_upto;
                }
            }
            Err(e) => {
                state.failed.get_or_insert(e.to_string());
                state.in_flight.retain(|(u, _)| *u != upto);
            }
        }
        state.generation += 1;
        for waker in std::mem::take(&mut state.wakers) {
            waker.wake();
        }
    }
}

/// Waits until the group in flight (at creation) finishes: [`LocalLog`]'s wakers are woken
/// once per finished group.
struct GroupDone<'a> {
    log: &'a LocalLog,
    /// The count of finished groups when the wait began.
    generation: u64,
}

impl Future for GroupDone<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.log.state.borrow_mut();
        if state.generation != self.generation || state.in_flight.is_empty() {
            return Poll::Ready(());
        }
        state.wakers.push(cx.waker().clone());
        Poll::Pending
    }
}

/// A write group forwarded to the executor that owns the node's one log: (records,
/// statements, the sender's own ticket count up to and including them).
pub type LogRequest = (Vec<u8>, u64, u64);

/// The owner's answer: the sender's ticket count now durable, or why nothing will be.
pub type LogAck = Result<u64, String>;

/// The owner's side of one other executor's forwarding: appends each forwarded group to
/// `log` and, once a sync covers it, acknowledges the sender's ticket count. Runs until the
/// sender goes away.
pub async fn serve_forwarded(
    log: Rc<LocalLog>,
    requests: glommio::channels::shared_channel::SharedReceiver<LogRequest>,
    acks: glommio::channels::shared_channel::SharedSender<LogAck>,
) {
    let requests = requests.connect().await;
    let acks = Rc::new(acks.connect().await);
    while let Some((records, statements, upto)) = requests.recv().await {
        let ticket = log.append(&records, statements);
        let log = Rc::clone(&log);
        let acks = Rc::clone(&acks);
        glommio::spawn_local(async move {
            let ack = log.commit(ticket).await.map(|()| upto).map_err(|e| e.to_string());
            // The sender's executor is gone if this fails; there is nobody to tell.
            let _ = acks.send(ack).await;
        })
        .detach();
    }
}

#[derive(Debug, Default)]
struct RemoteState {
    pending: Vec<u8>,
    pending_statements: u64,
    appended: u64,
    synced: u64,
    /// Acknowledgements (or failures) received.
    generation: u64,
    /// Writers waiting for an acknowledgement.
    wakers: Vec<Waker>,
    /// The forwarder, waiting for pending records.
    forwarder: Option<Waker>,
    failed: Option<String>,
}

/// An executor's handle on a log another executor owns (one log for the node): writers
/// append here; a forwarder task sends everything pending, as one group, over a glommio
/// shared channel to the owner ([`serve_forwarded`]), and an acknowledgement task wakes the
/// writers the owner's syncs covered.
#[derive(Debug)]
pub struct RemoteLog {
    state: RefCell<RemoteState>,
}

impl RemoteLog {
    /// Connects to the owner and starts the forwarder and acknowledgement tasks on the
    /// current executor.
    pub async fn start(
        to_owner: glommio::channels::shared_channel::SharedSender<LogRequest>,
        from_owner: glommio::channels::shared_channel::SharedReceiver<LogAck>,
    ) -> Rc<RemoteLog> {
        let log = Rc::new(RemoteLog { state: RefCell::new(RemoteState::default()) });
        let to_owner = to_owner.connect().await;
        let from_owner = from_owner.connect().await;
        let forwarding = Rc::clone(&log);
        glommio::spawn_local(async move {
            loop {
                let (records, statements, upto) = Pending { log: &forwarding }.await;
                if to_owner.send((records, statements, upto)).await.is_err() {
                    forwarding.fail("the log's executor is gone".into());
                    return;
                }
            }
        })
        .detach();
        let acknowledging = Rc::clone(&log);
        glommio::spawn_local(async move {
            loop {
                match from_owner.recv().await {
                    Some(Ok(upto)) => {
                        let mut state = acknowledging.state.borrow_mut();
                        state.synced = state.synced.max(upto);
                        state.generation += 1;
                        for waker in std::mem::take(&mut state.wakers) {
                            waker.wake();
                        }
                    }
                    Some(Err(reason)) => return acknowledging.fail(reason),
                    None => return acknowledging.fail("the log's executor is gone".into()),
                }
            }
        })
        .detach();
        log
    }

    fn fail(&self, reason: String) {
        let mut state = self.state.borrow_mut();
        state.failed.get_or_insert(reason);
        state.generation += 1;
        for waker in std::mem::take(&mut state.wakers) {
            waker.wake();
        }
    }

    /// Appends `records` (the bytes of `statements` write statements) for the forwarder.
    pub fn append(&self, records: &[u8], statements: u64) -> Ticket {
        let mut state = self.state.borrow_mut();
        state.pending.extend_from_slice(records);
        state.pending_statements += statements;
        state.appended += statements;
        if let Some(forwarder) = state.forwarder.take() {
            forwarder.wake();
        }
        Ticket(state.appended)
    }

    /// Resolves once the owner acknowledged `ticket`.
    pub async fn commit(&self, ticket: Ticket) -> Result<(), LogError> {
        std::future::poll_fn(|cx| {
            let mut state = self.state.borrow_mut();
            if state.synced >= ticket.0 {
                return Poll::Ready(Ok(()));
            }
            if let Some(reason) = &state.failed {
                return Poll::Ready(Err(LogError::Failed { reason: reason.clone() }));
            }
            state.wakers.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// The forwarder's wait for pending records: everything pending, as one group.
struct Pending<'a> {
    log: &'a RemoteLog,
}

impl Future for Pending<'_> {
    type Output = LogRequest;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LogRequest> {
        let mut state = self.log.state.borrow_mut();
        if state.pending.is_empty() {
            state.forwarder = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let records = std::mem::take(&mut state.pending);
        let statements = std::mem::take(&mut state.pending_statements);
        Poll::Ready((records, statements, state.appended))
    }
}

/// A glommio executor's log: its own, or its handle on the one another executor owns.
#[derive(Clone, Debug)]
pub enum ExecutorLog {
    /// The executor writes and syncs the log itself.
    Own(Rc<LocalLog>),
    /// Another executor owns the log.
    Remote(Rc<RemoteLog>),
}

impl ExecutorLog {
    /// Appends `records` (the bytes of `statements` write statements).
    pub fn append(&self, records: &[u8], statements: u64) -> Ticket {
        match self {
            ExecutorLog::Own(log) => log.append(records, statements),
            ExecutorLog::Remote(log) => log.append(records, statements),
        }
    }

    /// Resolves once `ticket` is durable.
    pub async fn commit(&self, ticket: Ticket) -> Result<(), LogError> {
        match self {
            ExecutorLog::Own(log) => log.commit(ticket).await,
            ExecutorLog::Remote(log) => log.commit(ticket).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Buffered cursor: records go end to end; a group that does not fit starts at 0.
    #[test]
    fn unit_cursor_buffered_appends_and_wraps() {
        let mut cursor = Cursor::new(10, 1);
        assert_eq!(cursor.place(b"abcd"), (0, b"abcd".to_vec()));
        assert_eq!(cursor.place(b"efg"), (4, b"efg".to_vec()));
        assert_eq!(cursor.place(b"hijk"), (0, b"hijk".to_vec()));
        assert_eq!(cursor.place(b"lmnopq"), (4, b"lmnopq".to_vec()));
    }

    /// Direct cursor: every write is whole blocks from a block boundary, the partial last
    /// block is written again with the next group, and a full block is not.
    #[test]
    fn unit_cursor_direct_rewrites_the_partial_block() {
        let mut cursor = Cursor::new(16, 4);
        assert_eq!(cursor.place(b"ab"), (0, b"ab\0\0".to_vec()));
        assert_eq!(cursor.place(b"cdefg"), (0, b"abcdefg\0".to_vec()));
        assert_eq!(cursor.place(b"h"), (4, b"efgh".to_vec()));
        assert_eq!(cursor.place(b"ijkl"), (8, b"ijkl".to_vec()));
        // 12 + 5 > 16: the group starts again at 0, with no tail.
        assert_eq!(cursor.place(b"mnopq"), (0, b"mnopq\0\0\0".to_vec()));
    }

    /// A prepared 64 KiB log file in a fresh directory (kept alive by the first element) and
    /// the stats its log will count into.
    fn log_file() -> (tempfile::TempDir, std::path::PathBuf, u64, Arc<DurableStats>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let capacity = 1 << 16;
        prepare_file(&path, capacity).unwrap();
        (dir, path, capacity, Arc::new(DurableStats::default()))
    }

    /// An executor as the null server builds them.
    fn executor() -> glommio::LocalExecutorBuilder {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(crate::limits::NULL_GLOMMIO_IO_MEMORY_BYTES)
    }

    /// A sink whose every sync waits for the test's go-ahead and reports what it wrote.
    struct GatedSink {
        started: mpsc::Sender<Vec<u8>>,
        release: mpsc::Receiver<io::Result<()>>,
    }

    impl Sink for GatedSink {
        fn write_and_sync(&mut self, _offset: u64, bytes: &[u8]) -> io::Result<()> {
            let _ = self.started.send(bytes.to_vec());
            self.release.recv().unwrap_or_else(|_| Err(io::Error::other("test ended")))
        }
    }

    fn gated() -> (Arc<GroupLog>, mpsc::Receiver<Vec<u8>>, mpsc::Sender<io::Result<()>>) {
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let sink = GatedSink { started: started_tx, release: release_rx };
        let stats = Arc::new(DurableStats::default());
        let log = GroupLog::start(sink, 1 << 20, "test-syncer".into(), stats).unwrap();
        (log, started, release)
    }

    /// A writer is covered only after the sync of a group that holds it; writers that
    /// append while a sync is in flight are one next group, with one more fdatasync.
    #[test]
    fn unit_group_log_writers_join_the_next_group() {
        let (log, started, release) = gated();
        let a = log.append(b"a", 1);
        assert_eq!(started.recv().unwrap(), b"a");
        let b = log.append(b"b", 1);
        let c = log.append(b"c", 1);
        assert!(!log.is_synced(a).unwrap());
        release.send(Ok(())).unwrap();
        log.wait(a).unwrap();
        assert_eq!(started.recv().unwrap(), b"bc");
        assert!(!log.is_synced(b).unwrap());
        assert!(!log.is_synced(c).unwrap());
        release.send(Ok(())).unwrap();
        log.wait(c).unwrap();
        assert!(log.is_synced(b).unwrap());
        assert_eq!(log.stats.snapshot(), (3, 3, 0, 2));
    }

    /// A failed fdatasync acknowledges nobody, then or later.
    #[test]
    fn unit_group_log_failure_is_final() {
        let (log, started, release) = gated();
        let a = log.append(b"a", 1);
        started.recv().unwrap();
        release.send(Err(io::Error::other("EIO"))).unwrap();
        assert!(matches!(log.wait(a), Err(LogError::Failed { .. })));
        let b = log.append(b"b", 1);
        assert!(matches!(log.wait(b), Err(LogError::Failed { .. })));
        assert_eq!(log.stats.snapshot().1, 0);
    }

    /// The async wait resolves only after the covering sync (a waker woken by the syncer).
    #[test]
    fn unit_group_log_async_wait() {
        let (log, started, release) = gated();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let a = log.append(b"a", 1);
        started.recv().unwrap();
        let waiting = Arc::clone(&log);
        let handle =
            std::thread::spawn(move || runtime.block_on(async move { waiting.synced(a).await }));
        release.send(Ok(())).unwrap();
        handle.join().unwrap().unwrap();
        assert!(log.is_synced(a).unwrap());
    }

    /// glommio's log on a real file: one writer alone is one fdatasync; writers that append
    /// while it is in flight (or before anyone leads) share the next one. The file holds
    /// the records end to end.
    #[test]
    fn unit_local_log_groups_on_a_real_file() {
        let (_dir, path, capacity, stats) = log_file();
        let executor = executor();
        let task_stats = Arc::clone(&stats);
        let task_path = path.clone();
        executor
            .spawn(move || async move {
                let log = LocalLog::open(&task_path, capacity, 1, task_stats).await.unwrap();
                let a = log.append(b"first;", 1);
                let mut leader = std::pin::pin!(log.commit(a));
                let _ = futures_lite::future::poll_once(leader.as_mut()).await;
                let b = log.append(b"second;", 1);
                let c = log.append(b"third;", 1);
                let both = futures_lite::future::zip(log.commit(b), log.commit(c));
                let (ra, (rb, rc)) = futures_lite::future::zip(leader, both).await;
                ra.unwrap();
                rb.unwrap();
                rc.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(stats.snapshot(), (3, 3, 0, 2));
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, capacity);
        assert!(bytes.starts_with(b"first;second;third;\0"));
    }

    /// One log for two executors: the one that does not own it forwards its writers' groups
    /// over shared channels; they are answered once the owner's sync covers them, and the
    /// owner's file holds them.
    #[test]
    fn unit_remote_log_forwards_to_the_owner() {
        use glommio::channels::shared_channel;
        let (_dir, path, capacity, stats) = log_file();
        let (to_owner, requests) = shared_channel::new_bounded(4);
        let (acks, from_owner) = shared_channel::new_bounded(4);
        let (owner_stats, owner_path) = (Arc::clone(&stats), path.clone());
        let owner = executor()
            .spawn(move || async move {
                let log = LocalLog::open(&owner_path, capacity, 1, owner_stats).await.unwrap();
                serve_forwarded(log, requests, acks).await;
            })
            .unwrap();
        let writer = executor()
            .spawn(move || async move {
                let log = RemoteLog::start(to_owner, from_owner).await;
                let a = log.append(b"one;", 1);
                let b = log.append(b"two;", 1);
                log.commit(b).await.unwrap();
                log.commit(a).await.unwrap();
                let c = log.append(b"three;", 1);
                log.commit(c).await.unwrap();
                assert!(log.state.borrow().synced >= 3);
            })
            .unwrap();
        writer.join().unwrap();
        let (appended, synced, _, syncs) = stats.snapshot();
        assert_eq!((appended, synced), (3, 3));
        // "one;two;" were pending together when the forwarder ran; "three;" came later.
        assert_eq!(syncs, 2);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"one;two;three;\0"));
        // The owner serves until the process ends (as in the server).
        drop(owner);
    }

    /// The syncer thread with an `O_DIRECT` file: whole blocks, the partial one re-written,
    /// and the file holds the records end to end.
    #[test]
    fn unit_group_log_direct_file() {
        let (_dir, path, capacity, stats) = log_file();
        let sink = FileSink::open(&path, true).unwrap();
        let log =
            GroupLog::start(sink, capacity, "test-direct".into(), Arc::clone(&stats)).unwrap();
        for record in [&b"alpha;"[..], b"beta;", b"gamma;"] {
            let ticket = log.append(record, 1);
            log.wait(ticket).unwrap();
        }
        assert_eq!(stats.snapshot(), (3, 3, 0, 3));
        assert_eq!(stats.bytes_written.load(Ordering::SeqCst), 3 * NULL_LOG_BLOCK_BYTES);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"alpha;beta;gamma;\0"));
    }

    /// Padded cursor: every group starts on a fresh block.
    #[test]
    fn unit_cursor_padded_starts_groups_on_fresh_blocks() {
        let mut cursor = Cursor::padded(16, 4);
        assert_eq!(cursor.place(b"ab"), (0, b"ab\0\0".to_vec()));
        assert_eq!(cursor.place(b"cdefg"), (4, b"cdefg\0\0\0".to_vec()));
        assert_eq!(cursor.place(b"hijk"), (12, b"hijk".to_vec()));
        assert_eq!(cursor.place(b"l"), (0, b"l\0\0\0".to_vec()));
    }

    /// Two syncs in flight: a second group starts while the first is in flight, a third
    /// waits for one of them; each group has blocks of its own.
    #[test]
    fn unit_local_log_two_syncs_in_flight() {
        let (_dir, path, capacity, stats) = log_file();
        let executor = executor();
        let (task_stats, task_path) = (Arc::clone(&stats), path.clone());
        executor
            .spawn(move || async move {
                let log = LocalLog::open(&task_path, capacity, 2, task_stats).await.unwrap();
                let a = log.append(b"first;", 1);
                let mut first = std::pin::pin!(log.commit(a));
                let _ = futures_lite::future::poll_once(first.as_mut()).await;
                let b = log.append(b"second;", 1);
                let mut second = std::pin::pin!(log.commit(b));
                let _ = futures_lite::future::poll_once(second.as_mut()).await;
                let c = log.append(b"third;", 1);
                let later = futures_lite::future::zip(second, log.commit(c));
                let (ra, (rb, rc)) = futures_lite::future::zip(first, later).await;
                ra.unwrap();
                rb.unwrap();
                rc.unwrap();
                assert!(log.state.borrow().in_flight.is_empty());
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(stats.snapshot(), (3, 3, 0, 3));
        let bytes = std::fs::read(&path).unwrap();
        let block = usize::try_from(NULL_LOG_BLOCK_BYTES).unwrap();
        assert!(bytes.starts_with(b"first;\0"));
        assert!(bytes[block..].starts_with(b"second;\0"));
        assert!(bytes[2 * block..].starts_with(b"third;\0"));
    }
}

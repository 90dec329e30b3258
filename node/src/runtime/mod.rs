//! The executor runtime: one glommio executor per core, each owning local state (its
//! fragments), joined by a *mesh* of bounded flume inboxes for cross-core calls, and a shutdown
//! broadcast that every executor can await.
//!
//! A cross-core call moves a closure to the executor that owns the state it needs, runs it
//! there as a local task, and sends the result back on a one-slot channel. Nothing on the data
//! path is shared between executors: only the channels are.
//!
//! **Invariant:** an executor's state (`Rc<S>`) never leaves its thread; only `Send` closures
//! and `Send` results cross.
//!
//! **Invariant:** no other thread ever wakes or drops the waker of a glommio task that can
//! finish (glommio 0.9.0 frees a task under a foreign waker, see `relay`). Answers to calls
//! come back through the caller executor's relay, and waits on other threads go through
//! [`relayed`]; only each executor's permanent inbox and relay tasks are woken from outside.

mod relay;
mod shutdown;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use glommio::{LocalExecutorBuilder, Placement};
use storage::park;

pub use relay::{Relayed, relayed};
pub use shutdown::{Countdown, Shutdown};

/// Messages an executor's inbox holds before senders wait (backpressure, not growth). Each
/// message is one request batch for this executor's fragments.
pub const MESH_INBOX_MAX: usize = 1024;

/// Period of each executor's heartbeat timer. glommio 0.9.0's scheduler can park while a
/// locally woken task is runnable (when the preemption flag is already set as a scheduling
/// round starts, it runs nothing and then parks until the next I/O or timer event). A pending
/// timer bounds such a stall to this period; when no timer is pending (the heartbeat's own
/// timer has fired and the heartbeat is one of the runnable tasks), the park watchdog ends it
/// (`storage::park`), and the heartbeat's ticks are what the watchdog watches. This is the
/// period while the executor works; an idle executor's heartbeat backs off to
/// `storage::park::HEARTBEAT_IDLE_MAX`.
pub const EXECUTOR_HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(5);

/// glommio's preempt timer for every executor: a task queue runs this long before
/// `need_preempt` turns true. glommio 0.9.0's own default, named here because a shorter one
/// widens the park race (`storage::park`) and a test shortens it on purpose.
pub const EXECUTOR_PREEMPT_TIMER: std::time::Duration = std::time::Duration::from_millis(100);

/// Bytes of io_uring buffer memory per executor. `ulimit -l` is 8 MiB on our machines, and the
/// locked memory of all executors must fit under it.
pub const EXECUTOR_IO_MEMORY_BYTES: usize = 1 << 20;

/// Threads of each executor's blocking pool (glommio's default is one). The logs' chunks and the
/// coordinator journal's run there (`storage::ChunkIo::Now`: `pwrite` + `fdatasync`), as do
/// long jobs: a backup's file copy, a dropped fragment's directory removal. With a second
/// thread one long job does not hold up every commit of its executor behind it.
pub const EXECUTOR_BLOCKING_THREADS: usize = 2;

/// Position of an executor in the node, `0 .. executors`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ExecutorIndex(usize);

impl ExecutorIndex {
    /// The executor at `index`.
    pub const fn new(index: usize) -> ExecutorIndex {
        ExecutorIndex(index)
    }

    /// Its position.
    pub const fn get(self) -> usize {
        self.0
    }
}

impl std::fmt::Display for ExecutorIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "executor-{}", self.0)
    }
}

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;
type Job<S> = Box<dyn FnOnce(Rc<S>) -> LocalFuture + Send>;

/// Why a cross-core call did not return a result.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError {
    /// No executor has that index.
    #[error("no executor {0} (the node has {1})")]
    NoSuchExecutor(usize, usize),
    /// The target executor has stopped (the node is shutting down).
    #[error("{0} has stopped")]
    Stopped(ExecutorIndex),
    /// The target dropped the request without answering (its task panicked or it stopped).
    #[error("{0} dropped the request without answering")]
    Dropped(ExecutorIndex),
}

/// The handles to every executor's inbox. Cheap to clone; `Send + Sync`.
pub struct Mesh<S> {
    inboxes: Arc<[flume::Sender<Job<S>>]>,
}

impl<S> Clone for Mesh<S> {
    fn clone(&self) -> Self {
        Mesh { inboxes: Arc::clone(&self.inboxes) }
    }
}

impl<S: 'static> Mesh<S> {
    /// Number of executors.
    pub fn len(&self) -> usize {
        self.inboxes.len()
    }

    /// Always false: a mesh has at least one executor.
    pub fn is_empty(&self) -> bool {
        self.inboxes.is_empty()
    }

    /// Runs `work` on executor `to` with its state and returns the result. Waits while the
    /// target's inbox is full (backpressure). Running on the caller's own executor is allowed
    /// but costs a hop; callers should run local work directly. Each call is counted
    /// ([`calls_sent`]) before it is sent.
    pub async fn call<F, Fut, R>(&self, to: ExecutorIndex, work: F) -> Result<R, CallError>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        bump(&CALLS_SENT);
        self.send(to, work).await
    }

    /// Runs `work` on executor `to`: at once, with `state`, when `to` is `here` (the caller's
    /// own executor: no hop, nothing counted), otherwise as [`Mesh::call`].
    pub async fn run_on<F, Fut, R>(
        &self,
        here: ExecutorIndex,
        state: &Rc<S>,
        to: ExecutorIndex,
        work: F,
    ) -> Result<R, CallError>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        if to == here {
            return Ok(work(Rc::clone(state)).await);
        }
        self.call(to, work).await
    }

    /// As [`Mesh::call`], for work no statement waits for (housekeeping detached from the
    /// answer, such as reporting finished transactions to the coordinator): counted apart
    /// ([`background_calls_sent`]), so a statement's hops stay exact however such work
    /// interleaves with it.
    pub async fn call_background<F, Fut, R>(
        &self,
        to: ExecutorIndex,
        work: F,
    ) -> Result<R, CallError>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        bump(&BACKGROUND_CALLS_SENT);
        self.send(to, work).await
    }

    async fn send<F, Fut, R>(&self, to: ExecutorIndex, work: F) -> Result<R, CallError>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        let inbox = self
            .inboxes
            .get(to.get())
            .ok_or(CallError::NoSuchExecutor(to.get(), self.inboxes.len()))?;
        let Some((awaiting, reply_to)) = relay::open_reply() else {
            // Not on one of our executors: this caller's waker is thread-safe.
            let (reply_tx, reply_rx) = flume::bounded::<R>(1);
            let job: Job<S> = Box::new(move |state| {
                Box::pin(async move {
                    let result = work(state).await;
                    // The caller may have gone away (its connection closed); nothing to do then.
                    let _ = reply_tx.send(result);
                })
            });
            inbox.send_async(job).await.map_err(|_| CallError::Stopped(to))?;
            return reply_rx.recv_async().await.map_err(|_| CallError::Dropped(to));
        };
        let job: Job<S> = Box::new(move |state| {
            Box::pin(async move {
                let result = work(state).await;
                reply_to.send(Box::new(result));
            })
        });
        match inbox.try_send(job) {
            Ok(()) => {}
            Err(flume::TrySendError::Full(job)) => {
                // Backpressure: the target's drain task wakes this sender through our relay.
                relayed(inbox.send_async(job)).await.map_err(|_| CallError::Stopped(to))?;
            }
            Err(flume::TrySendError::Disconnected(_)) => return Err(CallError::Stopped(to)),
        }
        let answer = awaiting.await.ok_or(CallError::Dropped(to))?;
        answer.downcast::<R>().map(|r| *r).map_err(|_| CallError::Dropped(to))
    }
}

thread_local! {
    /// Calls sent from this thread with [`Mesh::call`]: every cross-executor hop, counted in
    /// one place rather than at each call site.
    static CALLS_SENT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Calls sent from this thread with [`Mesh::call_background`].
    static BACKGROUND_CALLS_SENT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Cross-executor calls ([`Mesh::call`]) sent so far from the calling thread: on an executor,
/// that executor's hops (`tessera_mesh_calls_total`).
pub fn calls_sent() -> u64 {
    CALLS_SENT.with(std::cell::Cell::get)
}

/// Background cross-executor calls ([`Mesh::call_background`]) sent so far from the calling
/// thread (`tessera_mesh_background_calls_total`).
pub fn background_calls_sent() -> u64 {
    BACKGROUND_CALLS_SENT.with(std::cell::Cell::get)
}

fn bump(counter: &'static std::thread::LocalKey<std::cell::Cell<u64>>) {
    counter.with(|c| c.set(c.get().saturating_add(1)));
}

/// What an executor knows about itself and the node.
pub struct ExecutorContext<S> {
    /// This executor's position.
    pub index: ExecutorIndex,
    /// Every executor's inbox.
    pub mesh: Mesh<S>,
    /// Fires when the node starts shutting down.
    pub shutdown: Shutdown,
    /// This executor's heartbeat count and park-watchdog signals.
    pulse: Arc<park::Pulse>,
}

impl<S> ExecutorContext<S> {
    /// Times this executor's heartbeat timer has fired so far. Work that waits for a timer
    /// tick instead of its own wake-up shows here (tests count ticks during cross-core calls).
    pub fn heartbeats(&self) -> u64 {
        self.pulse.heartbeats()
    }

    /// Times the park watchdog has signalled this executor so far: once per four heartbeat
    /// periods (its current ones) in which its heartbeat did not tick (a park with runnable
    /// work, or a long busy stretch).
    pub fn park_kicks(&self) -> u64 {
        self.pulse.kicks()
    }
}

impl<S> Clone for ExecutorContext<S> {
    fn clone(&self) -> Self {
        ExecutorContext {
            index: self.index,
            mesh: self.mesh.clone(),
            shutdown: self.shutdown.clone(),
            pulse: Arc::clone(&self.pulse),
        }
    }
}

/// How the executors run. [`run`] uses the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeOptions {
    /// Period of each executor's heartbeat timer (see [`EXECUTOR_HEARTBEAT`]).
    pub heartbeat: std::time::Duration,
    /// glommio's preempt timer (see [`EXECUTOR_PREEMPT_TIMER`]).
    pub preempt_timer: std::time::Duration,
    /// Whether the park watchdog runs (`storage::park`). Only tests that show the hang turn it off.
    pub park_watchdog: bool,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            heartbeat: EXECUTOR_HEARTBEAT,
            preempt_timer: EXECUTOR_PREEMPT_TIMER,
            park_watchdog: true,
        }
    }
}

/// Why the runtime could not start or ended badly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// glommio could not create an executor (io_uring, locked memory, CPU placement).
    #[error("cannot start {index}: {source}")]
    Spawn {
        /// Which executor.
        index: ExecutorIndex,
        /// glommio's error.
        source: glommio::GlommioError<()>,
    },
    /// An executor's initialisation (opening its fragments) failed.
    #[error("{index} failed to start: {message}")]
    Init {
        /// Which executor.
        index: ExecutorIndex,
        /// The error, rendered.
        message: String,
    },
    /// An executor thread panicked (a bug).
    #[error("{0} panicked")]
    Panicked(ExecutorIndex),
    /// The park watchdog could not start (its signal handler or its thread).
    #[error("cannot start the park watchdog: {0}")]
    Watchdog(std::io::Error),
}

/// Starts `executors` executors and blocks until all have finished.
///
/// On each executor: `init` builds its state (opening fragments); once **every** executor is
/// initialised, `serve` runs (accepting connections) until it returns, which it should do soon
/// after `shutdown` fires; then the executor keeps answering cross-core calls until every
/// executor's `serve` has returned, and `close` runs last (flushing and closing fragments).
/// If any `init` fails, shutdown is triggered everywhere and the first error is returned.
pub fn run<S, Init, InitFut, Serve, ServeFut, Close, CloseFut>(
    executors: usize,
    shutdown: Shutdown,
    init: Init,
    serve: Serve,
    close: Close,
) -> Result<(), RuntimeError>
where
    S: 'static,
    Init: Fn(ExecutorContext<S>) -> InitFut + Send + Sync + 'static,
    InitFut: Future<Output = Result<S, String>> + 'static,
    Serve: Fn(Rc<S>, ExecutorContext<S>) -> ServeFut + Send + Sync + 'static,
    ServeFut: Future<Output = ()> + 'static,
    Close: Fn(Rc<S>, ExecutorContext<S>) -> CloseFut + Send + Sync + 'static,
    CloseFut: Future<Output = ()> + 'static,
{
    run_with(RuntimeOptions::default(), executors, shutdown, init, serve, close)
}

/// [`run`] with explicit [`RuntimeOptions`].
pub fn run_with<S, Init, InitFut, Serve, ServeFut, Close, CloseFut>(
    options: RuntimeOptions,
    executors: usize,
    shutdown: Shutdown,
    init: Init,
    serve: Serve,
    close: Close,
) -> Result<(), RuntimeError>
where
    S: 'static,
    Init: Fn(ExecutorContext<S>) -> InitFut + Send + Sync + 'static,
    InitFut: Future<Output = Result<S, String>> + 'static,
    Serve: Fn(Rc<S>, ExecutorContext<S>) -> ServeFut + Send + Sync + 'static,
    ServeFut: Future<Output = ()> + 'static,
    Close: Fn(Rc<S>, ExecutorContext<S>) -> CloseFut + Send + Sync + 'static,
    CloseFut: Future<Output = ()> + 'static,
{
    assert!(executors > 0, "a node runs at least one executor");
    let mut senders = Vec::with_capacity(executors);
    let mut receivers = Vec::with_capacity(executors);
    for _ in 0..executors {
        let (tx, rx) = flume::bounded::<Job<S>>(MESH_INBOX_MAX);
        senders.push(tx);
        receivers.push(rx);
    }
    let mesh = Mesh { inboxes: senders.into() };
    let hooks = Arc::new((init, serve, close));
    let ready = Countdown::new(executors);
    let served = Countdown::new(executors);
    let first_error: Arc<std::sync::Mutex<Option<RuntimeError>>> = Arc::default();
    let init_failed = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // Before any executor starts: each one puts itself under watch as its thread begins.
    let watchdog = if options.park_watchdog {
        Some(park::ParkWatchdog::start(options.heartbeat).map_err(RuntimeError::Watchdog)?)
    } else {
        None
    };
    let mut handles = Vec::with_capacity(executors);
    for (i, inbox) in receivers.into_iter().enumerate() {
        let index = ExecutorIndex::new(i);
        let heartbeat_period = options.heartbeat;
        let hooks = Arc::clone(&hooks);
        let (ready, served, first_error) =
            (ready.clone(), served.clone(), Arc::clone(&first_error));
        let init_failed = Arc::clone(&init_failed);
        let pulse = Arc::new(park::Pulse::default());
        let preempt_timer = options.preempt_timer;
        let thread = park::ExecutorThread {
            name: format!("tessera-{i}"),
            builder: move || {
                LocalExecutorBuilder::new(Placement::Unbound)
                    .io_memory(EXECUTOR_IO_MEMORY_BYTES)
                    .blocking_thread_pool_placement(glommio::PoolPlacement::Unbound(
                        EXECUTOR_BLOCKING_THREADS,
                    ))
                    .preempt_timer(preempt_timer)
            },
            watch: watchdog.as_ref().map(|w| (w.watcher(), Arc::clone(&pulse))),
            // If glommio cannot build this executor, the others must not wait for it.
            cannot_start: {
                let (ready, served) = (ready.clone(), served.clone());
                let (first_error, failed) = (Arc::clone(&first_error), Arc::clone(&init_failed));
                let shutdown = shutdown.clone();
                move |source| {
                    failed.store(true, std::sync::atomic::Ordering::SeqCst);
                    record_first(&first_error, RuntimeError::Spawn { index, source });
                    shutdown.trigger();
                    ready.arrive();
                    served.arrive();
                }
            },
        };
        let (mesh, shutdown, beats) = (mesh.clone(), shutdown.clone(), Arc::clone(&pulse));
        let handle = thread
            .spawn(move || async move {
                // First of all: every wait on another thread goes through it.
                let relay = relay::install();
                let ctx = ExecutorContext { index, mesh, shutdown, pulse: Arc::clone(&beats) };
                // From the start, init included: opening fragments waits on I/O too, and an
                // executor once parked for good there (no timer armed) under heavy load. The
                // park watchdog watches its ticks.
                let heartbeat = glommio::spawn_local(park::heartbeat(heartbeat_period, beats));
                let (init, serve, close) = &*hooks;
                let state = match init(ctx.clone()).await {
                    Ok(state) => Rc::new(state),
                    Err(message) => {
                        init_failed.store(true, std::sync::atomic::Ordering::SeqCst);
                        record_first(&first_error, RuntimeError::Init { index, message });
                        ctx.shutdown.trigger();
                        ready.arrive();
                        served.arrive();
                        relay.stop().await;
                        drop(heartbeat);
                        return;
                    }
                };
                // Answer cross-core calls from now until the very end. Detached at once, like
                // the relay: other threads wake it, so its handle must never be dropped late.
                let (drain_stop, drain_done) =
                    (Rc::new(relay::LocalLatch::default()), Rc::new(relay::LocalLatch::default()));
                let (stop_in, done_in, state_in) =
                    (Rc::clone(&drain_stop), Rc::clone(&drain_done), Rc::clone(&state));
                glommio::spawn_local(async move {
                    futures_lite::future::or(drain_inbox(inbox, state_in), stop_in.wait()).await;
                    done_in.fire();
                })
                .detach();
                ready.arrive();
                ready.wait().await;
                // Serve runs even when shutdown has already fired (it must then return promptly),
                // but not when another executor failed to start: the node is not whole.
                if !init_failed.load(std::sync::atomic::Ordering::SeqCst) {
                    serve(Rc::clone(&state), ctx.clone()).await;
                }
                served.arrive();
                // Others may still need this executor's fragments to finish their work.
                served.wait().await;
                close(Rc::clone(&state), ctx.clone()).await;
                // Requests that arrive from now on are dropped with the inbox: their callers
                // see `Dropped` or `Stopped`.
                drain_stop.fire();
                drain_done.wait().await;
                relay.stop().await;
                // Only this thread's timer wakes the heartbeat: dropping its handle is safe.
                drop(heartbeat);
            })
            .map_err(|e| RuntimeError::Spawn { index, source: e.into() })?;
        handles.push((index, handle));
    }
    for (index, handle) in handles {
        if handle.join().is_err() {
            record_first(&first_error, RuntimeError::Panicked(index));
        }
    }
    drop(watchdog);
    let mut slot = first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match slot.take() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn record_first(slot: &std::sync::Mutex<Option<RuntimeError>>, error: RuntimeError) {
    let mut slot = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if slot.is_none() {
        *slot = Some(error);
    }
}

async fn drain_inbox<S: 'static>(inbox: flume::Receiver<Job<S>>, state: Rc<S>) {
    while let Ok(job) = inbox.recv_async().await {
        glommio::spawn_local(job(Rc::clone(&state))).detach();
    }
}

#[cfg(test)]
mod tests;

//! The park watchdog: ends glommio 0.9.0's park with a runnable task. The node's executors and
//! storage's bench run under it (storage's integration tests keep a 60 s preempt timer
//! instead); it lives here, the lowest crate that runs glommio, so storage can use it too.
//!
//! **The race** (glommio 0.9.0, `LocalExecutor::run`, `executor/mod.rs`): every turn of the loop
//! calls `poll_io`, which arms the preempt timer (a timeout in the latency ring, due
//! `preempt_timer` from now), and then `run_task_queues`, whose first step is
//! `if need_preempt() { break }` (the latency ring holds a completion nobody consumed yet). If
//! the preempt timer fires between the two (the thread was descheduled for the whole preempt
//! period, which a loaded machine does with the default 100 ms, or the period is tiny), the round
//! runs nothing and reports "ran nothing". `spin_poll_io` then consumes the timer's completion,
//! which wakes no task, so the loop calls `park()`, and parking (`sys/uring.rs`
//! `Reactor::wait`) looks only at the rings, never at the task queues: it sleeps in
//! `io_uring_enter` until an I/O completion, a foreign wake or the next *pending* timer. A
//! heartbeat timer bounds that sleep only while its timer is pending; once it has fired, the
//! heartbeat is itself one of the runnable tasks, nothing is armed, and the executor sleeps until
//! unrelated I/O arrives, or forever (the hang sessions 3-5 saw, `io_cqring_wait` with no timeout).
//!
//! **The workaround:** one watchdog thread per runtime reads every executor's heartbeat count
//! each [`PARK_WATCHDOG_HEARTBEATS`] heartbeat periods. An executor whose count has not moved
//! gets [`PARK_WATCHDOG_SIGNAL`], whose handler does nothing: `io_uring_enter` returns `EINTR`,
//! glommio takes that as a wake-up, and its next turn arms a fresh preempt timer and runs the
//! task queues. The signal needs nothing registered inside the executor, so it also covers a
//! park before the executor's first task ever ran. A busy executor that did not tick gets a
//! signal too; the handler is installed with `SA_RESTART`, so the signal costs it nothing but
//! the interruption.
//!
//! Use: [`ParkWatchdog::start`] once per set of executors, then build each executor with
//! [`ExecutorThread`] (a watched thread of our own) and spawn [`heartbeat`] on it first. An
//! executor without a heartbeat is signalled at every check (its count never moves): one
//! wake-up per watchdog period, and no pending timer, whose cost is that every park arms and
//! cancels a timeout (storage's bench runs so, see BENCHMARKS.md, branch `park`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};
use std::time::Duration;

/// Heartbeat periods without a tick after which the watchdog interrupts an executor's sleep.
/// With the 5 ms heartbeat, an executor parked with runnable work sleeps at most about two
/// watchdog periods (40 ms) instead of forever; a healthy executor ticks 4 times per check.
pub const PARK_WATCHDOG_HEARTBEATS: u32 = 4;

/// Longest heartbeat period of an idle executor. An executor whose heartbeat finds it idle
/// (at most [`HEARTBEAT_IDLE_POLLS`] task polls since the last tick, the tick's own included)
/// doubles its period up to this, and goes back to its base period at the first tick that
/// finds work. Why: a 5 ms heartbeat woke an idle node's executors 200 times a second each,
/// about 3% of a core for a node doing nothing (BENCHMARKS.md, "Session 32"). The price: the
/// first park race after an idle stretch is bounded by this period (or the watchdog's four of
/// them) instead of the base period; the race needs a 100 ms descheduling to happen at all.
pub const HEARTBEAT_IDLE_MAX: Duration = Duration::from_millis(50);

/// Task polls between two heartbeat ticks, the tick's own included, up to which the executor
/// counts as idle (a lone timer, such as the prepared-transaction sweep, does not keep it busy).
pub const HEARTBEAT_IDLE_POLLS: u64 = 2;

/// The signal that interrupts a parked executor. Its default action is to ignore it, and the
/// node uses no out-of-band TCP data, so nothing else in the process expects it.
pub const PARK_WATCHDOG_SIGNAL: libc::c_int = libc::SIGURG;

/// What one executor and the watchdog share: the executor's heartbeat count and the signals
/// the watchdog sent it.
#[derive(Default, Debug)]
pub struct Pulse {
    /// Times the executor's heartbeat timer has fired.
    heartbeats: AtomicU64,
    /// Times the watchdog signalled the executor.
    kicks: AtomicU64,
    /// The heartbeat's current period in microseconds (0: never published, the base period).
    period_micros: AtomicU64,
}

impl Pulse {
    /// Counts one heartbeat tick (called on the executor).
    fn beat(&self) {
        self.heartbeats.fetch_add(1, Ordering::Relaxed);
    }

    /// Heartbeat ticks so far.
    pub fn heartbeats(&self) -> u64 {
        self.heartbeats.load(Ordering::Relaxed)
    }

    /// Signals the watchdog has sent this executor so far.
    pub fn kicks(&self) -> u64 {
        self.kicks.load(Ordering::Relaxed)
    }

    /// The heartbeat's current period (`None` until the heartbeat published one).
    pub fn period(&self) -> Option<Duration> {
        match self.period_micros.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }

    fn set_period(&self, period: Duration) {
        let micros = u64::try_from(period.as_micros()).unwrap_or(u64::MAX).max(1);
        self.period_micros.store(micros, Ordering::Relaxed);
    }
}

/// One watched executor thread.
struct Slot {
    thread: libc::pthread_t,
    pulse: Arc<Pulse>,
    /// The heartbeat count at the previous check.
    seen: u64,
    /// Time the watchdog has seen the count unmoved since the last move or signal (the sum
    /// of its waits between checks).
    quiet: Duration,
}

/// The watched executor threads. A thread adds itself as it starts and removes itself as it
/// ends ([`Watched`]), so a slot exists only while its thread runs, and the lock is held while
/// signalling: a thread is never signalled after it ended (its `pthread_t` could dangle).
type Slots = Arc<Mutex<Vec<Option<Slot>>>>;

/// The watchdog thread and the executors it watches. Dropping it stops the thread.
pub struct ParkWatchdog {
    slots: Slots,
    /// Dropped to stop the thread.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ParkWatchdog {
    /// Installs the signal handler (once per process) and starts the watchdog thread, which
    /// checks every `PARK_WATCHDOG_HEARTBEATS` of the shortest heartbeat period in force among
    /// the executors it watches (`heartbeat`, the base period, when any runs at it or has not
    /// published one), so an idle node's watchdog backs off with its heartbeats.
    pub fn start(heartbeat: Duration) -> std::io::Result<ParkWatchdog> {
        install_handler()?;
        let slots: Slots = Arc::default();
        let (stop, stopped) = mpsc::channel::<()>();
        let watched = Arc::clone(&slots);
        let thread =
            std::thread::Builder::new().name("tessera-watchdog".to_owned()).spawn(move || {
                // Only the timeout keeps it going: a message or the sender's drop stops it.
                let mut wait = heartbeat.saturating_mul(PARK_WATCHDOG_HEARTBEATS);
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                    wait = check(&watched, heartbeat, wait);
                }
            })?;
        Ok(ParkWatchdog { slots, stop: Some(stop), thread: Some(thread) })
    }

    /// A handle executor threads use to put themselves under watch.
    pub fn watcher(&self) -> Watcher {
        Watcher { slots: Arc::clone(&self.slots) }
    }
}

/// Puts the calling thread under the watchdog's watch. `Send`, so it can move to the thread.
#[derive(Clone)]
pub struct Watcher {
    slots: Slots,
}

impl Watcher {
    /// Watches the calling thread, whose executor's heartbeat counts into `pulse`, until the
    /// returned guard drops. Call it on the executor's thread before the executor runs.
    fn watch_this_thread(&self, pulse: Arc<Pulse>) -> Watched {
        // SAFETY: `pthread_self` has no preconditions.
        let thread = unsafe { libc::pthread_self() };
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = Some(Slot { thread, pulse, seen: 0, quiet: Duration::ZERO });
        // An ended thread's slot is reused, so the table stays as long as the most threads
        // watched at once.
        let at = match slots.iter_mut().enumerate().find(|(_, s)| s.is_none()) {
            Some((free, s)) => {
                *s = slot;
                free
            }
            None => {
                slots.push(slot);
                slots.len() - 1
            }
        };
        Watched { slots: Arc::clone(&self.slots), at }
    }
}

/// A watched thread's slot; dropping it (on that thread, as it ends) ends the watch.
struct Watched {
    slots: Slots,
    at: usize,
}

impl Drop for Watched {
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get_mut(self.at) {
            *slot = None;
        }
    }
}

/// The executor's heartbeat: ticks `pulse` every `period` while the executor works, less often
/// while it idles (up to [`HEARTBEAT_IDLE_MAX`], see [`next_period`]), forever; the period in
/// force is published in `pulse` for the watchdog. Spawn it first on every watched executor
/// (`glommio::spawn_local(heartbeat(..))`): the watchdog reads its ticks, and its pending timer
/// also bounds most parks by itself. It is the executor's only reader of glommio's
/// `executor_stats`, which hands out the counts since the previous call.
pub async fn heartbeat(period: Duration, pulse: Arc<Pulse>) {
    let longest = HEARTBEAT_IDLE_MAX.max(period);
    let mut next = period;
    let _ = glommio::executor().executor_stats();
    loop {
        pulse.set_period(next);
        glommio::timer::sleep(next).await;
        pulse.beat();
        let polls = glommio::executor().executor_stats().tasks_executed();
        next = next_period(next, period, longest, polls);
    }
}

/// The heartbeat's next period after a tick that saw `polls` task polls since the previous
/// one: twice `current` (at most `longest`) when the executor idled, else `base`.
pub fn next_period(current: Duration, base: Duration, longest: Duration, polls: u64) -> Duration {
    if polls <= HEARTBEAT_IDLE_POLLS { current.saturating_mul(2).min(longest) } else { base }
}

/// How long the watchdog lets an executor's heartbeat stay unmoved before signalling it:
/// [`PARK_WATCHDOG_HEARTBEATS`] of its current period (`None`, or anything shorter than the
/// base period `base`, counts as `base`).
pub fn patience(period: Option<Duration>, base: Duration) -> Duration {
    period.unwrap_or(base).max(base).saturating_mul(PARK_WATCHDOG_HEARTBEATS)
}

impl Drop for ParkWatchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The loop cannot panic; a join error would only repeat a panic already reported.
            let _ = thread.join();
        }
    }
}

/// One round of the watchdog, `waited` after the previous one: signal every executor whose
/// heartbeat has stayed unmoved for its [`patience`] (`base`: the heartbeat's base period).
/// Returns the wait until the next round: the smallest patience among the watched executors
/// (the base one's when none is watched).
fn check(slots: &Slots, base: Duration, waited: Duration) -> Duration {
    let mut slots = slots.lock().unwrap_or_else(PoisonError::into_inner);
    let mut next: Option<Duration> = None;
    for slot in slots.iter_mut().flatten() {
        let patience = patience(slot.pulse.period(), base);
        next = Some(next.map_or(patience, |n| n.min(patience)));
        let now = slot.pulse.heartbeats();
        if now != slot.seen {
            slot.seen = now;
            slot.quiet = Duration::ZERO;
            continue;
        }
        slot.quiet = slot.quiet.saturating_add(waited);
        if slot.quiet < patience {
            continue;
        }
        slot.quiet = Duration::ZERO;
        // SAFETY: the slot's thread is running: it removes its slot (under this lock) before
        // it ends, so its `pthread_t` is valid here.
        let rc = unsafe { libc::pthread_kill(slot.thread, PARK_WATCHDOG_SIGNAL) };
        if rc == 0 {
            slot.pulse.kicks.fetch_add(1, Ordering::Relaxed);
        }
    }
    next.unwrap_or_else(|| patience(None, base))
}

/// The handler: its only job is to exist, so that the signal interrupts `io_uring_enter`.
extern "C" fn interrupt_only(_signal: libc::c_int) {}

/// Installs [`interrupt_only`] for [`PARK_WATCHDOG_SIGNAL`] unless the process already handles
/// that signal (any handler interrupts the sleep). Once per process.
fn install_handler() -> std::io::Result<()> {
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let outcome = INSTALLED.get_or_init(|| {
        // SAFETY: `sigaction` is plain data; all-zero is a valid "no handler, empty mask".
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the current one into `old`, a valid pointer.
        if unsafe { libc::sigaction(PARK_WATCHDOG_SIGNAL, std::ptr::null(), &mut old) } != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
            return Ok(());
        }
        // SAFETY: as above, all-zero is a valid `sigaction`.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = interrupt_only as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: `action.sa_mask` is a valid sigset owned by this frame; the handler does
        // nothing, so it is async-signal-safe; `action` is fully initialised.
        let rc = unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(PARK_WATCHDOG_SIGNAL, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        Ok(())
    });
    (*outcome).map_err(std::io::Error::from_raw_os_error)
}

/// One executor on a thread of our own (glommio's `LocalExecutorBuilder::spawn` hides the
/// thread's `pthread_t`, which the watchdog needs).
pub struct ExecutorThread<B, E> {
    /// The thread's name.
    pub name: String,
    /// Makes the executor's builder, on the thread (a builder is not `Send`).
    pub builder: B,
    /// Runs on the thread instead of the executor when glommio cannot build it.
    pub cannot_start: E,
    /// The park watchdog, if it runs, and what it reads (the pulse [`heartbeat`] ticks).
    pub watch: Option<(Watcher, Arc<Pulse>)>,
}

impl<B, E> ExecutorThread<B, E>
where
    B: FnOnce() -> glommio::LocalExecutorBuilder + Send + 'static,
    E: FnOnce(glommio::GlommioError<()>) + Send + 'static,
{
    /// Starts the thread, puts it under watch, builds the executor on it and runs `fut_gen()`
    /// there. The thread ends when that future does.
    pub fn spawn<G, F, T>(self, fut_gen: G) -> std::io::Result<std::thread::JoinHandle<Option<T>>>
    where
        G: FnOnce() -> F + Send + 'static,
        F: std::future::Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let ExecutorThread { name, builder, cannot_start, watch } = self;
        std::thread::Builder::new().name(name).spawn(move || {
            // Held until the thread ends, even by a panic.
            let _watched = watch.map(|(watcher, pulse)| watcher.watch_this_thread(pulse));
            match builder().make() {
                // `fut_gen` runs inside the executor, as with glommio's own `spawn`.
                Ok(executor) => Some(executor.run(async move { fut_gen().await })),
                Err(source) => {
                    cannot_start(source);
                    None
                }
            }
        })
    }
}

/// Heartbeat period of [`run_watched`]'s executor (the node's, `EXECUTOR_HEARTBEAT`, is the same).
pub const RUN_WATCHED_HEARTBEAT: Duration = Duration::from_millis(5);

/// Runs the future `fut_gen` makes on a new executor thread `name`, built by `builder`, with a
/// heartbeat and a watchdog of its own, and returns its output once it ends. For executors
/// that do one job and end (tests, tools); a node's runtime watches its executors itself. A
/// panic on the executor is resumed on the caller, so a test's assertion failure reads as
/// usual. `Err`: the watchdog, the thread or the executor could not start.
pub fn run_watched<B, G, F, T>(name: &str, builder: B, fut_gen: G) -> std::io::Result<T>
where
    B: FnOnce() -> glommio::LocalExecutorBuilder + Send + 'static,
    G: FnOnce() -> F + Send + 'static,
    F: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    let watchdog = ParkWatchdog::start(RUN_WATCHED_HEARTBEAT)?;
    let pulse = Arc::new(Pulse::default());
    let (failed, why) = mpsc::channel();
    let thread = ExecutorThread {
        name: name.to_owned(),
        builder,
        cannot_start: move |e: glommio::GlommioError<()>| {
            let _ = failed.send(e.to_string());
        },
        watch: Some((watchdog.watcher(), Arc::clone(&pulse))),
    };
    let handle = thread.spawn(move || async move {
        // Detached: the executor ends with `fut_gen`'s future, not with this.
        glommio::spawn_local(heartbeat(RUN_WATCHED_HEARTBEAT, pulse)).detach();
        fut_gen().await
    })?;
    let ended = handle.join();
    drop(watchdog);
    match ended {
        Ok(Some(out)) => Ok(out),
        Ok(None) => Err(std::io::Error::other(format!(
            "cannot build executor {name}: {}",
            why.try_recv().unwrap_or_else(|_| "no reason given".to_owned())
        ))),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A preempt timer short enough that rounds often start already preempted, as the default
    /// 100 ms does when a loaded machine deschedules the thread for that long.
    const TEST_PREEMPT_TIMER: Duration = Duration::from_micros(20);

    /// Heartbeat period in these tests (the node's).
    const TEST_HEARTBEAT: Duration = Duration::from_millis(5);

    /// How long a test waits before it calls the executor hung. Only a hang gets here.
    const TEST_HANG_BOUND: Duration = Duration::from_secs(120);

    /// Rounds of local work (override with `TESSERA_STRESS_ITERATIONS` to soak).
    fn rounds() -> u64 {
        std::env::var("TESSERA_STRESS_ITERATIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000)
    }

    /// The executor of the park-race tests: a 20 us preempt timer, so rounds often start
    /// preempted.
    fn racing_executor() -> glommio::LocalExecutorBuilder {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(1 << 20)
            .preempt_timer(TEST_PREEMPT_TIMER)
    }

    /// The park-race workload: `rounds` local tasks spawned and awaited, a 10 us sleep every
    /// 100th; the sum of their outputs, [`race_sum`] when every one ran.
    async fn race(rounds: u64) -> u64 {
        let mut sum = 0;
        for n in 0..rounds {
            sum += glommio::spawn_local(async move { n % 3 }).await;
            if n % 100 == 0 {
                glommio::timer::sleep(Duration::from_micros(10)).await;
            }
        }
        sum
    }

    fn race_sum(rounds: u64) -> u64 {
        (0..rounds).map(|n| n % 3).sum()
    }

    /// Waits, yielding, until `pulse` publishes `want` (a hang fails at the hang bound).
    fn wait_for_period(pulse: &Pulse, want: Duration) {
        let started = std::time::Instant::now();
        while pulse.period() != Some(want) {
            assert!(started.elapsed() < TEST_HANG_BOUND, "period stuck at {:?}", pulse.period());
            std::thread::yield_now();
        }
    }

    // Checks the heartbeat's schedule: idle ticks double the period up to the longest, a tick
    // that saw work goes straight back to the base, and the base never grows past the longest
    // when it is longer itself.
    #[test]
    fn unit_heartbeat_backs_off_while_idle_and_returns_with_work() {
        let (base, longest) = (Duration::from_millis(5), Duration::from_millis(50));
        let mut p = base;
        let mut seen = Vec::new();
        for _ in 0..6 {
            p = next_period(p, base, longest, HEARTBEAT_IDLE_POLLS);
            seen.push(p.as_millis());
        }
        assert_eq!(seen, [10, 20, 40, 50, 50, 50]);
        assert_eq!(next_period(p, base, longest, HEARTBEAT_IDLE_POLLS + 1), base);
        assert_eq!(next_period(base, base, longest, 0), Duration::from_millis(10));
        let long_base = Duration::from_secs(30);
        assert_eq!(next_period(long_base, long_base, long_base, 0), long_base);
    }

    // Checks the watchdog's patience: four base periods for an executor at the base period (or
    // none published, as in the storage bench), four of its own periods for a slower one.
    #[test]
    fn unit_watchdog_waits_four_of_the_executors_periods() {
        let base = Duration::from_millis(5);
        let ms = Duration::from_millis;
        assert_eq!(patience(None, base), ms(20));
        assert_eq!(patience(Some(base), base), ms(20));
        assert_eq!(patience(Some(ms(12)), base), ms(48));
        assert_eq!(patience(Some(HEARTBEAT_IDLE_MAX), base), ms(200));
        assert_eq!(patience(Some(ms(1)), base), ms(20));
    }

    // Checks the watchdog's rounds on real (sleeping) threads: an executor at the base period
    // is signalled at the first round that finds its count unmoved; one at the longest period
    // only once its unmoved time adds up to four of its periods; a moved count resets; the
    // next round comes after the smallest patience among the watched.
    #[test]
    fn unit_check_signals_after_each_executors_own_patience() {
        install_handler().expect("handler");
        let base = Duration::from_millis(5);
        let slots: Slots = Arc::default();
        let (fast, slow) = (Arc::new(Pulse::default()), Arc::new(Pulse::default()));
        slow.set_period(HEARTBEAT_IDLE_MAX);
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let stop_rx = Arc::new(Mutex::new(stop_rx));
        let mut threads = Vec::new();
        for pulse in [&fast, &slow] {
            let (watcher, pulse, stop) =
                (Watcher { slots: Arc::clone(&slots) }, Arc::clone(pulse), Arc::clone(&stop_rx));
            let (ready_tx, ready_rx) = mpsc::channel();
            threads.push(std::thread::spawn(move || {
                let _watched = watcher.watch_this_thread(pulse);
                ready_tx.send(()).expect("ready");
                // Sleeps until the test ends; the signals (SA_RESTART) do not end the wait.
                let _ = stop.lock().unwrap_or_else(PoisonError::into_inner).recv();
            }));
            ready_rx.recv().expect("watched");
        }
        let watchdog_wait = patience(None, base);
        // The first round records the counts (0) as unmoved already: the fast one is due.
        assert_eq!(check(&slots, base, watchdog_wait), watchdog_wait);
        assert_eq!((fast.kicks(), slow.kicks()), (1, 0));
        // Nine more rounds of 20 ms make the slow one's 200 ms: signalled at the tenth.
        for _ in 0..8 {
            check(&slots, base, watchdog_wait);
        }
        assert_eq!(slow.kicks(), 0);
        check(&slots, base, watchdog_wait);
        assert_eq!((fast.kicks(), slow.kicks()), (10, 1));
        // A tick resets the count; with both at the longest period the rounds slow down.
        fast.set_period(HEARTBEAT_IDLE_MAX);
        fast.beat();
        assert_eq!(check(&slots, base, watchdog_wait), patience(Some(HEARTBEAT_IDLE_MAX), base));
        assert_eq!(fast.kicks(), 10);
        drop(stop_tx);
        for t in threads {
            t.join().expect("thread");
        }
    }

    // Checks the back-off on a real executor: with nothing to do but its heartbeat (1 ms base),
    // the published period reaches the longest; then a burst of work brings it back to the
    // base. The test thread watches the pulse from outside (yielding, bounded by the hang
    // bound); the executor waits on a channel from this thread, which polls nothing meanwhile.
    #[test]
    fn idle_heartbeat_backs_off_and_work_brings_it_back() {
        let base = Duration::from_millis(1);
        let pulse = Arc::new(Pulse::default());
        let beats = Arc::clone(&pulse);
        let (go_tx, go_rx) = flume::bounded::<()>(1);
        let (done_tx, done_rx) = mpsc::channel();
        let thread = ExecutorThread {
            name: "park-test-idle".to_owned(),
            builder: || glommio::LocalExecutorBuilder::default().io_memory(1 << 20),
            cannot_start: |e| panic!("cannot build the executor: {e}"),
            watch: None,
        };
        let executor = thread
            .spawn(move || async move {
                glommio::spawn_local(heartbeat(base, beats)).detach();
                // Work until told to stop: each round is a burst of task polls.
                while go_rx.recv_async().await.is_ok() {
                    for n in 0..64u64 {
                        glommio::spawn_local(async move { n }).await;
                    }
                    let _ = done_tx.send(());
                }
            })
            .expect("thread");
        wait_for_period(&pulse, HEARTBEAT_IDLE_MAX);
        // Work every time the heartbeat ticks until a tick sees it: the period is the base.
        let mut bursts = 0;
        while pulse.period() != Some(base) {
            assert!(bursts < 1_000_000, "work never brought the period back");
            go_tx.send(()).expect("executor alive");
            done_rx.recv_timeout(TEST_HANG_BOUND).expect("burst done");
            bursts += 1;
        }
        drop(go_tx);
        executor.join().expect("executor thread");
    }

    // Checks run_watched returns the future's output, and resumes an executor's panic on the
    // caller with its own message (so a test assertion inside still reads as itself).
    #[test]
    fn unit_run_watched_returns_output_and_resumes_panics() {
        let builder = || glommio::LocalExecutorBuilder::default().io_memory(1 << 20);
        let out = run_watched("run-watched-ok", builder, || async {
            glommio::timer::sleep(Duration::from_millis(1)).await;
            41 + 1
        });
        assert_eq!(out.expect("runs"), 42);
        let caught = std::panic::catch_unwind(|| {
            run_watched("run-watched-panics", builder, || async {
                panic!("assertion inside the executor");
            })
        });
        let payload = caught.expect_err("the panic reaches the caller");
        let message = payload.downcast_ref::<&str>().copied().unwrap_or_default();
        assert_eq!(message, "assertion inside the executor");
    }

    // Checks that a watched executor parked with runnable tasks is woken: with a 20 us preempt
    // timer glommio 0.9.0 often starts a round already preempted and parks with no timer
    // armed. One executor spawns and awaits local tasks and sleeps on short timers; it must
    // finish. With `TESSERA_PARK_WATCHDOG=off` (no watchdog) it hangs in a large share of runs
    // and the test fails at its hang bound.
    #[test]
    fn watched_executor_parked_with_runnable_tasks_is_woken() {
        let rounds = rounds();
        let on = std::env::var("TESSERA_PARK_WATCHDOG").map_or(true, |v| v != "off");
        let watchdog = ParkWatchdog::start(TEST_HEARTBEAT).expect("watchdog");
        let pulse = Arc::new(Pulse::default());
        let (done_tx, done_rx) = mpsc::channel();
        let beats = Arc::clone(&pulse);
        let thread = ExecutorThread {
            name: "park-test".to_owned(),
            builder: racing_executor,
            cannot_start: |e| panic!("cannot build the executor: {e}"),
            watch: on.then(|| (watchdog.watcher(), Arc::clone(&pulse))),
        };
        // Not joined: a hung executor thread is left behind and the test fails.
        let _executor = thread
            .spawn(move || async move {
                glommio::spawn_local(heartbeat(TEST_HEARTBEAT, beats)).detach();
                let _ = done_tx.send(race(rounds).await);
            })
            .expect("thread");
        let sum = done_rx.recv_timeout(TEST_HANG_BOUND).unwrap_or_else(|_| {
            panic!("the executor hung for {TEST_HANG_BOUND:?} (watchdog {on})")
        });
        assert_eq!(sum, race_sum(rounds));
        // Not asserted: whether the race happened in this run depends on the machine.
        eprintln!("park watchdog signals: {}", pulse.kicks());
    }

    // Checks the back-off's price is bounded, not a hang: an executor idle long enough for its
    // heartbeat to reach the longest period (and the watchdog to slow down with it) then runs
    // the park-race workload above (20 us preempt timer). It must finish: the first races after
    // the idle stretch are ended by the 50 ms timer or the watchdog's 200 ms patience.
    #[test]
    fn parked_right_after_an_idle_stretch_is_woken() {
        let rounds = rounds() / 10;
        let watchdog = ParkWatchdog::start(TEST_HEARTBEAT).expect("watchdog");
        let pulse = Arc::new(Pulse::default());
        let beats = Arc::clone(&pulse);
        let (go_tx, go_rx) = flume::bounded::<()>(1);
        let (done_tx, done_rx) = mpsc::channel();
        let thread = ExecutorThread {
            name: "park-test-after-idle".to_owned(),
            builder: racing_executor,
            cannot_start: |e| panic!("cannot build the executor: {e}"),
            watch: Some((watchdog.watcher(), Arc::clone(&pulse))),
        };
        // Not joined: a hung executor thread is left behind and the test fails.
        let _executor = thread
            .spawn(move || async move {
                glommio::spawn_local(heartbeat(TEST_HEARTBEAT, beats)).detach();
                if go_rx.recv_async().await.is_ok() {
                    let _ = done_tx.send(race(rounds).await);
                }
            })
            .expect("thread");
        wait_for_period(&pulse, HEARTBEAT_IDLE_MAX);
        go_tx.send(()).expect("executor alive");
        let sum = done_rx.recv_timeout(TEST_HANG_BOUND).unwrap_or_else(|_| {
            panic!("the executor hung for {TEST_HANG_BOUND:?} after an idle stretch")
        });
        assert_eq!(sum, race_sum(rounds));
        eprintln!("park watchdog signals after idling: {}", pulse.kicks());
    }

    // Checks that a thread leaves the watchdog's table as it ends (it must never be signalled
    // once gone): while the executor runs its slot is in use, after the join it is empty.
    #[test]
    fn an_ended_thread_is_no_longer_watched() {
        let watched = |slots: &Slots| {
            slots.lock().unwrap_or_else(PoisonError::into_inner).iter().flatten().count()
        };
        let watchdog = ParkWatchdog::start(TEST_HEARTBEAT).expect("watchdog");
        let thread = ExecutorThread {
            name: "park-test-end".to_owned(),
            builder: glommio::LocalExecutorBuilder::default,
            cannot_start: |e| panic!("cannot build the executor: {e}"),
            watch: Some((watchdog.watcher(), Arc::new(Pulse::default()))),
        };
        let slots = Arc::clone(&watchdog.slots);
        let during = thread
            .spawn(move || async move { watched(&slots) })
            .expect("thread")
            .join()
            .expect("join");
        assert_eq!(during, Some(1));
        assert_eq!(watched(&watchdog.slots), 0);
    }
}

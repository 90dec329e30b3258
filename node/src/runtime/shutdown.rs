//! Cross-thread signals an async task can wait for: the node-wide shutdown, and a countdown
//! that fires when every executor has reached a point.
//!
//! Both are built on a flume channel whose sender is dropped to fire: every receiver, on any
//! thread, wakes with `Disconnected`. That gives a broadcast without a runtime of its own.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A one-shot broadcast: `trigger` once, every `wait` (past and future) returns.
#[derive(Clone)]
pub struct Shutdown {
    inner: Arc<Latch>,
}

pub(super) struct Latch {
    pub(super) fired: AtomicBool,
    sender: Mutex<Option<flume::Sender<()>>>,
    receiver: flume::Receiver<()>,
}

impl Latch {
    fn new() -> Latch {
        let (tx, rx) = flume::bounded(1);
        Latch { fired: AtomicBool::new(false), sender: Mutex::new(Some(tx)), receiver: rx }
    }

    fn fire(&self) {
        self.fired.store(true, Ordering::SeqCst);
        let mut sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        drop(sender.take());
    }

    async fn wait(&self) {
        // Nothing is ever sent, so this returns only on disconnection, when `fire` has run.
        // The firing thread wakes a relay, never the waiting task itself.
        let _ = super::relayed(self.receiver.recv_async()).await;
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A signal that has not fired.
    pub fn new() -> Shutdown {
        Shutdown { inner: Arc::new(Latch::new()) }
    }

    /// Fires the signal. Idempotent.
    pub fn trigger(&self) {
        self.inner.fire();
    }

    /// Whether it has fired.
    pub fn is_triggered(&self) -> bool {
        self.inner.fired.load(Ordering::SeqCst)
    }

    /// Returns once the signal has fired.
    pub async fn wait(&self) {
        self.inner.wait().await;
    }
}

/// Fires once `count` parties have called `arrive`.
#[derive(Clone)]
pub struct Countdown {
    remaining: Arc<AtomicUsize>,
    pub(super) latch: Arc<Latch>,
}

impl std::fmt::Debug for Countdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Countdown")
            .field("remaining", &self.remaining.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl Countdown {
    /// A countdown of `count` arrivals.
    pub fn new(count: usize) -> Countdown {
        let countdown = Countdown {
            remaining: Arc::new(AtomicUsize::new(count)),
            latch: Arc::new(Latch::new()),
        };
        if count == 0 {
            countdown.latch.fire();
        }
        countdown
    }

    /// One party has arrived. Arrivals past `count` are ignored.
    pub fn arrive(&self) {
        let before = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before == 1 {
            self.latch.fire();
        }
    }

    /// Returns once every party has arrived.
    pub async fn wait(&self) {
        self.latch.wait().await;
    }
}

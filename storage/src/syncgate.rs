//! An executor-wide gate on the group commits in flight across the fragments of one executor.
//!
//! Each fragment group-commits on its own: one chunk, one O_DIRECT write, one fdatasync. With
//! several fragments on one executor under load, every fragment starts a chunk as soon as a
//! record is queued, so the groups stay small and the executor pays one fdatasync (tens of µs
//! of CPU in the thread that runs it, ext4 and the block layer) for one or two records. A
//! [`SyncGate`] shared by those fragments lets at most `limit` chunks be written and synced at
//! once; a fragment that finds the gate full waits its turn (first come, first served) while
//! its records keep queueing, and when its turn comes they go out as one bigger chunk, the way
//! a single write-ahead log's flush covers everything queued behind it. A lone writer finds the
//! gate open and starts its chunk at once: the gate adds no delay and no timer.
//!
//! The gate only delays when a chunk starts. It never reorders a fragment's chunks (they still
//! complete in log order), never lets a record be acknowledged before its fdatasync, and a
//! failed write or fdatasync stays fatal for its fragment only (its permits are released with
//! its chunks). A fragment holds a permit only from the start of a chunk to the end of its
//! fdatasync, and waits for one only while holding none it has not launched, so fragments never
//! wait on each other in a cycle.
//!
//! Everything here is executor-local (`Rc`, `Cell`): one gate per executor thread.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::limits::SYNC_GATE_LIMIT_MAX;

/// Counters of one gate, since it was made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SyncGateStats {
    /// Chunks started at once: the gate had a free permit and nobody waiting.
    pub immediate: u64,
    /// Chunks that waited for a permit (another fragment's chunk was in flight).
    pub waited: u64,
    /// Waits given up before the permit came (the fragment closed or failed meanwhile).
    pub abandoned: u64,
    /// Most permits held at once.
    pub peak: usize,
}

/// Why a gate limit is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sync gate limit {given} is outside 1..={max}", max = SYNC_GATE_LIMIT_MAX)]
pub struct SyncGateLimitError {
    /// The limit asked for.
    pub given: usize,
}

struct Waiter {
    /// Set when a released permit was handed to this waiter (counted in `held`).
    granted: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

struct GateState {
    limit: usize,
    /// Permits held, including ones granted to a waiter that has not taken it yet.
    held: Cell<usize>,
    waiting: RefCell<VecDeque<Rc<Waiter>>>,
    stats: Cell<SyncGateStats>,
}

impl GateState {
    fn bump(&self, f: impl FnOnce(&mut SyncGateStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        s.peak = s.peak.max(self.held.get());
        self.stats.set(s);
    }

    /// Gives a permit back: to the first waiter if there is one, else to the gate.
    fn release(&self) {
        let next = self.waiting.borrow_mut().pop_front();
        match next {
            Some(w) => {
                w.granted.set(true);
                if let Some(waker) = w.waker.take() {
                    waker.wake();
                }
            }
            None => self.held.set(self.held.get().saturating_sub(1)),
        }
    }
}

/// The gate shared by the fragments of one executor: at most `limit` group commits (chunk
/// write + fdatasync) in flight at once. Cloning shares the gate.
#[derive(Clone)]
pub struct SyncGate {
    state: Rc<GateState>,
}

impl fmt::Debug for SyncGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncGate")
            .field("limit", &self.state.limit)
            .field("held", &self.state.held.get())
            .field("waiting", &self.state.waiting.borrow().len())
            .finish()
    }
}

impl SyncGate {
    /// A gate letting `limit` group commits run at once, `1 ..= SYNC_GATE_LIMIT_MAX`.
    pub fn new(limit: usize) -> Result<SyncGate, SyncGateLimitError> {
        if limit == 0 || limit > SYNC_GATE_LIMIT_MAX {
            return Err(SyncGateLimitError { given: limit });
        }
        Ok(SyncGate {
            state: Rc::new(GateState {
                limit,
                held: Cell::new(0),
                waiting: RefCell::default(),
                stats: Cell::default(),
            }),
        })
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.state.limit
    }

    /// Permits held right now.
    pub fn held(&self) -> usize {
        self.state.held.get()
    }

    /// Fragments waiting for a permit right now.
    pub fn waiting(&self) -> usize {
        self.state.waiting.borrow().len()
    }

    /// The counters.
    pub fn stats(&self) -> SyncGateStats {
        self.state.stats.get()
    }

    /// A permit now if one is free and nobody waits, else a place in the queue.
    pub fn request(&self) -> Result<SyncPermit, SyncTicket> {
        let st = &self.state;
        if st.held.get() < st.limit && st.waiting.borrow().is_empty() {
            st.held.set(st.held.get() + 1);
            st.bump(|s| s.immediate += 1);
            return Ok(SyncPermit { gate: Some(self.clone()) });
        }
        let waiter = Rc::new(Waiter { granted: Cell::new(false), waker: Cell::new(None) });
        st.waiting.borrow_mut().push_back(waiter.clone());
        st.bump(|s| s.waited += 1);
        Err(SyncTicket { gate: self.clone(), waiter: Some(waiter) })
    }

    /// Waits for a permit (first come, first served).
    pub async fn acquire(&self) -> SyncPermit {
        match self.request() {
            Ok(permit) => permit,
            Err(mut ticket) => std::future::poll_fn(|cx| ticket.poll_permit(cx)).await,
        }
    }
}

/// The right to run one group commit. Dropping it lets the next one start.
#[must_use = "dropping a permit releases it at once"]
pub struct SyncPermit {
    gate: Option<SyncGate>,
}

impl fmt::Debug for SyncPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncPermit").finish_non_exhaustive()
    }
}

impl Drop for SyncPermit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.state.release();
        }
    }
}

/// A place in a gate's queue. Dropping it gives up the place (or passes on a permit granted
/// and not taken).
pub struct SyncTicket {
    gate: SyncGate,
    /// `None` once the permit was taken.
    waiter: Option<Rc<Waiter>>,
}

impl fmt::Debug for SyncTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncTicket").finish_non_exhaustive()
    }
}

impl SyncTicket {
    /// `Ready` with the permit once a released one was handed to this ticket; registers the
    /// task's waker otherwise. After `Ready`, polling again waits in the queue anew.
    pub fn poll_permit(&mut self, cx: &mut Context<'_>) -> Poll<SyncPermit> {
        let Some(waiter) = self.waiter.as_ref() else {
            // Taken already: queue again rather than hand out a second permit.
            match self.gate.request() {
                Ok(permit) => return Poll::Ready(permit),
                Err(mut again) => {
                    self.waiter = again.waiter.take();
                    return self.poll_permit(cx);
                }
            }
        };
        if waiter.granted.get() {
            self.waiter = None;
            return Poll::Ready(SyncPermit { gate: Some(self.gate.clone()) });
        }
        waiter.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for SyncTicket {
    fn drop(&mut self) {
        let Some(waiter) = self.waiter.take() else { return };
        let st = &self.gate.state;
        st.bump(|s| s.abandoned += 1);
        if waiter.granted.get() {
            // The permit came and nobody will use it: pass it on.
            st.release();
        } else {
            st.waiting.borrow_mut().retain(|w| !Rc::ptr_eq(w, &waiter));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    struct Flag(std::sync::atomic::AtomicUsize);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Flag>, Waker) {
        let flag = Arc::new(Flag(std::sync::atomic::AtomicUsize::new(0)));
        (flag.clone(), Waker::from(flag))
    }

    fn woken(flag: &Flag) -> usize {
        flag.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn unit_limits_are_checked() {
        assert_eq!(SyncGate::new(0).err(), Some(SyncGateLimitError { given: 0 }));
        assert!(SyncGate::new(SYNC_GATE_LIMIT_MAX + 1).is_err());
        assert_eq!(SyncGate::new(SYNC_GATE_LIMIT_MAX).map(|g| g.limit()).ok(), Some(64));
    }

    #[test]
    fn unit_free_permits_come_at_once_and_count() {
        let gate = SyncGate::new(2).expect("gate");
        let a = gate.request().expect("free");
        let b = gate.request().expect("free");
        assert_eq!(gate.held(), 2);
        let c = gate.request();
        assert!(c.is_err(), "the third waits");
        drop(c);
        drop(a);
        drop(b);
        assert_eq!(gate.held(), 0);
        assert_eq!(gate.stats(), SyncGateStats { immediate: 2, waited: 1, abandoned: 1, peak: 2 });
    }

    #[test]
    fn unit_released_permit_goes_to_the_first_waiter() {
        let gate = SyncGate::new(1).expect("gate");
        let held = gate.request().expect("free");
        let (f1, w1) = waker();
        let (f2, w2) = waker();
        let mut first = gate.request().expect_err("waits");
        let mut second = gate.request().expect_err("waits");
        assert!(first.poll_permit(&mut Context::from_waker(&w1)).is_pending());
        assert!(second.poll_permit(&mut Context::from_waker(&w2)).is_pending());
        assert_eq!(gate.waiting(), 2);
        drop(held);
        assert_eq!((woken(&f1), woken(&f2)), (1, 0), "only the first is woken");
        assert_eq!(gate.held(), 1, "the permit moved to the first waiter");
        // A newcomer does not overtake the second waiter.
        assert!(gate.request().is_err());
        let p1 = match first.poll_permit(&mut Context::from_waker(&w1)) {
            Poll::Ready(p) => p,
            Poll::Pending => panic!("granted"),
        };
        assert!(second.poll_permit(&mut Context::from_waker(&w2)).is_pending());
        drop(p1);
        assert_eq!(woken(&f2), 1);
        assert!(matches!(second.poll_permit(&mut Context::from_waker(&w2)), Poll::Ready(_)));
        assert_eq!(gate.held(), 0);
        assert_eq!(gate.waiting(), 0);
    }

    #[test]
    fn unit_a_dropped_ticket_passes_its_grant_on() {
        let gate = SyncGate::new(1).expect("gate");
        let held = gate.request().expect("free");
        let (_f1, w1) = waker();
        let (f2, w2) = waker();
        let mut first = gate.request().expect_err("waits");
        let mut second = gate.request().expect_err("waits");
        assert!(first.poll_permit(&mut Context::from_waker(&w1)).is_pending());
        assert!(second.poll_permit(&mut Context::from_waker(&w2)).is_pending());
        drop(held);
        // The first waiter gives up after its permit was granted: the second gets it.
        drop(first);
        assert_eq!(woken(&f2), 1);
        let p2 = match second.poll_permit(&mut Context::from_waker(&w2)) {
            Poll::Ready(p) => p,
            Poll::Pending => panic!("passed on"),
        };
        assert_eq!(gate.held(), 1);
        drop(p2);
        assert_eq!(gate.held(), 0);
        assert_eq!(gate.stats().abandoned, 1);
    }

    #[test]
    fn unit_a_dropped_waiting_ticket_leaves_the_queue() {
        let gate = SyncGate::new(1).expect("gate");
        let held = gate.request().expect("free");
        let ticket = gate.request().expect_err("waits");
        assert_eq!(gate.waiting(), 1);
        drop(ticket);
        assert_eq!(gate.waiting(), 0);
        drop(held);
        assert_eq!(gate.held(), 0);
        assert!(gate.request().is_ok(), "free again");
    }
}

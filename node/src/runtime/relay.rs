//! Cross-thread wake-ups that never hand a glommio waker to another thread.
//!
//! glommio 0.9.0's wakers are `Send` but not safe to wake or drop on a foreign thread for a
//! task that can finish: a foreign `drop_waker` decrements the task's reference count to zero
//! and only then clones the waker again to queue it on the owner, and in that window the
//! owner, dropping the task's `JoinHandle` (which *loads* the count and destroys the task when
//! it reads zero), frees the memory the foreign thread is about to touch. The queued dangling
//! waker then crashes the owner in `RawTask::do_wake`.
//!
//! So every executor runs one permanent *relay* task. A task that waits for another thread
//! registers a slot here and gives the other thread only a thread-safe address: a proxy waker
//! (an `Arc` around the relay's channel sender and the slot id) or a [`ReplyTo`]. The other
//! thread sends a [`Signal`] on the relay's channel, which wakes the relay task (permanent,
//! detached at spawn, so its lifetime is decided only by atomic reference counts), and the
//! relay wakes the waiting task with its own waker, on its own thread.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// A reply that crossed threads, type-erased (the caller downcasts it to what it asked for).
pub(super) type Answer = Box<dyn Any + Send>;

/// What another thread sends to an executor's relay.
enum Signal {
    /// A proxy waker of slot `id` was woken.
    Wake(u64),
    /// The answer to the call waiting in slot `id` (`None`: it was dropped unanswered).
    Reply(u64, Option<Answer>),
}

/// One waiting task's place in its executor's relay.
#[derive(Default)]
struct Slot {
    waker: Option<Waker>,
    reply: Option<Option<Answer>>,
}

/// An executor's relay: its channel, and the slots of the tasks waiting for other threads.
struct Relay {
    /// Tells this relay from a later one on the same thread (a future keeps its relay's key).
    key: u64,
    sender: flume::Sender<Signal>,
    next: Cell<u64>,
    slots: RefCell<HashMap<u64, Slot>>,
}

/// Keys of relays, unique in the process.
static RELAY_KEYS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's relay, while its executor runs one.
    static RELAY: RefCell<Option<Rc<Relay>>> = const { RefCell::new(None) };
}

fn current() -> Option<Rc<Relay>> {
    RELAY.try_with(|r| r.borrow().clone()).ok().flatten()
}

/// Runs `f` on this thread's relay if it is the one with `key`.
fn with_relay<T>(key: u64, f: impl FnOnce(&Relay) -> T) -> Option<T> {
    current().filter(|r| r.key == key).map(|r| f(&r))
}

impl Relay {
    fn open(&self) -> u64 {
        let id = self.next.get();
        self.next.set(id + 1);
        self.slots.borrow_mut().insert(id, Slot::default());
        id
    }

    fn close(&self, id: u64) {
        // The slot's waker is dropped here, on its own thread.
        let slot = self.slots.borrow_mut().remove(&id);
        drop(slot);
    }

    /// Remembers `waker` as the one to wake for slot `id`; false if the slot is gone.
    fn park(&self, id: u64, waker: &Waker) -> bool {
        let mut slots = self.slots.borrow_mut();
        let Some(slot) = slots.get_mut(&id) else { return false };
        match &slot.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => slot.waker = Some(waker.clone()),
        }
        true
    }

    fn deliver(&self, signal: Signal) {
        let waker = {
            let mut slots = self.slots.borrow_mut();
            match signal {
                Signal::Wake(id) => slots.get_mut(&id).and_then(|s| s.waker.take()),
                Signal::Reply(id, answer) => match slots.get_mut(&id) {
                    Some(slot) => {
                        slot.reply = Some(answer);
                        slot.waker.take()
                    }
                    // The caller went away; its answer is dropped here, on the caller's thread.
                    None => None,
                },
            }
        };
        // Woken with no borrow held: a local wake only schedules the task.
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A one-shot signal between tasks of one executor.
#[derive(Default)]
pub(super) struct LocalLatch {
    fired: Cell<bool>,
    waiters: RefCell<Vec<Waker>>,
}

impl LocalLatch {
    /// Fires the latch and wakes its waiters (locally).
    pub(super) fn fire(&self) {
        self.fired.set(true);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for waker in waiters {
            waker.wake();
        }
    }

    /// Returns once the latch has fired.
    pub(super) async fn wait(&self) {
        std::future::poll_fn(|cx| {
            if self.fired.get() {
                return Poll::Ready(());
            }
            let mut waiters = self.waiters.borrow_mut();
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
    }
}

/// This executor's relay, installed by the runtime; [`Installed::stop`] ends it.
pub(super) struct Installed {
    stop: Rc<LocalLatch>,
    done: Rc<LocalLatch>,
}

/// Installs a relay on this executor's thread and starts its task.
pub(super) fn install() -> Installed {
    let (sender, receiver) = flume::unbounded();
    let relay = Rc::new(Relay {
        key: RELAY_KEYS.fetch_add(1, Ordering::Relaxed),
        sender,
        next: Cell::new(0),
        slots: RefCell::default(),
    });
    RELAY.with(|r| *r.borrow_mut() = Some(Rc::clone(&relay)));
    let (stop, done) = (Rc::new(LocalLatch::default()), Rc::new(LocalLatch::default()));
    let (stop_in, done_in) = (Rc::clone(&stop), Rc::clone(&done));
    // Detached at once: a JoinHandle dropped later would read the reference count that foreign
    // wakers change (see the module comment); a detached task is freed by the count alone.
    glommio::spawn_local(async move {
        let serve = async {
            while let Ok(signal) = receiver.recv_async().await {
                relay.deliver(signal);
                while let Ok(signal) = receiver.try_recv() {
                    relay.deliver(signal);
                }
            }
        };
        futures_lite::future::or(serve, stop_in.wait()).await;
        drop(relay);
        done_in.fire();
    })
    .detach();
    Installed { stop, done }
}

impl Installed {
    /// Uninstalls the relay and waits for its task to end. Tasks still waiting on it then
    /// see their calls dropped; call this last, once the executor's work is done.
    pub(super) async fn stop(self) {
        let _ = RELAY.try_with(|r| r.borrow_mut().take());
        self.stop.fire();
        self.done.wait().await;
    }
}

/// Where a call's answer goes: the caller executor's relay and the caller's slot. Dropping it
/// unanswered tells the caller its call was dropped.
pub(super) struct ReplyTo {
    sender: flume::Sender<Signal>,
    id: u64,
    answered: bool,
}

impl ReplyTo {
    /// Sends the answer (from any thread). A caller that went away simply never reads it.
    pub(super) fn send(mut self, answer: Answer) {
        self.answered = true;
        let _ = self.sender.send(Signal::Reply(self.id, Some(answer)));
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        if !self.answered {
            let _ = self.sender.send(Signal::Reply(self.id, None));
        }
    }
}

/// The caller's end of a call through the relay: resolves to the answer, or `None` when the
/// request was dropped unanswered (or the relay has stopped).
pub(super) struct Awaiting {
    key: u64,
    id: u64,
}

/// A reply slot on this thread's relay, or `None` when this thread runs no relay (the caller
/// is not on one of our executors, and its waker is thread-safe).
pub(super) fn open_reply() -> Option<(Awaiting, ReplyTo)> {
    let relay = current()?;
    let id = relay.open();
    let reply = ReplyTo { sender: relay.sender.clone(), id, answered: false };
    Some((Awaiting { key: relay.key, id }, reply))
}

impl Future for Awaiting {
    type Output = Option<Answer>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Answer>> {
        let (key, id) = (self.key, self.id);
        let answer = with_relay(key, |relay| {
            let reply = relay.slots.borrow_mut().get_mut(&id).and_then(|slot| slot.reply.take());
            if reply.is_none() {
                relay.park(id, cx.waker());
            }
            reply
        });
        match answer {
            Some(Some(answer)) => Poll::Ready(answer),
            Some(None) => Poll::Pending,
            None => Poll::Ready(None),
        }
    }
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        let id = self.id;
        with_relay(self.key, |relay| relay.close(id));
    }
}

/// A waker that another thread may wake or drop freely: waking it sends a signal to the
/// waiting task's relay.
struct Proxy {
    sender: flume::Sender<Signal>,
    id: u64,
}

impl Wake for Proxy {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.sender.send(Signal::Wake(self.id));
    }
}

/// A future whose inner future sees a proxy waker instead of its task's glommio waker when it
/// runs on one of our executors, so that whatever thread wakes it, the task is woken on its
/// own thread. Off our executors it polls the inner future unchanged.
pub struct Relayed<F> {
    inner: Pin<Box<F>>,
    proxy: Option<(u64, u64, Waker)>,
}

/// Wraps `future` (one that another thread completes: a flume channel, a cross-thread latch)
/// so that only its executor's permanent relay task is ever woken from another thread.
pub fn relayed<F: Future>(future: F) -> Relayed<F> {
    Relayed { inner: Box::pin(future), proxy: None }
}

impl<F: Future> Future for Relayed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if this.proxy.is_none()
            && let Some(relay) = current()
        {
            let id = relay.open();
            let proxy = Waker::from(Arc::new(Proxy { sender: relay.sender.clone(), id }));
            this.proxy = Some((relay.key, id, proxy));
        }
        if let Some((key, id, proxy)) = &this.proxy
            && with_relay(*key, |relay| relay.park(*id, cx.waker())) == Some(true)
        {
            return this.inner.as_mut().poll(&mut Context::from_waker(proxy));
        }
        // No relay here (or it has stopped, at the executor's very end): the caller's own
        // waker is the only one left to use.
        this.inner.as_mut().poll(cx)
    }
}

impl<F> Drop for Relayed<F> {
    fn drop(&mut self) {
        if let Some((key, id, _)) = &self.proxy {
            let id = *id;
            with_relay(*key, |relay| relay.close(id));
        }
    }
}

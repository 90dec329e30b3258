//! The engine's [`FragmentHost`]: handoff steps the control plane asks for, run on the
//! executors with the `Core` fragment lifecycle API (`open_fragment`, `fence_fragment`,
//! `unfence_fragment`, `close_fragment`, `fragment_handle`).
//!
//! The bridge: the control plane (tokio) sends a [`HostRequest`] on a bounded flume channel
//! (`send_async` is runtime-agnostic) and awaits a tokio oneshot; a task on executor 0 receives
//! each request, runs it on the executor holding the fragment (`Mesh::call`) and answers on the
//! oneshot (a plain, synchronous `send`). So the control plane never awaits a glommio future
//! and no executor awaits a tokio one. The executor task's wait is `runtime::relayed`: a send
//! from the control plane's thread wakes executor 0's relay, never a glommio task's waker.
//!
//! An export stream lives on its fragment's executor (`storage::Export` holds an `Rc`), keyed
//! by fragment; `fence` (always a handoff's first step) drops a leftover one of an aborted
//! handoff, so every handoff exports from the start, after its fence.
//!
//! Requests for one fragment run one at a time, in arrival order ([`one_at_a_time`]): a
//! handoff's `CreateEmpty` and a reconcile's `Delete` of the copy an aborted handoff left (or
//! a retried step and the late original) would otherwise interleave, one removing the
//! directory the other is opening a log in (session 30: glommio panicked on the vanished
//! directory and took the executor down).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use router::{FragmentId, ShardRange};
use tokio::sync::oneshot;

use crate::cluster::handoff::{FragmentHost, HostError, HostFuture, install_host};
use crate::cluster::limits::{
    HANDOFF_FENCE_POLL_MS, HANDOFF_FENCE_PREPARED_WAIT_MS, HOST_REQUESTS_MAX,
};
use crate::engine::Core;
use crate::runtime::{ExecutorContext, ExecutorIndex, Mesh, relayed};

type Reply<T> = oneshot::Sender<Result<T, HostError>>;

/// One handoff step for the executors.
#[derive(Debug)]
pub enum HostRequest {
    /// `FragmentHost::fence`.
    Fence(u32, Reply<()>),
    /// `FragmentHost::unfence`.
    Unfence(u32, Reply<()>),
    /// `FragmentHost::export_next`: the fragment, and the sub-range if not the whole.
    Export(u32, Option<(u32, u32)>, Reply<Option<Vec<u8>>>),
    /// `FragmentHost::create_empty`.
    CreateEmpty {
        /// The fragment.
        fragment: u32,
        /// First shard.
        start: u32,
        /// One past the last shard.
        end: u32,
        /// The executor to open it on.
        executor: u32,
        /// The answer.
        reply: Reply<()>,
    },
    /// `FragmentHost::import`.
    Import(u32, Vec<u8>, Reply<u64>),
    /// `FragmentHost::delete`.
    Delete(u32, u64, Reply<()>),
    /// `FragmentHost::local`.
    Local(Reply<Vec<u32>>),
}

/// The control plane's end of the bridge.
#[derive(Debug, Clone)]
pub struct BridgeHost {
    requests: flume::Sender<HostRequest>,
}

impl BridgeHost {
    fn ask<T: Send + 'static>(&self, make: impl FnOnce(Reply<T>) -> HostRequest) -> HostFuture<T> {
        let (tx, rx) = oneshot::channel();
        let request = make(tx);
        let requests = self.requests.clone();
        Box::pin(async move {
            let stopped = || HostError::Stopped;
            requests.send_async(request).await.map_err(|_| stopped())?;
            rx.await.map_err(|_| stopped())?
        })
    }
}

impl FragmentHost for BridgeHost {
    fn fence(&self, fragment: u32) -> HostFuture<()> {
        self.ask(|r| HostRequest::Fence(fragment, r))
    }
    fn unfence(&self, fragment: u32) -> HostFuture<()> {
        self.ask(|r| HostRequest::Unfence(fragment, r))
    }
    fn export_next(
        &self,
        fragment: u32,
        within: Option<(u32, u32)>,
    ) -> HostFuture<Option<Vec<u8>>> {
        self.ask(|r| HostRequest::Export(fragment, within, r))
    }
    fn create_empty(&self, fragment: u32, start: u32, end: u32, executor: u32) -> HostFuture<()> {
        self.ask(|reply| HostRequest::CreateEmpty { fragment, start, end, executor, reply })
    }
    fn import(&self, fragment: u32, chunk: Vec<u8>) -> HostFuture<u64> {
        self.ask(|r| HostRequest::Import(fragment, chunk, r))
    }
    fn delete(&self, fragment: u32, after_epoch: u64) -> HostFuture<()> {
        self.ask(|r| HostRequest::Delete(fragment, after_epoch, r))
    }
    fn local(&self) -> HostFuture<Vec<u32>> {
        self.ask(HostRequest::Local)
    }
}

/// An export stream's fragment and sub-range (`None`: its whole range).
type ExportKey = (FragmentId, Option<(u32, u32)>);

thread_local! {
    /// Export streams of this executor's fragments, by fragment and range (`None`: whole).
    static EXPORTS: RefCell<BTreeMap<ExportKey, storage::Export>> =
        const { RefCell::new(BTreeMap::new()) };
}

/// Installs the bridge as this node's fragment host and serves it from executor 0 (cluster
/// data nodes; call after `Core::start`). Other executors do nothing here.
pub fn start(core: &Rc<Core>, ctx: &ExecutorContext<Core>) {
    if ctx.index.get() != 0 {
        return;
    }
    let (tx, rx) = flume::bounded(HOST_REQUESTS_MAX);
    if !install_host(Arc::new(BridgeHost { requests: tx })) {
        tracing::error!("a fragment host is installed already; handoff requests go there");
        return;
    }
    let core = Rc::clone(core);
    let mesh = ctx.mesh.clone();
    let shutdown = ctx.shutdown.clone();
    glommio::spawn_local(async move {
        loop {
            // The control plane's thread sends: it wakes this executor's relay, not this task.
            let next =
                futures_lite::future::or(relayed(async { rx.recv_async().await.ok() }), async {
                    shutdown.wait().await;
                    None
                })
                .await;
            let Some(request) = next else { break };
            let (core, mesh) = (Rc::clone(&core), mesh.clone());
            glommio::spawn_local(async move { serve(&core, &mesh, request).await }).detach();
        }
    })
    .detach();
}

fn failed(fragment: u32, reason: impl std::fmt::Display) -> HostError {
    HostError::Failed { fragment, reason: reason.to_string() }
}

/// Runs `work` on executor `to` (directly when it is this one).
async fn on<F, Fut, R>(
    core: &Rc<Core>,
    mesh: &Mesh<Core>,
    to: ExecutorIndex,
    fragment: u32,
    work: F,
) -> Result<R, HostError>
where
    F: FnOnce(Rc<Core>) -> Fut + Send + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    mesh.run_on(core.index(), core, to, work).await.map_err(|e| failed(fragment, e))
}

/// The executor holding `fragment` open, if any.
async fn locate(
    core: &Rc<Core>,
    mesh: &Mesh<Core>,
    fragment: u32,
) -> Result<Option<ExecutorIndex>, HostError> {
    let id = FragmentId::new(fragment);
    for i in 0..mesh.len() {
        let at = ExecutorIndex::new(i);
        if on(core, mesh, at, fragment, move |c| async move { c.has_fragment(id) }).await? {
            return Ok(Some(at));
        }
    }
    Ok(None)
}

async fn located(
    core: &Rc<Core>,
    mesh: &Mesh<Core>,
    fragment: u32,
) -> Result<ExecutorIndex, HostError> {
    locate(core, mesh, fragment).await?.ok_or(HostError::NotHere { fragment })
}

/// Removes fragment `id`'s directory if it exists (a copy not open).
async fn remove_dir(core: &Core, fragment: u32) -> Result<(), HostError> {
    let dir = core.fragment_dir(FragmentId::new(fragment));
    glommio::executor()
        .spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await
        .map_err(|e| failed(fragment, format!("cannot delete its directory: {e}")))
}

/// The fragment a request is about (`None`: the node as a whole).
fn fragment_of(request: &HostRequest) -> Option<u32> {
    match request {
        HostRequest::Fence(f, _)
        | HostRequest::Unfence(f, _)
        | HostRequest::Export(f, _, _)
        | HostRequest::Import(f, _, _)
        | HostRequest::Delete(f, _, _) => Some(*f),
        HostRequest::CreateEmpty { fragment, .. } => Some(*fragment),
        HostRequest::Local(_) => None,
    }
}

thread_local! {
    /// Per fragment with a request running or waiting: the turn its requests take (executor 0
    /// serves every request, so one executor's map covers them all).
    static TURNS: RefCell<BTreeMap<u32, Rc<glommio::sync::Semaphore>>> =
        const { RefCell::new(BTreeMap::new()) };
}

/// Runs `work` once every earlier request for `fragment` has finished (glommio's semaphore
/// queues waiters in order); the fragment's entry goes when nothing else waits for it.
async fn one_at_a_time<R>(fragment: u32, work: impl Future<Output = R>) -> R {
    let turn = TURNS.with(|t| {
        Rc::clone(
            t.borrow_mut()
                .entry(fragment)
                .or_insert_with(|| Rc::new(glommio::sync::Semaphore::new(1))),
        )
    });
    let out = {
        // The semaphore is never closed, so the permit always comes.
        let _permit = turn.acquire_permit(1).await;
        work.await
    };
    TURNS.with(|t| {
        let mut turns = t.borrow_mut();
        // Only the map and this request hold it: nobody waits behind.
        if Rc::strong_count(&turn) == 2 {
            turns.remove(&fragment);
        }
    });
    out
}

async fn serve(core: &Rc<Core>, mesh: &Mesh<Core>, request: HostRequest) {
    match fragment_of(&request) {
        Some(f) => one_at_a_time(f, serve_now(core, mesh, request)).await,
        None => serve_now(core, mesh, request).await,
    }
}

async fn serve_now(core: &Rc<Core>, mesh: &Mesh<Core>, request: HostRequest) {
    match request {
        HostRequest::Fence(f, reply) => {
            let _ = reply.send(fence(core, mesh, f).await);
        }
        HostRequest::Unfence(f, reply) => {
            let r = match locate(core, mesh, f).await {
                Ok(Some(at)) => {
                    let id = FragmentId::new(f);
                    on(core, mesh, at, f, move |c| async move { c.unfence_fragment(id) }).await
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            let _ = reply.send(r);
        }
        HostRequest::Export(f, within, reply) => {
            let _ = reply.send(export_next(core, mesh, f, within).await);
        }
        HostRequest::CreateEmpty { fragment, start, end, executor, reply } => {
            let _ = reply.send(create_empty(core, mesh, fragment, start, end, executor).await);
        }
        HostRequest::Import(f, chunk, reply) => {
            let _ = reply.send(import(core, mesh, f, chunk).await);
        }
        HostRequest::Delete(f, after_epoch, reply) => {
            let _ = reply.send(delete(core, mesh, f, after_epoch).await);
        }
        HostRequest::Local(reply) => {
            let _ = reply.send(local(core, mesh).await);
        }
    }
}

async fn fence(core: &Rc<Core>, mesh: &Mesh<Core>, f: u32) -> Result<(), HostError> {
    let at = located(core, mesh, f).await?;
    let id = FragmentId::new(f);
    on(core, mesh, at, f, move |c| async move {
        EXPORTS.with(|e| e.borrow_mut().retain(|(f, _), _| *f != id));
        c.fence_fragment(id).await.map_err(|e| e.to_string())?;
        // A transaction prepared before the fence still commits (or aborts) into the fragment:
        // wait until none is in doubt, then until what they wrote is durable, so the export
        // that follows holds every acknowledged write. The sweeper resolves a prepare within
        // the engine's prepared-transaction timeout, so this wait is bounded.
        let Some(handle) = c.fragment_handle(id) else {
            return Err(format!("fragment {id} closed while being fenced"));
        };
        let started = std::time::Instant::now();
        let bound = std::time::Duration::from_millis(HANDOFF_FENCE_PREPARED_WAIT_MS);
        while !handle.in_doubt().is_empty() {
            if started.elapsed() >= bound {
                return Err(format!(
                    "prepared transactions still hold fragment {id} after {bound:?}"
                ));
            }
            glommio::timer::sleep(std::time::Duration::from_millis(HANDOFF_FENCE_POLL_MS)).await;
        }
        handle.wait_durable(handle.last_queued_lsn()).await.map_err(|e| e.to_string())?;
        Ok(())
    })
    .await?
    .map_err(|e| failed(f, e))
}

async fn export_next(
    core: &Rc<Core>,
    mesh: &Mesh<Core>,
    f: u32,
    sub: Option<(u32, u32)>,
) -> Result<Option<Vec<u8>>, HostError> {
    let at = located(core, mesh, f).await?;
    let id = FragmentId::new(f);
    on(core, mesh, at, f, move |c| async move {
        let Some(handle) = c.fragment_handle(id) else {
            return Err(HostError::NotHere { fragment: f });
        };
        let range = match sub {
            None => handle.range(),
            Some((start, end)) => ShardRange::new(start, end)
                .filter(|r| handle.range().start() <= r.start() && r.end() <= handle.range().end())
                .ok_or_else(|| {
                    failed(f, format!("[{start}, {end}) is not inside {}", handle.range()))
                })?,
        };
        Ok(EXPORTS.with(|e| {
            let mut exports = e.borrow_mut();
            let key = (id, sub);
            let export = exports.entry(key).or_insert_with(|| handle.export(range));
            let chunk = export.next_chunk();
            if chunk.is_none() {
                exports.remove(&key);
            }
            chunk
        }))
    })
    .await?
}

async fn create_empty(
    core: &Rc<Core>,
    mesh: &Mesh<Core>,
    f: u32,
    start: u32,
    end: u32,
    executor: u32,
) -> Result<(), HostError> {
    let Some(range) = ShardRange::new(start, end) else {
        return Err(failed(f, format!("[{start}, {end}) is not a shard range")));
    };
    let at = ExecutorIndex::new(executor as usize);
    if at.get() >= mesh.len() {
        return Err(failed(f, format!("executor {executor} does not exist on this node")));
    }
    // A partial copy of an earlier attempt (open or only on disk) is discarded first.
    if let Some(open) = locate(core, mesh, f).await? {
        let id = FragmentId::new(f);
        on(core, mesh, open, f, move |c| async move {
            c.close_fragment(id, true).await.map_err(|e| e.to_string())
        })
        .await?
        .map_err(|e| failed(f, e))?;
    }
    remove_dir(core, f).await?;
    let id = FragmentId::new(f);
    on(core, mesh, at, f, move |c| async move {
        c.open_fragment(id, range).await.map_err(|e| e.to_string())?;
        // No await between the open and the fence: the copy takes no write before its commit.
        c.fence_fragment(id).await.map_err(|e| e.to_string())
    })
    .await?
    .map_err(|e| failed(f, e))
}

async fn import(
    core: &Rc<Core>,
    mesh: &Mesh<Core>,
    f: u32,
    chunk: Vec<u8>,
) -> Result<u64, HostError> {
    let at = located(core, mesh, f).await?;
    let id = FragmentId::new(f);
    on(core, mesh, at, f, move |c| async move {
        let Some(handle) = c.fragment_handle(id) else {
            return Err(HostError::NotHere { fragment: f });
        };
        match handle.import(&chunk).await {
            Ok(stats) => Ok(stats.docs),
            Err(storage::ImportError::Corruption { offset, what }) => {
                Err(HostError::Damaged { fragment: f, offset, what: what.to_string() })
            }
            Err(storage::ImportError::NotAPut { offset }) => Err(HostError::Damaged {
                fragment: f,
                offset,
                what: "a record that is not a put".to_owned(),
            }),
            Err(e) => Err(failed(f, e)),
        }
    })
    .await?
}

async fn delete(
    core: &Rc<Core>,
    mesh: &Mesh<Core>,
    f: u32,
    after_epoch: u64,
) -> Result<(), HostError> {
    let installed = core.shared().map_epoch().0;
    if installed < after_epoch {
        return Err(HostError::NotYet {
            fragment: f,
            reason: format!(
                "the data path has epoch {installed}, waiting for {after_epoch} before deleting"
            ),
        });
    }
    if let Some(at) = locate(core, mesh, f).await? {
        let id = FragmentId::new(f);
        on(core, mesh, at, f, move |c| async move {
            EXPORTS.with(|e| e.borrow_mut().retain(|(f, _), _| *f != id));
            c.close_fragment(id, true).await.map_err(|e| e.to_string())
        })
        .await?
        .map_err(|e| failed(f, e))?;
    }
    remove_dir(core, f).await
}

/// Fragments open on any executor, and fragment directories on disk (a partial copy left by a
/// crash is on disk only).
async fn local(core: &Rc<Core>, mesh: &Mesh<Core>) -> Result<Vec<u32>, HostError> {
    let mut all = BTreeSet::new();
    for i in 0..mesh.len() {
        let at = ExecutorIndex::new(i);
        let open = on(core, mesh, at, u32::MAX, |c| async move {
            c.open_fragments().into_iter().map(|(id, _)| id.get()).collect::<Vec<_>>()
        })
        .await?;
        all.extend(open);
    }
    let root = core.shared().data_dir.join("fragments");
    let on_disk = glommio::executor()
        .spawn_blocking(move || -> Vec<u32> {
            let Ok(entries) = std::fs::read_dir(&root) else { return Vec::new() };
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix('$')?.parse().ok())
                .collect()
        })
        .await;
    all.extend(on_disk);
    Ok(all.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Runs `test` on a glommio executor of its own.
    fn on_executor<Fut: Future<Output = ()> + 'static>(
        test: impl FnOnce() -> Fut + Send + 'static,
    ) {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(1 << 20)
            .spawn(move || async move { test().await })
            .expect("spawn executor")
            .join()
            .expect("executor thread");
    }

    #[test]
    fn unit_requests_for_one_fragment_run_one_at_a_time_in_order() {
        // A second request for fragment 3 waits for the first, still running, to finish; one
        // for fragment 4 does not; and the turn's entry is gone afterwards.
        on_executor(|| async {
            let log = Rc::new(RefCell::new(Vec::new()));
            let (release, held) = flume::bounded::<()>(1);
            let first = glommio::spawn_local({
                let log = Rc::clone(&log);
                one_at_a_time(3, async move {
                    log.borrow_mut().push("first starts");
                    held.recv_async().await.expect("released");
                    log.borrow_mut().push("first ends");
                })
            });
            let second_ran = Rc::new(Cell::new(false));
            let second = glommio::spawn_local({
                let (log, ran) = (Rc::clone(&log), Rc::clone(&second_ran));
                one_at_a_time(3, async move {
                    ran.set(true);
                    log.borrow_mut().push("second");
                })
            });
            let other = glommio::spawn_local(one_at_a_time(4, async { 4 }));
            assert_eq!(other.await, 4, "another fragment's request does not wait");
            for _ in 0..16 {
                futures_lite::future::yield_now().await;
            }
            assert!(!second_ran.get(), "the second request started while the first ran");
            release.send_async(()).await.expect("first waits");
            first.await;
            second.await;
            assert_eq!(*log.borrow(), ["first starts", "first ends", "second"]);
            assert!(TURNS.with(|t| t.borrow().is_empty()), "turns left behind");
        });
    }
}

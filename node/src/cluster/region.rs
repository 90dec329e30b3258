//! The region: how a cluster node's data path follows the replicated shard map.
//!
//! * The map: each executor looks at the control plane's published `ClusterView` every
//!   `REGION_POLL_MS`; executor 0, on a newer epoch, has every executor open the fragments the
//!   map gives it (`Core::open_fragment`, empty ones created) and then installs the map in
//!   `Shared` (`install_map`: epochs only grow). So a map a statement routes by has its local
//!   fragments open. A proxy is never an owner and opens nothing.
//! * Buffers: a statement for a fragment without a known location (the map not allocated yet;
//!   with handoff, a fragment being moved) waits in a buffer bounded per fragment
//!   (`REGION_BUFFER_PER_FRAGMENT`) and per node (`REGION_BUFFER_TOTAL`); past either the
//!   statement fails with SQLSTATE 53400, and a wait longer than `REGION_BUFFER_WAIT_MS` fails
//!   too (never a silent drop). Waiters look again every `REGION_POLL_MS`, in the order they
//!   arrived on their executor; a session runs one statement at a time, so its order holds.
//!
//! See ARCHITECTURE.md, "node::cluster".

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use router::{FragmentId, NodeId, ShardMap};

use crate::cluster::limits::{
    REGION_BUFFER_PER_FRAGMENT, REGION_BUFFER_TOTAL, REGION_BUFFER_WAIT_MS, REGION_POLL_MS,
};
use crate::engine::{Core, EngineError};
use crate::runtime::{ExecutorContext, ExecutorIndex};

/// Why the region could not place or run a statement.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegionError {
    /// A buffer is full.
    #[error(
        "region buffer for {what} is full ({max} statements waiting); the {what} has no known location yet, retry later"
    )]
    BufferFull {
        /// Which buffer (`fragment $3`, `unallocated shard map`, `node`).
        what: String,
        /// Its limit.
        max: usize,
    },
    /// A buffered statement waited too long.
    #[error("gave up after {waited_ms} ms waiting for {what} to get a location")]
    WaitExpired {
        /// What it waited for.
        what: String,
        /// How long.
        waited_ms: u64,
    },
    /// The statement needs a cluster-wide atomic commit across nodes, which is not built.
    #[error(
        "{what} spans fragments on several cluster nodes ({nodes}); cross-node transactions are not supported yet"
    )]
    CrossNode {
        /// The statement kind.
        what: &'static str,
        /// The nodes, comma-separated.
        nodes: String,
    },
    /// A forwarded share could not be run on its owner.
    #[error("forwarding to node {node} failed: {reason}")]
    Forward {
        /// The owner.
        node: u32,
        /// Why.
        reason: String,
    },
    /// A request to another node would be larger than one data-connection message carries
    /// (`DATA_MESSAGE_BYTES_MAX`): a transaction's buffered writes for that node's fragments
    /// travel in one request.
    #[error(
        "the request to node {node} would be {bytes} bytes, the limit is {max}: a transaction's \
         writes to another node's fragments travel in one request; split the transaction into \
         smaller ones"
    )]
    RequestTooLarge {
        /// The owner.
        node: u32,
        /// The request's encoded size.
        bytes: usize,
        /// `DATA_MESSAGE_BYTES_MAX`.
        max: usize,
    },
    /// A fragment moved (or split, or merged) while a streamed answer read it, after some of
    /// the answer's rows had been sent: those cannot be taken back, so the statement fails and
    /// is to be run again (before any row is sent, the statement is planned again instead).
    #[error("the shard map changed while the rows were being sent; run the statement again")]
    MapChangedMidStream,
    /// The map kept changing under the statement.
    #[error("the shard map kept changing; gave up after {attempts} attempts")]
    MapChurn {
        /// Attempts made.
        attempts: u32,
    },
    /// The owner ran the share and it failed there.
    #[error("{message}")]
    Remote {
        /// The owner's SQLSTATE.
        code: String,
        /// Its message.
        message: String,
    },
    /// The owner node is not a known member with an address.
    #[error("node {node} owns a fragment but its address is unknown here")]
    UnknownNode {
        /// The node.
        node: u32,
    },
}

/// What a buffered statement waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BufferKey {
    /// The shard map itself (not allocated yet: every fragment's location is unknown).
    Unallocated,
    /// One fragment's location.
    Fragment(FragmentId),
    /// A map at least this new (after an owner said ours was stale, or before running a
    /// share routed by a newer map than ours).
    Map(u64),
}

impl std::fmt::Display for BufferKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BufferKey::Unallocated => f.write_str("unallocated shard map"),
            BufferKey::Fragment(id) => write!(f, "fragment {id}"),
            BufferKey::Map(epoch) => write!(f, "shard map epoch {epoch}"),
        }
    }
}

/// Bounds of the region's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferLimits {
    /// Per fragment.
    pub per_fragment: usize,
    /// Per node (also the bound of the single buffer before allocation).
    pub total: usize,
    /// Longest wait.
    pub wait: Duration,
}

impl Default for BufferLimits {
    fn default() -> BufferLimits {
        BufferLimits {
            per_fragment: REGION_BUFFER_PER_FRAGMENT,
            total: REGION_BUFFER_TOTAL,
            wait: Duration::from_millis(REGION_BUFFER_WAIT_MS),
        }
    }
}

/// The node's region buffers (counts only: a waiting statement is its own session's task).
#[derive(Debug, Default)]
pub struct Buffers {
    limits: BufferLimits,
    held: Mutex<BTreeMap<BufferKey, usize>>,
}

/// A statement's place in a buffer; leaves it when dropped.
#[derive(Debug)]
pub struct BufferSlot<'b> {
    buffers: &'b Buffers,
    key: BufferKey,
}

impl Drop for BufferSlot<'_> {
    fn drop(&mut self) {
        let mut held = self.buffers.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

impl Buffers {
    /// Buffers bounded by `limits`.
    pub fn new(limits: BufferLimits) -> Buffers {
        Buffers { limits, held: Mutex::default() }
    }

    /// The bounds.
    pub fn limits(&self) -> BufferLimits {
        self.limits
    }

    /// Takes a place in `key`'s buffer, or says which bound is reached.
    pub fn enter(&self, key: BufferKey) -> Result<BufferSlot<'_>, RegionError> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let total: usize = held.values().sum();
        if total >= self.limits.total {
            cov_mark::hit!(region_buffer_total_full);
            return Err(RegionError::BufferFull {
                what: format!("this node (all fragments; waiting for {key})"),
                max: self.limits.total,
            });
        }
        let here = held.get(&key).copied().unwrap_or(0);
        if key != BufferKey::Unallocated && here >= self.limits.per_fragment {
            return Err(RegionError::BufferFull {
                what: key.to_string(),
                max: self.limits.per_fragment,
            });
        }
        held.insert(key, here + 1);
        Ok(BufferSlot { buffers: self, key })
    }

    /// What is buffered now, per key (SHOW REGION).
    pub fn held(&self) -> Vec<(BufferKey, usize)> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, n)| (*k, *n))
            .collect()
    }

    /// Waits, holding a place in `key`'s buffer, until `ready` gives a value; fails when the
    /// buffer is full or the wait exceeds the limit.
    pub async fn wait_for<T>(
        &self,
        key: BufferKey,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Result<T, RegionError> {
        if let Some(v) = ready() {
            return Ok(v);
        }
        let _slot = self.enter(key)?;
        tracing::debug!(%key, "statement buffered");
        poll_until(&key.to_string(), self.limits.wait, ready).await
    }
}

/// Waits in the buffer of each fragment of `fragments` that `moving` says has no location now
/// (being handed off), until it has one. Returns whether it waited (the caller routes again:
/// the map may have changed meanwhile).
pub async fn wait_located(
    buffers: &Buffers,
    fragments: &[FragmentId],
    moving: impl Fn(FragmentId) -> bool,
) -> Result<bool, RegionError> {
    let mut waited = false;
    for id in fragments {
        if moving(*id) {
            waited = true;
            buffers.wait_for(BufferKey::Fragment(*id), || (!moving(*id)).then_some(())).await?;
        }
    }
    Ok(waited)
}

/// Looks at `ready` every `REGION_POLL_MS` until it gives a value; `WaitExpired` naming
/// `what` after `limit`. Buffered statements wait through this holding their place; an owner
/// catching up with the map a peer routed by waits through it directly (bounded by the data
/// connections, each running one share at a time).
pub async fn poll_until<T>(
    what: &str,
    limit: Duration,
    mut ready: impl FnMut() -> Option<T>,
) -> Result<T, RegionError> {
    let started = Instant::now();
    loop {
        if let Some(v) = ready() {
            return Ok(v);
        }
        if started.elapsed() >= limit {
            return Err(RegionError::WaitExpired {
                what: what.to_owned(),
                waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        glommio::timer::sleep(Duration::from_millis(REGION_POLL_MS)).await;
    }
}

/// After an owner answered that the map at epoch `used` is stale (`current`: the owner's epoch,
/// 0 when it did not say): waits in the buffer (bounded) until `installed()` is newer than
/// `used` and at least `current`, counting the attempt; past `REGION_RETRIES_MAX` attempts
/// the statement fails with `MapChurn`.
pub async fn refresh(
    buffers: &Buffers,
    installed: impl Fn() -> u64,
    used: u64,
    current: u64,
    attempt: &mut u32,
) -> Result<(), RegionError> {
    if *attempt >= crate::cluster::limits::REGION_RETRIES_MAX {
        return Err(RegionError::MapChurn { attempts: *attempt });
    }
    *attempt += 1;
    cov_mark::hit!(region_stale_epoch_retried);
    let want = current.max(used.saturating_add(1));
    buffers.wait_for(BufferKey::Map(want), || (installed() >= want).then_some(())).await
}

/// The map of `view`, if newer than `installed`, with the fragments being handed off, split
/// or merged at that map's epoch.
fn newer_map(
    view: &crate::cluster::ClusterView,
    installed: router::Epoch,
) -> Option<(Arc<ShardMap>, BTreeSet<FragmentId>)> {
    let map = view.map.as_ref()?;
    let handing_off = view.handoffs.iter().map(|h| h.fragment);
    let reshaping = view.reshapes.iter().flat_map(|r| r.sources.iter().copied());
    let moving = handing_off.chain(reshaping).map(FragmentId::new).collect();
    (map.epoch() > installed).then(|| (Arc::new(map.clone()), moving))
}

/// Waits (at most `limit`) until this node has installed catalog version `version` or a newer
/// one: an owner catching up with the catalog a peer planned by, a session deciding again
/// after another change won.
pub async fn wait_catalog(
    shared: &crate::engine::Shared,
    version: u64,
    limit: Duration,
) -> Result<(), RegionError> {
    let what = format!("collection catalog version {version}");
    poll_until(&what, limit, || (shared.catalog_version() >= version).then_some(())).await
}

/// The replicated catalog version this node's executors have installed (what its `Pong`
/// reports: the coordinator activates a change once every member has it).
static INSTALLED_CATALOG: AtomicU64 = AtomicU64::new(0);

/// The catalog version this node has installed (0: none yet).
pub fn installed_catalog() -> u64 {
    INSTALLED_CATALOG.load(Ordering::Acquire)
}

/// Installs the control plane's replicated catalog if it is newer than the node's: one
/// `Shared` serves every executor, so all see it from the next statement on.
fn install_newer_catalog(shared: &crate::engine::Shared, view: &crate::cluster::ClusterView) {
    if view.catalog_version <= shared.catalog_version() {
        return;
    }
    match crate::engine::CatalogView::from_cluster(view.catalog_version, &view.collections) {
        Ok(catalog) => {
            shared.install_catalog(Arc::new(catalog));
            INSTALLED_CATALOG.fetch_max(view.catalog_version, Ordering::AcqRel);
            tracing::info!(version = view.catalog_version, "collection catalog installed");
        }
        // Configurations are parsed before they are proposed: a refusal here is a bug or a
        // newer member's configuration this build cannot read. Routing by the old catalog
        // keeps every change pending (this node never reports the new version).
        Err(e) => {
            if CATALOG_REFUSED.swap(view.catalog_version, Ordering::AcqRel) != view.catalog_version
            {
                tracing::error!(
                    version = view.catalog_version,
                    "cannot install the collection catalog: {e}"
                );
            }
        }
    }
}

/// The catalog version last refused by `install_newer_catalog` (logged once, not every poll).
static CATALOG_REFUSED: AtomicU64 = AtomicU64::new(0);

/// The fragments of `map` that executor `executor` of node `me` owns.
pub fn owned_by(
    map: &ShardMap,
    me: NodeId,
    executor: ExecutorIndex,
) -> Vec<(FragmentId, router::ShardRange)> {
    map.fragments()
        .iter()
        .filter(|f| f.owner().node == me && f.owner().executor.0 as usize == executor.get())
        .map(|f| (f.id(), f.range()))
        .collect()
}

/// Opens on `core` every fragment `map` gives it that it does not have open yet.
pub async fn open_owned(core: &Core, map: &ShardMap) -> Result<(), EngineError> {
    for (id, range) in owned_by(map, core.shared().me, core.index()) {
        core.open_fragment(id, range).await?;
        // Handoff hook: a fragment this node is handing off stays fenced until the handoff's
        // commit or abort is applied (a source restarted mid-handoff).
        if crate::cluster::handoff::fence_at_open(id.get(), core.shared().me.0) {
            core.fence_fragment(id).await?;
        }
    }
    Ok(())
}

/// Starts the map follower on this executor (cluster nodes only; call after `Core::start`).
/// Executor 0 opens the new map's fragments on every executor, then installs it.
pub fn start(core: &Rc<Core>, ctx: &ExecutorContext<Core>) {
    if ctx.index.get() != 0 {
        return;
    }
    let core = Rc::clone(core);
    let ctx = ctx.clone();
    glommio::spawn_local(async move {
        let mut failed_epoch = None;
        loop {
            glommio::timer::sleep(Duration::from_millis(REGION_POLL_MS)).await;
            if ctx.shutdown.is_triggered() {
                break;
            }
            // The catalog first: a statement routed by the new map sees a catalog at least
            // as new as the view that map came in.
            let Some(view) = crate::cluster::view() else { continue };
            install_newer_catalog(core.shared(), &view);
            let Some((map, moving)) = newer_map(&view, core.shared().map_epoch()) else {
                continue;
            };
            match follow(&core, &ctx, &map).await {
                Ok(()) => {
                    // Writes to a fragment in handoff wait in its buffer. Both the fragments
                    // moving before and after this epoch wait while the map is swapped, so no
                    // write routes by one map with the other's moving set.
                    let shared = core.shared();
                    shared.set_moving(shared.moving().union(&moving).copied().collect());
                    shared.install_map(Arc::clone(&map));
                    shared.set_moving(moving);
                    tracing::info!(epoch = map.epoch().0, fragments = map.len(), "data path follows the shard map");
                }
                Err(e) if failed_epoch != Some(map.epoch()) => {
                    failed_epoch = Some(map.epoch());
                    tracing::error!(epoch = map.epoch().0, error = %e, "cannot open this node's fragments of the shard map; retrying");
                }
                Err(_) => {}
            }
        }
    })
    .detach();
}

/// Opens the map's fragments on every executor of this node.
async fn follow(
    core: &Rc<Core>,
    ctx: &ExecutorContext<Core>,
    map: &Arc<ShardMap>,
) -> Result<(), EngineError> {
    for i in 0..ctx.mesh.len() {
        let executor = ExecutorIndex::new(i);
        if executor == core.index() {
            open_owned(core, map).await?;
            continue;
        }
        let map = Arc::clone(map);
        ctx.mesh.call(executor, move |core| async move { open_owned(&core, &map).await }).await??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_fragment: usize, total: usize) -> BufferLimits {
        BufferLimits { per_fragment, total, wait: Duration::from_millis(50) }
    }

    // Checks the bounds: per fragment, in total, the unallocated buffer bounded by the total
    // only, and a place freed when its slot is dropped.
    #[test]
    fn unit_buffer_bounds() {
        let b = Buffers::new(limits(2, 3));
        let f = |n| BufferKey::Fragment(FragmentId::new(n));
        let s1 = b.enter(f(1)).unwrap();
        let _s2 = b.enter(f(1)).unwrap();
        assert!(matches!(b.enter(f(1)), Err(RegionError::BufferFull { max: 2, .. })));
        let _s3 = b.enter(f(2)).unwrap();
        {
            cov_mark::check!(region_buffer_total_full);
            assert!(matches!(b.enter(f(3)), Err(RegionError::BufferFull { max: 3, .. })));
        }
        assert_eq!(b.held(), vec![(f(1), 2), (f(2), 1)]);
        drop(s1);
        assert_eq!(b.held(), vec![(f(1), 1), (f(2), 1)]);
        let _s4 = b.enter(BufferKey::Unallocated).unwrap();
        assert!(b.enter(BufferKey::Unallocated).is_err());
        let u = Buffers::new(limits(1, 3));
        let _a = u.enter(BufferKey::Unallocated).unwrap();
        let _b = u.enter(BufferKey::Unallocated).unwrap();
        assert!(u.enter(BufferKey::Unallocated).is_ok());
    }

    // Checks a waiter gets the value once ready, holds a place meanwhile, and expires.
    #[test]
    fn unit_buffer_wait_delivers_and_expires() {
        storage::park::run_watched(
            "region-test",
            glommio::LocalExecutorBuilder::default,
            || async {
                let b = Buffers::new(limits(4, 4));
                let polls = std::cell::Cell::new(0);
                let got = b
                    .wait_for(BufferKey::Unallocated, || {
                        polls.set(polls.get() + 1);
                        assert_eq!(
                            b.held(),
                            if polls.get() == 1 {
                                vec![]
                            } else {
                                vec![(BufferKey::Unallocated, 1)]
                            }
                        );
                        (polls.get() == 3).then_some(7)
                    })
                    .await;
                assert_eq!(got, Ok(7));
                assert!(b.held().is_empty());
                let never =
                    b.wait_for(BufferKey::Fragment(FragmentId::new(1)), || None::<()>).await;
                assert!(matches!(never, Err(RegionError::WaitExpired { .. })));
                assert!(b.held().is_empty());
            },
        )
        .unwrap();
    }

    // Checks the stale-epoch retry: the region waits until its map is newer than the one the
    // owner refused (and at least the owner's), then routes again; the attempts are bounded.
    #[test]
    fn unit_stale_epoch_refresh_waits_and_is_bounded() {
        storage::park::run_watched(
            "region-test",
            glommio::LocalExecutorBuilder::default,
            || async {
                let b = Buffers::new(limits(4, 4));
                let polls = std::cell::Cell::new(0u64);
                // The map reaches epoch 3 on the third look.
                let installed = || {
                    polls.set(polls.get() + 1);
                    if polls.get() >= 3 { 3 } else { 1 }
                };
                let mut attempt = 1;
                {
                    cov_mark::check!(region_stale_epoch_retried);
                    refresh(&b, installed, 1, 3, &mut attempt).await.unwrap();
                }
                assert_eq!(attempt, 2);
                assert!(polls.get() >= 3);
                // NotMine names no epoch: any newer map will do.
                refresh(&b, || 4, 3, 0, &mut attempt).await.unwrap();
                // A map that never gets newer: the wait expires.
                let stuck = refresh(&b, || 4, 4, 0, &mut attempt).await;
                assert!(matches!(stuck, Err(RegionError::WaitExpired { .. })), "{stuck:?}");
                let mut last = crate::cluster::limits::REGION_RETRIES_MAX;
                let churn = refresh(&b, || 9, 1, 0, &mut last).await;
                assert_eq!(churn, Err(RegionError::MapChurn { attempts: last }));
            },
        )
        .unwrap();
    }

    // Checks a statement for a fragment being moved waits in that fragment's buffer until it
    // has a location again, and one for other fragments does not wait.
    #[test]
    fn unit_wait_located_buffers_per_fragment() {
        storage::park::run_watched(
            "region-test",
            glommio::LocalExecutorBuilder::default,
            || async {
                let b = Buffers::new(limits(1, 4));
                let f = FragmentId::new;
                let looks = std::cell::Cell::new(0);
                let moving = |id: FragmentId| {
                    if id == f(2) {
                        looks.set(looks.get() + 1);
                        looks.get() < 4
                    } else {
                        false
                    }
                };
                assert!(!wait_located(&b, &[f(1), f(3)], moving).await.unwrap());
                // Fragment 2's buffer holds one statement: a second one is refused.
                let _held = b.enter(BufferKey::Fragment(f(2))).unwrap();
                let full = wait_located(&b, &[f(2)], |_| true).await;
                assert!(matches!(full, Err(RegionError::BufferFull { max: 1, .. })), "{full:?}");
                drop(_held);
                assert!(wait_located(&b, &[f(1), f(2)], moving).await.unwrap());
                assert!(looks.get() >= 4);
                assert!(b.held().is_empty());
            },
        )
        .unwrap();
    }

    // Checks which fragments an executor of a node opens from a map.
    #[test]
    fn unit_owned_by_filters_node_and_executor() {
        let owners = [router::Owner::new(1, 0), router::Owner::new(2, 0), router::Owner::new(1, 1)];
        let map = ShardMap::even(6, &owners).unwrap();
        let mine: Vec<u32> =
            owned_by(&map, NodeId(1), ExecutorIndex::new(0)).iter().map(|(f, _)| f.get()).collect();
        assert_eq!(mine, vec![0, 3]);
        assert!(owned_by(&map, NodeId(3), ExecutorIndex::new(0)).is_empty());
    }
}

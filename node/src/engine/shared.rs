//! State every executor of a node reads: the shard map and the catalog snapshot.
//!
//! Read-mostly and small. The catalog and the shard map are swapped as a whole (`Arc`
//! snapshot behind a `RwLock` held only for the clone of the `Arc`), so a statement plans
//! against one version. On a single node the map is the layout's, fixed; on a cluster node it
//! is absent until the coordinator allocates it and then follows the replicated map
//! (`install_map`, epochs only grow).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, PoisonError, RwLock};

use router::{Epoch, FragmentId, NodeId, ShardMap, ShardingConfig};

use crate::catalog::Catalog;

/// A catalog with its configurations parsed by router.
#[derive(Debug)]
pub struct CatalogView {
    catalog: Catalog,
    configs: BTreeMap<String, ShardingConfig>,
}

impl CatalogView {
    /// Parses every configuration; a stored one that no longer parses is an error naming it.
    pub fn new(catalog: Catalog) -> Result<CatalogView, String> {
        let mut configs = BTreeMap::new();
        for (name, entry) in &catalog.collections {
            let config = ShardingConfig::parse(&entry.sharding.to_string())
                .map_err(|e| format!("stored sharding of collection {name:?} is invalid: {e}"))?;
            configs.insert(name.clone(), config);
        }
        Ok(CatalogView { catalog, configs })
    }

    /// The configuration of `collection`, if it has one.
    pub fn config(&self, collection: &str) -> Option<&ShardingConfig> {
        self.configs.get(collection)
    }

    /// Every configured collection, by name.
    pub fn configs(&self) -> &BTreeMap<String, ShardingConfig> {
        &self.configs
    }

    /// The durable catalog behind this view.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }
}

/// What all executors of one node share.
#[derive(Debug)]
pub struct Shared {
    /// This node: `NodeId(0)` on a single node, the cluster node id otherwise.
    pub me: NodeId,
    /// Whether the node is a cluster member (the map follows the coordinator's).
    pub clustered: bool,
    /// The data directory (catalog lives here).
    pub data_dir: PathBuf,
    /// Statements running anywhere in the node; shutdown waits for zero before closing
    /// fragments. Touched twice per statement, never per row.
    pub statements_running: AtomicUsize,
    /// Transaction ids, recovered decisions and the two-phase-commit gate.
    pub txn: super::coordinator::TxnShared,
    /// The region's buffers: statements waiting for a fragment's location (cluster nodes).
    pub buffers: crate::cluster::region::Buffers,
    catalog: RwLock<Arc<CatalogView>>,
    /// Fragments, their ranges and owners; `None` until a cluster allocates its map.
    map: RwLock<Option<Arc<ShardMap>>>,
    /// Fragments without a location right now (being handed off): statements for them wait
    /// in the region buffer.
    moving: RwLock<Arc<BTreeSet<FragmentId>>>,
}

impl Shared {
    /// Node state with the given map and catalog.
    pub fn new(map: ShardMap, data_dir: PathBuf, catalog: CatalogView) -> Shared {
        Shared::with(NodeId(0), false, Some(map), data_dir, catalog)
    }

    /// Cluster node `me`'s state: no map until the control plane publishes an allocated one.
    pub fn new_cluster(me: NodeId, data_dir: PathBuf, catalog: CatalogView) -> Shared {
        Shared::with(me, true, None, data_dir, catalog)
    }

    fn with(
        me: NodeId,
        clustered: bool,
        map: Option<ShardMap>,
        data_dir: PathBuf,
        catalog: CatalogView,
    ) -> Shared {
        Shared {
            me,
            clustered,
            map: RwLock::new(map.map(Arc::new)),
            moving: RwLock::default(),
            data_dir,
            statements_running: AtomicUsize::new(0),
            txn: super::coordinator::TxnShared::default(),
            buffers: crate::cluster::region::Buffers::default(),
            catalog: RwLock::new(Arc::new(catalog)),
        }
    }

    /// The current shard map snapshot; `None` on a cluster node before allocation.
    pub fn map(&self) -> Option<Arc<ShardMap>> {
        self.map.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The epoch of the installed map (`Epoch(0)`: none yet).
    pub fn map_epoch(&self) -> Epoch {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(Epoch(0), |m| m.epoch())
    }

    /// Installs a newer shard map; an older or equal epoch is ignored, so the map a statement
    /// sees never goes backwards. Returns whether it was installed.
    pub fn install_map(&self, next: Arc<ShardMap>) -> bool {
        let mut slot = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|m| m.epoch() >= next.epoch()) {
            return false;
        }
        *slot = Some(next);
        true
    }

    /// Marks the fragments being handed off (no location now): statements routed to them wait
    /// in their region buffer until they leave this set. The map follower
    /// (`cluster::region::start`) sets it from the published handoffs with each new map.
    pub fn set_moving(&self, fragments: BTreeSet<FragmentId>) {
        *self.moving.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fragments);
    }

    /// The fragments being handed off now.
    pub fn moving(&self) -> Arc<BTreeSet<FragmentId>> {
        Arc::clone(&self.moving.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether fragment `id` is being handed off.
    pub fn is_moving(&self, id: FragmentId) -> bool {
        self.moving.read().unwrap_or_else(PoisonError::into_inner).contains(&id)
    }

    /// The gate a backup holds to pause new two-phase-commit decisions (see
    /// [`super::TwoPhaseGate`]): `let _pause = shared.two_phase_gate().pause().await;`.
    pub fn two_phase_gate(&self) -> &super::coordinator::TwoPhaseGate {
        self.txn.two_phase_gate()
    }

    /// The current catalog snapshot.
    pub fn catalog(&self) -> Arc<CatalogView> {
        Arc::clone(&self.catalog.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Installs a newer catalog; an older or equal version is ignored, so the version a
    /// statement sees never goes backwards.
    pub fn install_catalog(&self, next: Arc<CatalogView>) {
        let mut slot = self.catalog.write().unwrap_or_else(PoisonError::into_inner);
        if next.catalog.version > slot.catalog.version {
            *slot = next;
        }
    }
}

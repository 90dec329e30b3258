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
    /// Cluster collections whose last change is not in force on every member yet, with the
    /// configuration before it (see `cluster::state::CollectionEntry`).
    pending: BTreeMap<String, Option<ShardingConfig>>,
}

/// How this node treats one collection's documents under its catalog: the configuration that
/// places new `…$` ids, those every write is validated against (a Mutable one validates
/// nothing), and the one content predicates route by (`None`: every fragment).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rules<'a> {
    /// Places new documents whose id ends with `$`.
    pub place: Option<&'a ShardingConfig>,
    /// Every new document is validated against each.
    pub validate: [Option<&'a ShardingConfig>; 2],
    /// Routes content predicates.
    pub route: Option<&'a ShardingConfig>,
}

impl Rules<'_> {
    /// Validates a new document against every configuration in force (23514 on a violation).
    pub fn validate(
        &self,
        id: &str,
        doc: &serde_json::Value,
    ) -> Result<(), router::ValidationError> {
        for config in self.validate.iter().flatten() {
            router::validate(config, id, doc)?;
        }
        Ok(())
    }
}

fn parse_config(name: &str, text: &str) -> Result<ShardingConfig, String> {
    ShardingConfig::parse(text)
        .map_err(|e| format!("stored sharding of collection {name:?} is invalid: {e}"))
}

impl CatalogView {
    /// Parses every configuration; a stored one that no longer parses is an error naming it.
    pub fn new(catalog: Catalog) -> Result<CatalogView, String> {
        let mut configs = BTreeMap::new();
        for (name, entry) in &catalog.collections {
            configs.insert(name.clone(), parse_config(name, &entry.sharding.to_string())?);
        }
        Ok(CatalogView { catalog, configs, pending: BTreeMap::new() })
    }

    /// The view of a cluster's replicated catalog at `version`.
    pub fn from_cluster(
        version: u64,
        collections: &BTreeMap<String, crate::cluster::state::CollectionEntry>,
    ) -> Result<CatalogView, String> {
        let mut catalog =
            Catalog { format: crate::catalog::CATALOG_FORMAT, version, ..Catalog::default() };
        let mut configs = BTreeMap::new();
        let mut pending = BTreeMap::new();
        for (name, entry) in collections {
            if let Some(text) = &entry.sharding {
                configs.insert(name.clone(), parse_config(name, text)?);
                let sharding = serde_json::from_str(text).map_err(|e| e.to_string())?;
                catalog
                    .collections
                    .insert(name.clone(), crate::catalog::CollectionEntry { sharding });
            }
            if entry.pending.is_some() {
                let previous = entry.previous.as_deref().map(|t| parse_config(name, t));
                pending.insert(name.clone(), previous.transpose()?);
            }
        }
        Ok(CatalogView { catalog, configs, pending })
    }

    /// The configuration of `collection`, if it has one (on a cluster, the newest one, in
    /// force or pending): what DDL decides against and `SHOW SHARDING` shows.
    pub fn config(&self, collection: &str) -> Option<&ShardingConfig> {
        self.configs.get(collection)
    }

    /// The catalog's version (on a cluster, the replicated catalog's).
    pub fn version(&self) -> u64 {
        self.catalog.version
    }

    /// Whether `collection` has a configuration change not yet in force on every member.
    pub fn is_pending(&self, collection: &str) -> bool {
        self.pending.contains_key(collection)
    }

    /// How this node places, validates and routes `collection`'s documents. With no change
    /// pending, all three follow its configuration. While one is pending, writes are
    /// validated against the configuration before and after it, new `…$` ids are placed by
    /// the one before when that one validates (else by the new one), and content predicates
    /// route nowhere in particular: a node that has not installed the change still routes by
    /// the old configuration, and every write either side accepts satisfies both.
    pub fn rules(&self, collection: &str) -> Rules<'_> {
        let current = self.configs.get(collection);
        match self.pending.get(collection) {
            None => Rules { place: current, validate: [current, None], route: current },
            Some(previous) => {
                let previous = previous.as_ref();
                let place = match previous {
                    Some(p) if !p.mutable() => Some(p),
                    _ => current.or(previous),
                };
                Rules { place, validate: [current, previous], route: None }
            }
        }
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

    /// The installed catalog's version.
    pub fn catalog_version(&self) -> u64 {
        self.catalog.read().unwrap_or_else(PoisonError::into_inner).version()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::state::CollectionEntry;

    fn entry(
        sharding: Option<&str>,
        previous: Option<&str>,
        pending: Option<u64>,
    ) -> CollectionEntry {
        CollectionEntry {
            sharding: sharding.map(str::to_owned),
            previous: previous.map(str::to_owned),
            pending,
        }
    }

    fn range(rules: &Option<&ShardingConfig>) -> Option<(u32, bool)> {
        rules.map(|c| (c.range(), c.mutable()))
    }

    // Checks the rules a cluster catalog gives each state of a collection: in force, all three
    // follow the configuration; pending, writes are validated by both configurations, placed
    // by the one before when it validates (else by the new one) and routed by neither.
    #[test]
    fn pending_changes_validate_both_and_route_by_neither() {
        let r1 = r#"{"Fields":["Customer"],"Range":1}"#;
        let r4 = r#"{"Fields":["Customer"],"Range":4}"#;
        let free = r#"{"Fields":["Customer"],"Mutable":true}"#;
        let collections: BTreeMap<String, CollectionEntry> = [
            ("active", entry(Some(r1), None, None)),
            ("growing", entry(Some(r4), Some(r1), Some(3))),
            ("created", entry(Some(r1), None, Some(4))),
            ("freed", entry(Some(free), Some(r1), Some(5))),
            ("bound", entry(Some(r4), Some(free), Some(6))),
            ("dropped", entry(None, Some(r4), Some(7))),
        ]
        .into_iter()
        .map(|(n, e)| (n.to_owned(), e))
        .collect();
        let view = CatalogView::from_cluster(9, &collections).expect("parses");
        assert_eq!(view.catalog().version, 9);
        let summary = |name: &str| {
            let r = view.rules(name);
            (range(&r.place), [range(&r.validate[0]), range(&r.validate[1])], range(&r.route))
        };
        let one = Some((1, false));
        let four = Some((4, false));
        let mutable = Some((1, true));
        assert_eq!(summary("active"), (one, [one, None], one));
        assert_eq!(summary("growing"), (one, [four, one], None));
        assert_eq!(summary("created"), (one, [one, None], None));
        assert_eq!(summary("freed"), (one, [mutable, one], None));
        assert_eq!(summary("bound"), (four, [four, mutable], None));
        assert_eq!(summary("dropped"), (four, [None, four], None));
        assert_eq!(summary("other"), (None, [None, None], None));
        assert!(view.is_pending("dropped") && !view.is_pending("active"));
        assert!(view.config("dropped").is_none(), "SHOW SHARDING no longer lists a removal");
        assert_eq!(view.catalog().collections.len(), 5);
        // A document valid under Range 4 but not Range 1 is refused while the growth is pending.
        let (one_block, four_blocks) =
            (ShardingConfig::parse(r1).unwrap(), ShardingConfig::parse(r4).unwrap());
        let doc = serde_json::json!({"Customer": "customers/7"});
        let outside = (0..64)
            .map(|i| router::assign(&four_blocks, &format!("o/{i}$"), &doc).unwrap().0)
            .find(|id| router::validate(&one_block, id, &doc).is_err())
            .expect("three in four land outside the Range 1 block");
        assert!(view.rules("growing").validate(&outside, &doc).is_err());
        assert!(view.rules("active").validate(&outside, &doc).is_err());
        assert!(
            view.rules("active").validate("o/2$@1", &serde_json::json!({"Customer": 1})).is_err()
        );
    }
}

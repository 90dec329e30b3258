//! State every executor of a node reads: the shard map and the catalog snapshot.
//!
//! Read-mostly and small. The catalog is swapped as a whole (`Arc` snapshot behind a
//! `RwLock` held only for the clone of the `Arc`), so a statement plans against one version.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, PoisonError, RwLock};

use router::{ShardMap, ShardingConfig};

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
    /// Fragments, their ranges and owning executors.
    pub map: ShardMap,
    /// The data directory (catalog lives here).
    pub data_dir: PathBuf,
    /// Statements running anywhere in the node; shutdown waits for zero before closing
    /// fragments. Touched twice per statement, never per row.
    pub statements_running: AtomicUsize,
    /// Transaction ids, recovered decisions and the two-phase-commit gate.
    pub txn: super::coordinator::TxnShared,
    catalog: RwLock<Arc<CatalogView>>,
}

impl Shared {
    /// Node state with the given map and catalog.
    pub fn new(map: ShardMap, data_dir: PathBuf, catalog: CatalogView) -> Shared {
        Shared {
            map,
            data_dir,
            statements_running: AtomicUsize::new(0),
            txn: super::coordinator::TxnShared::default(),
            catalog: RwLock::new(Arc::new(catalog)),
        }
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

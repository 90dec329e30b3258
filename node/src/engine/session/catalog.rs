//! Collection configuration changes (`CREATE TABLE … WITH`, `ALTER TABLE … SET`, `DROP
//! TABLE`'s removal).
//!
//! On a single node the catalog is the node's `catalog.json`, changed on executor 0 one change
//! at a time (`Core::change_catalog`). On a cluster it is the coordinator's replicated
//! catalog (`cluster::state::CollectionEntry`): the session decides against the catalog its
//! node has installed and proposes the result as a compare-and-set on that catalog's version;
//! a race lost to another change is decided again against the newer catalog. The statement
//! then waits (bounded by `CATALOG_ACTIVATION_WAIT_MS`) until the change is in force on every
//! member; past the bound it succeeds with a warning, the change stays pending and the
//! coordinator activates it once every member has installed it.

use std::time::Duration;

use super::Session;
use crate::catalog::CollectionEntry;
use crate::cluster::limits::{CATALOG_ACTIVATION_WAIT_MS, CATALOG_CHANGE_ATTEMPTS};
use crate::cluster::ops::MoveError;
use crate::cluster::region::{poll_until, wait_catalog};
use crate::engine::error::EngineError;
use crate::pg::error::Notice;
use crate::runtime::ExecutorIndex;

impl Session {
    /// Changes `collection`'s configuration to what `decide` makes of the current one (`None`:
    /// remove it). A warning for the client when a cluster has not put the change in force
    /// everywhere within the bound.
    pub(super) async fn change_catalog(
        &self,
        collection: String,
        decide: impl Fn(Option<&router::ShardingConfig>) -> Result<Option<CollectionEntry>, EngineError>
        + Send
        + 'static,
    ) -> Result<Option<Notice>, EngineError> {
        if self.core.shared().clustered {
            return self.change_cluster_catalog(collection, decide).await;
        }
        let catalog_owner = ExecutorIndex::new(0);
        if self.core.index() == catalog_owner {
            self.core.change_catalog(collection, decide).await?;
            return Ok(None);
        }
        self.ctx
            .mesh
            .call(catalog_owner, move |core| async move {
                core.change_catalog(collection, decide).await
            })
            .await??;
        Ok(None)
    }

    async fn change_cluster_catalog(
        &self,
        collection: String,
        decide: impl Fn(Option<&router::ShardingConfig>) -> Result<Option<CollectionEntry>, EngineError>,
    ) -> Result<Option<Notice>, EngineError> {
        let shared = self.core.shared();
        let mut attempt = 1;
        let version = loop {
            let view = shared.catalog();
            let sharding = decide(view.config(&collection))?.map(|e| e.sharding.to_string());
            let expected = view.version();
            match crate::cluster::ops::set_collection(collection.clone(), expected, sharding).await
            {
                Ok(version) => break version,
                Err(MoveError::CatalogChanged { version }) if attempt < CATALOG_CHANGE_ATTEMPTS => {
                    attempt += 1;
                    // Decide again once this node has the catalog that won.
                    wait_catalog(shared, version, wait()).await?;
                }
                Err(e) => return Err(e.into()),
            }
        };
        // In force once this node has installed the activation, which the coordinator
        // proposes after every member reported the change installed; then every member must
        // install the activation too, or a write through one that still holds the change
        // pending is validated against the old configuration as well (a relaxed
        // configuration would refuse it there). One bound for both waits.
        let started = std::time::Instant::now();
        let active = || {
            let view = shared.catalog();
            (view.version() > version && !view.is_pending(&collection)).then_some(view.version())
        };
        let warning = |what: &str| {
            Some(Notice::warning(format!(
                "the configuration of {collection:?} is recorded but {what}; until it is, \
                 a member without it may validate or route by the configuration before it \
                 (SHOW SHARDING on a node shows its state, SHOW CLUSTER unreachable members)"
            )))
        };
        let Ok(activated) = poll_until("the catalog change", wait(), active).await else {
            return Ok(warning("not yet installed on every member"));
        };
        let left = wait().saturating_sub(started.elapsed());
        let everywhere = || {
            let view = crate::cluster::view()?;
            view.members.iter().all(|m| m.catalog >= activated).then_some(())
        };
        Ok(match poll_until("the catalog change on every member", left, everywhere).await {
            Ok(()) => None,
            Err(_) => warning("not yet in force on every member"),
        })
    }
}

fn wait() -> Duration {
    Duration::from_millis(CATALOG_ACTIVATION_WAIT_MS)
}

//! One executor's share of the node: the fragments it owns and the work that runs on them.
//!
//! Everything here runs on the owning executor: a statement's share for this executor arrives
//! either directly (the session runs here) or as one mesh call carrying every fragment of this
//! executor that the statement touches (one hop per executor, not per fragment).
//!
//! **Invariant:** between reading a document's version and enqueueing the write that depends
//! on it there is no `.await`, so storage's version check sees exactly what the statement read;
//! a conflict means another task's write was already enqueued, and the statement is re-run.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use query::exec::VerifyPartial;
use query::explain::FragmentAnalysis;
use query::plan::{CollectionName, Delete, Insert, Select, Update};
use query::{Partial, PlacedDocument, WriteIntent, WritePartial};
use router::{FragmentId, ShardRange, ShardingConfig};
use storage::{AppendError, Fragment, FragmentOptions, Version, WriteBatch};

use super::error::EngineError;
use super::reader::FragmentReader;
use super::shared::{CatalogView, Shared};
use crate::catalog::CollectionEntry;
use crate::runtime::ExecutorIndex;

/// Times an autocommit write statement is run against one fragment when concurrent writes
/// keep changing the documents it read. Each run is cheap (local, no hop); past this the
/// client gets 40001 and should retry.
pub const WRITE_ATTEMPTS_MAX: u32 = 16;

/// How often a write that conflicted with a queued (not yet durable) write checks whether
/// that write became visible, before it is re-run.
pub const WRITE_CONFLICT_POLL: Duration = Duration::from_millis(1);

/// Longest a conflicting write waits for the write it conflicted with to become durable
/// before it is re-run anyway. A group commit takes one fdatasync; this is far above it.
pub const WRITE_CONFLICT_WAIT_MAX: Duration = Duration::from_secs(2);

/// A fragment and the shard ranges of it a statement reads.
#[derive(Clone, Debug)]
pub struct Target {
    /// The fragment.
    pub fragment: FragmentId,
    /// Ranges inside the fragment's own range.
    pub ranges: Vec<ShardRange>,
}

/// Per-fragment counters of work done, for pruning checks and SHOW.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragmentCounters {
    /// Statements that ran on the fragment.
    pub statements: u64,
    /// Documents read.
    pub rows_scanned: u64,
}

/// One line of SHOW FRAGMENTS.
#[derive(Clone, Debug)]
pub struct FragmentRow {
    /// Fragment.
    pub fragment: FragmentId,
    /// Its shard range.
    pub range: ShardRange,
    /// Owning executor.
    pub executor: ExecutorIndex,
    /// Live documents.
    pub documents: u64,
    /// Log bytes of live documents.
    pub bytes: u64,
    /// Work counters.
    pub counters: FragmentCounters,
}

/// What a write statement did on this executor's fragments.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    /// Documents written or deleted.
    pub affected: u64,
    /// RETURNING rows.
    pub returning: Vec<Vec<query::Datum>>,
    /// Per fragment, for EXPLAIN ANALYZE.
    pub analysis: Vec<FragmentAnalysis>,
}

/// The fragments of one executor.
pub struct Core {
    index: ExecutorIndex,
    shared: Arc<Shared>,
    fragments: RefCell<BTreeMap<FragmentId, Rc<Fragment>>>,
    counters: RefCell<BTreeMap<FragmentId, FragmentCounters>>,
    catalog_gate: glommio::sync::Semaphore,
    metrics: crate::metrics::ExecutorMetrics,
}

impl Core {
    /// Opens (recovering) the fragments this executor owns.
    pub async fn open(
        index: ExecutorIndex,
        shared: Arc<Shared>,
        owned: Vec<(FragmentId, ShardRange, std::path::PathBuf)>,
        segment_bytes: u64,
    ) -> Result<Core, String> {
        let mut fragments = BTreeMap::new();
        for (id, range, dir) in owned {
            let started = Instant::now();
            let options = FragmentOptions { segment_bytes, ..FragmentOptions::default() };
            let fragment = Fragment::open(&dir, id, range, options)
                .await
                .map_err(|e| format!("cannot open fragment {id} in {}: {e}", dir.display()))?;
            // storage logs the recovery itself; this adds where and how long.
            tracing::debug!(
                fragment = %id, %range, dir = %dir.display(),
                elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "fragment ready"
            );
            fragments.insert(id, Rc::new(fragment));
        }
        Ok(Core {
            index,
            shared,
            fragments: RefCell::new(fragments),
            counters: RefCell::default(),
            catalog_gate: glommio::sync::Semaphore::new(1),
            metrics: crate::metrics::ExecutorMetrics::default(),
        })
    }

    /// This executor's position.
    pub fn index(&self) -> ExecutorIndex {
        self.index
    }

    /// The node-wide state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// This executor's operator metrics.
    pub fn metrics(&self) -> &crate::metrics::ExecutorMetrics {
        &self.metrics
    }

    /// Metrics of every fragment of this executor.
    pub fn fragment_snapshots(&self) -> Vec<crate::metrics::FragmentSnapshot> {
        let counters = self.counters.borrow();
        self.fragments
            .borrow()
            .iter()
            .map(|(id, f)| {
                let c = counters.get(id).copied().unwrap_or_default();
                crate::metrics::FragmentSnapshot::of(f, c)
            })
            .collect()
    }

    /// Backup cuts of every fragment of this executor (see `engine::backup`).
    pub async fn backup_cuts(&self) -> Result<Vec<storage::BackupCut>, storage::CutError> {
        let fragments: Vec<Rc<Fragment>> = self.fragments.borrow().values().cloned().collect();
        let mut cuts = Vec::with_capacity(fragments.len());
        for f in fragments {
            cuts.push(f.backup_cut().await?);
        }
        Ok(cuts)
    }

    fn fragment(&self, id: FragmentId) -> Result<Rc<Fragment>, EngineError> {
        self.fragments
            .borrow()
            .get(&id)
            .cloned()
            .ok_or(EngineError::Call(crate::runtime::CallError::Stopped(self.index)))
    }

    fn count(&self, id: FragmentId, rows_scanned: u64) {
        let mut counters = self.counters.borrow_mut();
        let c = counters.entry(id).or_default();
        c.statements += 1;
        c.rows_scanned += rows_scanned;
        self.metrics.rows_read(rows_scanned);
    }

    /// Runs a SELECT's share on each target fragment.
    pub fn select(
        &self,
        select: &Select,
        targets: &[Target],
    ) -> Result<(Vec<Partial>, Vec<FragmentAnalysis>), EngineError> {
        let mut partials = Vec::with_capacity(targets.len());
        let mut analysis = Vec::with_capacity(targets.len());
        for target in targets {
            let started = Instant::now();
            let fragment = self.fragment(target.fragment)?;
            let reader = FragmentReader::new(&fragment);
            let partial = query::execute_select(select, &reader, &target.ranges)?;
            self.count(target.fragment, partial.rows_scanned);
            analysis.push(FragmentAnalysis {
                fragment: target.fragment,
                rows_scanned: partial.rows_scanned,
                rows_returned: partial_rows(&partial),
                elapsed: started.elapsed(),
            });
            partials.push(partial);
        }
        Ok((partials, analysis))
    }

    /// Runs `verify_sharding` on each target fragment.
    pub fn verify(
        &self,
        collection: &CollectionName,
        config: &ShardingConfig,
        targets: &[Target],
    ) -> Result<Vec<(String, String)>, EngineError> {
        let mut out = Vec::new();
        for target in targets {
            let fragment = self.fragment(target.fragment)?;
            let reader = FragmentReader::new(&fragment);
            let VerifyPartial { violations, rows_scanned } =
                query::exec::execute_verify_sharding(collection, config, &reader, &target.ranges)?;
            self.count(target.fragment, rows_scanned);
            out.extend(violations);
        }
        Ok(out)
    }

    /// Runs an UPDATE's share: evaluate, validate, apply durably, per fragment.
    pub async fn update(
        &self,
        update: &Update,
        targets: &[Target],
        config: Option<&ShardingConfig>,
    ) -> Result<WriteOutcome, EngineError> {
        let mut outcome = WriteOutcome::default();
        for target in targets {
            let run = |r: &FragmentReader<'_>| query::execute_update(update, r, &target.ranges);
            self.write_fragment(target.fragment, &update.collection, config, run, &mut outcome)
                .await?;
        }
        Ok(outcome)
    }

    /// Runs a DELETE's share, per fragment.
    pub async fn delete(
        &self,
        delete: &Delete,
        targets: &[Target],
    ) -> Result<WriteOutcome, EngineError> {
        let mut outcome = WriteOutcome::default();
        for target in targets {
            let run = |r: &FragmentReader<'_>| query::execute_delete(delete, r, &target.ranges);
            self.write_fragment(target.fragment, &delete.collection, None, run, &mut outcome)
                .await?;
        }
        Ok(outcome)
    }

    /// Writes placed new documents, per fragment (ids already final, shards assigned).
    pub async fn insert(
        &self,
        insert: &Insert,
        per_fragment: &[(FragmentId, Vec<PlacedDocument>)],
        config: Option<&ShardingConfig>,
    ) -> Result<WriteOutcome, EngineError> {
        let mut outcome = WriteOutcome::default();
        for (fragment, docs) in per_fragment {
            let run = |r: &FragmentReader<'_>| query::execute_insert(insert, r, docs);
            self.write_fragment(*fragment, &insert.collection, config, run, &mut outcome).await?;
        }
        Ok(outcome)
    }

    /// Evaluates a write on one fragment and applies its intents as one atomic batch, re-running
    /// it when a concurrent write got in first (see the module invariant).
    async fn write_fragment(
        &self,
        id: FragmentId,
        collection: &CollectionName,
        config: Option<&ShardingConfig>,
        run: impl Fn(&FragmentReader<'_>) -> Result<WritePartial, query::ExecError>,
        outcome: &mut WriteOutcome,
    ) -> Result<(), EngineError> {
        let fragment = self.fragment(id)?;
        for attempt in 1..=WRITE_ATTEMPTS_MAX {
            let started = Instant::now();
            let (returning, rows_scanned, affected, batch) = {
                let reader = FragmentReader::new(&fragment);
                let WritePartial { intents, returning, rows_scanned } = run(&reader)?;
                let affected = intents.len() as u64;
                (returning, rows_scanned, affected, batch_of(collection.as_str(), intents, config)?)
            };
            if !batch.is_empty() {
                let commit_started = Instant::now();
                match fragment.apply(batch).await {
                    Ok(_) => self.metrics.committed(affected, commit_started.elapsed()),
                    Err(AppendError::Conflict { collection, id: doc, expected, .. })
                        if attempt < WRITE_ATTEMPTS_MAX =>
                    {
                        tracing::debug!(fragment = %id, attempt, "write conflict; re-running");
                        self.metrics.conflict();
                        wait_visible(&fragment, &collection, &doc, expected).await;
                        continue;
                    }
                    Err(AppendError::Conflict { .. }) => {
                        self.metrics.aborted();
                        return Err(EngineError::Contention { attempts: attempt });
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            self.count(id, rows_scanned);
            outcome.affected += affected;
            outcome.returning.extend(returning);
            outcome.analysis.push(FragmentAnalysis {
                fragment: id,
                rows_scanned,
                rows_returned: affected,
                elapsed: started.elapsed(),
            });
            return Ok(());
        }
        Err(EngineError::Contention { attempts: WRITE_ATTEMPTS_MAX })
    }

    /// SHOW FRAGMENTS rows of this executor.
    pub fn fragment_rows(&self) -> Vec<FragmentRow> {
        let counters = self.counters.borrow();
        self.fragments
            .borrow()
            .iter()
            .map(|(id, f)| {
                let stats = f.stats();
                FragmentRow {
                    fragment: *id,
                    range: f.range(),
                    executor: self.index,
                    documents: stats.docs,
                    bytes: stats.live_bytes,
                    counters: counters.get(id).copied().unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Changes one collection's configuration durably and publishes the new catalog to every
    /// executor. Runs on executor 0 only, one change at a time. `decide` sees the current
    /// configuration and returns the entry to store (or why not).
    pub async fn change_catalog(
        &self,
        collection: String,
        decide: impl FnOnce(Option<&ShardingConfig>) -> Result<CollectionEntry, EngineError>,
    ) -> Result<(), EngineError> {
        let _turn = self
            .catalog_gate
            .acquire_permit(1)
            .await
            .map_err(|e| EngineError::Catalog(e.to_string()))?;
        let current = self.shared.catalog();
        let entry = decide(current.config(&collection))?;
        let dir = self.shared.data_dir.clone();
        let base = current.catalog().clone();
        let next = glommio::executor()
            .spawn_blocking(move || base.with_entry(&dir, &collection, entry))
            .await
            .map_err(|e| EngineError::Catalog(e.to_string()))?;
        let view = CatalogView::new(next).map_err(EngineError::Catalog)?;
        tracing::info!(version = view.catalog().version, "catalog changed");
        self.shared.install_catalog(Arc::new(view));
        Ok(())
    }

    /// Waits for every statement of the node to finish, then closes the fragments (their
    /// in-flight commits complete first). Called once, at shutdown.
    pub async fn close(&self) {
        while self.shared.statements_running.load(Ordering::SeqCst) > 0 {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        let fragments = std::mem::take(&mut *self.fragments.borrow_mut());
        for (id, fragment) in fragments {
            match Rc::try_unwrap(fragment) {
                Ok(fragment) => {
                    fragment.close().await;
                    tracing::info!(fragment = %id, "fragment closed");
                }
                // Only a statement still holding it could; none runs now. Dropping it is safe:
                // every acknowledged write is already durable.
                Err(_) => tracing::warn!(fragment = %id, "fragment still in use at close"),
            }
        }
    }
}

/// Waits until `fragment`'s readable version of a document is no longer `read`, the version
/// the conflicted statement read. Storage checks versions against queued writes but readers see
/// only durable ones, so a statement re-run at once after conflicting with a queued write would
/// read the same old version and conflict again, until its attempts ran out during one
/// fdatasync. Any change of the readable version will do (versions only grow, and a later write
/// may already have superseded the one the conflict saw), so the wait ends at the first group
/// commit that touches the document. Bounded by [`WRITE_CONFLICT_WAIT_MAX`] all the same.
async fn wait_visible(fragment: &Fragment, collection: &str, doc: &str, read: Version) {
    let read = (read != Version::ABSENT).then_some(read);
    let started = Instant::now();
    while fragment.version_of(collection, doc) == read
        && started.elapsed() < WRITE_CONFLICT_WAIT_MAX
    {
        glommio::timer::sleep(WRITE_CONFLICT_POLL).await;
    }
}

fn partial_rows(partial: &Partial) -> u64 {
    match &partial.body {
        query::exec::PartialBody::Rows(rows) => rows.len() as u64,
        query::exec::PartialBody::Groups(groups) => groups.len() as u64,
    }
}

/// The storage batch for a statement's intents on one fragment, validating each new document
/// against the collection's content configuration first.
fn batch_of(
    collection: &str,
    intents: Vec<WriteIntent>,
    config: Option<&ShardingConfig>,
) -> Result<WriteBatch, EngineError> {
    let mut batch = WriteBatch::new();
    for intent in intents {
        batch = match intent {
            WriteIntent::Put { id, shard, version_read, doc } => {
                if let Some(config) = config {
                    router::validate(config, &id, &doc)?;
                }
                // A new document must still be absent when the batch is applied.
                let expected =
                    Some(version_read.map_or(Version::ABSENT, |v| Version::new(v.get())));
                batch.put(collection, &id, shard, expected, doc)
            }
            WriteIntent::Delete { id, shard, version_read } => {
                batch.delete(collection, &id, shard, Some(Version::new(version_read.get())))
            }
        };
    }
    Ok(batch)
}

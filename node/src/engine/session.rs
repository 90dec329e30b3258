//! A client session: `pg::Engine` over the query planner and the executors' fragments.
//!
//! A statement is parsed and planned once (`prepare`), bound to parameters without parsing
//! again, routed to the fragments that can hold its answer, and run there: work for this
//! executor's fragments runs in place, work for each other executor travels as one mesh call
//! carrying all of that executor's fragments. Partial results are merged here.
//!
//! Transactions: BEGIN opens a block whose statements run through the transaction's buffer
//! (`txn`): reads see its own writes and record versions, writes are buffered. COMMIT turns
//! the buffer into one storage batch per fragment: nothing to write validates the reads
//! (checks only); one fragment applies its batch on its owner (one atomic batch, one fdatasync);
//! several fragments go through two-phase commit with the coordinator on executor 0. An
//! autocommit write statement that touches one fragment runs there directly (evaluate and
//! apply without an `.await` in between); one that touches several is a transaction of one
//! through the same commit path, so it is atomic across fragments and executors.
//!
//! On a cluster, shares of other nodes' fragments are forwarded (`cluster::forward`), inside a
//! block too (with the block's buffered writes of each fragment); COMMIT over several nodes is
//! a two-phase commit coordinated by this node (see ARCHITECTURE.md, "cross-node
//! transactions").

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use query::explain::FragmentAnalysis;
use query::plan::{CollectionName, Statement};
use query::{Datum, PlacedDocument, SqlType, WriteIntent};
use router::{FragmentId, NodeId, Placement, RoutePlan, ShardMap, ShardRange};

use super::coordinator::{coordinator_of, fault, marker, txid_for_node};
use super::core::WRITE_CONFLICT_POLL;
use super::core::{
    CHECK_SLICE_OPS, Core, FragmentRow, SessionTxnRow, ShareRead, Target, TxCounters, TxnShare,
    TxnTarget, WriteOutcome, between_slices,
};
use super::error::EngineError;
use super::limits::{TXN_AUTOCOMMIT_ATTEMPTS_MAX, TXN_HELD_WAITS_MAX};
use super::shared::{CatalogView, Rules};
use super::txn::{FragmentTxn, ReadRecord, Reads, Txn};
use crate::catalog::CollectionEntry;
use crate::cluster::forward::{self, Reply, Share};
use crate::cluster::region::{BufferKey, RegionError};
use crate::pg::error::Notice;
use crate::pg::sqlstate::{SqlState, engine_error};
use crate::pg::{
    Column, CommandTag, Description, Engine, Format, Oid, Params, PgError, RowSink,
    TransactionStatus,
};
use crate::runtime::{ExecutorContext, ExecutorIndex};

mod block;
mod catalog;
mod copy;
mod stream;
mod truncate;

/// A planned statement, kept by the wire layer for reuse.
pub struct Prepared {
    statement: Arc<Statement>,
    text: Arc<str>,
    /// The whole SQL text it was parsed from and its position there (what a region forwards).
    sql: Arc<str>,
    index: u32,
    description: Description,
    param_types: Vec<SqlType>,
}

/// Where a session is with respect to transaction blocks.
enum Block {
    /// Autocommit: every statement is its own transaction.
    Idle,
    /// Between BEGIN and COMMIT.
    Open(Txn),
    /// A statement of the block failed: everything but ROLLBACK (or COMMIT) is refused.
    Failed(Txn),
}

/// PostgreSQL's implicit transaction block: the statements of one simple Query message of
/// several statements commit together (or not at all) unless they manage blocks themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Implicit {
    /// Not inside a query of several statements: each statement outside a block stands alone.
    Off,
    /// Inside one, with no implicit block open: the next statement outside a block opens one.
    Armed,
    /// The open block is the query's implicit block: the query's end commits it (or rolls
    /// it back after an error).
    Open,
}

/// One client connection's engine.
pub struct Session {
    core: Rc<Core>,
    ctx: ExecutorContext<Core>,
    settings: BTreeMap<String, String>,
    block: Block,
    /// Whether a query of several statements is running and its implicit block is open.
    implicit: Implicit,
    /// The startup message's user and database, for `current_user` / `current_database()`.
    names: query::expr::SessionNames,
    /// The text of the last parsed SQL (slow-statement log), bounded.
    last_sql: Arc<str>,
    /// Opcode and fragments of the last statement routed (slow-statement log).
    last_route: std::cell::RefCell<Option<(router::Opcode, Vec<FragmentId>)>>,
    /// The whole text of the last parsed SQL and how many of its statements were planned.
    sql: Arc<str>,
    planned: std::cell::Cell<u32>,
    /// The running statement as a region forwards it: text, position, bound values.
    forwardable: std::cell::RefCell<Option<Forwardable>>,
    /// The last simple Query's statements when they form a block that may be shipped whole
    /// (`block`), until its BEGIN runs.
    block_text: Option<block::BlockText>,
    /// Outcomes of a shipped block not yet replayed.
    replay: Option<block::Replay>,
    /// A running `COPY … FROM STDIN`.
    copy: Option<copy::CopyIn>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.core.metrics().connection_closed();
        if let Block::Open(t) | Block::Failed(t) = &self.block {
            self.core.set_session_txn(t.number, None);
            self.core.count_tx(|c| c.aborts += 1);
        }
    }
}

/// Rows of a statement's result before they are written to the client.
type Rows = Vec<Vec<Datum>>;

/// An INSERT's placed documents, by owning executor and fragment.
type Placed = BTreeMap<ExecutorIndex, Vec<(FragmentId, Vec<PlacedDocument>)>>;

/// A statement as a region forwards it: its SQL text, its position there, its bound values.
type Forwardable = (Arc<str>, u32, Vec<Datum>);

/// Where an autocommit write's fragments live: other nodes (fragments each), whether this
/// node has some, the map epoch, and every fragment.
struct WriteNodes {
    remote: BTreeMap<NodeId, usize>,
    here: bool,
    epoch: u64,
    fragments: Vec<FragmentId>,
}

/// Targets on this node, by owning executor.
type Local = BTreeMap<ExecutorIndex, Vec<Target>>;

/// Targets on other cluster nodes, by owner node (empty on a single node).
type Remote<T> = BTreeMap<NodeId, Vec<T>>;

/// A routed statement: the plan, this node's share by executor, other nodes' shares, and the
/// epoch of the map it was routed by.
struct Routed {
    plan: RoutePlan,
    local: BTreeMap<ExecutorIndex, Vec<Target>>,
    remote: Remote<Target>,
    epoch: u64,
}

/// Refuses work that other nodes would have to do in a path that cannot forward it.
fn local_only<T>(remote: &Remote<T>, what: &'static str) -> Result<(), EngineError> {
    if remote.is_empty() {
        return Ok(());
    }
    let nodes: Vec<String> = remote.keys().map(|n| n.0.to_string()).collect();
    Err(crate::cluster::region::RegionError::CrossNode { what, nodes: nodes.join(",") }.into())
}

/// Whether a statement reads or writes fragments (and so needs the shard map).
fn needs_map(statement: &Statement) -> bool {
    match statement {
        Statement::Select(s) => s.collection.is_some(),
        Statement::Insert(_)
        | Statement::Update(_)
        | Statement::Delete(_)
        | Statement::Truncate { .. }
        | Statement::DropCollections { .. }
        | Statement::VerifySharding { .. } => true,
        Statement::Explain { inner, .. } | Statement::CopyTo { query: inner, .. } => {
            needs_map(inner)
        }
        _ => false,
    }
}

/// Counts a statement as running in the node until dropped, however the statement ends.
struct Running(Arc<super::shared::Shared>);

impl Running {
    fn start(shared: &Arc<super::shared::Shared>) -> Running {
        shared.statements_running.fetch_add(1, Ordering::SeqCst);
        Running(Arc::clone(shared))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.statements_running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Session {
    /// A session on the executor owning `core`.
    pub fn new(core: Rc<Core>, ctx: ExecutorContext<Core>) -> Session {
        core.metrics().connection_opened();
        Session {
            core,
            ctx,
            settings: BTreeMap::new(),
            block: Block::Idle,
            implicit: Implicit::Off,
            names: query::expr::SessionNames::default(),
            last_sql: Arc::from(""),
            last_route: std::cell::RefCell::new(None),
            sql: Arc::from(""),
            planned: std::cell::Cell::new(0),
            forwardable: std::cell::RefCell::new(None),
            block_text: None,
            replay: None,
            copy: None,
        }
    }

    fn prepared(&self, statement: Statement, client_types: &[Oid]) -> Prepared {
        let inferred = query::param_types(&statement);
        let mut params = Vec::with_capacity(inferred.len());
        let mut param_types = Vec::with_capacity(inferred.len());
        for (i, guess) in inferred.iter().enumerate() {
            let client = client_types.get(i).copied().unwrap_or(Oid::UNSPECIFIED);
            let ty = sql_type_of_oid(client).or(*guess).unwrap_or(SqlType::Text);
            params.push(if client == Oid::UNSPECIFIED { oid_of(ty) } else { client });
            param_types.push(ty);
        }
        let columns = self.result_columns(&statement);
        Prepared {
            statement: Arc::new(statement),
            text: Arc::clone(&self.last_sql),
            sql: Arc::clone(&self.sql),
            index: {
                let i = self.planned.get();
                self.planned.set(i.saturating_add(1));
                i
            },
            description: Description { params, columns },
            param_types,
        }
    }

    fn result_columns(&self, statement: &Statement) -> Option<Vec<Column>> {
        if let Statement::Show { name } = statement
            && name.eq_ignore_ascii_case(TRANSACTIONS)
        {
            return Some(vec![
                Column::new("id", Oid::TEXT),
                Column::new("state", Oid::TEXT),
                Column::new("participants", Oid::TEXT),
                Column::new("age_ms", Oid::INT8),
            ]);
        }
        if let Statement::Show { name } = statement
            && name.eq_ignore_ascii_case(TRANSACTION_COUNTERS)
        {
            return Some(vec![Column::new("counter", Oid::TEXT), Column::new("value", Oid::INT8)]);
        }
        if let Statement::Show { name } = statement
            && name == crate::cluster::SHOW_CLUSTER
        {
            return Some(crate::cluster::show_cluster_columns());
        }
        if let Statement::Show { name } = statement
            && name == SHOW_REGION
        {
            return Some(vec![
                Column::new("fragment", Oid::TEXT),
                Column::new("range", Oid::TEXT),
                Column::new("owner", Oid::TEXT),
                Column::new("epoch", Oid::INT8),
                Column::new("buffered", Oid::INT8),
            ]);
        }
        if matches!(statement, Statement::ShowFragments) && self.core.shared().clustered {
            return Some(vec![
                Column::new("fragment", Oid::TEXT),
                Column::new("range", Oid::TEXT),
                Column::new("owner", Oid::TEXT),
                Column::new("documents", Oid::INT8),
                Column::new("bytes", Oid::INT8),
                Column::new("state", Oid::TEXT),
            ]);
        }
        if let Statement::Show { name } = statement
            && name == SHOW_LOCAL_FRAGMENTS
        {
            return Statement::ShowFragments.result_columns().map(|columns| {
                columns.iter().map(|c| Column::new(c.name.clone(), oid_of(c.ty))).collect()
            });
        }
        if let Statement::Show { name } = statement
            && name == SHOW_STATS
        {
            return Some(vec![
                Column::new("name", Oid::TEXT),
                Column::new("labels", Oid::TEXT),
                Column::new("value", Oid::FLOAT8),
            ]);
        }
        if let Statement::Show { name } = statement
            && name == FRAGMENT_COUNTERS
        {
            return Some(vec![
                Column::new("fragment", Oid::TEXT),
                Column::new("statements", Oid::INT8),
                Column::new("rows_scanned", Oid::INT8),
            ]);
        }
        statement.result_columns().map(|columns| {
            columns.iter().map(|c| Column::new(c.name.clone(), oid_of(c.ty))).collect()
        })
    }

    fn bind(&self, prepared: &Prepared, params: Params<'_>) -> Result<Arc<Statement>, EngineError> {
        if prepared.param_types.is_empty() {
            *self.forwardable.borrow_mut() =
                Some((Arc::clone(&prepared.sql), prepared.index, Vec::new()));
            return Ok(Arc::clone(&prepared.statement));
        }
        let mut values = Vec::with_capacity(params.len());
        for (i, param) in params.iter().enumerate() {
            let ty = prepared.param_types.get(i).copied().unwrap_or(SqlType::Text);
            values.push(decode_param(i + 1, param.type_oid, ty, param.format, param.value)?);
        }
        let bound = Arc::new(query::bind(&prepared.statement, &values)?);
        *self.forwardable.borrow_mut() = Some((Arc::clone(&prepared.sql), prepared.index, values));
        Ok(bound)
    }

    async fn run(
        &mut self,
        statement: Arc<Statement>,
        sink: &mut RowSink<'_>,
    ) -> Result<CommandTag, EngineError> {
        if needs_map(&statement) {
            self.ready().await?;
        }
        match &*statement {
            Statement::Select(_) => {
                let n = self
                    .select_each(&statement, async |rows| write_rows(sink, &rows).await.map(drop))
                    .await?;
                Ok(CommandTag::with_rows("SELECT", n))
            }
            Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
                if matches!(self.block, Block::Open(_)) =>
            {
                let outcome = self.txn_write(&statement).await?;
                write_rows(sink, &outcome.returning).await?;
                Ok(match &*statement {
                    Statement::Insert(_) => CommandTag::insert(outcome.affected),
                    Statement::Update(_) => CommandTag::with_rows("UPDATE", outcome.affected),
                    _ => CommandTag::with_rows("DELETE", outcome.affected),
                })
            }
            Statement::Insert(_) => {
                let outcome = self.write(&statement).await?;
                write_rows(sink, &outcome.returning).await?;
                Ok(CommandTag::insert(outcome.affected))
            }
            Statement::Update(_) | Statement::Delete(_) => {
                let verb =
                    if matches!(&*statement, Statement::Update(_)) { "UPDATE" } else { "DELETE" };
                let outcome = self.write(&statement).await?;
                write_rows(sink, &outcome.returning).await?;
                Ok(CommandTag::with_rows(verb, outcome.affected))
            }
            Statement::CopyFrom { collection, columns, format } => {
                Ok(self.copy_from(collection, *columns, format))
            }
            Statement::CopyTo { query, format } => self.copy_to(query, format, sink).await,
            Statement::Truncate { collections } => self.truncate(collections, sink).await,
            Statement::DropCollections { collections, if_exists } => {
                self.drop_collections(collections, *if_exists, sink).await
            }
            Statement::CreateCollection { collection, sharding, if_not_exists } => {
                if let Some(warning) =
                    self.create(collection, sharding.clone(), *if_not_exists).await?
                {
                    sink.notice(&warning);
                }
                Ok(CommandTag::new("CREATE TABLE"))
            }
            Statement::AlterSharding { collection, sharding } => {
                let config = sharding.clone();
                let name = collection.as_str().to_owned();
                let shown = name.clone();
                let warning = self
                    .change_catalog(name, move |current| {
                        let current =
                            current.ok_or_else(|| EngineError::NoConfiguration(shown.clone()))?;
                        router::check_change(current, &config)?;
                        Ok(Some(entry_of(&config)))
                    })
                    .await?;
                if let Some(warning) = warning {
                    sink.notice(&warning);
                }
                Ok(CommandTag::new("ALTER TABLE"))
            }
            Statement::VerifySharding { collection } => {
                let rows = self.verify(collection).await?;
                let n = write_rows(sink, &rows).await?;
                Ok(CommandTag::with_rows("SELECT", n))
            }
            Statement::Explain { analyze, inner } => {
                let lines = self.explain(inner, *analyze).await?;
                let rows: Rows = lines.into_iter().map(|l| vec![Datum::Text(l)]).collect();
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("EXPLAIN"))
            }
            Statement::ShowFragments if self.core.shared().clustered => {
                let rows = self.cluster_fragment_rows().await?;
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Show { name } if name == SHOW_LOCAL_FRAGMENTS => {
                let rows = self.local_fragment_rows().await?;
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Show { name } if name == SHOW_REGION => {
                let rows = self.region_rows();
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::ShowFragments => {
                let rows = self.local_fragment_rows().await?;
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::ShowCollections => {
                let rows = self.collection_rows().await?;
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::ShowSharding { collection } => {
                let catalog = self.core.shared().catalog();
                let rows: Rows = catalog
                    .configs()
                    .iter()
                    .filter(|(name, _)| collection.as_ref().is_none_or(|c| c.as_str() == *name))
                    .map(|(name, config)| {
                        let state = if catalog.is_pending(name) { "pending" } else { "in force" };
                        vec![
                            Datum::Text(name.clone()),
                            Datum::Json(config_json(config)),
                            Datum::Text(state.to_owned()),
                        ]
                    })
                    .collect();
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Show { name } if name.eq_ignore_ascii_case(TRANSACTIONS) => {
                let rows = self.transaction_rows().await?;
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Show { name } if name.eq_ignore_ascii_case(TRANSACTION_COUNTERS) => {
                let c = self.transaction_counters().await?;
                let n = |v: u64| Datum::Int8(i64::try_from(v).unwrap_or(i64::MAX));
                let rows: Rows = [
                    ("fast_path_commits", c.fast_path_commits),
                    ("two_phase_commits", c.two_phase_commits),
                    ("read_only_commits", c.read_only_commits),
                    ("read_only_holds", c.read_only_holds),
                    ("aborts", c.aborts),
                    ("conflicts", c.conflicts),
                    ("range_conflicts", c.range_conflicts),
                    ("held_waits", c.held_waits),
                    ("paused_reads", c.paused_reads),
                    ("prepared_attempts", c.prepared_attempts),
                ]
                .into_iter()
                .map(|(k, v)| vec![Datum::Text(k.to_owned()), n(v)])
                .collect();
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Show { name } if name == crate::cluster::SHOW_CLUSTER => {
                let map = self.core.shared().map();
                // Documents per node: the region's counts of the fragments each node owns
                // (NULL for a node that did not answer).
                let mut documents: BTreeMap<i64, Option<u64>> = BTreeMap::new();
                if let Some(map) = &map {
                    let counts = self.fragment_counts(map).await?;
                    for f in map.fragments() {
                        let node = i64::from(f.owner().node.0);
                        let here = counts.get(&f.id()).map(|(d, _)| *d);
                        let slot = documents.entry(node).or_insert(Some(0));
                        *slot = slot.zip(here).map(|(a, b)| a + b);
                    }
                }
                let rows = crate::cluster::show_cluster_datums(
                    map.as_ref().map_or(0, |m| m.epoch().0),
                    map.as_ref().map_or(0, |m| m.len()),
                    |node| match documents.get(&node) {
                        Some(Some(d)) => Datum::Int8(i64::try_from(*d).unwrap_or(i64::MAX)),
                        Some(None) => Datum::Null,
                        None => Datum::Int8(0),
                    },
                );
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Show { name } if name == FRAGMENT_COUNTERS => {
                let rows = self
                    .fragment_rows()
                    .await?
                    .into_iter()
                    .map(|r| {
                        let n = |v: u64| Datum::Int8(i64::try_from(v).unwrap_or(i64::MAX));
                        vec![
                            Datum::Text(r.fragment.to_string()),
                            n(r.counters.statements),
                            n(r.counters.rows_scanned),
                        ]
                    })
                    .collect::<Rows>();
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Show { name } if name == SHOW_STATS => {
                let snapshots = crate::metrics::collect(&self.core, &self.ctx.mesh).await;
                let set = crate::metrics::render_set(&snapshots);
                let rows: Rows = set
                    .samples()
                    .map(|s| {
                        vec![
                            Datum::Text(s.name.clone()),
                            Datum::Text(crate::metrics::format_labels(&s.labels)),
                            Datum::Float8(s.value),
                        ]
                    })
                    .collect();
                write_rows(sink, &rows).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Show { name } => {
                let value =
                    self.setting(name).ok_or_else(|| EngineError::UnknownSetting(name.clone()))?;
                write_rows(sink, &[vec![Datum::Text(value)]]).await?;
                Ok(CommandTag::new("SHOW"))
            }
            Statement::Set { name, value } if name == super::backup::BACKUP_SETTING => {
                let to = std::path::PathBuf::from(value);
                let done = super::backup::run(&self.core, &self.ctx.mesh, to).await?;
                Ok(CommandTag::new(format!("BACKUP {} {}", done.files, done.bytes)))
            }
            Statement::Set { name, value } => {
                self.settings.insert(name.clone(), value.clone());
                Ok(CommandTag::new("SET"))
            }
            Statement::Reset { name: Some(name) } => {
                self.settings.remove(name);
                Ok(CommandTag::new("RESET"))
            }
            Statement::Reset { name: None } => {
                self.settings.clear();
                Ok(CommandTag::new("RESET"))
            }
            // The wire layer dropped the statements (`Engine::connection_effect`).
            Statement::Deallocate { name } => Ok(CommandTag::new(match name {
                Some(_) => "DEALLOCATE",
                None => "DEALLOCATE ALL",
            })),
            Statement::DiscardAll => {
                self.settings.clear();
                Ok(CommandTag::new("DISCARD ALL"))
            }
            Statement::MoveFragment { fragment, node } => {
                let epoch = crate::cluster::ops::plan_move(*fragment, *node).await?;
                tracing::info!(
                    fragment,
                    node,
                    epoch,
                    "ALTER FRAGMENT: the coordinator planned the move"
                );
                Ok(CommandTag::new("ALTER FRAGMENT"))
            }
            Statement::RemoveNode { node } => {
                crate::cluster::ops::remove_node(*node).await?;
                tracing::info!(node, "ALTER CLUSTER: the coordinator removed the member");
                Ok(CommandTag::new("ALTER CLUSTER"))
            }
            Statement::SplitFragment { fragment, at } => {
                let epoch = crate::cluster::ops::split(*fragment, *at).await?;
                tracing::info!(
                    fragment,
                    ?at,
                    epoch,
                    "ALTER FRAGMENT: the coordinator began the split"
                );
                Ok(CommandTag::new("ALTER FRAGMENT"))
            }
            Statement::MergeFragments { left, right } => {
                let epoch = crate::cluster::ops::merge(*left, *right).await?;
                tracing::info!(
                    left,
                    right,
                    epoch,
                    "ALTER FRAGMENT: the coordinator began the merge"
                );
                Ok(CommandTag::new("ALTER FRAGMENT"))
            }
            Statement::Begin => {
                match &self.block {
                    Block::Idle => self.open_block(),
                    // BEGIN in a query of several statements makes its implicit block an
                    // explicit one (the statements before it included), as in PostgreSQL.
                    Block::Open(_) if self.implicit == Implicit::Open => {
                        self.implicit = Implicit::Armed;
                    }
                    Block::Open(_) | Block::Failed(_) => sink.notice(
                        &Notice::warning("there is already a transaction in progress")
                            .with_code(SqlState::ACTIVE_SQL_TRANSACTION),
                    ),
                }
                Ok(CommandTag::new("BEGIN"))
            }
            Statement::Commit => match std::mem::replace(&mut self.block, Block::Idle) {
                Block::Idle => {
                    sink.notice(
                        &Notice::warning("there is no transaction in progress")
                            .with_code(SqlState::NO_ACTIVE_SQL_TRANSACTION),
                    );
                    Ok(CommandTag::new("COMMIT"))
                }
                Block::Failed(txn) => {
                    // As in PostgreSQL: COMMIT of a failed block rolls it back.
                    self.drop_block(&txn);
                    Ok(CommandTag::new("ROLLBACK"))
                }
                Block::Open(txn) => {
                    self.commit_block(&txn).await.map(|()| CommandTag::new("COMMIT"))
                }
            },
            Statement::Rollback => {
                match std::mem::replace(&mut self.block, Block::Idle) {
                    Block::Idle => sink.notice(
                        &Notice::warning("there is no transaction in progress")
                            .with_code(SqlState::NO_ACTIVE_SQL_TRANSACTION),
                    ),
                    Block::Open(txn) | Block::Failed(txn) => self.drop_block(&txn),
                }
                Ok(CommandTag::new("ROLLBACK"))
            }
        }
    }

    fn setting(&self, name: &str) -> Option<String> {
        if let Some(v) = self.settings.get(name) {
            return Some(v.clone());
        }
        let fixed = match name {
            "server_version" => query::SERVER_VERSION,
            "server_version_num" => "150000",
            "server_encoding" | "client_encoding" => "UTF8",
            "transaction_isolation" | "default_transaction_isolation" => "serializable",
            "transaction_read_only" | "default_transaction_read_only" => "off",
            "standard_conforming_strings" | "integer_datetimes" => "on",
            "datestyle" => "ISO, MDY",
            "timezone" => "UTC",
            "intervalstyle" => "postgres",
            "max_identifier_length" => "63",
            "application_name" => "",
            _ => return None,
        };
        Some(fixed.to_owned())
    }

    /// The shard map, waiting in the region's buffer while a cluster has none allocated yet
    /// (bounded; 53400 when the buffer is full). A single node always has its map.
    async fn ready(&self) -> Result<Arc<ShardMap>, EngineError> {
        let shared = self.core.shared();
        let key = crate::cluster::region::BufferKey::Unallocated;
        Ok(shared.buffers.wait_for(key, || shared.map()).await?)
    }

    /// The current map (`ready` was awaited before any statement that routes).
    fn map(&self) -> Result<Arc<ShardMap>, EngineError> {
        self.core
            .shared()
            .map()
            .ok_or_else(|| internal("routing before the shard map is allocated"))
    }

    /// Routes a statement: which fragments, grouped by owning executor on this node and by
    /// owner node for other nodes, with the shard ranges to read in each.
    fn route_all(
        &self,
        statement: &Statement,
        catalog: &CatalogView,
    ) -> Result<Option<Routed>, EngineError> {
        let map = self.map()?;
        let me = self.core.shared().me;
        let config = rules_of(catalog, statement).route;
        let Some(plan) = query::route_statement(statement, config, &map) else { return Ok(None) };
        *self.last_route.borrow_mut() = Some((plan.opcode, plan.fragments.clone()));
        let mut local: BTreeMap<ExecutorIndex, Vec<Target>> = BTreeMap::new();
        let mut remote: Remote<Target> = BTreeMap::new();
        for id in &plan.fragments {
            let Some(fragment) = map.get(*id) else { continue };
            let ranges = clip(&plan.shards, fragment.range());
            if ranges.is_empty() {
                continue;
            }
            let target = Target { fragment: *id, ranges };
            let owner = fragment.owner();
            if owner.node == me {
                local
                    .entry(ExecutorIndex::new(owner.executor.0 as usize))
                    .or_default()
                    .push(target);
            } else {
                remote.entry(owner.node).or_default().push(target);
            }
        }
        Ok(Some(Routed { plan, local, remote, epoch: map.epoch().0 }))
    }

    /// Routes a statement that must run on this node only (refused with 0A000 otherwise).
    fn route(
        &self,
        statement: &Statement,
        catalog: &CatalogView,
    ) -> Result<Option<(RoutePlan, Local)>, EngineError> {
        let Some(routed) = self.route_all(statement, catalog)? else { return Ok(None) };
        let what = if matches!(self.block, Block::Idle) {
            "this statement"
        } else {
            "a statement in a transaction block"
        };
        local_only(&routed.remote, what)?;
        Ok(Some((routed.plan, routed.local)))
    }

    async fn select(
        &self,
        statement: &Arc<Statement>,
    ) -> Result<(Rows, Vec<FragmentAnalysis>), EngineError> {
        let Statement::Select(select) = &**statement else {
            return Err(internal("select() of a non-SELECT"));
        };
        let mut attempt = 1;
        loop {
            let catalog = self.core.shared().catalog();
            let Some(routed) = self.route_all(statement, &catalog)? else {
                let merged = query::merge(select, Vec::new())?;
                return Ok((merged.rows, Vec::new()));
            };
            if self.located(&routed.plan.fragments).await? {
                continue;
            }
            // Other nodes' shares first (one forwarded request each), then this node's.
            let mut forwarded = Vec::with_capacity(routed.remote.len());
            for (node, targets) in routed.remote {
                let request = self.request(
                    routed.epoch,
                    catalog.version(),
                    Share::Select { targets: wire_targets(&targets) },
                )?;
                forwarded.push(glommio::spawn_local(forward::call(node.0, request, true)));
            }
            let local = self
                .fan_out(routed.local, statement, |core, stmt, targets| async move {
                    match &*stmt {
                        Statement::Select(s) => core.select(s, &targets).await,
                        _ => Err(internal("select share of a non-SELECT")),
                    }
                })
                .await;
            let mut partials = Vec::new();
            let mut analysis = Vec::new();
            let mut retry = None;
            let mut first_error = None;
            for task in forwarded {
                match task.await {
                    Ok(Reply::Partials(p)) => match forward::partials_from_wire(p) {
                        Ok(p) => partials.extend(p),
                        Err(reason) => first_error = first_error.or(Some(bad_reply(reason))),
                    },
                    Ok(other) => match reply_error(other) {
                        Ok(epoch) => retry = Some(epoch),
                        Err(e) => first_error = first_error.or(Some(e)),
                    },
                    Err(e) => first_error = first_error.or(Some(e.into())),
                }
            }
            let local = local?;
            if let Some(e) = first_error {
                return Err(e);
            }
            if let Some(current) = retry {
                self.refresh(routed.epoch, current, &mut attempt).await?;
                continue;
            }
            for (p, a) in local {
                partials.extend(p);
                analysis.extend(a);
            }
            analysis.sort_by_key(|a| a.fragment);
            let merged = query::merge(select, partials)?;
            return Ok((merged.rows, analysis));
        }
    }

    /// The running statement as a forwarded request with `share`, at `epoch`.
    /// The request forwarding the running statement's `share`, routed by map `epoch` and
    /// planned with catalog version `catalog` (0 for shares that depend on neither).
    fn request(
        &self,
        epoch: u64,
        catalog: u64,
        share: Share,
    ) -> Result<forward::Request, EngineError> {
        let forwardable = self.forwardable.borrow();
        let (sql, index, params) = forwardable
            .as_ref()
            .ok_or_else(|| internal("forwarding a statement without its text"))?;
        Ok(forward::Request {
            epoch,
            catalog,
            sql: sql.to_string(),
            index: *index,
            params: forward::datums_to_wire(params),
            share,
        })
    }

    /// After an owner said the map at `used` is stale: waits (in the region buffer, bounded)
    /// for a map newer than `used` (at least `current` when the owner named it), counting the
    /// attempt against `REGION_RETRIES_MAX`.
    async fn refresh(&self, used: u64, current: u64, attempt: &mut u32) -> Result<(), EngineError> {
        let shared = self.core.shared();
        let installed = || shared.map_epoch().0;
        Ok(crate::cluster::region::refresh(&shared.buffers, installed, used, current, attempt)
            .await?)
    }

    /// Other nodes a write statement's fragments live on, and whether it touches this one.
    fn write_nodes(
        &self,
        statement: &Arc<Statement>,
        catalog: &CatalogView,
    ) -> Result<WriteNodes, EngineError> {
        let epoch = self.core.shared().map_epoch().0;
        Ok(match &**statement {
            Statement::Insert(insert) => {
                let (placed, remote) =
                    self.place_all(insert, catalog.rules(insert.collection.as_str()).place)?;
                let mut fragments: Vec<FragmentId> =
                    placed.values().flat_map(|l| l.iter().map(|(f, _)| *f)).collect();
                fragments.extend(remote.values().flatten().copied());
                WriteNodes {
                    remote: remote.into_iter().map(|(n, f)| (n, f.len())).collect(),
                    here: !placed.is_empty(),
                    epoch,
                    fragments,
                }
            }
            _ => match self.route_all(statement, catalog)? {
                Some(r) => WriteNodes {
                    remote: r.remote.into_iter().map(|(n, f)| (n, f.len())).collect(),
                    here: !r.local.is_empty(),
                    epoch: r.epoch,
                    fragments: r.plan.fragments,
                },
                None => {
                    WriteNodes { remote: BTreeMap::new(), here: true, epoch, fragments: Vec::new() }
                }
            },
        })
    }

    /// Waits (in the region buffers) while any of `fragments` is being handed off; returns
    /// whether it waited, and then the statement is routed again.
    async fn located(&self, fragments: &[FragmentId]) -> Result<bool, EngineError> {
        let shared = self.core.shared();
        let moving = |id| shared.is_moving(id);
        Ok(crate::cluster::region::wait_located(&shared.buffers, fragments, moving).await?)
    }

    /// An autocommit write on a cluster node: run here when every fragment it touches is
    /// here, forwarded whole to the owner when they all live on one other node, refused with
    /// 0A000 when they span nodes (no cross-node atomic commit yet).
    async fn write_routed(
        &self,
        statement: &Arc<Statement>,
    ) -> Result<Option<WriteOutcome>, EngineError> {
        let mut attempt = 1;
        loop {
            let catalog = self.core.shared().catalog();
            let WriteNodes { remote, here, epoch, fragments } =
                self.write_nodes(statement, &catalog)?;
            if self.located(&fragments).await? {
                continue;
            }
            if remote.is_empty() {
                return Ok(None);
            }
            if here || remote.len() > 1 {
                // Spans nodes: a transaction of one statement, committed by this node.
                return Ok(Some(self.autocommit_txn(statement).await?));
            }
            let Some(node) = remote.keys().next().copied() else { return Ok(None) };
            let request = self.request(epoch, catalog.version(), Share::Write)?;
            match forward::call(node.0, request, false).await? {
                Reply::Written { affected, returning } => {
                    return Ok(Some(written_outcome(affected, returning)?));
                }
                Reply::StaleCatalog { current } => {
                    // Plan again by the owner's catalog (bounded like a stale map).
                    if attempt >= crate::cluster::limits::REGION_RETRIES_MAX {
                        let changed =
                            crate::cluster::ops::MoveError::CatalogChanged { version: current };
                        return Err(changed.into());
                    }
                    attempt += 1;
                    let shared = self.core.shared();
                    let limit = shared.buffers.limits().wait;
                    crate::cluster::region::wait_catalog(shared, current, limit).await?;
                }
                other => {
                    let current = reply_error(other)?;
                    self.refresh(epoch, current, &mut attempt).await?;
                }
            }
        }
    }

    /// Runs a share another node forwarded here (see `cluster::forward`): the same routing
    /// checks and the same `Core` functions as a local share. Errors travel back as SQLSTATE
    /// and message.
    pub async fn serve_forwarded(&mut self, request: forward::Request) -> Reply {
        if self.ctx.shutdown.is_triggered() {
            return Reply::Failed {
                code: SqlState::ADMIN_SHUTDOWN.to_string(),
                message: "the owner node is shutting down".to_owned(),
            };
        }
        // Counted like a client's statement: shutdown waits for it before closing fragments.
        let _running = Running::start(self.core.shared());
        match self.forwarded(request).await {
            Ok(reply) => reply,
            Err(e) => {
                let pg = engine_error(&e);
                Reply::Failed { code: pg.code().to_string(), message: pg.message().to_owned() }
            }
        }
    }

    async fn forwarded(&mut self, request: forward::Request) -> Result<Reply, EngineError> {
        let shared = Arc::clone(self.core.shared());
        // Phase two and decision requests do not depend on the map the region routed by.
        match request.share {
            Share::TxnDecide { txid } => {
                let commit = self.decide_for_participant(storage::TxId::new(txid)).await?;
                return Ok(Reply::Decided { commit });
            }
            Share::TxnFinish { txid, fragments, commit } => {
                self.finish_forwarded(storage::TxId::new(txid), fragments, commit).await?;
                return Ok(Reply::Applied);
            }
            _ => {}
        }
        let want = request.epoch;
        // This node may not have installed the region's map yet: wait for it (bounded).
        let limit = shared.buffers.limits().wait;
        let what = format!("shard map epoch {want}");
        let ready = || shared.map().filter(|m| m.epoch().0 >= want);
        let map = crate::cluster::region::poll_until(&what, limit, ready).await?;
        if map.epoch().0 > want {
            return Ok(Reply::StaleEpoch { current: map.epoch().0 });
        }
        // Nor the catalog the statement was planned with (placement and validation by the
        // same configuration: `CatalogView::rules`).
        let planned_catalog = request.catalog;
        crate::cluster::region::wait_catalog(&shared, planned_catalog, limit).await?;
        let me = shared.me;
        if let Share::Fragments = request.share {
            let rows = self.fragment_rows().await?;
            return Ok(Reply::Fragments(
                rows.into_iter()
                    .map(|r| forward::WireFragment {
                        fragment: r.fragment.get(),
                        start: r.range.start(),
                        end: r.range.end(),
                        executor: u32::try_from(r.executor.get()).unwrap_or(u32::MAX),
                        documents: r.documents,
                        bytes: r.bytes,
                    })
                    .collect(),
            ));
        }
        if let Share::Verify { collection } = &request.share {
            let found = self.local_violations(&CollectionName::new(collection.as_str())).await?;
            return Ok(Reply::Violations(
                found
                    .into_iter()
                    .map(|(id, reason)| forward::WireViolation { id, reason })
                    .collect(),
            ));
        }
        if let Share::Collections = request.share {
            let docs = self.local_collection_docs().await?;
            return Ok(Reply::Collections(
                docs.into_iter()
                    .map(|(name, documents)| forward::WireCollection { name, documents })
                    .collect(),
            ));
        }
        if let Share::TxnApply { target } = request.share {
            return self.apply_forwarded(&map, target).await;
        }
        if let Share::TxnPrepare { txid, targets } = request.share {
            return self.prepare_forwarded(&map, storage::TxId::new(txid), targets).await;
        }
        let parsed = query::parse(&request.sql)?;
        let unbound = parsed
            .into_iter()
            .nth(request.index as usize)
            .ok_or_else(|| internal("forwarded statement index outside its text"))?;
        let values = forward::datums_from_wire(request.params).map_err(bad_reply)?;
        let mut statement = query::bind(&unbound, &values)?;
        if let Statement::Explain { inner, .. } | Statement::CopyTo { query: inner, .. } = statement
        {
            statement = *inner;
        }
        // A TRUNCATE's round arrives as the text `TRUNCATE "c"` (see `truncate`).
        if let Statement::Truncate { collections } = &statement
            && let [collection] = collections.as_slice()
        {
            statement = truncate::round(collection, map.len());
        }
        let statement = Arc::new(statement);
        *self.forwardable.borrow_mut() =
            Some((Arc::from(request.sql.as_str()), request.index, values));
        match request.share {
            Share::Select { targets } => {
                let mut groups: Local = BTreeMap::new();
                for t in targets {
                    let id = FragmentId::new(t.fragment);
                    let Some(owner) = map.owner_of(id).filter(|o| o.node == me) else {
                        return Ok(Reply::NotMine { fragment: t.fragment });
                    };
                    let ranges =
                        t.ranges.iter().filter_map(|r| ShardRange::new(r.start, r.end)).collect();
                    groups
                        .entry(ExecutorIndex::new(owner.executor.0 as usize))
                        .or_default()
                        .push(Target { fragment: id, ranges });
                }
                let results = self
                    .fan_out(groups, &statement, |core, stmt, targets| async move {
                        match &*stmt {
                            Statement::Select(s) => core.select(s, &targets).await,
                            _ => Err(internal("forwarded select share of a non-SELECT")),
                        }
                    })
                    .await?;
                let partials: Vec<query::Partial> =
                    results.into_iter().flat_map(|(p, _)| p).collect();
                Ok(Reply::Partials(forward::partials_to_wire(&partials)))
            }
            Share::SelectPage { target, after } => {
                let id = FragmentId::new(target.fragment);
                let Some(owner) = map.owner_of(id).filter(|o| o.node == me) else {
                    return Ok(Reply::NotMine { fragment: target.fragment });
                };
                let ranges =
                    target.ranges.iter().filter_map(|r| ShardRange::new(r.start, r.end)).collect();
                let after = after.map(forward::pos_from_wire).transpose().map_err(bad_reply)?;
                let mut groups: BTreeMap<ExecutorIndex, Vec<(Target, Option<query::ScanPos>)>> =
                    BTreeMap::new();
                groups
                    .entry(ExecutorIndex::new(owner.executor.0 as usize))
                    .or_default()
                    .push((Target { fragment: id, ranges }, after));
                let mut pages = self
                    .fan_out(groups, &statement, |core, stmt, mut shares| async move {
                        let (target, after) =
                            shares.pop().ok_or_else(|| internal("page share without a target"))?;
                        match &*stmt {
                            Statement::Select(s) => core.select_page(s, &target, after.as_ref()),
                            _ => Err(internal("forwarded page share of a non-SELECT")),
                        }
                    })
                    .await?;
                let (partial, next) =
                    pages.pop().ok_or_else(|| internal("page share answered nothing"))?;
                let partial = forward::partials_to_wire(std::slice::from_ref(&partial))
                    .pop()
                    .ok_or_else(|| internal("page without a partial"))?;
                Ok(Reply::Page { partial, next: next.as_ref().map(forward::pos_to_wire) })
            }
            Share::Write => {
                if !matches!(
                    &*statement,
                    Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
                ) {
                    return Err(internal("forwarded write share of a non-write"));
                }
                let catalog = shared.catalog();
                let WriteNodes { fragments, .. } = self.write_nodes(&statement, &catalog)?;
                let elsewhere =
                    fragments.iter().find(|f| map.owner_of(**f).is_none_or(|o| o.node != me));
                if let Some(fragment) = elsewhere {
                    // A newer catalog here may place `…$` ids elsewhere than the region did.
                    let current = catalog.version();
                    return Ok(if current == planned_catalog {
                        Reply::NotMine { fragment: fragment.get() }
                    } else {
                        Reply::StaleCatalog { current }
                    });
                }
                let outcome = self.write(&statement).await?;
                Ok(written_reply(&outcome))
            }
            Share::TxnSelect { targets } => {
                let groups = match txn_targets_here(&map, me, targets)? {
                    Ok(g) => g,
                    Err(fragment) => return Ok(Reply::NotMine { fragment }),
                };
                let results = self
                    .fan_out(groups, &statement, |core, stmt, targets| async move {
                        match &*stmt {
                            Statement::Select(s) => core.txn_select(s, &targets).await,
                            _ => Err(internal("forwarded select share of a non-SELECT")),
                        }
                    })
                    .await?;
                let mut partials = Vec::new();
                let mut reads = Vec::new();
                for (p, r) in results {
                    partials.extend(p);
                    for (fragment, list) in r {
                        reads.push(forward::WireTxnShare {
                            fragment: fragment.get(),
                            intents: Vec::new(),
                            reads: forward::reads_to_wire(&list.docs, &list.scans),
                            returning: Vec::new(),
                            rows_scanned: 0,
                        });
                    }
                }
                Ok(Reply::TxnRead { partials: forward::partials_to_wire(&partials), reads })
            }
            Share::TxnWrite { targets } => {
                self.txn_write_here(
                    &map,
                    me,
                    &statement,
                    planned_catalog,
                    targets,
                    ShareRead::Asked,
                )
                .await
            }
            Share::TxnWriteAs { targets, read } => {
                let read = share_read_from_wire(read);
                self.txn_write_here(&map, me, &statement, planned_catalog, targets, read).await
            }
            Share::TxnWritePrepared { targets, txid } => {
                let txid = storage::TxId::new(txid);
                if coordinator_of(txid) == me {
                    return Err(internal("a prepare coordinated by this node came from another"));
                }
                let groups = match txn_targets_here(&map, me, targets)? {
                    Ok(g) => g,
                    Err(fragment) => return Ok(Reply::NotMine { fragment }),
                };
                let (outcome, _) = self.prepare_shares(groups, &statement, txid).await?;
                Ok(written_reply(&outcome))
            }
            Share::TxnApply { .. }
            | Share::TxnPrepare { .. }
            | Share::TxnFinish { .. }
            | Share::TxnDecide { .. } => Err(internal("commit share handled above")),
            Share::Fragments | Share::Collections | Share::Verify { .. } => {
                Err(internal("fragments, collections and verify shares handled above"))
            }
        }
    }

    /// Runs a transaction's write share another node sent (`Share::TxnWrite`,
    /// `Share::TxnWriteAs`) on this node's fragments, read as `read` says; answered with the
    /// shares (writes nothing).
    async fn txn_write_here(
        &self,
        map: &ShardMap,
        me: NodeId,
        statement: &Arc<Statement>,
        planned_catalog: u64,
        targets: Vec<forward::WireTxnTarget>,
        read: ShareRead,
    ) -> Result<Reply, EngineError> {
        let catalog = self.core.shared().catalog();
        let mut groups = match txn_targets_here(map, me, targets)? {
            Ok(g) => g,
            Err(fragment) => return Ok(Reply::NotMine { fragment }),
        };
        if let Statement::Insert(insert) = &**statement {
            // The owner places the documents again (same map epoch and catalog, same
            // result) and keeps those of the fragments the region sent here. A newer
            // catalog here may place a `…$` id elsewhere than the region did: nothing
            // is written, the client retries (40001).
            if catalog.version() != planned_catalog && places_by_content(insert)? {
                let version = catalog.version();
                return Err(crate::cluster::ops::MoveError::CatalogChanged { version }.into());
            }
            let (placed, _) =
                self.place_all(insert, catalog.rules(insert.collection.as_str()).place)?;
            let mut docs: BTreeMap<FragmentId, Vec<PlacedDocument>> =
                placed.into_values().flatten().collect();
            for targets in groups.values_mut() {
                for t in targets.iter_mut() {
                    t.docs = docs.remove(&t.fragment).unwrap_or_default();
                }
            }
        }
        let with = (Arc::clone(statement), catalog, read);
        let shares = self
            .fan_out(groups, &with, |core, (stmt, view, read), targets| async move {
                core.txn_write(&stmt, &targets, rules_of(&view, &stmt), read).await
            })
            .await?;
        Ok(Reply::TxnShares(shares.iter().flatten().map(share_to_wire).collect()))
    }

    /// Applies a transaction's batch of one fragment of this node that another node's
    /// session committed (its only write, or checks of reads).
    async fn apply_forwarded(
        &self,
        map: &ShardMap,
        target: forward::WireTxnTarget,
    ) -> Result<Reply, EngineError> {
        let fragment = FragmentId::new(target.fragment);
        let Some(owner) = map.owner_of(fragment).filter(|o| o.node == self.core.shared().me) else {
            return Ok(Reply::NotMine { fragment: target.fragment });
        };
        let batch = batch_from_wire(target)?;
        let executor = ExecutorIndex::new(owner.executor.0 as usize);
        let mut groups = BTreeMap::new();
        groups.insert(executor, vec![(fragment, batch)]);
        self.apply_batches(groups).await?;
        Ok(Reply::Applied)
    }

    /// Phase one for a transaction another node coordinates: prepares its batches of this
    /// node's fragments (durable; all or nothing on this node).
    async fn prepare_forwarded(
        &self,
        map: &ShardMap,
        txid: storage::TxId,
        targets: Vec<forward::WireTxnTarget>,
    ) -> Result<Reply, EngineError> {
        let me = self.core.shared().me;
        if coordinator_of(txid) == me {
            return Err(internal("a prepare coordinated by this node came from another"));
        }
        let mut groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>> =
            BTreeMap::new();
        for target in targets {
            let fragment = FragmentId::new(target.fragment);
            let Some(owner) = map.owner_of(fragment).filter(|o| o.node == me) else {
                return Ok(Reply::NotMine { fragment: target.fragment });
            };
            groups
                .entry(ExecutorIndex::new(owner.executor.0 as usize))
                .or_default()
                .push((fragment, batch_from_wire(target)?));
        }
        let participants = participants_of(&groups);
        let prepared = self.prepare_here(txid, groups).await;
        if let Err(e) = prepared {
            // Executors that prepared abort at once (the coordinator aborts too).
            self.phase_two(txid, &participants, false).await;
            return Err(e);
        }
        Ok(Reply::Applied)
    }

    /// Phase two for a transaction another node coordinates, on this node's fragments of
    /// `fragments`; returns once the records are durable.
    async fn finish_forwarded(
        &self,
        txid: storage::TxId,
        fragments: Vec<u32>,
        commit: bool,
    ) -> Result<(), EngineError> {
        let me = self.core.shared().me;
        let map = self.map()?;
        let mut groups: BTreeMap<ExecutorIndex, Vec<FragmentId>> = BTreeMap::new();
        for f in fragments {
            let id = FragmentId::new(f);
            if let Some(owner) = map.owner_of(id).filter(|o| o.node == me) {
                groups.entry(ExecutorIndex::new(owner.executor.0 as usize)).or_default().push(id);
            }
        }
        let with = (txid, commit);
        self.fan_out(groups, &with, |core, (txid, commit), list| async move {
            core.finish_txn(txid, list, commit, None).await;
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// The decision on `txid` for a participant on another node that holds it prepared: a
    /// COMMIT recovered from this node's journal, else the coordinator's (ABORT recorded
    /// first when it has none).
    async fn decide_for_participant(&self, txid: storage::TxId) -> Result<bool, EngineError> {
        let shared = Arc::clone(self.core.shared());
        if coordinator_of(txid) != shared.me {
            return Err(internal(
                "asked for the decision of a transaction another node coordinates",
            ));
        }
        if shared.txn.recovered_commit(txid) {
            return Ok(true);
        }
        let gate_shared = Arc::clone(&shared);
        if let Some(c) = self.core.coordinator() {
            return c.decide(gate_shared.txn.two_phase_gate(), txid, false, &[], 0).await;
        }
        self.ctx
            .mesh
            .call(ExecutorIndex::new(0), move |core| async move {
                match core.coordinator() {
                    Some(c) => {
                        c.decide(gate_shared.txn.two_phase_gate(), txid, false, &[], 0).await
                    }
                    None => Err(internal("executor 0 has no coordinator")),
                }
            })
            .await?
    }

    async fn write(&self, statement: &Arc<Statement>) -> Result<WriteOutcome, EngineError> {
        if self.core.shared().clustered
            && let Some(outcome) = self.write_routed(statement).await?
        {
            return Ok(outcome);
        }
        let catalog = self.core.shared().catalog();
        // Placed or routed once: the fragment count picks the path and the groups are reused.
        let outcomes = match &**statement {
            Statement::Insert(insert) => {
                let groups = self.place(insert, catalog.rules(insert.collection.as_str()).place)?;
                if groups.values().map(Vec::len).sum::<usize>() > 1 {
                    return self.autocommit_txn(statement).await;
                }
                self.placed(&groups);
                let with = (Arc::clone(statement), catalog);
                self.fan_out(groups, &with, |core, (stmt, view), per_fragment| async move {
                    let Statement::Insert(i) = &*stmt else {
                        return Err(internal("insert share of a non-INSERT"));
                    };
                    core.insert(i, &per_fragment, view.rules(i.collection.as_str())).await
                })
                .await?
            }
            Statement::Update(_) | Statement::Delete(_) => {
                let groups = self.route(statement, &catalog)?.map(|(_, g)| g).unwrap_or_default();
                if groups.values().map(Vec::len).sum::<usize>() > 1 {
                    return self.autocommit_txn(statement).await;
                }
                let with = (Arc::clone(statement), catalog);
                self.fan_out(groups, &with, |core, (stmt, view), targets| async move {
                    match &*stmt {
                        Statement::Update(u) => {
                            core.update(u, &targets, view.rules(u.collection.as_str())).await
                        }
                        Statement::Delete(d) => core.delete(d, &targets).await,
                        _ => Err(internal("write share of a non-write")),
                    }
                })
                .await?
            }
            _ => return Err(internal("write() of a non-write")),
        };
        let mut total = WriteOutcome::default();
        for o in outcomes {
            total.absorb(o);
        }
        Ok(total)
    }

    /// An autocommit write over several fragments: a transaction of one statement through the
    /// commit path (atomic across fragments and executors), run again on a conflict. Only the
    /// documents it writes are validated, as when it runs on one fragment, so it reads each
    /// fragment at one instant: the first attempt in slices under a pause of the writes of
    /// what it reads ([`ShareRead::AutocommitPaused`]), then committed. An UPDATE's or
    /// DELETE's later attempts prepare each fragment's writes before its instant ends
    /// ([`Session::autocommit_prepared`]), so writes that kept landing between a read and its
    /// commit wait for it instead, on other nodes too; so does its first attempt within
    /// `AUTOCOMMIT_CONTENTION_WINDOW` of such a statement's conflict on this executor, in the
    /// same collection; one that finds the map stale reads in
    /// one go ([`ShareRead::AutocommitOneGo`]) and commits after, as before.
    async fn autocommit_txn(
        &self,
        statement: &Arc<Statement>,
    ) -> Result<WriteOutcome, EngineError> {
        let mut attempt = 1;
        // Soon after such a statement of this collection and executor conflicted, from the
        // first attempt.
        let collection = collection_of(statement).map_or("", |c| c.as_str());
        let contended = self.core.autocommit_contended(collection);
        loop {
            let prepared = match (attempt, &**statement) {
                (_, Statement::Insert(_)) => None,
                (1, _) if !contended => None,
                _ => self.autocommit_prepared(statement).await?,
            };
            let result = match prepared {
                Some(result) => result,
                None => {
                    let mut txn = Txn::new(0);
                    let read = if attempt == 1 {
                        ShareRead::AutocommitPaused
                    } else {
                        ShareRead::AutocommitOneGo
                    };
                    let outcome = self.txn_statement(&mut txn, statement, read).await?;
                    self.commit_txn(&txn).await.map(|()| outcome)
                }
            };
            match result {
                Ok(outcome) => return Ok(outcome),
                Err(e) if is_conflict(&e) && attempt < TXN_AUTOCOMMIT_ATTEMPTS_MAX => {
                    self.core.autocommit_conflicted(collection);
                    // The other transaction is usually one fdatasync from done: give it that
                    // long (growing with each attempt) before running again.
                    glommio::timer::sleep(WRITE_CONFLICT_POLL * attempt).await;
                    attempt += 1;
                    tracing::debug!(attempt, "autocommit transaction conflicted; re-running");
                }
                Err(e) if is_conflict(&e) => {
                    self.core.autocommit_conflicted(collection);
                    return Err(EngineError::Contention { attempts: attempt });
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt of an autocommit UPDATE or DELETE over several fragments that prepares
    /// as it reads: every executor of this node reads its fragments and prepares each one's
    /// writes for one transaction id at the instant it was read (`Core::txn_write_prepared`),
    /// and every other node holding some does the same for its own
    /// (`Share::TxnWritePrepared`), all at once; then this node records the decision and runs
    /// phase two, as [`Session::two_phase`] does. A fragment's documents are held from its
    /// prepare on, so the writes a read's pause held wait for this statement's commit instead
    /// of invalidating it. `None` when the map is stale (nothing is left held): the caller runs
    /// the attempt as before, which refreshes it. `Some(Err)` of a conflict is retried by the
    /// caller; nothing is held after any error.
    async fn autocommit_prepared(
        &self,
        statement: &Arc<Statement>,
    ) -> Result<Option<Result<WriteOutcome, EngineError>>, EngineError> {
        let catalog = self.core.shared().catalog();
        let Some(routed) = self.route_all(statement, &catalog)? else { return Ok(None) };
        if self.located(&routed.plan.fragments).await? {
            return Ok(None);
        }
        let txid = self.new_txid()?;
        self.core.count_tx(|c| c.prepared_attempts += 1);
        let none = Txn::new(0);
        let mut asked = Vec::with_capacity(routed.remote.len());
        let mut remote_fragments: Vec<(NodeId, Vec<u32>)> = Vec::with_capacity(routed.remote.len());
        for (node, targets) in &routed.remote {
            let share = Share::TxnWritePrepared {
                targets: wire_txn_targets(&none, targets),
                txid: txid.get(),
            };
            let request = self.request(routed.epoch, catalog.version(), share)?;
            asked.push(glommio::spawn_local(forward::call(node.0, request, false)));
            remote_fragments.push((*node, targets.iter().map(|t| t.fragment.get()).collect()));
        }
        let local = self.prepare_shares(with_writes(&none, routed.local), statement, txid).await;
        // Every node's answer is awaited, even after a failure, so none is left preparing.
        let mut outcome = WriteOutcome::default();
        let mut failure = None;
        let mut stale = false;
        let mut remote_prepared: Vec<(NodeId, Vec<u32>)> = Vec::new();
        for (task, (node, fragments)) in asked.into_iter().zip(&remote_fragments) {
            let answer = match task.await {
                Ok(Reply::Written { affected, returning }) => written_outcome(affected, returning),
                Ok(other) => reply_error(other).map(|_| {
                    stale = true;
                    WriteOutcome::default()
                }),
                Err(e) => Err(e.into()),
            };
            match answer {
                // A node prepared exactly when it wrote.
                Ok(there) if there.affected > 0 => {
                    remote_prepared.push((*node, fragments.clone()));
                    outcome.absorb(there);
                }
                Ok(_) => {}
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        let local = match local {
            Ok(local) => Some(local),
            Err(e) => {
                failure = failure.or(Some(e));
                None
            }
        };
        let no_readers = BTreeSet::new();
        if failure.is_some() || stale {
            // Each failed share undid itself; the prepared ones are undone here.
            if let Some((_, participants)) = &local {
                self.phase_two(txid, participants, false).await;
            }
            self.remote_phase_two(txid, &remote_fragments, false, &no_readers).await;
            return Ok(failure.map(Err));
        }
        let Some((here, prepared)) = local else { return Err(internal("no local outcome")) };
        outcome.absorb(here);
        if prepared.is_empty() && remote_prepared.is_empty() {
            return Ok(Some(Ok(outcome)));
        }
        fault::before_decision().await;
        let mut fragments: Vec<FragmentId> =
            prepared.iter().flat_map(|(_, f)| f.iter().copied()).collect();
        fragments.extend(
            remote_prepared.iter().flat_map(|(_, f)| f.iter().map(|f| FragmentId::new(*f))),
        );
        let reporting = prepared.len() + remote_prepared.len();
        let (commit, rest) = match self.decide_here(txid, prepared, fragments, reporting).await {
            Ok(decided) => decided,
            Err(e) => return Ok(Some(Err(e))),
        };
        let local = self.phase_two(txid, &rest, commit);
        let other = self.remote_phase_two(txid, &remote_prepared, commit, &no_readers);
        futures_lite::future::zip(local, other).await;
        if !commit {
            return Ok(Some(Err(EngineError::TxnAborted)));
        }
        self.core.count_tx(|c| c.two_phase_commits += 1);
        Ok(Some(Ok(outcome)))
    }

    /// A prepared retry's shares on this node's executors (`Core::txn_write_prepared`) for
    /// `txid`: the outcome and the participants that prepared (those with writes). On any
    /// failure every share here is undone before the error returns (each failed share undid
    /// itself; the others are aborted here).
    async fn prepare_shares(
        &self,
        groups: BTreeMap<ExecutorIndex, Vec<TxnTarget>>,
        statement: &Arc<Statement>,
        txid: storage::TxId,
    ) -> Result<(WriteOutcome, Vec<(ExecutorIndex, Vec<FragmentId>)>), EngineError> {
        let participants: Vec<(ExecutorIndex, Vec<FragmentId>)> = groups
            .iter()
            .map(|(e, targets)| (*e, targets.iter().map(|t| t.fragment).collect()))
            .collect();
        let with = (Arc::clone(statement), self.core.shared().catalog());
        let shares = self
            .fan_out(groups, &with, move |core, (stmt, view), targets| async move {
                let rules = rules_of(&view, &stmt);
                let (outcome, prepared) =
                    core.txn_write_prepared(&stmt, &targets, rules, txid).await?;
                Ok((core.index(), outcome, prepared))
            })
            .await;
        let shares = match shares {
            Ok(shares) => shares,
            Err(e) => {
                self.phase_two(txid, &participants, false).await;
                return Err(e);
            }
        };
        let mut outcome = WriteOutcome::default();
        let mut prepared = Vec::with_capacity(shares.len());
        for (executor, share, fragments) in shares {
            outcome.absorb(share);
            if !fragments.is_empty() {
                prepared.push((executor, fragments));
            }
        }
        Ok((outcome, prepared))
    }

    /// A SELECT's rows: constants here (with the session's names), through the open block's
    /// buffer, or from the fragments (SELECT and COPY TO both run it).
    async fn select_rows(&mut self, statement: &Arc<Statement>) -> Result<Rows, EngineError> {
        match &**statement {
            Statement::Select(select) if select.collection.is_none() => {
                Ok(query::execute_constant(&select.with_session(&self.names))?.rows)
            }
            Statement::Select(_) if matches!(self.block, Block::Open(_)) => {
                self.txn_select(statement).await
            }
            Statement::Select(_) => Ok(self.select(statement).await?.0),
            _ => Err(internal("select_rows of a non-SELECT")),
        }
    }

    /// Opens a transaction block (BEGIN, or the implicit block of a query of several
    /// statements).
    fn open_block(&mut self) {
        let txn = Txn::new(self.core.next_session_txn());
        self.publish(&txn, "active");
        self.block = Block::Open(txn);
    }

    /// Commits a block taken out of `self.block` (COMMIT, or the end of a query of several
    /// statements); an error is an abort.
    async fn commit_block(&mut self, txn: &Txn) -> Result<(), EngineError> {
        self.implicit_ended();
        self.publish(txn, "committing");
        let result = self.commit_txn(txn).await;
        self.core.set_session_txn(txn.number, None);
        if result.is_err() {
            self.core.count_tx(|c| c.aborts += 1);
        }
        result
    }

    /// Rolls back a block taken out of `self.block`.
    fn drop_block(&mut self, txn: &Txn) {
        self.implicit_ended();
        self.core.set_session_txn(txn.number, None);
        self.core.count_tx(|c| c.aborts += 1);
    }

    /// The block just ended: if it was a query's implicit block, a later statement of the
    /// same query opens a new one (as PostgreSQL does after a COMMIT among them).
    fn implicit_ended(&mut self) {
        if self.implicit == Implicit::Open {
            self.implicit = Implicit::Armed;
        }
    }

    /// After a statement's error: an open block fails (only ROLLBACK or COMMIT is accepted
    /// until it ends), as in PostgreSQL.
    fn fail_block(&mut self) {
        if let Block::Open(_) = self.block
            && let Block::Open(txn) = std::mem::replace(&mut self.block, Block::Idle)
        {
            self.publish(&txn, "failed");
            self.block = Block::Failed(txn);
        }
    }

    /// Publishes this session's open block for SHOW TRANSACTIONS.
    fn publish(&self, txn: &Txn, state: &'static str) {
        self.core.set_session_txn(
            txn.number,
            Some(SessionTxnRow {
                state,
                fragments: txn.fragments.keys().copied().collect(),
                since: txn.started,
            }),
        );
    }

    fn open_txn(&mut self) -> Result<&mut Txn, EngineError> {
        match &mut self.block {
            Block::Open(txn) => Ok(txn),
            _ => Err(internal("transaction statement outside a block")),
        }
    }

    /// A SELECT inside the block: through the buffer, recording versions read.
    async fn txn_select(&mut self, statement: &Arc<Statement>) -> Result<Rows, EngineError> {
        let Statement::Select(select) = &**statement else {
            return Err(internal("txn_select() of a non-SELECT"));
        };
        let mut attempt = 1;
        let (results, remote_partials, remote_reads) = loop {
            let catalog = self.core.shared().catalog();
            let Some(routed) = self.route_all(statement, &catalog)? else {
                break (Vec::new(), Vec::new(), Vec::new());
            };
            if self.located(&routed.plan.fragments).await? {
                continue;
            }
            let txn = self.open_txn()?;
            let remote: Vec<(NodeId, Vec<forward::WireTxnTarget>)> = routed
                .remote
                .iter()
                .map(|(node, targets)| (*node, wire_txn_targets(txn, targets)))
                .collect();
            let groups = with_writes(txn, routed.local);
            let forwarded = self.forward_txn(routed.epoch, catalog.version(), remote, None)?;
            let local = self
                .fan_out(groups, statement, |core, stmt, targets| async move {
                    match &*stmt {
                        Statement::Select(s) => core.txn_select(s, &targets).await,
                        _ => Err(internal("select share of a non-SELECT")),
                    }
                })
                .await;
            let answers = collect_txn(forwarded).await;
            let local = local?;
            match answers? {
                Ok((partials, shares)) => break (local, partials, shares),
                Err(current) => self.refresh(routed.epoch, current, &mut attempt).await?,
            }
        };
        let collection =
            select.collection.as_ref().map(|c| c.as_str().to_owned()).unwrap_or_default();
        let mut partials = remote_partials;
        let mut read = Vec::new();
        for share in remote_reads {
            read.push((share.fragment, share.reads));
        }
        for (p, reads) in results {
            partials.extend(p);
            read.extend(reads);
        }
        for (fragment, reads) in read {
            self.absorb_reads(fragment, &collection, reads).await?;
        }
        let merged = query::merge(select, partials)?;
        let txn = self.open_txn()?;
        let row_txn = (txn.number, txn.fragments.keys().copied().collect(), txn.started);
        self.core.set_session_txn(
            row_txn.0,
            Some(SessionTxnRow { state: "active", fragments: row_txn.1, since: row_txn.2 }),
        );
        Ok(merged.rows)
    }

    /// Records what a SELECT of the block read on `fragment` ([`absorb_in_slices`]).
    async fn absorb_reads(
        &mut self,
        fragment: FragmentId,
        collection: &str,
        reads: Reads,
    ) -> Result<(), EngineError> {
        absorb_in_slices(self.open_txn()?, fragment, collection, reads, Vec::new()).await
    }

    /// A write inside the block: evaluated through the buffer, buffered.
    async fn txn_write(&mut self, statement: &Arc<Statement>) -> Result<WriteOutcome, EngineError> {
        let Block::Open(mut txn) = std::mem::replace(&mut self.block, Block::Idle) else {
            return Err(internal("txn_write() outside a block"));
        };
        let result = self.txn_statement(&mut txn, statement, ShareRead::Block).await;
        self.publish(&txn, "active");
        self.block = Block::Open(txn);
        result
    }

    /// Runs a write statement into `txn`'s buffer on every fragment it touches, reading this
    /// node's fragments as `read` says. A block's (`ShareRead::Block`) records the versions
    /// of documents read but not written too.
    async fn txn_statement(
        &self,
        txn: &mut Txn,
        statement: &Arc<Statement>,
        read: ShareRead,
    ) -> Result<WriteOutcome, EngineError> {
        let mut attempt = 1;
        loop {
            match self.txn_statement_once(txn, statement, read).await? {
                Ok(outcome) => return Ok(outcome),
                Err((used, current)) => self.refresh(used, current, &mut attempt).await?,
            }
        }
    }

    /// One attempt of `txn_statement`: `Ok(Err((epoch used, owner's epoch)))` when an owner
    /// said the map is stale (nothing was absorbed).
    async fn txn_statement_once(
        &self,
        txn: &mut Txn,
        statement: &Arc<Statement>,
        read: ShareRead,
    ) -> Result<Result<WriteOutcome, (u64, u64)>, EngineError> {
        let catalog = self.core.shared().catalog();
        let epoch = self.core.shared().map_epoch().0;
        let (collection, groups, remote) = match &**statement {
            Statement::Insert(insert) => {
                let place = catalog.rules(insert.collection.as_str()).place;
                let (placed, remote) = self.place_all(insert, place)?;
                let remote: Vec<(NodeId, Vec<forward::WireTxnTarget>)> = remote
                    .into_iter()
                    .map(|(node, fragments)| {
                        let targets: Vec<Target> = fragments
                            .into_iter()
                            .map(|fragment| Target { fragment, ranges: Vec::new() })
                            .collect();
                        (node, wire_txn_targets(txn, &targets))
                    })
                    .collect();
                let groups: BTreeMap<ExecutorIndex, Vec<TxnTarget>> = placed
                    .into_iter()
                    .map(|(e, list)| {
                        let targets = list
                            .into_iter()
                            .map(|(fragment, docs)| TxnTarget {
                                fragment,
                                ranges: Vec::new(),
                                docs,
                                writes: txn.writes_of(fragment),
                            })
                            .collect();
                        (e, targets)
                    })
                    .collect();
                (insert.collection.as_str().to_owned(), groups, remote)
            }
            Statement::Update(_) | Statement::Delete(_) => {
                let collection =
                    collection_of(statement).map(|c| c.as_str().to_owned()).unwrap_or_default();
                match self.route_all(statement, &catalog)? {
                    Some(routed) => {
                        if self.located(&routed.plan.fragments).await? {
                            return Ok(Err((routed.epoch, 0)));
                        }
                        let remote = routed
                            .remote
                            .iter()
                            .map(|(node, targets)| (*node, wire_txn_targets(txn, targets)))
                            .collect();
                        (collection, with_writes(txn, routed.local), remote)
                    }
                    None => (collection, BTreeMap::new(), Vec::new()),
                }
            }
            _ => return Err(internal("txn_statement() of a non-write")),
        };
        let forwarded = self.forward_txn(epoch, catalog.version(), remote, Some(read))?;
        let with = (Arc::clone(statement), catalog, read);
        let local = self
            .fan_out(groups, &with, |core, (stmt, view, read), targets| async move {
                core.txn_write(&stmt, &targets, rules_of(&view, &stmt), read).await
            })
            .await;
        let answers = collect_txn(forwarded).await;
        let local = local?;
        let remote_shares = match answers? {
            Ok((_, shares)) => shares,
            Err(current) => return Ok(Err((epoch, current))),
        };
        let mut outcome = WriteOutcome::default();
        for share in local.into_iter().flatten().chain(remote_shares) {
            let affected = share.intents.len() as u64;
            outcome.add_share(
                share.fragment,
                affected,
                share.returning,
                share.rows_scanned,
                share.elapsed,
            );
            let reads = if read.keeps_reads() { share.reads } else { Reads::default() };
            absorb_in_slices(txn, share.fragment, &collection, reads, share.intents).await?;
        }
        Ok(Ok(outcome))
    }

    /// Sends each remote node its transactional share of the running statement (a SELECT
    /// when `write` is `None`, else a write read there as `write` says), one request per
    /// node, running meanwhile.
    fn forward_txn(
        &self,
        epoch: u64,
        catalog: u64,
        remote: Vec<(NodeId, Vec<forward::WireTxnTarget>)>,
        write: Option<ShareRead>,
    ) -> Result<Vec<ForwardTask>, EngineError> {
        let mut tasks = Vec::with_capacity(remote.len());
        for (node, targets) in remote {
            let share = match write {
                None => Share::TxnSelect { targets },
                Some(read) => match wire_share_read(read) {
                    Some(read) => Share::TxnWriteAs { targets, read },
                    None => Share::TxnWrite { targets },
                },
            };
            let request = self.request(epoch, catalog, share)?;
            tasks.push(glommio::spawn_local(forward::call(node.0, request, write.is_none())));
        }
        Ok(tasks)
    }

    /// Commits a transaction (see [`Session::commit_once`]). When the commit met a document
    /// held by a prepared transaction on this node, it holds nothing any more (every share
    /// was undone before the error came back): it waits for the holder to release its
    /// documents (`Core::wait_released`, bounded) and commits again, at most
    /// `TXN_HELD_WAITS_MAX` times. The next attempt commits if the holder aborted or left
    /// what this transaction read alone, and conflicts (40001) if it changed it. A holder
    /// still there after the wait is answered with 40001.
    async fn commit_txn(&self, txn: &Txn) -> Result<(), EngineError> {
        let mut waits = 0;
        loop {
            match self.commit_once(txn).await {
                Err(EngineError::TxnHeld { fragment, txid, .. })
                    if waits < TXN_HELD_WAITS_MAX && self.wait_released(fragment, txid).await =>
                {
                    waits += 1;
                    tracing::debug!(%txid, waits, "held document released; committing again");
                }
                other => return other,
            }
        }
    }

    /// Waits on the executor owning `fragment` (on this node) until `txid` released its
    /// documents there; false when it did not within `TXN_HELD_WAIT_MAX` or the fragment is
    /// not this node's.
    async fn wait_released(&self, fragment: FragmentId, txid: storage::TxId) -> bool {
        let Ok(map) = self.map() else { return false };
        let Some(owner) = map.owner_of(fragment) else { return false };
        if owner.node != self.core.shared().me {
            return false;
        }
        let executor = ExecutorIndex::new(owner.executor.0 as usize);
        self.ctx
            .mesh
            .run_on(self.core.index(), &self.core, executor, move |core| async move {
                core.wait_released(txid).await
            })
            .await
            .unwrap_or(false)
    }

    /// Commits a transaction once: validates reads (nothing written), applies one fragment's
    /// batch (fast path) or runs two-phase commit. `TxnConflict` and `TxnHeld` mean nothing
    /// was applied and nothing is held any more. A fragment of another cluster node gets its
    /// batch over a data connection (the block's buffer stays here): applied at once on the
    /// fast path, prepared and finished by this node as the coordinator otherwise.
    async fn commit_once(&self, txn: &Txn) -> Result<(), EngineError> {
        if !txn.writes_anything() {
            return self.validate_reads(txn).await;
        }
        let batches = txn.batches();
        let map = self.map()?;
        let epoch = map.epoch().0;
        let me = self.core.shared().me;
        let mut groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>> =
            BTreeMap::new();
        let count = batches.len();
        let mut remote: Remote<forward::WireTxnTarget> = BTreeMap::new();
        for (fragment, batch) in batches {
            super::txn::within_fragment_limit(fragment, &batch)?;
            let owner = map.owner_of(fragment).ok_or_else(|| internal("fragment without owner"))?;
            if owner.node != me {
                remote.entry(owner.node).or_default().push(wire_commit_target(txn, fragment));
                continue;
            }
            groups
                .entry(ExecutorIndex::new(owner.executor.0 as usize))
                .or_default()
                .push((fragment, batch));
        }
        if count == 1 {
            // The fast path: one fragment, one batch, one fdatasync.
            let tasks = self.apply_remote(remote, epoch)?;
            let local = self.apply_batches(groups).await;
            let answers = expect_applied(tasks).await;
            local?;
            answers?;
            self.core.count_local_commit(true);
            return Ok(());
        }
        self.two_phase(groups, remote, epoch).await
    }

    /// Commits a transaction that wrote nothing: validates every version read and every
    /// range scanned on its owner. This node's fragments are validated in rounds of at most
    /// [`CHECK_SLICE_OPS`] checks per fragment, each round's checks built only when it
    /// starts, with [`between_slices`] between rounds: a block that read 200,000 documents
    /// does not copy them all into one batch and hold the executor meanwhile. Each check
    /// stands on its own once every read is done (`Core::commit_fragment`), except a range's
    /// count and an absence, which a document inserted and deleted again undoes unseen: a
    /// fragment's are validated together, first (`FragmentTxn::batch_slices`), and over
    /// several fragments, of this node or of others, they are first held on each
    /// (`Core::prepare_txn` of them alone, as a two-phase commit holds a read-only
    /// participant; `Share::TxnPrepare` on another node: puts into the ranges and inserts of
    /// the absent ids wait), released once all are taken, and the other checks run after:
    /// the instant all were held sees every read still current. Parts of at most
    /// [`CHECK_SLICE_OPS`] operations are held whole, with nothing left to check. Fragments
    /// of other nodes get their remaining checks in one request each (validated in slices
    /// there).
    async fn validate_reads(&self, txn: &Txn) -> Result<(), EngineError> {
        let map = self.map()?;
        let epoch = map.epoch().0;
        let me = self.core.shared().me;
        let mut remote: Remote<(FragmentId, &FragmentTxn)> = BTreeMap::new();
        let mut local = Vec::new();
        for (fragment, part) in &txn.fragments {
            let owner =
                map.owner_of(*fragment).ok_or_else(|| internal("fragment without owner"))?;
            if owner.node != me {
                remote.entry(owner.node).or_default().push((*fragment, part));
                continue;
            }
            local.push((*fragment, ExecutorIndex::new(owner.executor.0 as usize), part));
        }
        let parts =
            || local.iter().map(|(_, _, p)| *p).chain(remote.values().flatten().map(|(_, p)| *p));
        // Small parts are held whole (every check validated when its hold is taken, as a
        // two-phase commit's read-only participant is): nothing is left to check afterwards.
        let whole = parts().all(|part| part.ops_len() <= CHECK_SLICE_OPS);
        let hold = match parts().count() > 1 && parts().any(FragmentTxn::has_undoable) {
            true => Some(self.hold_reads(&local, &remote, whole, epoch).await?),
            false => None,
        };
        let mut rounds: Vec<_> = local
            .into_iter()
            .map(|(fragment, executor, part)| {
                let slices: Box<dyn Iterator<Item = storage::WriteBatch>> = match hold {
                    Some(_) if whole => Box::new(std::iter::empty()),
                    Some(_) => Box::new(part.versioned_slices(CHECK_SLICE_OPS)),
                    None => Box::new(part.batch_slices(CHECK_SLICE_OPS)),
                };
                (fragment, executor, slices)
            })
            .collect();
        let checks = match hold {
            Some(_) if whole => Checks::None,
            Some(_) => Checks::Versioned,
            None => Checks::All,
        };
        let rest = remote
            .into_iter()
            .map(|(node, parts)| {
                let targets = parts.into_iter().filter_map(|(f, p)| wire_checks(p, f, checks));
                (node, targets.collect::<Vec<_>>())
            })
            .collect();
        let tasks = self.apply_remote(rest, epoch)?;
        let mut checked = Ok(());
        for round in 0.. {
            let mut groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>> =
                BTreeMap::new();
            for (fragment, executor, slices) in &mut rounds {
                if let Some(batch) = slices.next() {
                    groups.entry(*executor).or_default().push((*fragment, batch));
                }
            }
            if groups.is_empty() {
                break;
            }
            if round > 0 {
                between_slices().await;
            }
            checked = self.apply_batches(groups).await;
            if checked.is_err() {
                break;
            }
        }
        let answers = expect_applied(tasks).await;
        checked?;
        answers?;
        if hold.is_some() {
            self.core.count_tx(|c| c.read_only_holds += 1);
        }
        self.core.count_local_commit(false);
        Ok(())
    }

    /// Holds a read-only commit's counts and absences (`whole`: every check) on each of its
    /// fragments at one instant, this node's through `Core::prepare_txn` and other nodes'
    /// through `Share::TxnPrepare`, all under one fresh id, then releases every hold taken
    /// (awaited, so COMMIT answers with nothing held and a retry meets none). Err: a hold was
    /// refused (a conflict, 40001), after the others were released.
    async fn hold_reads(
        &self,
        local: &[(FragmentId, ExecutorIndex, &FragmentTxn)],
        remote: &Remote<(FragmentId, &FragmentTxn)>,
        whole: bool,
        epoch: u64,
    ) -> Result<storage::TxId, EngineError> {
        let mut holds: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>> =
            BTreeMap::new();
        for (fragment, executor, part) in local {
            let batch = match whole {
                true => part.batch_slices(usize::MAX).next(),
                false => part.undoable_batch(),
            };
            if let Some(batch) = batch {
                holds.entry(*executor).or_default().push((*fragment, batch));
            }
        }
        let held = participants_of(&holds);
        let checks = if whole { Checks::All } else { Checks::Undoable };
        let txid = self.new_txid()?;
        let to_hold: Remote<forward::WireTxnTarget> = remote
            .iter()
            .map(|(node, parts)| {
                (*node, parts.iter().filter_map(|(f, p)| wire_checks(p, *f, checks)).collect())
            })
            .filter(|(_, targets): &(NodeId, Vec<_>)| !targets.is_empty())
            .collect();
        let remote_held: Vec<(NodeId, Vec<u32>)> = to_hold
            .iter()
            .map(|(node, targets)| (*node, targets.iter().map(|t| t.fragment).collect()))
            .collect();
        let asked = self.prepare_remote(txid, epoch, to_hold)?;
        let taken = self.prepare_here(txid, holds).await;
        let remote_taken = expect_applied(asked).await;
        // Every hold taken: the instant the commit stands for. Released at once: a later
        // versioned check that passes was current then, and a visited document leaving a range
        // fails its own check. A node holding only checks reports nothing finished.
        let readers = remote_held.iter().map(|(n, _)| *n).collect();
        futures_lite::future::zip(
            self.phase_two(txid, &held, false),
            self.remote_phase_two(txid, &remote_held, false, &readers),
        )
        .await;
        taken?;
        remote_taken?;
        Ok(txid)
    }

    /// Prepares each executor's batches under `txid` (holds the checks-only ones): one mesh
    /// call per executor (`Core::prepare_txn`).
    async fn prepare_here(
        &self,
        txid: storage::TxId,
        groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>>,
    ) -> Result<Vec<()>, EngineError> {
        self.fan_out(
            groups,
            &txid,
            |core, txid, list| async move { core.prepare_txn(txid, list).await },
        )
        .await
    }

    /// Asks each other node to prepare (or hold) its targets under `txid`: one
    /// `Share::TxnPrepare` per node, running meanwhile, answered `Applied`.
    fn prepare_remote(
        &self,
        txid: storage::TxId,
        epoch: u64,
        remote: Remote<forward::WireTxnTarget>,
    ) -> Result<Vec<ForwardTask>, EngineError> {
        let mut asked = Vec::with_capacity(remote.len());
        for (node, targets) in remote {
            let share = Share::TxnPrepare { txid: txid.get(), targets };
            let request = self.request(epoch, 0, share)?;
            asked.push(glommio::spawn_local(forward::call(node.0, request, false)));
        }
        Ok(asked)
    }

    /// A fresh id for a transaction that holds or prepares documents on several fragments
    /// (tagged with this node's id in a cluster, so a participant knows whom to ask).
    fn new_txid(&self) -> Result<storage::TxId, EngineError> {
        let shared = self.core.shared();
        let mut txid = shared.txn.next_txid();
        if shared.clustered {
            txid = txid_for_node(txid, shared.me).ok_or_else(|| {
                EngineError::from(RegionError::CrossNode {
                    what: "a two-phase commit on a node whose id is 4095 or more",
                    nodes: shared.me.0.to_string(),
                })
            })?;
        }
        if txid.is_local() {
            // A clock (or journal) past 2^52 microseconds: storage's ids start there.
            return Err(internal("transaction id in storage's own range"));
        }
        Ok(txid)
    }

    /// Sends each fragment of another node its share of a commit to apply (the fast path)
    /// or validate (checks only): one request per fragment, answered `Applied`.
    fn apply_remote(
        &self,
        remote: Remote<forward::WireTxnTarget>,
        epoch: u64,
    ) -> Result<Vec<ForwardTask>, EngineError> {
        let mut tasks = Vec::new();
        for (node, targets) in remote {
            for target in targets {
                let request = self.request(epoch, 0, Share::TxnApply { target })?;
                tasks.push(glommio::spawn_local(forward::call(node.0, request, false)));
            }
        }
        Ok(tasks)
    }

    /// Applies batches on this node's executors (the fast path, or checks in slices).
    async fn apply_batches(
        &self,
        groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>>,
    ) -> Result<(), EngineError> {
        self.fan_out(groups, &(), |core, (), list| async move {
            for (fragment, batch) in list {
                core.commit_fragment(fragment, batch).await?;
            }
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// Two-phase commit over the participants in `groups` (one mesh call per executor per
    /// phase) and the fragments of other nodes in `remote` (one request per node per phase).
    /// The COMMIT decision's fdatasync in this node's coordinator journal is the commit
    /// point; the writes are visible on every participant before this returns, their Commit
    /// records become durable after. A remote participant that misses phase two asks this
    /// node for the decision (the node is in the transaction id, `coordinator_of`).
    async fn two_phase(
        &self,
        groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>>,
        remote: Remote<forward::WireTxnTarget>,
        epoch: u64,
    ) -> Result<(), EngineError> {
        let txid = self.new_txid()?;
        let participants = participants_of(&groups);
        // Only executors that write report their Commit records finished; a read-only one
        // holds its checks in memory and only releases them (`Core::finish_txn`).
        let writing =
            groups.values().filter(|list| list.iter().any(|(_, b)| b.writes() > 0)).count();
        let remote_fragments: Vec<(NodeId, Vec<u32>)> = remote
            .iter()
            .map(|(n, targets)| (*n, targets.iter().map(|t| t.fragment).collect()))
            .collect();
        // A remote node without buffered writes only holds checks: nothing of it is durable,
        // so it is not waited for (a crash there leaves no decision kept for it).
        let remote_readers: BTreeSet<NodeId> = remote
            .iter()
            .filter(|(_, targets)| targets.iter().all(|t| t.writes.is_empty()))
            .map(|(n, _)| *n)
            .collect();
        let mut fragments: Vec<FragmentId> =
            participants.iter().flat_map(|(_, f)| f.iter().copied()).collect();
        fragments.extend(
            remote_fragments.iter().flat_map(|(_, f)| f.iter().map(|f| FragmentId::new(*f))),
        );
        if marker::enabled()
            && remote.is_empty()
            && !self.core.shared().clustered
            && groups.values().flatten().all(|(_, b)| b.len() < storage::limits::BATCH_OPS_MAX)
        {
            let coordinator = ExecutorIndex::new(0);
            if self.core.index() != coordinator && groups.contains_key(&coordinator) {
                let groups = self.with_markers(txid, groups)?;
                return self.two_phase_joined(txid, groups, fragments, writing, true).await;
            }
            return self.two_phase_marked(txid, groups, participants).await;
        }
        let coordinator = ExecutorIndex::new(0);
        if remote.is_empty()
            && self.core.index() != coordinator
            && groups.contains_key(&coordinator)
        {
            return self.two_phase_joined(txid, groups, fragments, writing, false).await;
        }
        let asked = self.prepare_remote(txid, epoch, remote)?;
        let prepared = self.prepare_here(txid, groups).await;
        let remote_prepared = expect_applied(asked).await;
        if let Err(e) = prepared.map(|_| ()).and(remote_prepared) {
            self.phase_two(txid, &participants, false).await;
            self.remote_phase_two(txid, &remote_fragments, false, &remote_readers).await;
            return Err(e);
        }
        fault::before_decision().await;
        // Every local executor and every remote node reports its share finished.
        let reporting = writing + remote_fragments.len() - remote_readers.len();
        let (commit, rest) = self.decide_here(txid, participants, fragments, reporting).await?;
        let local = self.phase_two(txid, &rest, commit);
        let other = self.remote_phase_two(txid, &remote_fragments, commit, &remote_readers);
        futures_lite::future::zip(local, other).await;
        if commit {
            self.core.count_tx(|c| c.two_phase_commits += 1);
            Ok(())
        } else {
            Err(EngineError::TxnAborted)
        }
    }

    /// A one-round commit (`coordinator::marker`) over this node's `groups`: each written
    /// fragment's batch also puts the transaction's marker (naming every written fragment),
    /// and the transaction is committed once every Prepare record is durable; no decision is
    /// recorded. Phase two then runs as after a decision. A participant that fails to prepare
    /// (or was fenced by the timeout) aborts the rest.
    async fn two_phase_marked(
        &self,
        txid: storage::TxId,
        groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>>,
        participants: Vec<(ExecutorIndex, Vec<FragmentId>)>,
    ) -> Result<(), EngineError> {
        let groups = self.with_markers(txid, groups)?;
        if let Err(e) = self.prepare_here(txid, groups).await {
            self.phase_two(txid, &participants, false).await;
            return Err(e);
        }
        // Every Prepare record is durable: the commit point. (A stall here outlasting the
        // prepared timeout finds the transaction committed by the sweeper.)
        fault::before_decision().await;
        fault::decided();
        self.phase_two(txid, &participants, true).await;
        self.core.count_tx(|c| c.two_phase_commits += 1);
        Ok(())
    }

    /// `groups` with one-round commit `txid`'s marker put into each written fragment's batch.
    fn with_markers(
        &self,
        txid: storage::TxId,
        mut groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>>,
    ) -> Result<BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>>, EngineError> {
        let map = self.map()?;
        let writers: Vec<FragmentId> =
            groups.values().flatten().filter(|(_, b)| b.writes() > 0).map(|(f, _)| *f).collect();
        let doc = marker::doc(&writers);
        let id = marker::id(txid);
        for (fragment, batch) in groups.values_mut().flatten() {
            if batch.writes() == 0 {
                continue;
            }
            // Any shard of the fragment: the marker is never routed to, only read by recovery.
            let shard = map
                .get(*fragment)
                .and_then(|f| marker::shard(f.range()))
                .ok_or_else(|| internal("a participant fragment is not in the map"))?;
            let written = std::mem::replace(batch, storage::WriteBatch::new());
            *batch = written.put(
                marker::COLLECTION,
                &id,
                shard,
                Some(storage::Version::ABSENT),
                doc.clone(),
            );
        }
        Ok(groups)
    }

    /// Records the decision for `txid` (see [`Session::decide`]) once every participant is
    /// prepared. The coordinator's executor does its own share of phase two inside the
    /// decision's call when the session runs elsewhere: one cross-executor round trip less.
    /// Returns the decision and the participants whose phase two is left to the caller.
    async fn decide_here(
        &self,
        txid: storage::TxId,
        participants: Vec<(ExecutorIndex, Vec<FragmentId>)>,
        fragments: Vec<FragmentId>,
        reporting: usize,
    ) -> Result<(bool, Vec<(ExecutorIndex, Vec<FragmentId>)>), EngineError> {
        let coordinator = ExecutorIndex::new(0);
        let (there, rest): (Vec<_>, Vec<_>) = participants
            .into_iter()
            .partition(|(e, _)| *e == coordinator && self.core.index() != coordinator);
        let there = there.into_iter().next().map(|(_, f)| f);
        let commit = self.decide(txid, fragments, reporting, there).await?;
        Ok((commit, rest))
    }

    /// Two-phase commit on this node when the coordinator's executor holds a share and this
    /// session runs on another executor: one call there prepares that share and, once this
    /// session reports every other share prepared, records the decision and makes that share
    /// visible (`Core::prepare_and_decide`); the other shares are prepared meanwhile and
    /// finished after it. The prepares still run in parallel and the decision still follows
    /// them all (two fdatasync rounds), with one cross-executor round trip less than a
    /// prepare call followed by a decision call.
    async fn two_phase_joined(
        &self,
        txid: storage::TxId,
        mut groups: BTreeMap<ExecutorIndex, Vec<(FragmentId, storage::WriteBatch)>>,
        fragments: Vec<FragmentId>,
        reporting: usize,
        marked: bool,
    ) -> Result<(), EngineError> {
        let coordinator = ExecutorIndex::new(0);
        let there = groups.remove(&coordinator).ok_or_else(|| internal("no coordinator share"))?;
        let rest = participants_of(&groups);
        let (others_tx, others_rx) = flume::bounded::<bool>(1);
        // Polled first, so the call is on its way before the other shares start preparing;
        // awaited in this task (no task of its own to wake). If this session goes away
        // meanwhile the sender is dropped and the coordinator's side aborts.
        let call = self.ctx.mesh.call(coordinator, move |core| async move {
            core.prepare_and_decide(txid, there, others_rx, fragments, reporting, marked).await
        });
        let others = async {
            let prepared = self.prepare_here(txid, groups).await;
            let _ = others_tx.send(prepared.is_ok());
            prepared
        };
        let (outcome, prepared) = futures_lite::future::zip(call, others).await;
        let commit = match (prepared, outcome) {
            (Ok(_), Ok(Ok(commit))) => commit,
            (Ok(_), Ok(Err(e))) => {
                // The coordinator's share did not prepare (and is undone), or the decision
                // could not be recorded: in both cases no COMMIT is durable unless the
                // journal failed after writing it, which the timeout resolves from the log.
                if !matches!(e, EngineError::Journal(_) | EngineError::Call(_)) {
                    self.phase_two(txid, &rest, false).await;
                }
                return Err(e);
            }
            // The call was lost with the decision unknown: the timeout resolves the shares
            // prepared here from the coordinator's log.
            (Ok(_), Err(e)) => return Err(e.into()),
            // Nothing can be committed: the coordinator was told these shares failed.
            (Err(e), _) => {
                self.phase_two(txid, &rest, false).await;
                return Err(e);
            }
        };
        self.phase_two(txid, &rest, commit).await;
        if commit {
            self.core.count_tx(|c| c.two_phase_commits += 1);
            Ok(())
        } else {
            Err(EngineError::TxnAborted)
        }
    }

    /// Phase two on other nodes: each commits (or aborts) its fragments of `txid` and answers
    /// once they are durable; each commit answered counts as a finished participant in the
    /// coordinator. A node that does not answer keeps `txid` prepared and asks this node for
    /// the decision later.
    async fn remote_phase_two(
        &self,
        txid: storage::TxId,
        remote: &[(NodeId, Vec<u32>)],
        commit: bool,
        readers: &BTreeSet<NodeId>,
    ) {
        let mut tasks = Vec::with_capacity(remote.len());
        for (node, fragments) in remote {
            let share = Share::TxnFinish { txid: txid.get(), fragments: fragments.clone(), commit };
            let Ok(request) = self.request(0, 0, share) else { continue };
            tasks.push((*node, glommio::spawn_local(forward::call(node.0, request, false))));
        }
        for (node, task) in tasks {
            match task.await {
                Ok(Reply::Applied) if commit && !readers.contains(&node) => {
                    self.report_remote_finished(txid).await
                }
                Ok(Reply::Applied) => {}
                Ok(other) => {
                    tracing::warn!(%txid, node = node.0, answer = ?other, "phase two not confirmed; the participant will ask");
                }
                Err(e) => {
                    tracing::warn!(%txid, node = node.0, error = %e, "phase two not delivered; the participant will ask");
                }
            }
        }
    }

    /// Tells this node's coordinator that one remote participant's Commit records are durable.
    async fn report_remote_finished(&self, txid: storage::TxId) {
        let shared = Arc::clone(self.core.shared());
        if let Some(c) = self.core.coordinator() {
            c.finished(shared.txn.two_phase_gate(), txid).await;
            return;
        }
        let _ = self
            .ctx
            .mesh
            .call(ExecutorIndex::new(0), move |core| async move {
                if let Some(c) = core.coordinator() {
                    c.finished(core.shared().two_phase_gate(), txid).await;
                }
            })
            .await;
    }

    /// Sends the outcome to every participant executor and waits until the writes are
    /// visible (a commit) or the prepares are aborted; Commit records finish in the background.
    async fn phase_two(
        &self,
        txid: storage::TxId,
        participants: &[(ExecutorIndex, Vec<FragmentId>)],
        commit: bool,
    ) {
        // Detached: each executor's share is sent even if this session goes away meanwhile.
        let mut shares = Vec::with_capacity(participants.len());
        for (executor, fragments) in participants {
            let fragments = fragments.clone();
            let share = if *executor == self.core.index() {
                let core = Rc::clone(&self.core);
                glommio::spawn_local(async move {
                    core.finish_txn_visible(txid, fragments, commit).await;
                })
                .detach()
            } else {
                let (mesh, executor) = (self.ctx.mesh.clone(), *executor);
                glommio::spawn_local(async move {
                    let _ = mesh
                        .call(executor, move |core| async move {
                            core.finish_txn_visible(txid, fragments, commit).await;
                        })
                        .await;
                })
                .detach()
            };
            shares.push(share);
        }
        // A commit is acknowledged once visible everywhere; an abort once the holds are gone
        // everywhere, so a retry does not run into them.
        for share in shares {
            let _ = share.await;
        }
    }

    /// Asks the coordinator (executor 0) to record COMMIT for `txid`; returns the decision in
    /// force once durable (an ABORT recorded by the timeout wins). `finish_there`: the
    /// coordinator executor's own participant fragments, whose phase two then runs there
    /// right after the decision, before the call returns.
    async fn decide(
        &self,
        txid: storage::TxId,
        fragments: Vec<FragmentId>,
        executors: usize,
        finish_there: Option<Vec<FragmentId>>,
    ) -> Result<bool, EngineError> {
        let shared = Arc::clone(self.core.shared());
        if let Some(c) = self.core.coordinator() {
            let commit =
                c.decide(shared.txn.two_phase_gate(), txid, true, &fragments, executors).await?;
            if commit {
                fault::decided();
            }
            return Ok(commit);
        }
        self.ctx
            .mesh
            .call(ExecutorIndex::new(0), move |core| async move {
                let Some(c) = core.coordinator() else {
                    return Err(internal("executor 0 has no coordinator"));
                };
                let commit = c
                    .decide(shared.txn.two_phase_gate(), txid, true, &fragments, executors)
                    .await?;
                if commit {
                    fault::decided();
                }
                if let Some(fragments) = finish_there {
                    core.finish_txn_visible(txid, fragments, commit).await;
                }
                Ok(commit)
            })
            .await?
    }

    async fn transaction_counters(&self) -> Result<TxCounters, EngineError> {
        let mut groups: BTreeMap<ExecutorIndex, Vec<()>> = BTreeMap::new();
        for i in 0..self.ctx.mesh.len() {
            groups.insert(ExecutorIndex::new(i), vec![()]);
        }
        let all =
            self.fan_out(groups, &(), |core, (), _| async move { Ok(core.tx_counters()) }).await?;
        let mut sum = TxCounters::default();
        for c in all {
            sum.fast_path_commits += c.fast_path_commits;
            sum.two_phase_commits += c.two_phase_commits;
            sum.read_only_commits += c.read_only_commits;
            sum.read_only_holds += c.read_only_holds;
            sum.aborts += c.aborts;
            sum.conflicts += c.conflicts;
            sum.range_conflicts += c.range_conflicts;
            sum.held_waits += c.held_waits;
            sum.paused_reads += c.paused_reads;
            sum.prepared_attempts += c.prepared_attempts;
        }
        Ok(sum)
    }

    async fn transaction_rows(&self) -> Result<Rows, EngineError> {
        let mut groups: BTreeMap<ExecutorIndex, Vec<()>> = BTreeMap::new();
        for i in 0..self.ctx.mesh.len() {
            groups.insert(ExecutorIndex::new(i), vec![()]);
        }
        let all = self
            .fan_out(groups, &(), |core, (), _| async move {
                let (sessions, prepared, decisions) = core.txn_rows();
                let index = core.index();
                let sessions: Vec<(String, String, Vec<FragmentId>, u128)> = sessions
                    .into_iter()
                    .map(|(n, r)| {
                        (
                            format!("{index}/{n}"),
                            r.state.to_owned(),
                            r.fragments,
                            r.since.elapsed().as_millis(),
                        )
                    })
                    .collect();
                let prepared: Vec<(String, String, Vec<FragmentId>, u128)> = prepared
                    .into_iter()
                    .flat_map(|(t, p)| {
                        let age = p.since.elapsed().as_millis();
                        p.show_states().into_iter().map(move |(state, fragments)| {
                            (t.to_string(), state.to_owned(), fragments, age)
                        })
                    })
                    .collect();
                let decisions: Vec<(String, String, Vec<FragmentId>, u128)> = decisions
                    .into_iter()
                    .map(|d| {
                        let state = if d.commit { "committed (applying)" } else { "aborted" };
                        (d.txid.to_string(), state.to_owned(), d.fragments, d.age.as_millis())
                    })
                    .collect();
                Ok((sessions, prepared, decisions))
            })
            .await?;
        // Prepared rows of one transaction on several executors become one row.
        let mut merged: BTreeMap<(String, String), (Vec<FragmentId>, u128)> = BTreeMap::new();
        for (sessions, prepared, decisions) in all {
            for (id, state, fragments, age) in sessions.into_iter().chain(prepared).chain(decisions)
            {
                let entry = merged.entry((id, state)).or_insert((Vec::new(), 0));
                entry.0.extend(fragments);
                entry.1 = entry.1.max(age);
            }
        }
        Ok(merged
            .into_iter()
            .map(|((id, state), (mut fragments, age))| {
                fragments.sort();
                fragments.dedup();
                let list: Vec<String> = fragments.iter().map(ToString::to_string).collect();
                vec![
                    Datum::Text(id),
                    Datum::Text(state),
                    Datum::Text(list.join(",")),
                    Datum::Int8(i64::try_from(age).unwrap_or(i64::MAX)),
                ]
            })
            .collect())
    }

    /// Counts an INSERT's routing: the fragments its documents were placed on.
    fn placed(&self, groups: &Placed) {
        let fragments: Vec<FragmentId> =
            groups.values().flat_map(|v| v.iter().map(|(f, _)| *f)).collect();
        let opcode =
            if fragments.len() == 1 { router::Opcode::Single } else { router::Opcode::Multi };
        *self.last_route.borrow_mut() = Some((opcode, fragments));
    }

    /// Final ids and shards of an INSERT's documents, grouped by executor and fragment.
    fn place_all(
        &self,
        insert: &query::plan::Insert,
        config: Option<&router::ShardingConfig>,
    ) -> Result<(Placed, Remote<FragmentId>), EngineError> {
        let map = self.map()?;
        let mut by_fragment: BTreeMap<FragmentId, Vec<PlacedDocument>> = BTreeMap::new();
        for new in insert.documents()? {
            let (id, shard) = match router::shard_of(&new.id)? {
                Placement::Content => {
                    let config = config.ok_or_else(|| EngineError::ContentIdWithoutConfig {
                        id: new.id.clone(),
                        collection: insert.collection.as_str().to_owned(),
                    })?;
                    router::assign(config, &new.id, &new.doc)?
                }
                placed => {
                    let shard =
                        placed.shard().ok_or_else(|| internal("placement without shard"))?;
                    (new.id, shard)
                }
            };
            by_fragment.entry(map.fragment_of(shard)).or_default().push(PlacedDocument {
                id,
                shard,
                doc: new.doc,
            });
        }
        let mut groups = Placed::new();
        let me = self.core.shared().me;
        let mut remote: Remote<FragmentId> = BTreeMap::new();
        for (fragment, docs) in by_fragment {
            let owner = map.owner_of(fragment).ok_or_else(|| internal("fragment without owner"))?;
            if owner.node != me {
                remote.entry(owner.node).or_default().push(fragment);
                continue;
            }
            groups
                .entry(ExecutorIndex::new(owner.executor.0 as usize))
                .or_default()
                .push((fragment, docs));
        }
        Ok((groups, remote))
    }

    /// `place_all` for an INSERT that must run on this node only (0A000 otherwise).
    fn place(
        &self,
        insert: &query::plan::Insert,
        config: Option<&router::ShardingConfig>,
    ) -> Result<Placed, EngineError> {
        let (groups, remote) = self.place_all(insert, config)?;
        local_only(&remote, "an INSERT")?;
        Ok(groups)
    }

    /// Runs `work` with each executor's targets and a clone of `with` (what every share needs:
    /// the statement, a catalog snapshot, or nothing): other executors' shares are sent first
    /// (one call each) and run while this executor does its own share in place.
    async fn fan_out<T, C, W, Fut, R>(
        &self,
        mut groups: BTreeMap<ExecutorIndex, Vec<T>>,
        with: &C,
        work: W,
    ) -> Result<Vec<R>, EngineError>
    where
        T: Send + 'static,
        C: Clone + Send + 'static,
        W: Fn(Rc<Core>, C, Vec<T>) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<R, EngineError>> + 'static,
        R: Send + 'static,
    {
        let here = self.core.index();
        // One share, on another executor (half of the random-id autocommit writes on a
        // 2-executor node): nothing runs here meanwhile, so the call is awaited in this task
        // rather than in a spawned one (no task to allocate, schedule and join per hop).
        if groups.len() == 1
            && !groups.contains_key(&here)
            && let Some((executor, targets)) = groups.pop_first()
        {
            let with = with.clone();
            let answer =
                self.ctx.mesh.call(executor, move |core| work(core, with, targets)).await?;
            return Ok(vec![answer?]);
        }
        let mut local = None;
        let mut remote = Vec::new();
        for (executor, targets) in groups {
            if executor == here {
                local = Some(targets);
                continue;
            }
            let mesh = self.ctx.mesh.clone();
            let with = with.clone();
            let work = work.clone();
            remote.push(glommio::spawn_local(async move {
                mesh.call(executor, move |core| work(core, with, targets)).await
            }));
        }
        let mut results = Vec::with_capacity(remote.len() + 1);
        let mut first_error = None;
        if let Some(targets) = local {
            match work(Rc::clone(&self.core), with.clone(), targets).await {
                Ok(r) => results.push(r),
                Err(e) => first_error = Some(e),
            }
        }
        // Every remote share is awaited, even after an error, so none is left running.
        for task in remote {
            match task.await {
                Ok(Ok(r)) => results.push(r),
                Ok(Err(e)) => first_error = first_error.or(Some(e)),
                Err(e) => first_error = first_error.or(Some(e.into())),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(results),
        }
    }

    /// `verify_sharding(c)`: the documents of every fragment, on every node (one forwarded
    /// request per other owner node; one that does not answer fails the statement), that
    /// violate the collection's configuration, sorted by id.
    async fn verify(&self, collection: &CollectionName) -> Result<Rows, EngineError> {
        let mut violations = self.local_violations(collection).await?;
        let map = self.map()?;
        let share = Share::Verify { collection: collection.as_str().to_owned() };
        for answer in self.ask_other_owners(&map, &share).await {
            match answer? {
                Reply::Violations(found) => {
                    violations.extend(found.into_iter().map(|v| (v.id, v.reason)));
                }
                other => {
                    reply_error(other)?;
                    return Err(bad_reply("verify answered without violations".to_owned()));
                }
            }
        }
        violations.sort();
        Ok(violations
            .into_iter()
            .map(|(id, reason)| vec![Datum::Text(id), Datum::Text(reason)])
            .collect())
    }

    /// The documents of this node's fragments that violate `collection`'s configuration (as
    /// this node's catalog has it).
    async fn local_violations(
        &self,
        collection: &CollectionName,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let catalog = self.core.shared().catalog();
        if catalog.config(collection.as_str()).is_none() {
            return Err(EngineError::NoConfiguration(collection.as_str().to_owned()));
        }
        let groups = self.local_fragments()?;
        let with = (catalog, collection.clone());
        let found = self
            .fan_out(groups, &with, |core, (view, name), targets| async move {
                let config = view
                    .config(name.as_str())
                    .ok_or_else(|| EngineError::NoConfiguration(name.as_str().to_owned()))?;
                core.verify(&name, config, &targets)
            })
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Every fragment this node owns, whole, by executor.
    fn local_fragments(&self) -> Result<BTreeMap<ExecutorIndex, Vec<Target>>, EngineError> {
        let mut groups: BTreeMap<ExecutorIndex, Vec<Target>> = BTreeMap::new();
        let map = self.map()?;
        let me = self.core.shared().me;
        for f in map.fragments().iter().filter(|f| f.owner().node == me) {
            groups
                .entry(ExecutorIndex::new(f.owner().executor.0 as usize))
                .or_default()
                .push(Target { fragment: f.id(), ranges: vec![f.range()] });
        }
        Ok(groups)
    }

    /// SHOW REGION rows.
    fn region_rows(&self) -> Rows {
        let shared = self.core.shared();
        let held = shared.buffers.held();
        let buffered = |key: BufferKey| {
            held.iter()
                .find(|(k, _)| *k == key)
                .map_or(0, |(_, n)| i64::try_from(*n).unwrap_or(i64::MAX))
        };
        let mut rows = Rows::new();
        if let Some(map) = shared.map() {
            let epoch = i64::try_from(map.epoch().0).unwrap_or(i64::MAX);
            for f in map.fragments() {
                rows.push(vec![
                    Datum::Text(f.id().to_string()),
                    Datum::Text(f.range().to_string()),
                    Datum::Text(f.owner().to_string()),
                    Datum::Int8(epoch),
                    Datum::Int8(buffered(BufferKey::Fragment(f.id()))),
                ]);
            }
        }
        let epoch = i64::try_from(shared.map_epoch().0).unwrap_or(i64::MAX);
        for (key, n) in held {
            if let BufferKey::Fragment(_) = key {
                continue;
            }
            rows.push(vec![
                Datum::Text(format!("({key})")),
                Datum::Null,
                Datum::Null,
                Datum::Int8(epoch),
                Datum::Int8(i64::try_from(n).unwrap_or(i64::MAX)),
            ]);
        }
        rows
    }

    /// Documents and bytes of every fragment of `map`: this node's from its executors, other
    /// nodes' asked from them (one request per node; absent when an owner does not answer).
    async fn fragment_counts(
        &self,
        map: &ShardMap,
    ) -> Result<BTreeMap<FragmentId, (u64, u64)>, EngineError> {
        let mut counts: BTreeMap<FragmentId, (u64, u64)> = BTreeMap::new();
        for r in self.fragment_rows().await? {
            counts.insert(r.fragment, (r.documents, r.bytes));
        }
        for answer in self.ask_other_owners(map, &Share::Fragments).await {
            if let Ok(Reply::Fragments(list)) = answer {
                for f in list {
                    counts.insert(FragmentId::new(f.fragment), (f.documents, f.bytes));
                }
            }
        }
        Ok(counts)
    }

    /// SHOW FRAGMENTS on a cluster node: every fragment of the map with its owner; documents
    /// and bytes of other nodes' fragments asked from them (one forwarded request per node;
    /// NULL with state `unreachable` when the owner does not answer).
    async fn cluster_fragment_rows(&self) -> Result<Rows, EngineError> {
        let shared = Arc::clone(self.core.shared());
        let Some(map) = shared.map() else { return Ok(Rows::new()) };
        let counts = self.fragment_counts(&map).await?;
        let held = shared.buffers.held();
        let n = |v: u64| Datum::Int8(i64::try_from(v).unwrap_or(i64::MAX));
        // Sources of a split (one) or merge (two) in flight, by fragment.
        let reshaping: BTreeMap<u32, usize> = crate::cluster::view()
            .map(|v| {
                v.reshapes
                    .iter()
                    .flat_map(|r| r.sources.iter().map(|s| (*s, r.sources.len())))
                    .collect()
            })
            .unwrap_or_default();
        Ok(map
            .fragments()
            .iter()
            .map(|f| {
                let buffering = held.iter().any(|(k, _)| *k == BufferKey::Fragment(f.id()));
                let (documents, bytes, state) = match counts.get(&f.id()) {
                    Some((d, b)) => {
                        let state = if let Some(sources) = reshaping.get(&f.id().get()) {
                            if *sources == 1 { "splitting" } else { "merging" }
                        } else if shared.is_moving(f.id()) {
                            "handing-off"
                        } else if buffering {
                            "buffering"
                        } else {
                            "active"
                        };
                        (n(*d), n(*b), state)
                    }
                    None => (Datum::Null, Datum::Null, "unreachable"),
                };
                vec![
                    Datum::Text(f.id().to_string()),
                    Datum::Text(f.range().to_string()),
                    Datum::Text(f.owner().to_string()),
                    documents,
                    bytes,
                    Datum::Text(state.to_owned()),
                ]
            })
            .collect())
    }

    /// This node's open fragments, as single-node `SHOW FRAGMENTS` shows them.
    async fn local_fragment_rows(&self) -> Result<Rows, EngineError> {
        Ok(self
            .fragment_rows()
            .await?
            .into_iter()
            .map(|r| {
                vec![
                    Datum::Text(r.fragment.to_string()),
                    Datum::Text(r.range.to_string()),
                    Datum::Text(r.executor.to_string()),
                    Datum::Int8(i64::try_from(r.documents).unwrap_or(i64::MAX)),
                    Datum::Int8(i64::try_from(r.bytes).unwrap_or(i64::MAX)),
                ]
            })
            .collect::<Rows>())
    }

    /// Sends `share` (one that reads no SQL) to every other node owning fragments of `map`,
    /// all at once; each node's answer, or why there is none.
    async fn ask_other_owners(
        &self,
        map: &ShardMap,
        share: &Share,
    ) -> Vec<Result<Reply, RegionError>> {
        let me = self.core.shared().me;
        let nodes: BTreeSet<NodeId> =
            map.fragments().iter().map(|f| f.owner().node).filter(|n| *n != me).collect();
        let mut asked = Vec::with_capacity(nodes.len());
        for node in nodes {
            let request = forward::Request {
                epoch: map.epoch().0,
                catalog: 0,
                sql: String::new(),
                index: 0,
                params: Vec::new(),
                share: share.clone(),
            };
            asked.push(glommio::spawn_local(forward::call(node.0, request, true)));
        }
        let mut answers = Vec::with_capacity(asked.len());
        for task in asked {
            answers.push(task.await);
        }
        answers
    }

    /// One unit of work for every executor of this node, for [`Session::fan_out`].
    fn every_executor(&self) -> BTreeMap<ExecutorIndex, Vec<()>> {
        (0..self.ctx.mesh.len()).map(|i| (ExecutorIndex::new(i), vec![()])).collect()
    }

    /// Documents per collection over every executor of this node.
    async fn local_collection_docs(&self) -> Result<BTreeMap<String, u64>, EngineError> {
        let per_executor =
            self.fan_out(self.every_executor(), &(), |core, (), _| async move {
                Ok(core.collection_docs())
            })
            .await?;
        let mut docs: BTreeMap<String, u64> = BTreeMap::new();
        for (collection, n) in per_executor.into_iter().flatten() {
            // Tessera's own (one-round commit markers) are not the user's collections.
            if !collection.starts_with(query::limits::RESERVED_COLLECTION_PREFIX) {
                *docs.entry(collection).or_default() += n;
            }
        }
        Ok(docs)
    }

    /// SHOW COLLECTIONS: every collection with documents here or, on a cluster node, on any
    /// node owning fragments (one forwarded request per node), and every configured one, with
    /// its documents and sharding configuration (NULL: hashed by id). When a node does not
    /// answer, every count is NULL (unknown), and a collection only it holds is missing.
    async fn collection_rows(&self) -> Result<Rows, EngineError> {
        let shared = Arc::clone(self.core.shared());
        let mut docs = self.local_collection_docs().await?;
        let mut complete = true;
        if shared.clustered
            && let Some(map) = shared.map()
        {
            for answer in self.ask_other_owners(&map, &Share::Collections).await {
                match answer {
                    Ok(Reply::Collections(list)) => {
                        for c in list {
                            *docs.entry(c.name).or_default() += c.documents;
                        }
                    }
                    _ => complete = false,
                }
            }
        }
        let catalog = shared.catalog();
        let configs = catalog.configs();
        let names: BTreeSet<&String> = docs.keys().chain(configs.keys()).collect();
        let rows = names
            .into_iter()
            .map(|name| {
                let documents = match (complete, docs.get(name)) {
                    (false, _) => Datum::Null,
                    (true, n) => {
                        Datum::Int8(i64::try_from(n.copied().unwrap_or(0)).unwrap_or(i64::MAX))
                    }
                };
                let sharding =
                    configs.get(name).map_or(Datum::Null, |c| Datum::Json(config_json(c)));
                vec![Datum::Text(name.clone()), documents, sharding]
            })
            .collect();
        Ok(rows)
    }

    async fn fragment_rows(&self) -> Result<Vec<FragmentRow>, EngineError> {
        let rows =
            self.fan_out(self.every_executor(), &(), |core, (), _| async move {
                Ok(core.fragment_rows())
            })
            .await?;
        let mut rows: Vec<FragmentRow> = rows.into_iter().flatten().collect();
        rows.sort_by_key(|r| r.fragment);
        Ok(rows)
    }

    async fn explain(&self, inner: &Statement, analyze: bool) -> Result<Vec<String>, EngineError> {
        let catalog = self.core.shared().catalog();
        let plan =
            if needs_map(inner) { self.route_all(inner, &catalog)?.map(|r| r.plan) } else { None };
        let analysis = if analyze {
            let statement = Arc::new(inner.clone());
            match inner {
                Statement::Select(s) if s.collection.is_some() => {
                    Some(self.select(&statement).await?.1)
                }
                Statement::Select(_) => Some(Vec::new()),
                Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
                    if !matches!(self.block, Block::Idle) =>
                {
                    return Err(EngineError::NotSupported {
                        what: "EXPLAIN ANALYZE of a write inside a transaction block",
                        hint: "run it outside BEGIN … COMMIT",
                    });
                }
                // As in PostgreSQL, EXPLAIN ANALYZE of a write performs the write.
                Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => {
                    let mut analysis = self.write(&statement).await?.analysis;
                    analysis.sort_by_key(|a| a.fragment);
                    Some(analysis)
                }
                _ => {
                    return Err(EngineError::NotSupported {
                        what: "EXPLAIN ANALYZE of a statement that reads no collection",
                        hint: "EXPLAIN ANALYZE takes SELECT, INSERT, UPDATE or DELETE",
                    });
                }
            }
        } else {
            None
        };
        let mut lines = query::explain(inner, plan.as_ref(), analysis.as_deref());
        if self.streams(inner) {
            lines.push(
                "  Sent: page by page (1,024 rows or 4 MiB), as each fragment answers".to_owned(),
            );
        }
        Ok(lines)
    }

    async fn create(
        &self,
        collection: &CollectionName,
        sharding: Option<router::ShardingConfig>,
        if_not_exists: bool,
    ) -> Result<Option<Notice>, EngineError> {
        // A collection exists once written to, so CREATE TABLE without a configuration only
        // has to refuse a configured one that exists.
        let name = collection.as_str().to_owned();
        let shown = name.clone();
        let Some(config) = sharding else {
            let exists = self.core.shared().catalog().config(&name).is_some();
            return if exists && !if_not_exists {
                Err(EngineError::CollectionExists(name))
            } else {
                Ok(None)
            };
        };
        let result = self
            .change_catalog(name, move |current| match current {
                Some(_) => Err(EngineError::CollectionExists(shown.clone())),
                None => Ok(Some(entry_of(&config))),
            })
            .await;
        match result {
            Err(EngineError::CollectionExists(_)) if if_not_exists => Ok(None),
            other => other,
        }
    }
}

/// Whether an INSERT has a document placed by its content (an id ending with `$`), whose
/// shard depends on the catalog.
fn places_by_content(insert: &query::plan::Insert) -> Result<bool, EngineError> {
    for new in insert.documents()? {
        if matches!(router::shard_of(&new.id)?, Placement::Content) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `SHOW TRANSACTIONS`: open transaction blocks, prepared transactions and coordinator
/// decisions not yet applied everywhere, across executors.
pub const TRANSACTIONS: &str = "transactions";

/// `SHOW transaction_counters`: the executors' [`TxCounters`], summed.
pub const TRANSACTION_COUNTERS: &str = "transaction_counters";

/// `SHOW fragment_counters`: statements and rows scanned per fragment since start, the
/// evidence that routing sent a statement only where it had to.
pub const FRAGMENT_COUNTERS: &str = "fragment_counters";

/// `SHOW REGION`: what this node's region caches (the map's fragments, owners, epoch) and
/// buffers (statements waiting, per fragment or for the map itself).
pub const SHOW_REGION: &str = "region";

/// `SHOW local_fragments`: the fragments this node has open (on a single node the same as
/// `SHOW FRAGMENTS`; on a cluster node `SHOW FRAGMENTS` is cluster-wide).
pub const SHOW_LOCAL_FRAGMENTS: &str = "local_fragments";

/// `SHOW STATS`: every metric of the node as (name, labels, value) rows, the same numbers as
/// the Prometheus endpoint.
pub const SHOW_STATS: &str = "stats";

impl Session {
    /// Counts a finished statement and logs it when it is slow.
    fn finished(&self, statement: &Prepared, started: std::time::Instant, ok: bool) {
        let kind = crate::metrics::StatementKind::of(&statement.statement);
        let elapsed = started.elapsed();
        // Counted here, once per statement: a statement may be routed more than once (an
        // autocommit write counts its fragments before it runs, EXPLAIN ANALYZE routes its
        // inner statement).
        if let Some((opcode, _)) = &*self.last_route.borrow() {
            self.core.metrics().routed(*opcode);
        }
        if !self.core.metrics().statement(kind, elapsed, ok) {
            return;
        }
        let route = self.last_route.borrow();
        let (opcode, fragments) = match &*route {
            Some((opcode, fragments)) => {
                let shown: Vec<String> = fragments
                    .iter()
                    .take(crate::metrics::limits::SLOW_STATEMENT_FRAGMENTS_MAX)
                    .map(ToString::to_string)
                    .collect();
                (format!("{opcode:?}"), format!("{} [{}]", fragments.len(), shown.join(", ")))
            }
            None => ("none".to_owned(), "0 []".to_owned()),
        };
        let text: String = statement
            .text
            .chars()
            .take(crate::metrics::limits::SLOW_STATEMENT_TEXT_CHARS_MAX)
            .collect();
        tracing::info!(
            elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            kind = %kind.label(),
            opcode = %opcode,
            fragments = %fragments,
            ok,
            statement = %text,
            "slow statement"
        );
    }
}

impl Engine for Session {
    // query plans without the catalog (routing happens at execution), so parsing and
    // planning happen together in `parse`; `plan` attaches the client's parameter types.
    type Parsed = Statement;
    type Statement = Prepared;

    fn connection_effect(&self, statement: &Prepared) -> Option<crate::pg::ConnectionEffect> {
        match &*statement.statement {
            Statement::Deallocate { name } => {
                Some(crate::pg::ConnectionEffect::Deallocate(name.clone()))
            }
            Statement::DiscardAll => Some(crate::pg::ConnectionEffect::DiscardAll),
            _ => None,
        }
    }

    async fn start_session(&mut self, session: &crate::pg::SessionInfo) -> Result<(), PgError> {
        self.names = query::expr::SessionNames {
            user: session.user.clone(),
            database: session.database.clone(),
        };
        Ok(())
    }

    async fn parse(&mut self, sql: &str) -> Result<Vec<Statement>, PgError> {
        let limit = crate::metrics::limits::SLOW_STATEMENT_TEXT_CHARS_MAX;
        self.last_sql = Arc::from(sql.chars().take(limit + 1).collect::<String>().as_str());
        self.sql = Arc::from(sql);
        self.planned.set(0);
        self.replay = None;
        let parsed = self.core.parse(sql).map_err(|e| engine_error(&EngineError::Plan(e)))?;
        self.block_text = block::BlockText::of(&self.sql, &parsed);
        Ok(parsed)
    }

    async fn plan(&mut self, parsed: Statement, param_types: &[Oid]) -> Result<Prepared, PgError> {
        Ok(self.prepared(parsed, param_types))
    }

    fn describe<'s>(&'s self, statement: &'s Prepared) -> &'s Description {
        &statement.description
    }

    async fn execute(
        &mut self,
        statement: &Prepared,
        params: Params<'_>,
        sink: &mut RowSink<'_>,
    ) -> Result<CommandTag, PgError> {
        if self.ctx.shutdown.is_triggered() {
            return Err(shutting_down());
        }
        let _running = Running::start(self.core.shared());
        // As in PostgreSQL, a failed block accepts only its end.
        let ends_block = matches!(&*statement.statement, Statement::Commit | Statement::Rollback);
        if let Block::Failed(_) = self.block
            && !ends_block
        {
            return Err(PgError::new(
                SqlState::IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        // A query of several statements runs them in one implicit block (BEGIN opens its own).
        let mut implicit_opened = false;
        if self.implicit == Implicit::Armed
            && matches!(self.block, Block::Idle)
            && !matches!(&*statement.statement, Statement::Begin)
        {
            self.open_block();
            self.implicit = Implicit::Open;
            implicit_opened = true;
        }
        let started = std::time::Instant::now();
        self.last_route.borrow_mut().take();
        // A query of writes alone to one remote fragment is shipped whole as it starts; a
        // statement of a block shipped whole (`block`) already ran: its outcome is replayed.
        let shipped = if implicit_opened && statement.index == 0 {
            self.ship_block(&statement.sql, false).await.err()
        } else {
            None
        };
        let replayed = match shipped {
            Some(e) => Some(Err(e)),
            None => self.replayed(&statement.sql, statement.index),
        };
        let result = match replayed {
            Some(result) => result,
            None => {
                let opens = statement.index == 0
                    && matches!(&*statement.statement, Statement::Begin)
                    && matches!(self.block, Block::Idle);
                match self.bind(statement, params) {
                    Ok(bound) => match self.run(bound, sink).await {
                        Ok(tag) if opens => {
                            self.ship_block(&statement.sql, true).await.map(|_| tag)
                        }
                        other => other,
                    },
                    Err(e) => Err(e),
                }
            }
        };
        if result.is_err() {
            self.fail_block();
        }
        self.finished(statement, started, result.is_ok());
        if let Err(e) = &result
            && not_client_caused(e)
        {
            tracing::error!(error = %e, "statement failed on the node's side");
        }
        result.map_err(|e| engine_error(&e))
    }

    fn copy_mode(&self, statement: &Prepared) -> Option<crate::pg::CopyMode> {
        match &*statement.statement {
            Statement::CopyFrom { .. } => Some(crate::pg::CopyMode::In { columns: 2 }),
            Statement::CopyTo { query, .. } => Some(crate::pg::CopyMode::Out {
                columns: query.result_columns().map_or(0, |c| c.len()),
            }),
            _ => None,
        }
    }

    async fn copy_data(&mut self, data: &[u8]) -> Result<(), PgError> {
        self.copy_input(data).await
    }

    async fn copy_done(&mut self) -> Result<CommandTag, PgError> {
        self.copy_finish().await
    }

    fn copy_abort(&mut self) {
        self.copy_dropped();
    }

    fn begin_implicit(&mut self) {
        self.implicit = Implicit::Armed;
    }

    async fn end_implicit(&mut self, failed: bool) -> Result<(), PgError> {
        let open = std::mem::replace(&mut self.implicit, Implicit::Off) == Implicit::Open;
        if !open {
            return Ok(());
        }
        if !failed && let Some(result) = self.replayed_commit() {
            return result.map_err(|e| engine_error(&e));
        }
        self.replay = None;
        match std::mem::replace(&mut self.block, Block::Idle) {
            Block::Idle => Ok(()),
            // Only reads: nothing to make atomic, and validating them would turn a monitoring
            // query (`SELECT …; SELECT …`) into one that fails with 40001 under writes, which
            // each statement on its own never did. Each read stands as it was answered.
            Block::Open(txn) if !failed && !txn.has_writes() => {
                self.core.set_session_txn(txn.number, None);
                Ok(())
            }
            Block::Open(txn) if !failed => {
                let _running = Running::start(self.core.shared());
                self.commit_block(&txn).await.map_err(|e| engine_error(&e))
            }
            Block::Open(txn) | Block::Failed(txn) => {
                self.drop_block(&txn);
                Ok(())
            }
        }
    }

    fn transaction_status(&self) -> TransactionStatus {
        match self.block {
            Block::Idle => TransactionStatus::Idle,
            Block::Open(_) => TransactionStatus::InTransaction,
            Block::Failed(_) => TransactionStatus::Failed,
        }
    }
}

/// The error every statement gets once the node is stopping.
fn shutting_down() -> PgError {
    PgError::fatal(SqlState::ADMIN_SHUTDOWN, "terminating connection: the node is shutting down")
}

/// Errors the client did not cause (disk, catalog, backup, a stopped fragment): logged.
fn not_client_caused(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Catalog(_)
            | EngineError::Backup(_)
            | EngineError::Append(storage::AppendError::Fatal { .. })
    )
}

/// Targets for the wire.
fn wire_targets(targets: &[Target]) -> Vec<forward::WireTarget> {
    targets
        .iter()
        .map(|t| forward::WireTarget {
            fragment: t.fragment.get(),
            ranges: t
                .ranges
                .iter()
                .map(|r| forward::WireRange { start: r.start(), end: r.end() })
                .collect(),
        })
        .collect()
}

/// The `Written` answer of a write run here for another node.
fn written_reply(outcome: &WriteOutcome) -> Reply {
    Reply::Written {
        affected: outcome.affected,
        returning: outcome.returning.iter().map(|r| forward::datums_to_wire(r)).collect(),
    }
}

/// A `Written` answer of another node, read back (`written_reply`'s other side).
fn written_outcome(
    affected: u64,
    returning: Vec<Vec<forward::WireDatum>>,
) -> Result<WriteOutcome, EngineError> {
    let returning = returning
        .into_iter()
        .map(forward::datums_from_wire)
        .collect::<Result<Vec<_>, String>>()
        .map_err(bad_reply)?;
    Ok(WriteOutcome { affected, returning, analysis: Vec::new() })
}

/// An owner's answer that carries no result: the epoch to refresh to (`StaleEpoch`,
/// `NotMine`), or the owner's error.
fn reply_error(reply: Reply) -> Result<u64, EngineError> {
    match reply {
        Reply::StaleEpoch { current } => Ok(current),
        Reply::NotMine { .. } => Ok(0),
        Reply::Failed { code, message } => Err(RegionError::Remote { code, message }.into()),
        // Only a whole forwarded write is answered so (`write_routed` plans it again).
        Reply::StaleCatalog { current } => {
            Err(crate::cluster::ops::MoveError::CatalogChanged { version: current }.into())
        }
        Reply::Partials(_)
        | Reply::Written { .. }
        | Reply::Fragments(_)
        | Reply::Collections(_)
        | Reply::TxnRead { .. }
        | Reply::TxnShares(_)
        | Reply::Decided { .. }
        | Reply::Violations(_)
        | Reply::Page { .. }
        | Reply::Applied => Err(bad_reply("an answer of another kind".to_owned())),
    }
}

fn bad_reply(reason: String) -> EngineError {
    RegionError::Forward { node: 0, reason: format!("bad answer from the owner: {reason}") }.into()
}

fn internal(what: &'static str) -> EngineError {
    EngineError::Exec(query::ExecError::WrongStatement { what })
}

fn entry_of(config: &router::ShardingConfig) -> CollectionEntry {
    CollectionEntry { sharding: config_json(config) }
}

/// A sharding configuration as the JSON SHOW SHARDING and SHOW COLLECTIONS show.
fn config_json(config: &router::ShardingConfig) -> serde_json::Value {
    serde_json::from_str(&config.to_json()).unwrap_or(serde_json::Value::Null)
}

/// How `view` says `statement`'s collection is placed, validated and routed (no rules for a
/// statement without one).
fn rules_of<'a>(view: &'a CatalogView, statement: &Statement) -> Rules<'a> {
    collection_of(statement).map(|c| view.rules(c.as_str())).unwrap_or_default()
}

fn collection_of(statement: &Statement) -> Option<&CollectionName> {
    match statement {
        Statement::Select(s) => s.collection.as_ref(),
        Statement::Insert(i) => Some(&i.collection),
        Statement::Update(u) => Some(&u.collection),
        Statement::Delete(d) => Some(&d.collection),
        _ => None,
    }
}

/// Routed targets with the transaction's buffered writes of each fragment.
fn with_writes(
    txn: &Txn,
    groups: BTreeMap<ExecutorIndex, Vec<Target>>,
) -> BTreeMap<ExecutorIndex, Vec<TxnTarget>> {
    groups
        .into_iter()
        .map(|(e, targets)| {
            let targets = targets
                .into_iter()
                .map(|t| TxnTarget {
                    writes: txn.writes_of(t.fragment),
                    fragment: t.fragment,
                    ranges: t.ranges,
                    docs: Vec::new(),
                })
                .collect();
            (e, targets)
        })
        .collect()
}

/// The fragments of each executor in `groups` (the participants phase two finishes).
fn participants_of<T>(
    groups: &BTreeMap<ExecutorIndex, Vec<(FragmentId, T)>>,
) -> Vec<(ExecutorIndex, Vec<FragmentId>)> {
    groups.iter().map(|(e, list)| (*e, list.iter().map(|(f, _)| *f).collect())).collect()
}

/// Files what a statement of a block read on `fragment`, then what it wrote, into `txn`: the
/// versions read in slices of `CHECK_SLICE_OPS` with `between_slices` after each, so a
/// statement that read many documents does not hold the session's executor while the
/// block's buffer takes them in (as `Txn::absorb` of everything at once would).
async fn absorb_in_slices(
    txn: &mut Txn,
    fragment: FragmentId,
    collection: &str,
    reads: Reads,
    intents: Vec<WriteIntent>,
) -> Result<(), EngineError> {
    let Reads { docs, scans } = reads;
    let mut docs = docs.into_iter().peekable();
    loop {
        let slice: Vec<_> = docs.by_ref().take(CHECK_SLICE_OPS).collect();
        if docs.peek().is_none() {
            return txn.absorb(fragment, collection, Reads { docs: slice, scans }, intents);
        }
        let slice = Reads { docs: slice, scans: Vec::new() };
        txn.absorb(fragment, collection, slice, Vec::new())?;
        between_slices().await;
    }
}

/// Which checks of a part go to its node (`Session::validate_reads`; `All`, with the writes,
/// for any commit: `wire_commit_target`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Checks {
    /// Every one.
    All,
    /// Ranges counted and absences (`FragmentTxn::undoable_batch`; a read-only block's
    /// buffered writes are all absences: inserted, then deleted).
    Undoable,
    /// The versions read of documents found (`FragmentTxn::versioned_slices`).
    Versioned,
    /// None (all were validated when held).
    None,
}

/// `checks` of one fragment's part of a commit (a read-only one's, or `All` of any), for the
/// node owning it (None when that leaves nothing to write or check).
fn wire_checks(
    part: &FragmentTxn,
    fragment: FragmentId,
    checks: Checks,
) -> Option<forward::WireTxnTarget> {
    let absent = |r: &&ReadRecord| r.version == storage::Version::ABSENT;
    let (writes, reads) = match checks {
        Checks::All => {
            (Some(&*part.writes), forward::reads_to_wire(part.reads.iter(), &part.scans))
        }
        Checks::Undoable => (
            Some(&*part.writes),
            forward::reads_to_wire(part.reads.iter().filter(absent), &part.scans),
        ),
        Checks::Versioned => {
            (None, forward::reads_to_wire(part.reads.iter().filter(|r| !absent(r)), None))
        }
        Checks::None => return None,
    };
    let writes = forward::writes_to_wire(writes);
    if writes.is_empty() && reads.docs.is_empty() && reads.scans.is_empty() {
        return None;
    }
    Some(forward::WireTxnTarget { fragment: fragment.get(), ranges: Vec::new(), writes, reads })
}

/// A fragment's part of `txn` for the owner to commit: its writes and the reads to check.
fn wire_commit_target(txn: &Txn, fragment: FragmentId) -> forward::WireTxnTarget {
    txn.fragments
        .get(&fragment)
        .and_then(|part| wire_checks(part, fragment, Checks::All))
        .unwrap_or(forward::WireTxnTarget {
            fragment: fragment.get(),
            ranges: Vec::new(),
            writes: Vec::new(),
            reads: forward::WireReads::default(),
        })
}

/// The storage batch of one fragment's part of a transaction committed by another node
/// (`Txn::batches` of that part: writes expect their base, reads not written are checks).
fn batch_from_wire(target: forward::WireTxnTarget) -> Result<storage::WriteBatch, EngineError> {
    let fragment = FragmentId::new(target.fragment);
    let writes = forward::writes_from_wire(target.writes).map_err(bad_reply)?;
    let reads = forward::reads_from_wire(target.reads).map_err(bad_reply)?;
    let mut txn = Txn::new(0);
    let part = txn.fragments.entry(fragment).or_default();
    part.writes = Arc::new(writes);
    for r in reads.docs {
        part.reads.insert_first(r, || Ok::<(), EngineError>(()))?;
    }
    part.scans = reads.scans.into_iter().collect();
    Ok(txn.batches().remove(&fragment).unwrap_or_default())
}

/// Awaits forwarded commit work (apply, prepare): every answer must be `Applied`; a stale
/// map at that point fails the transaction with 40001 (nothing of it was applied there).
async fn expect_applied(tasks: Vec<ForwardTask>) -> Result<(), EngineError> {
    let mut first_error = None;
    for task in tasks {
        let failure = match task.await {
            Ok(Reply::Applied) => continue,
            Ok(other) => match reply_error(other) {
                Ok(_) => RegionError::Remote {
                    code: SqlState::SERIALIZATION_FAILURE.to_string(),
                    message: "the shard map changed during COMMIT; retry the transaction".into(),
                }
                .into(),
                Err(e) => e,
            },
            Err(e) => e.into(),
        };
        first_error = first_error.or(Some(failure));
    }
    first_error.map_or(Ok(()), Err)
}

/// Whether `e` is a write conflict, here or on another node (whose conflict travels as its
/// SQLSTATE): nothing of the transaction was applied, it may run again.
fn is_conflict(e: &EngineError) -> bool {
    match e {
        EngineError::TxnConflict { .. }
        | EngineError::TxnPhantom { .. }
        | EngineError::TxnHeld { .. } => true,
        EngineError::Region(RegionError::Remote { code, .. }) => {
            code == SqlState::SERIALIZATION_FAILURE.code()
        }
        _ => false,
    }
}

/// A forwarded request running.
type ForwardTask = glommio::Task<Result<Reply, RegionError>>;

/// Awaits every forwarded transactional share: their partial results and shares, or
/// `Ok(Err(epoch))` when an owner said the map is stale (retry after a refresh).
async fn collect_txn(
    tasks: Vec<ForwardTask>,
) -> Result<Result<(Vec<query::Partial>, Vec<TxnShare>), u64>, EngineError> {
    let mut partials = Vec::new();
    let mut shares = Vec::new();
    let mut retry = None;
    let mut first_error = None;
    for task in tasks {
        let reply = match task.await {
            Ok(r) => r,
            Err(e) => {
                first_error = first_error.or(Some(e.into()));
                continue;
            }
        };
        let result = match reply {
            Reply::TxnRead { partials: p, reads } => {
                forward::partials_from_wire(p).map_err(bad_reply).and_then(|p| {
                    partials.extend(p);
                    reads.into_iter().map(share_from_wire).collect::<Result<Vec<_>, _>>()
                })
            }
            Reply::TxnShares(list) => {
                list.into_iter().map(share_from_wire).collect::<Result<Vec<_>, _>>()
            }
            other => match reply_error(other) {
                Ok(epoch) => {
                    retry = Some(epoch);
                    Ok(Vec::new())
                }
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(list) => shares.extend(list),
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(match retry {
        Some(epoch) => Err(epoch),
        None => Ok((partials, shares)),
    })
}

/// Remote targets of a transaction's statement for the wire, each with the block's
/// buffered writes on its fragment (the overlay the owner reads through).
fn wire_txn_targets(txn: &Txn, targets: &[Target]) -> Vec<forward::WireTxnTarget> {
    targets
        .iter()
        .map(|t| forward::WireTxnTarget {
            fragment: t.fragment.get(),
            ranges: t
                .ranges
                .iter()
                .map(|r| forward::WireRange { start: r.start(), end: r.end() })
                .collect(),
            writes: forward::writes_to_wire(txn.writes_of(t.fragment).as_deref()),
            reads: forward::WireReads::default(),
        })
        .collect()
}

/// A remote transactional share from the wire.
fn share_from_wire(s: forward::WireTxnShare) -> Result<TxnShare, EngineError> {
    Ok(TxnShare {
        fragment: FragmentId::new(s.fragment),
        intents: forward::intents_from_wire(s.intents).map_err(bad_reply)?,
        reads: forward::reads_from_wire(s.reads).map_err(bad_reply)?,
        returning: s
            .returning
            .into_iter()
            .map(forward::datums_from_wire)
            .collect::<Result<Vec<_>, String>>()
            .map_err(bad_reply)?,
        rows_scanned: s.rows_scanned,
        elapsed: std::time::Duration::ZERO,
    })
}

/// A local transactional share for the wire.
fn share_to_wire(s: &TxnShare) -> forward::WireTxnShare {
    forward::WireTxnShare {
        fragment: s.fragment.get(),
        intents: forward::intents_to_wire(&s.intents),
        reads: forward::reads_to_wire(&s.reads.docs, &s.reads.scans),
        returning: s.returning.iter().map(|r| forward::datums_to_wire(r)).collect(),
        rows_scanned: s.rows_scanned,
    }
}

/// Wire targets of a forwarded transactional share as local ones, grouped by executor;
/// `Err(fragment)` when this node does not own one of them.
/// How a node of this build asks another to read a write share it sends (`None`: a share it
/// was itself asked for, which it never sends on).
fn wire_share_read(read: ShareRead) -> Option<forward::WireShareRead> {
    match read {
        ShareRead::Block => Some(forward::WireShareRead::Block),
        ShareRead::AutocommitPaused => Some(forward::WireShareRead::AutocommitPaused),
        ShareRead::AutocommitOneGo => Some(forward::WireShareRead::AutocommitOneGo),
        ShareRead::Asked => None,
    }
}

/// How this node reads a write share another node sent with `Share::TxnWriteAs`.
fn share_read_from_wire(read: forward::WireShareRead) -> ShareRead {
    match read {
        forward::WireShareRead::Block => ShareRead::Block,
        forward::WireShareRead::AutocommitPaused => ShareRead::AutocommitPaused,
        forward::WireShareRead::AutocommitOneGo => ShareRead::AutocommitOneGo,
    }
}

fn txn_targets_here(
    map: &ShardMap,
    me: NodeId,
    targets: Vec<forward::WireTxnTarget>,
) -> Result<Result<BTreeMap<ExecutorIndex, Vec<TxnTarget>>, u32>, EngineError> {
    let mut groups: BTreeMap<ExecutorIndex, Vec<TxnTarget>> = BTreeMap::new();
    for t in targets {
        let id = FragmentId::new(t.fragment);
        let Some(owner) = map.owner_of(id).filter(|o| o.node == me) else {
            return Ok(Err(t.fragment));
        };
        let writes = forward::writes_from_wire(t.writes).map_err(bad_reply)?;
        groups.entry(ExecutorIndex::new(owner.executor.0 as usize)).or_default().push(TxnTarget {
            fragment: id,
            ranges: t.ranges.iter().filter_map(|r| ShardRange::new(r.start, r.end)).collect(),
            docs: Vec::new(),
            writes: (!writes.docs.is_empty()).then(|| Arc::new(writes)),
        });
    }
    Ok(Ok(groups))
}

/// The parts of `ranges` inside `within`.
fn clip(ranges: &[ShardRange], within: ShardRange) -> Vec<ShardRange> {
    ranges
        .iter()
        .filter_map(|r| ShardRange::new(r.start().max(within.start()), r.end().min(within.end())))
        .collect()
}

async fn write_rows(sink: &mut RowSink<'_>, rows: &[Vec<Datum>]) -> Result<u64, EngineError> {
    for values in rows {
        sink.check_cancelled().map_err(|_| EngineError::Cancelled)?;
        let mut row = sink.row();
        for value in values {
            let encoded = match row.format() {
                Format::Text => value.encode_text().map(String::into_bytes),
                Format::Binary => value.encode_binary(),
            };
            match encoded {
                Some(bytes) => row.bytes(&bytes),
                None => row.null(),
            }
        }
        row.finish().map_err(|e| EngineError::Wire(e.message().to_owned()))?;
        sink.flush_if_needed().await.map_err(|e| EngineError::Wire(e.message().to_owned()))?;
    }
    Ok(rows.len() as u64)
}

/// The PostgreSQL type of a column type.
pub fn oid_of(ty: SqlType) -> Oid {
    match ty {
        SqlType::Bool => Oid::BOOL,
        SqlType::Int8 => Oid::INT8,
        SqlType::Float8 => Oid::FLOAT8,
        SqlType::Text => Oid::TEXT,
        SqlType::Json => Oid::JSON,
    }
}

fn sql_type_of_oid(oid: Oid) -> Option<SqlType> {
    match oid {
        Oid::BOOL => Some(SqlType::Bool),
        Oid::INT2 | Oid::INT4 | Oid::INT8 => Some(SqlType::Int8),
        Oid::FLOAT4 | Oid::FLOAT8 | Oid::NUMERIC => Some(SqlType::Float8),
        Oid::TEXT | Oid::VARCHAR => Some(SqlType::Text),
        Oid::JSON | Oid::JSONB => Some(SqlType::Json),
        _ => None,
    }
}

/// Reads one parameter value. Client-chosen binary types narrower than ours (int2, int4,
/// float4, jsonb) are widened here; text formats go through query's own parser.
fn decode_param(
    index: usize,
    oid: Oid,
    ty: SqlType,
    format: Format,
    bytes: Option<&[u8]>,
) -> Result<Datum, EngineError> {
    let Some(bytes) = bytes else { return Ok(Datum::Null) };
    let bad = |reason: &str| EngineError::Param { index, reason: reason.to_owned() };
    if format == Format::Binary {
        match oid {
            Oid::INT2 => {
                let b: [u8; 2] = bytes.try_into().map_err(|_| bad("int2 needs 2 bytes"))?;
                return Ok(Datum::Int8(i64::from(i16::from_be_bytes(b))));
            }
            Oid::INT4 => {
                let b: [u8; 4] = bytes.try_into().map_err(|_| bad("int4 needs 4 bytes"))?;
                return Ok(Datum::Int8(i64::from(i32::from_be_bytes(b))));
            }
            Oid::FLOAT4 => {
                let b: [u8; 4] = bytes.try_into().map_err(|_| bad("float4 needs 4 bytes"))?;
                return Ok(Datum::Float8(f64::from(f32::from_be_bytes(b))));
            }
            Oid::JSONB => {
                // jsonb's binary form is a version byte (1) followed by the JSON text.
                let Some((&1, text)) = bytes.split_first() else {
                    return Err(bad("jsonb binary must start with version 1"));
                };
                return Ok(query::Datum::decode_param(
                    index,
                    SqlType::Json,
                    query::Format::Text,
                    Some(text),
                )?);
            }
            Oid::NUMERIC => return Err(bad("numeric parameters must be sent as text")),
            _ => {}
        }
    }
    let format = match format {
        Format::Text => query::Format::Text,
        Format::Binary => query::Format::Binary,
    };
    Ok(query::Datum::decode_param(index, ty, format, Some(bytes))?)
}

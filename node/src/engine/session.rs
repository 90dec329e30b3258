//! A client session: `pg::Engine` over the query planner and the executors' fragments.
//!
//! A statement is parsed and planned once (`prepare`), bound to parameters without parsing
//! again, routed to the fragments that can hold its answer, and run there: work for this
//! executor's fragments runs in place, work for each other executor travels as one mesh call
//! carrying all of that executor's fragments. Partial results are merged here.
//!
//! Statements that touch fragments on several executors are not atomic across them yet:
//! each executor's share commits on its own (cross-fragment transactions are a later step).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use query::explain::FragmentAnalysis;
use query::plan::{CollectionName, Statement};
use query::{Datum, PlacedDocument, SqlType};
use router::{FragmentId, Placement, RoutePlan, ShardRange};

use super::core::{Core, FragmentRow, Target, WriteOutcome};
use super::error::EngineError;
use super::shared::CatalogView;
use crate::catalog::CollectionEntry;
use crate::pg::sqlstate::{SqlState, engine_error};
use crate::pg::{
    Column, CommandTag, Description, Engine, Format, Oid, Params, PgError, RowSink,
    TransactionStatus,
};
use crate::runtime::{ExecutorContext, ExecutorIndex};

/// A planned statement, kept by the wire layer for reuse.
pub struct Prepared {
    statement: Arc<Statement>,
    text: Arc<str>,
    description: Description,
    param_types: Vec<SqlType>,
}

/// One client connection's engine.
pub struct Session {
    core: Rc<Core>,
    ctx: ExecutorContext<Core>,
    settings: BTreeMap<String, String>,
    /// The text of the last parsed SQL (slow-statement log), bounded.
    last_sql: Arc<str>,
    /// Opcode and fragments of the last statement routed (slow-statement log).
    last_route: std::cell::RefCell<Option<(router::Opcode, Vec<FragmentId>)>>,
}

/// Rows of a statement's result before they are written to the client.
type Rows = Vec<Vec<Datum>>;

/// An INSERT's placed documents, by owning executor and fragment.
type Placed = BTreeMap<ExecutorIndex, Vec<(FragmentId, Vec<PlacedDocument>)>>;

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
            last_sql: Arc::from(""),
            last_route: std::cell::RefCell::new(None),
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
            description: Description { params, columns },
            param_types,
        }
    }

    fn result_columns(&self, statement: &Statement) -> Option<Vec<Column>> {
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
            return Ok(Arc::clone(&prepared.statement));
        }
        let mut values = Vec::with_capacity(params.len());
        for (i, param) in params.iter().enumerate() {
            let ty = prepared.param_types.get(i).copied().unwrap_or(SqlType::Text);
            values.push(decode_param(i + 1, param.type_oid, ty, param.format, param.value)?);
        }
        Ok(Arc::new(query::bind(&prepared.statement, &values)?))
    }

    async fn run(
        &mut self,
        statement: Arc<Statement>,
        sink: &mut RowSink<'_>,
    ) -> Result<CommandTag, EngineError> {
        match &*statement {
            Statement::Select(select) if select.collection.is_none() => {
                let result = query::execute_constant(select)?;
                let n = write_rows(sink, &result.rows).await?;
                Ok(CommandTag::with_rows("SELECT", n))
            }
            Statement::Select(_) => {
                let (rows, _) = self.select(&statement).await?;
                let n = write_rows(sink, &rows).await?;
                Ok(CommandTag::with_rows("SELECT", n))
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
            Statement::CreateCollection { collection, sharding, if_not_exists } => {
                self.create(collection, sharding.clone(), *if_not_exists).await?;
                Ok(CommandTag::new("CREATE TABLE"))
            }
            Statement::AlterSharding { collection, sharding } => {
                let config = sharding.clone();
                let name = collection.as_str().to_owned();
                let shown = name.clone();
                self.change_catalog(name, move |current| {
                    let current = current.ok_or(EngineError::NoConfiguration(shown))?;
                    router::check_change(current, &config)?;
                    Ok(entry_of(&config))
                })
                .await?;
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
            Statement::ShowFragments => {
                let rows = self
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
                    .collect::<Rows>();
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
                        let json = serde_json::from_str(&config.to_json())
                            .unwrap_or(serde_json::Value::Null);
                        vec![Datum::Text(name.clone()), Datum::Json(json)]
                    })
                    .collect();
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
            Statement::Begin | Statement::Commit | Statement::Rollback => {
                Err(EngineError::NotSupported {
                    what: "BEGIN / COMMIT / ROLLBACK (transaction blocks)",
                    hint: "run each statement on its own (autocommit); every statement commits durably",
                })
            }
        }
    }

    fn setting(&self, name: &str) -> Option<String> {
        if let Some(v) = self.settings.get(name) {
            return Some(v.clone());
        }
        let fixed = match name {
            "server_version" => "15.0",
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

    /// Routes a statement: which fragments, grouped by owning executor, with the shard ranges
    /// to read in each.
    fn route(
        &self,
        statement: &Statement,
        catalog: &CatalogView,
    ) -> Option<(RoutePlan, BTreeMap<ExecutorIndex, Vec<Target>>)> {
        let shared = self.core.shared();
        let config = collection_of(statement).and_then(|c| catalog.config(c.as_str()));
        let plan = query::route_statement(statement, config, &shared.map)?;
        self.core.metrics().routed(plan.opcode);
        *self.last_route.borrow_mut() = Some((plan.opcode, plan.fragments.clone()));
        let mut groups: BTreeMap<ExecutorIndex, Vec<Target>> = BTreeMap::new();
        for id in &plan.fragments {
            let Some(fragment) = shared.map.get(*id) else { continue };
            let ranges = clip(&plan.shards, fragment.range());
            if ranges.is_empty() {
                continue;
            }
            let executor = ExecutorIndex::new(fragment.owner().executor.0 as usize);
            groups.entry(executor).or_default().push(Target { fragment: *id, ranges });
        }
        Some((plan, groups))
    }

    async fn select(
        &self,
        statement: &Arc<Statement>,
    ) -> Result<(Rows, Vec<FragmentAnalysis>), EngineError> {
        let Statement::Select(select) = &**statement else {
            return Err(internal("select() of a non-SELECT"));
        };
        let catalog = self.core.shared().catalog();
        let groups = self.route(statement, &catalog).map(|(_, g)| g).unwrap_or_default();
        let results = self
            .fan_out(groups, statement, |core, stmt, targets| async move {
                match &*stmt {
                    Statement::Select(s) => core.select(s, &targets),
                    _ => Err(internal("select share of a non-SELECT")),
                }
            })
            .await?;
        let mut partials = Vec::new();
        let mut analysis = Vec::new();
        for (p, a) in results {
            partials.extend(p);
            analysis.extend(a);
        }
        analysis.sort_by_key(|a| a.fragment);
        let merged = query::merge(select, partials)?;
        Ok((merged.rows, analysis))
    }

    async fn write(&self, statement: &Arc<Statement>) -> Result<WriteOutcome, EngineError> {
        let catalog = self.core.shared().catalog();
        let outcomes = match &**statement {
            Statement::Insert(insert) => {
                let config = catalog.config(insert.collection.as_str());
                let groups = self.place(insert, config)?;
                self.placed(&groups);
                let with = (Arc::clone(statement), catalog);
                self.fan_out(groups, &with, |core, (stmt, view), per_fragment| async move {
                    let Statement::Insert(i) = &*stmt else {
                        return Err(internal("insert share of a non-INSERT"));
                    };
                    core.insert(i, &per_fragment, view.config(i.collection.as_str())).await
                })
                .await?
            }
            Statement::Update(_) | Statement::Delete(_) => {
                let groups = self.route(statement, &catalog).map(|(_, g)| g).unwrap_or_default();
                let with = (Arc::clone(statement), catalog);
                self.fan_out(groups, &with, |core, (stmt, view), targets| async move {
                    match &*stmt {
                        Statement::Update(u) => {
                            core.update(u, &targets, view.config(u.collection.as_str())).await
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
            total.affected += o.affected;
            total.returning.extend(o.returning);
            total.analysis.extend(o.analysis);
        }
        Ok(total)
    }

    /// Counts an INSERT's routing: the fragments its documents were placed on.
    fn placed(&self, groups: &Placed) {
        let fragments: Vec<FragmentId> =
            groups.values().flat_map(|v| v.iter().map(|(f, _)| *f)).collect();
        let opcode =
            if fragments.len() == 1 { router::Opcode::Single } else { router::Opcode::Multi };
        self.core.metrics().routed(opcode);
        *self.last_route.borrow_mut() = Some((opcode, fragments));
    }

    /// Final ids and shards of an INSERT's documents, grouped by executor and fragment.
    fn place(
        &self,
        insert: &query::plan::Insert,
        config: Option<&router::ShardingConfig>,
    ) -> Result<Placed, EngineError> {
        let map = &self.core.shared().map;
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
        for (fragment, docs) in by_fragment {
            let owner = map.owner_of(fragment).ok_or_else(|| internal("fragment without owner"))?;
            groups
                .entry(ExecutorIndex::new(owner.executor.0 as usize))
                .or_default()
                .push((fragment, docs));
        }
        Ok(groups)
    }

    /// Runs `work` with each executor's targets and a clone of `with` (what every share needs:
    /// the statement, a catalog snapshot, or nothing): other executors' shares are sent first
    /// (one call each) and run while this executor does its own share in place.
    async fn fan_out<T, C, W, Fut, R>(
        &self,
        groups: BTreeMap<ExecutorIndex, Vec<T>>,
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
            self.core.metrics().mesh_call();
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

    async fn verify(&self, collection: &CollectionName) -> Result<Rows, EngineError> {
        let catalog = self.core.shared().catalog();
        if catalog.config(collection.as_str()).is_none() {
            return Err(EngineError::NoConfiguration(collection.as_str().to_owned()));
        }
        let groups = self.all_fragments();
        let with = (catalog, collection.clone());
        let found = self
            .fan_out(groups, &with, |core, (view, name), targets| async move {
                let config = view
                    .config(name.as_str())
                    .ok_or_else(|| EngineError::NoConfiguration(name.as_str().to_owned()))?;
                core.verify(&name, config, &targets)
            })
            .await?;
        let mut violations: Vec<(String, String)> = found.into_iter().flatten().collect();
        violations.sort();
        Ok(violations
            .into_iter()
            .map(|(id, reason)| vec![Datum::Text(id), Datum::Text(reason)])
            .collect())
    }

    fn all_fragments(&self) -> BTreeMap<ExecutorIndex, Vec<Target>> {
        let mut groups: BTreeMap<ExecutorIndex, Vec<Target>> = BTreeMap::new();
        for f in self.core.shared().map.fragments() {
            groups
                .entry(ExecutorIndex::new(f.owner().executor.0 as usize))
                .or_default()
                .push(Target { fragment: f.id(), ranges: vec![f.range()] });
        }
        groups
    }

    async fn fragment_rows(&self) -> Result<Vec<FragmentRow>, EngineError> {
        let mut groups: BTreeMap<ExecutorIndex, Vec<()>> = BTreeMap::new();
        for i in 0..self.ctx.mesh.len() {
            groups.insert(ExecutorIndex::new(i), vec![()]);
        }
        let rows = self
            .fan_out(groups, &(), |core, (), _| async move { Ok(core.fragment_rows()) })
            .await?;
        let mut rows: Vec<FragmentRow> = rows.into_iter().flatten().collect();
        rows.sort_by_key(|r| r.fragment);
        Ok(rows)
    }

    async fn explain(&self, inner: &Statement, analyze: bool) -> Result<Vec<String>, EngineError> {
        let catalog = self.core.shared().catalog();
        let plan = self.route(inner, &catalog).map(|(p, _)| p);
        let analysis = if analyze {
            let statement = Arc::new(inner.clone());
            match inner {
                Statement::Select(s) if s.collection.is_some() => {
                    Some(self.select(&statement).await?.1)
                }
                Statement::Select(_) => Some(Vec::new()),
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
        Ok(query::explain(inner, plan.as_ref(), analysis.as_deref()))
    }

    async fn create(
        &self,
        collection: &CollectionName,
        sharding: Option<router::ShardingConfig>,
        if_not_exists: bool,
    ) -> Result<(), EngineError> {
        // A collection exists once written to, so CREATE TABLE without a configuration only
        // has to refuse a configured one that exists.
        let name = collection.as_str().to_owned();
        let shown = name.clone();
        let Some(config) = sharding else {
            let exists = self.core.shared().catalog().config(&name).is_some();
            return if exists && !if_not_exists {
                Err(EngineError::CollectionExists(name))
            } else {
                Ok(())
            };
        };
        let result = self
            .change_catalog(name, move |current| match current {
                Some(_) => Err(EngineError::CollectionExists(shown)),
                None => Ok(entry_of(&config)),
            })
            .await;
        match result {
            Err(EngineError::CollectionExists(_)) if if_not_exists => Ok(()),
            other => other,
        }
    }

    async fn change_catalog(
        &self,
        collection: String,
        decide: impl FnOnce(Option<&router::ShardingConfig>) -> Result<CollectionEntry, EngineError>
        + Send
        + 'static,
    ) -> Result<(), EngineError> {
        let catalog_owner = ExecutorIndex::new(0);
        if self.core.index() == catalog_owner {
            return self.core.change_catalog(collection, decide).await;
        }
        self.core.metrics().mesh_call();
        self.ctx
            .mesh
            .call(catalog_owner, move |core| async move {
                core.change_catalog(collection, decide).await
            })
            .await?
    }
}

/// `SHOW fragment_counters`: statements and rows scanned per fragment since start, the
/// evidence that routing sent a statement only where it had to.
pub const FRAGMENT_COUNTERS: &str = "fragment_counters";

/// `SHOW STATS`: every metric of the node as (name, labels, value) rows, the same numbers as
/// the Prometheus endpoint.
pub const SHOW_STATS: &str = "stats";

impl Drop for Session {
    fn drop(&mut self) {
        self.core.metrics().connection_closed();
    }
}

impl Session {
    /// Counts a finished statement and logs it when it is slow.
    fn finished(&self, statement: &Prepared, started: std::time::Instant, ok: bool) {
        let kind = crate::metrics::StatementKind::of(&statement.statement);
        let elapsed = started.elapsed();
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

    async fn parse(&mut self, sql: &str) -> Result<Vec<Statement>, PgError> {
        let limit = crate::metrics::limits::SLOW_STATEMENT_TEXT_CHARS_MAX;
        self.last_sql = Arc::from(sql.chars().take(limit + 1).collect::<String>().as_str());
        query::parse(sql).map_err(|e| engine_error(&EngineError::Plan(e)))
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
            return Err(PgError::fatal(
                SqlState::ADMIN_SHUTDOWN,
                "terminating connection: the node is shutting down",
            ));
        }
        let _running = Running::start(self.core.shared());
        let started = std::time::Instant::now();
        self.last_route.borrow_mut().take();
        let result = match self.bind(statement, params) {
            Ok(bound) => self.run(bound, sink).await,
            Err(e) => Err(e),
        };
        self.finished(statement, started, result.is_ok());
        if let Err(e) = &result
            && not_client_caused(e)
        {
            tracing::error!(error = %e, "statement failed on the node's side");
        }
        result.map_err(|e| engine_error(&e))
    }

    fn transaction_status(&self) -> TransactionStatus {
        TransactionStatus::Idle
    }
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

fn internal(what: &'static str) -> EngineError {
    EngineError::Exec(query::ExecError::WrongStatement { what })
}

fn entry_of(config: &router::ShardingConfig) -> CollectionEntry {
    CollectionEntry {
        sharding: serde_json::from_str(&config.to_json()).unwrap_or(serde_json::Value::Null),
    }
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

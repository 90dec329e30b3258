//! Typed plans and the translation from sqlparser's AST to them.
//!
//! Identifiers follow PostgreSQL: unquoted ones fold to lower case, double-quoted ones keep
//! their case; JSON field names are then matched case-sensitively. `id()` is the document id
//! in any expression; in an INSERT column list `id` names the id; every other name is a
//! top-level field and dotted names walk objects. When the FROM clause gives the collection
//! an alias (`FROM users u`), a leading `u.` on a column is the alias and is dropped.

use std::cell::RefCell;
use std::fmt;

use router::ShardingConfig;
use sqlparser::ast;

use crate::copy::{CopyFormat, CopyKind};
use crate::error::PlanError;
use crate::expr::{
    BinaryOp, Expr, FieldPath, JsonStep, Literal, ScalarFunc, SessionNames, SessionValue, UnaryOp,
};
use crate::limits::{EXPR_DEPTH_MAX, IN_LIST_MAX, INSERT_ROWS_MAX, PARAMS_MAX, PATH_STEPS_MAX};
use crate::types::SqlType;

/// A collection's name, folded per PostgreSQL identifier rules.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct CollectionName(String);

impl CollectionName {
    /// A collection name as already folded.
    pub fn new(name: impl Into<String>) -> CollectionName {
        CollectionName(name.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as a quoted SQL identifier, for statement text node writes itself.
    pub fn quoted(&self) -> String {
        quote_ident(&self.0)
    }
}

/// `name` as a double-quoted SQL identifier (case kept, `"` doubled).
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl fmt::Display for CollectionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One planned statement.
#[derive(Clone, PartialEq, Debug)]
pub enum Statement {
    /// `SELECT … FROM c …` (or a FROM-less `SELECT 1`).
    Select(Select),
    /// `INSERT INTO c …`
    Insert(Insert),
    /// `UPDATE c SET … WHERE …`
    Update(Update),
    /// `DELETE FROM c WHERE …`
    Delete(Delete),
    /// `CREATE TABLE c () [WITH (sharding = '<json>')]`
    CreateCollection {
        /// The collection.
        collection: CollectionName,
        /// The content configuration, validated by router.
        sharding: Option<ShardingConfig>,
        /// `IF NOT EXISTS`
        if_not_exists: bool,
    },
    /// `ALTER TABLE c SET (sharding = '<json>')`
    AlterSharding {
        /// The collection.
        collection: CollectionName,
        /// The new configuration, validated by router (whether the change is allowed is
        /// `router::check_change`'s question, asked by node against the current one).
        sharding: ShardingConfig,
    },
    /// `SELECT * FROM verify_sharding('c')`: the ids of documents violating the collection's
    /// content configuration (one column, `id` text).
    VerifySharding {
        /// The collection.
        collection: CollectionName,
    },
    /// `EXPLAIN [ANALYZE] <statement>`
    Explain {
        /// `ANALYZE`: run the statement and report rows scanned and time per fragment.
        analyze: bool,
        /// The explained statement.
        inner: Box<Statement>,
    },
    /// `SHOW FRAGMENTS`
    ShowFragments,
    /// `SHOW COLLECTIONS` (also `SHOW TABLES`): every collection that has documents or a
    /// sharding configuration.
    ShowCollections,
    /// `SHOW SHARDING [c]`
    ShowSharding {
        /// One collection, or every collection.
        collection: Option<CollectionName>,
    },
    /// `SHOW <setting>` (lower-cased, dotted parts joined with `.`).
    Show {
        /// The setting's name.
        name: String,
    },
    /// `SET [SESSION|LOCAL] name = value` / `TO value`: accepted so drivers can send them.
    Set {
        /// The setting's name, lower-cased.
        name: String,
        /// The value as text.
        value: String,
    },
    /// `ALTER FRAGMENT $n MOVE TO NODE m`: ask the cluster's coordinator to plan the move
    /// (recognised before sqlparser, see `alter_fragment`).
    MoveFragment {
        /// The fragment's id.
        fragment: u32,
        /// The destination node's id.
        node: u32,
    },
    /// `ALTER CLUSTER REMOVE NODE n`: ask the coordinator to drop a stopped member that owns
    /// no fragments from the cluster (recognised before sqlparser, see `alter_fragment`).
    RemoveNode {
        /// The member's node id.
        node: u32,
    },
    /// `ALTER FRAGMENT $n SPLIT [AT s]`: ask the coordinator to split the fragment at shard
    /// `at` (`None`: the middle of its range) into two new fragments on the same node.
    SplitFragment {
        /// The fragment's id.
        fragment: u32,
        /// The first shard of the upper part.
        at: Option<u32>,
    },
    /// `ALTER FRAGMENT $l MERGE WITH $r`: ask the coordinator to merge two adjacent fragments
    /// of one node into one new fragment.
    MergeFragments {
        /// The lower fragment.
        left: u32,
        /// The upper fragment (starting where `left` ends).
        right: u32,
    },
    /// `RESET name` / `RESET ALL` (`None`): settings back to their defaults.
    Reset {
        /// The setting, lower-cased; `None` for every one.
        name: Option<String>,
    },
    /// `DEALLOCATE [PREPARE] name` / `DEALLOCATE ALL` (`None`): the connection drops
    /// prepared statements (node's wire layer holds them).
    Deallocate {
        /// The statement's name as the client gave it to Parse; `None` for every one.
        name: Option<String>,
    },
    /// `DISCARD ALL`: prepared statements, portals and settings dropped, as a connection
    /// pooler resets a connection between clients.
    DiscardAll,
    /// `COPY c [(id, doc)] FROM STDIN [WITH (…)]`: node reads the rows from the client's
    /// CopyData messages and inserts them in batches.
    CopyFrom {
        /// The collection written.
        collection: CollectionName,
        /// The columns in the order the input gives them (`id` and `doc`, each once).
        columns: [CopyColumn; 2],
        /// The data format.
        format: CopyFormat,
    },
    /// `COPY c [(columns)] TO STDOUT` or `COPY (SELECT …) TO STDOUT`: the query's rows sent in
    /// CopyData messages.
    CopyTo {
        /// The SELECT whose rows are sent (a [`Statement::Select`]).
        query: Box<Statement>,
        /// The data format.
        format: CopyFormat,
    },
    /// `TRUNCATE c [, …]`: every document of each collection deleted (node deletes them in
    /// rounds, see `node::engine::session`).
    Truncate {
        /// The collections, each once, in the order written.
        collections: Vec<CollectionName>,
    },
    /// `DROP TABLE [IF EXISTS] c [, …]`: every document deleted as by TRUNCATE, then the
    /// collection's sharding configuration removed.
    DropCollections {
        /// The collections, each once, in the order written.
        collections: Vec<CollectionName>,
        /// `IF EXISTS`: a collection without documents or configuration is a notice, not
        /// 42P01.
        if_exists: bool,
    },
    /// `BEGIN` / `START TRANSACTION`
    Begin,
    /// `COMMIT` / `END`
    Commit,
    /// `ROLLBACK`
    Rollback,
}

impl Statement {
    /// The collection the statement is about (node looks up its sharding configuration by
    /// it); the inner statement's for EXPLAIN and COPY TO; the first for TRUNCATE and DROP
    /// TABLE of several.
    pub fn collection(&self) -> Option<&CollectionName> {
        match self {
            Statement::Select(s) => s.collection.as_ref(),
            Statement::Insert(i) => Some(&i.collection),
            Statement::Update(u) => Some(&u.collection),
            Statement::Delete(d) => Some(&d.collection),
            Statement::CreateCollection { collection, .. }
            | Statement::AlterSharding { collection, .. }
            | Statement::VerifySharding { collection } => Some(collection),
            Statement::ShowSharding { collection } => collection.as_ref(),
            Statement::Explain { inner, .. } | Statement::CopyTo { query: inner, .. } => {
                inner.collection()
            }
            Statement::CopyFrom { collection, .. } => Some(collection),
            Statement::Truncate { collections }
            | Statement::DropCollections { collections, .. } => collections.first(),
            Statement::ShowFragments
            | Statement::ShowCollections
            | Statement::Show { .. }
            | Statement::MoveFragment { .. }
            | Statement::RemoveNode { .. }
            | Statement::SplitFragment { .. }
            | Statement::MergeFragments { .. }
            | Statement::Set { .. }
            | Statement::Reset { .. }
            | Statement::Deallocate { .. }
            | Statement::DiscardAll
            | Statement::Begin
            | Statement::Commit
            | Statement::Rollback => None,
        }
    }

    /// The columns of the rows this statement returns (for RowDescription), or `None` when it
    /// returns only a command tag. Node fills the rows of SHOW and verify_sharding.
    ///
    /// - SELECT: its projection; INSERT/UPDATE/DELETE: their RETURNING list, if any;
    /// - EXPLAIN: `QUERY PLAN text`;
    /// - `verify_sharding`: `id text, reason text`;
    /// - SHOW FRAGMENTS: `fragment text, shards text, executor text, documents int8, bytes int8`;
    /// - SHOW COLLECTIONS: `collection text, documents int8, sharding json`;
    /// - SHOW SHARDING: `collection text, sharding json, state text` (`in force`, or
    ///   `pending` on a cluster until every member installed it); `SHOW x`: `x text`.
    pub fn result_columns(&self) -> Option<Vec<OutputColumn>> {
        let col = |name: &str, ty| OutputColumn { name: name.to_owned(), ty };
        let returning = |r: &[Output]| {
            if r.is_empty() { None } else { Some(r.iter().map(|o| o.column.clone()).collect()) }
        };
        match self {
            Statement::Select(s) => Some(s.columns()),
            Statement::Insert(i) => returning(&i.returning),
            Statement::Update(u) => returning(&u.returning),
            Statement::Delete(d) => returning(&d.returning),
            Statement::Explain { .. } => Some(vec![col("QUERY PLAN", SqlType::Text)]),
            Statement::VerifySharding { .. } => {
                Some(vec![col("id", SqlType::Text), col("reason", SqlType::Text)])
            }
            Statement::ShowFragments => Some(vec![
                col("fragment", SqlType::Text),
                col("shards", SqlType::Text),
                col("executor", SqlType::Text),
                col("documents", SqlType::Int8),
                col("bytes", SqlType::Int8),
            ]),
            Statement::ShowCollections => Some(vec![
                col("collection", SqlType::Text),
                col("documents", SqlType::Int8),
                col("sharding", SqlType::Json),
            ]),
            Statement::ShowSharding { .. } => Some(vec![
                col("collection", SqlType::Text),
                col("sharding", SqlType::Json),
                col("state", SqlType::Text),
            ]),
            Statement::Show { name } => Some(vec![col(name, SqlType::Text)]),
            Statement::CreateCollection { .. }
            | Statement::AlterSharding { .. }
            | Statement::CopyFrom { .. }
            | Statement::CopyTo { .. }
            | Statement::Truncate { .. }
            | Statement::DropCollections { .. }
            | Statement::MoveFragment { .. }
            | Statement::RemoveNode { .. }
            | Statement::SplitFragment { .. }
            | Statement::MergeFragments { .. }
            | Statement::Set { .. }
            | Statement::Reset { .. }
            | Statement::Deallocate { .. }
            | Statement::DiscardAll
            | Statement::Begin
            | Statement::Commit
            | Statement::Rollback => None,
        }
    }
}

/// A column of `COPY … FROM STDIN`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CopyColumn {
    /// The document id (text).
    Id,
    /// The whole document (a JSON object as text).
    Doc,
}

impl CopyColumn {
    /// The column's name, as errors name it.
    pub fn name(self) -> &'static str {
        match self {
            CopyColumn::Id => "id",
            CopyColumn::Doc => "doc",
        }
    }
}

/// The right side of `IS [NOT] DISTINCT FROM`: an expression, or TRUE/FALSE for `IS [NOT]
/// TRUE/FALSE`.
enum Against<'a> {
    Expr(&'a ast::Expr),
    Bool(bool),
}

/// An output column: its name and type (see [`crate::types`] for the typing rule).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OutputColumn {
    /// The column name, as PostgreSQL would name it.
    pub name: String,
    /// The column type.
    pub ty: SqlType,
}

/// An output column computed by an expression per row.
#[derive(Clone, PartialEq, Debug)]
pub struct Output {
    /// Name and type.
    pub column: OutputColumn,
    /// The expression.
    pub expr: Expr,
}

/// A planned SELECT.
#[derive(Clone, PartialEq, Debug)]
pub struct Select {
    /// The collection read (`None` for `SELECT 1`).
    pub collection: Option<CollectionName>,
    /// The WHERE clause.
    pub filter: Option<Expr>,
    /// Plain rows or aggregates.
    pub shape: SelectShape,
    /// ORDER BY keys, most significant first. Ties are broken by document id (plain rows) so
    /// results do not depend on how documents are spread over fragments.
    pub order_by: Vec<OrderKey>,
    /// LIMIT
    pub limit: Option<Count>,
    /// OFFSET
    pub offset: Option<Count>,
}

impl Select {
    /// The result's columns.
    pub fn columns(&self) -> Vec<OutputColumn> {
        self.shape.outputs().iter().map(|o| o.column.clone()).collect()
    }

    /// This SELECT with the session's user and database in place of `current_user` and
    /// `current_database()` (only a SELECT without FROM holds them); borrowed, not copied,
    /// when it names neither (`SELECT 1`, which poolers send to check a connection).
    pub fn with_session(&self, names: &SessionNames) -> std::borrow::Cow<'_, Select> {
        let mut names_one = false;
        for o in self.shape.outputs() {
            o.expr.walk(&mut |e| names_one |= matches!(e, Expr::Session(_)));
        }
        if !names_one {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut select = self.clone();
        if let SelectShape::Rows { outputs } = &mut select.shape {
            for o in outputs {
                let expr = std::mem::replace(&mut o.expr, Expr::Literal(Literal::Null));
                o.expr = expr.map(&mut |e| match e {
                    Expr::Session(SessionValue::User) => {
                        Expr::Literal(Literal::Str(names.user.clone()))
                    }
                    Expr::Session(SessionValue::Database) => {
                        Expr::Literal(Literal::Str(names.database.clone()))
                    }
                    other => other,
                });
            }
        }
        std::borrow::Cow::Owned(select)
    }
}

/// What a SELECT produces.
#[derive(Clone, PartialEq, Debug)]
pub enum SelectShape {
    /// One output row per matching document.
    Rows {
        /// The projection.
        outputs: Vec<Output>,
    },
    /// One output row per group (one row in all without GROUP BY).
    Aggregate {
        /// GROUP BY expressions.
        group_by: Vec<Expr>,
        /// The aggregates computed per group.
        aggregates: Vec<Aggregate>,
        /// The projection: expressions over the group's keys and aggregate results
        /// ([`Expr::GroupKey`], [`Expr::AggregateResult`]) and constants.
        outputs: Vec<Output>,
        /// HAVING, over the same values as `outputs`: groups for which it is not true are
        /// left out.
        having: Option<Expr>,
    },
}

impl SelectShape {
    /// The output columns.
    pub fn outputs(&self) -> &[Output] {
        match self {
            SelectShape::Rows { outputs } | SelectShape::Aggregate { outputs, .. } => outputs,
        }
    }
}

/// An aggregate function.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AggregateFunc {
    /// `count(*)` / `count(e)` (non-NULL values)
    Count,
    /// `count(DISTINCT e)`: distinct non-NULL values, as `=` tells them apart (`1` and
    /// `1.0` are one value)
    CountDistinct,
    /// `sum(DISTINCT e)`: the sum of the distinct numbers
    SumDistinct,
    /// `avg(DISTINCT e)`: the mean of the distinct numbers
    AvgDistinct,
    /// `sum(e)` over numbers
    Sum,
    /// `min(e)`
    Min,
    /// `max(e)`
    Max,
    /// `avg(e)` over numbers
    Avg,
    /// `jsonb_agg(e [ORDER BY …])` (also `json_agg`): every value (NULL as JSON null) in a
    /// JSON array
    JsonAgg,
    /// `jsonb_object_agg(k, v [ORDER BY …])` (also `json_object_agg`): a JSON object, a later
    /// value replacing an earlier one of the same key
    JsonObjectAgg,
    /// `string_agg(e, delimiter [ORDER BY …])`: the non-NULL values as text, each after the
    /// delimiter of its row (the first without)
    StringAgg,
}

impl AggregateFunc {
    fn from_name(name: &str) -> Option<AggregateFunc> {
        Some(match name {
            "count" => AggregateFunc::Count,
            "sum" => AggregateFunc::Sum,
            "min" => AggregateFunc::Min,
            "max" => AggregateFunc::Max,
            "avg" => AggregateFunc::Avg,
            "jsonb_agg" | "json_agg" => AggregateFunc::JsonAgg,
            "jsonb_object_agg" | "json_object_agg" => AggregateFunc::JsonObjectAgg,
            "string_agg" => AggregateFunc::StringAgg,
            _ => return None,
        })
    }

    /// Whether it keeps every value (`jsonb_agg`, `jsonb_object_agg`, `string_agg`): its
    /// state is the list of values, bounded per query by `limits::AGGREGATED_BYTES_MAX`.
    pub fn collects(self) -> bool {
        matches!(
            self,
            AggregateFunc::JsonAgg | AggregateFunc::JsonObjectAgg | AggregateFunc::StringAgg
        )
    }

    /// Whether it aggregates distinct values (`count(DISTINCT e)`, …): its state is the set
    /// of values, bounded per query by `limits::DISTINCT_VALUES_MAX`.
    pub fn is_distinct(self) -> bool {
        matches!(
            self,
            AggregateFunc::CountDistinct | AggregateFunc::SumDistinct | AggregateFunc::AvgDistinct
        )
    }

    /// The SQL name.
    pub fn name(self) -> &'static str {
        match self {
            AggregateFunc::Count | AggregateFunc::CountDistinct => "count",
            AggregateFunc::Sum | AggregateFunc::SumDistinct => "sum",
            AggregateFunc::Min => "min",
            AggregateFunc::Max => "max",
            AggregateFunc::Avg | AggregateFunc::AvgDistinct => "avg",
            AggregateFunc::JsonAgg => "jsonb_agg",
            AggregateFunc::JsonObjectAgg => "jsonb_object_agg",
            AggregateFunc::StringAgg => "string_agg",
        }
    }
}

/// One aggregate call.
#[derive(Clone, PartialEq, Debug)]
pub struct Aggregate {
    /// The function.
    pub func: AggregateFunc,
    /// The argument (`None` for `count(*)`; the key of `jsonb_object_agg`).
    pub arg: Option<Expr>,
    /// The second argument: `string_agg`'s delimiter, `jsonb_object_agg`'s value.
    pub arg2: Option<Expr>,
    /// `ORDER BY` inside the call (collecting aggregates only): the order of the values kept.
    /// Every key is an [`OrderTarget::Expr`] over the document.
    pub order_by: Vec<OrderKey>,
    /// The result type.
    pub ty: SqlType,
    /// `FILTER (WHERE …)`: only documents for which it is true are aggregated.
    pub filter: Option<Expr>,
}

/// One ORDER BY key.
#[derive(Clone, PartialEq, Debug)]
pub struct OrderKey {
    /// What is sorted on.
    pub target: OrderTarget,
    /// `DESC`
    pub descending: bool,
    /// Whether NULLs come first (PostgreSQL default: first for DESC, last for ASC).
    pub nulls_first: bool,
}

/// What an ORDER BY key sorts on.
#[derive(Clone, PartialEq, Debug)]
pub enum OrderTarget {
    /// The n-th output column.
    Output(usize),
    /// An expression over the document (plain-row queries only).
    Expr(Expr),
}

/// A LIMIT or OFFSET count.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Count {
    /// A number.
    Value(u64),
    /// Parameter `$n` (0-based), bound later.
    Param(usize),
}

/// A planned INSERT.
#[derive(Clone, PartialEq, Debug)]
pub struct Insert {
    /// The collection.
    pub collection: CollectionName,
    /// The rows, in order.
    pub rows: Vec<InsertRow>,
    /// What happens when a row's id exists.
    pub on_conflict: OnConflict,
    /// `RETURNING` columns, evaluated over the written document.
    pub returning: Vec<Output>,
}

/// One row of an INSERT.
#[derive(Clone, PartialEq, Debug)]
pub struct InsertRow {
    /// The id expression (text).
    pub id: Expr,
    /// The document.
    pub body: InsertBody,
}

/// How an INSERT row gives its document.
#[derive(Clone, PartialEq, Debug)]
pub enum InsertBody {
    /// `VALUES ('<id>', '<json object>')`: the whole document as JSON text or json.
    Document(Expr),
    /// `INSERT INTO c (id, f1, f2) VALUES (…)`: top-level fields.
    Fields(Vec<(String, Expr)>),
}

/// `ON CONFLICT (id) …`
#[derive(Clone, PartialEq, Debug)]
pub enum OnConflict {
    /// No clause: a duplicate id is an error (23505).
    Error,
    /// `DO NOTHING`
    DoNothing,
    /// `DO UPDATE SET … [WHERE …]`, over the existing document with `excluded.f` the new row.
    DoUpdate {
        /// The assignments.
        assignments: Vec<Assignment>,
        /// Only update when this holds.
        filter: Option<Expr>,
    },
}

/// `SET path = expr`
#[derive(Clone, PartialEq, Debug)]
pub struct Assignment {
    /// The field set (dotted paths create missing objects).
    pub path: FieldPath,
    /// Its new value, computed from the document as it was before the statement; `None` for
    /// `SET f = DEFAULT`, which removes the field (a document has no default but absence).
    pub expr: Option<Expr>,
}

impl Assignment {
    /// `path = expr` (`DEFAULT` for a removal), as EXPLAIN shows it.
    pub fn shown(&self) -> String {
        match &self.expr {
            Some(e) => format!("{} = {e}", self.path),
            None => format!("{} = DEFAULT", self.path),
        }
    }
}

/// A planned UPDATE.
#[derive(Clone, PartialEq, Debug)]
pub struct Update {
    /// The collection.
    pub collection: CollectionName,
    /// The assignments.
    pub assignments: Vec<Assignment>,
    /// WHERE
    pub filter: Option<Expr>,
    /// `RETURNING` columns, evaluated over the new document.
    pub returning: Vec<Output>,
}

/// A planned DELETE.
#[derive(Clone, PartialEq, Debug)]
pub struct Delete {
    /// The collection.
    pub collection: CollectionName,
    /// WHERE
    pub filter: Option<Expr>,
    /// `RETURNING` columns, evaluated over the deleted document.
    pub returning: Vec<Output>,
    /// Most documents deleted per fragment (the first ones the scan meets); `None` for a
    /// DELETE as written. Only node's TRUNCATE sets it: it deletes in rounds.
    pub per_fragment_max: Option<usize>,
}

/// Plans every statement of an AST.
pub(crate) fn plan_statements(stmts: Vec<ast::Statement>) -> Result<Vec<Statement>, PlanError> {
    stmts
        .into_iter()
        .map(|s| plan_statement(&s).and_then(refuse_misplaced_session_values))
        .collect()
}

fn unsupported<T>(construct: impl Into<String>) -> Result<T, PlanError> {
    Err(PlanError::unsupported(construct))
}

/// An identifier's name after PostgreSQL folding.
fn ident_name(ident: &ast::Ident) -> String {
    match ident.quote_style {
        None => ident.value.to_lowercase(),
        Some(_) => ident.value.clone(),
    }
}

fn object_name_parts(name: &ast::ObjectName) -> Result<Vec<String>, PlanError> {
    name.0
        .iter()
        .map(|part| match part {
            ast::ObjectNamePart::Identifier(ident) => Ok(ident_name(ident)),
            ast::ObjectNamePart::Function(_) => unsupported("function in an object name"),
        })
        .collect()
}

fn collection_name(name: &ast::ObjectName) -> Result<CollectionName, PlanError> {
    let parts = object_name_parts(name)?;
    match parts.as_slice() {
        [one] | [_, one] if one.starts_with(crate::limits::RESERVED_COLLECTION_PREFIX) => {
            Err(PlanError::Invalid {
                what: format!(
                    "collection name {one} is reserved: names starting with {} are Tessera's own",
                    crate::limits::RESERVED_COLLECTION_PREFIX
                ),
            })
        }
        [one] => Ok(CollectionName(one.clone())),
        // `public.c` is accepted as `c`: drivers and tools qualify with the default schema.
        [schema, one] if schema == "public" => Ok(CollectionName(one.clone())),
        [schema, _] if is_catalog_schema(schema) => Err(catalog_refused(name)),
        _ => unsupported(format!("qualified name {name}")),
    }
}

/// PostgreSQL's system catalog schemas, which psql's `\d` commands and drivers' metadata
/// calls read.
fn is_catalog_schema(schema: &str) -> bool {
    schema == "pg_catalog" || schema == "information_schema"
}

fn catalog_refused(name: &ast::ObjectName) -> PlanError {
    PlanError::unsupported(format!(
        "the system catalog {name} (psql's \\d commands read it): Tessera keeps no catalogs; \
         SHOW COLLECTIONS, SHOW SHARDING and SHOW FRAGMENTS describe its data"
    ))
}

/// Refuses a FROM item that reads a system catalog, before a JOIN among catalogs is refused
/// as a JOIN, so a catalog query (psql's `\d`) is told what is missing.
fn refuse_catalogs(table: &ast::TableWithJoins) -> Result<(), PlanError> {
    let relations = std::iter::once(&table.relation).chain(table.joins.iter().map(|j| &j.relation));
    for relation in relations {
        if let ast::TableFactor::Table { name, .. } = relation
            && let Ok(parts) = object_name_parts(name)
            && let [schema, _] = parts.as_slice()
            && is_catalog_schema(schema)
        {
            return Err(catalog_refused(name));
        }
    }
    Ok(())
}

/// `current_user` and `current_database()` are put in by node for a SELECT without FROM
/// (`Select::with_session`), evaluated on the session's own executor. Anywhere else the
/// expression may be evaluated on another executor or node, which knows no session, so it is
/// refused by name.
fn refuse_misplaced_session_values(stmt: Statement) -> Result<Statement, PlanError> {
    let constant_select =
        |s: &Statement| matches!(s, Statement::Select(sel) if sel.collection.is_none());
    let allowed = match &stmt {
        Statement::Explain { inner, .. } => constant_select(inner),
        other => constant_select(other),
    };
    if allowed {
        return Ok(stmt);
    }
    let mut found = false;
    crate::bind::visit_statement(&stmt, &mut |e, _| {
        e.walk(&mut |x| found |= matches!(x, Expr::Session(_)));
    });
    if found {
        return unsupported(
            "current_user or current_database() in a statement that reads or writes documents \
             (SELECT them without FROM)",
        );
    }
    Ok(stmt)
}

fn plan_statement(stmt: &ast::Statement) -> Result<Statement, PlanError> {
    match stmt {
        ast::Statement::Query(q) => plan_query(q),
        ast::Statement::Insert(insert) => plan_insert(insert).map(Statement::Insert),
        ast::Statement::Update(update) => plan_update(update).map(Statement::Update),
        ast::Statement::Delete(delete) => plan_delete(delete).map(Statement::Delete),
        ast::Statement::CreateTable(create) => plan_create(create),
        ast::Statement::AlterTable(alter) => plan_alter(alter),
        ast::Statement::Explain {
            analyze,
            statement,
            verbose,
            query_plan,
            estimate,
            format,
            options,
            ..
        } => {
            if *verbose || *query_plan || *estimate || format.is_some() || options.is_some() {
                return unsupported("EXPLAIN options other than ANALYZE");
            }
            let inner = plan_statement(statement)?;
            if matches!(inner, Statement::Explain { .. }) {
                return unsupported("EXPLAIN of EXPLAIN");
            }
            if matches!(inner, Statement::CopyFrom { .. } | Statement::CopyTo { .. }) {
                return unsupported("EXPLAIN of COPY");
            }
            if matches!(inner, Statement::Truncate { .. } | Statement::DropCollections { .. }) {
                return unsupported("EXPLAIN of TRUNCATE or DROP TABLE");
            }
            Ok(Statement::Explain { analyze: *analyze, inner: Box::new(inner) })
        }
        ast::Statement::Copy { source, to, target, options, legacy_options, values } => {
            if !values.is_empty() {
                return unsupported("COPY data in the statement text (send it as COPY data)");
            }
            let format = copy_format(options, legacy_options)?;
            if *to {
                plan_copy_to(source, target, format)
            } else {
                plan_copy_from(source, target, format)
            }
        }
        ast::Statement::Truncate(truncate) => plan_truncate(truncate),
        ast::Statement::Drop {
            object_type: ast::ObjectType::Table,
            if_exists,
            names,
            purge: false,
            temporary: false,
            table: None,
            ..
        } => Ok(Statement::DropCollections {
            collections: distinct_collections(names.iter())?,
            if_exists: *if_exists,
        }),
        ast::Statement::ShowVariable { variable } => plan_show(variable),
        // MySQL's spelling, which newcomers type; any clause on it stays unsupported.
        ast::Statement::ShowTables { .. } if stmt.to_string() == "SHOW TABLES" => {
            Ok(Statement::ShowCollections)
        }
        ast::Statement::StartTransaction { statements, .. } if statements.is_empty() => {
            Ok(Statement::Begin)
        }
        ast::Statement::Commit { chain: false, .. } => Ok(Statement::Commit),
        ast::Statement::Rollback { chain: false, savepoint: None } => Ok(Statement::Rollback),
        ast::Statement::Set(set) => plan_set(set),
        ast::Statement::Reset(reset) => Ok(Statement::Reset {
            name: match &reset.reset {
                ast::Reset::ALL => None,
                ast::Reset::ConfigurationParameter(name) => {
                    Some(object_name_parts(name)?.join("."))
                }
                ast::Reset::SessionAuthorization => {
                    return unsupported("RESET SESSION AUTHORIZATION");
                }
            },
        }),
        ast::Statement::Deallocate { name, .. } => Ok(Statement::Deallocate {
            // `ALL` unquoted is every statement; quoted, a statement named "ALL".
            name: if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
                None
            } else {
                Some(ident_name(name))
            },
        }),
        ast::Statement::Discard { object_type: ast::DiscardObject::ALL } => {
            Ok(Statement::DiscardAll)
        }
        other => unsupported(statement_construct(other)),
    }
}

/// COPY's options, new style (`WITH (FORMAT csv, HEADER, …)`) and old (`CSV HEADER`,
/// `DELIMITER AS ','`, `NULL AS ''`), which psql's `\copy` passes on as written.
fn copy_format(
    options: &[ast::CopyOption],
    legacy: &[ast::CopyLegacyOption],
) -> Result<CopyFormat, PlanError> {
    use ast::{CopyLegacyCsvOption as LC, CopyLegacyOption as L, CopyOption as O};
    let mut kind = CopyKind::Text;
    let (mut delimiter, mut null, mut header, mut quote, mut escape) =
        (None, None, None, None, None);
    for option in options {
        match option {
            O::Format(name) => {
                kind = match ident_name(name).as_str() {
                    "text" => CopyKind::Text,
                    "csv" => CopyKind::Csv,
                    "binary" => return unsupported("COPY in binary format (use text or csv)"),
                    other => {
                        return Err(PlanError::Invalid {
                            what: format!("COPY format \"{other}\" not recognized"),
                        });
                    }
                }
            }
            O::Delimiter(c) => delimiter = Some(*c),
            O::Null(s) => null = Some(s.clone()),
            O::Header(h) => header = Some(*h),
            O::Quote(c) => quote = Some(*c),
            O::Escape(c) => escape = Some(*c),
            O::Encoding(e) if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {
            }
            O::Encoding(e) => {
                return unsupported(format!("COPY encoding {e} (Tessera reads and writes UTF8)"));
            }
            O::Freeze(_) => return unsupported("COPY option FREEZE"),
            O::ForceQuote(_) | O::ForceNotNull(_) | O::ForceNull(_) => {
                return unsupported("COPY options FORCE_QUOTE, FORCE_NOT_NULL and FORCE_NULL");
            }
        }
    }
    for option in legacy {
        match option {
            L::Csv(csv) => {
                kind = CopyKind::Csv;
                for o in csv {
                    match o {
                        LC::Header => header = Some(true),
                        LC::Quote(c) => quote = Some(*c),
                        LC::Escape(c) => escape = Some(*c),
                        LC::ForceQuote(_) | LC::ForceNotNull(_) => {
                            return unsupported("COPY options FORCE QUOTE and FORCE NOT NULL");
                        }
                    }
                }
            }
            L::Delimiter(c) => delimiter = Some(*c),
            L::Null(s) => null = Some(s.clone()),
            L::Header => header = Some(true),
            L::Binary => return unsupported("COPY in binary format (use text or csv)"),
            _ => {
                return unsupported(
                    "COPY option (Tessera takes FORMAT, DELIMITER, NULL, HEADER, QUOTE, ESCAPE, ENCODING)",
                );
            }
        }
    }
    let mut format = match kind {
        CopyKind::Text => CopyFormat::text(),
        CopyKind::Csv => CopyFormat::csv(),
    };
    let one_byte = |c: char, what: &str| -> Result<u8, PlanError> {
        u8::try_from(c).ok().filter(u8::is_ascii).ok_or_else(|| PlanError::Unsupported {
            construct: format!("COPY {what} that is not a single one-byte character"),
        })
    };
    if let Some(c) = delimiter {
        format.delimiter = one_byte(c, "delimiter")?;
    }
    if let Some(n) = null {
        format.null = n;
    }
    format.header = header.unwrap_or(false);
    if kind == CopyKind::Text && (quote.is_some() || escape.is_some()) {
        return Err(PlanError::Invalid {
            what: "COPY QUOTE and ESCAPE are available only in CSV mode".to_owned(),
        });
    }
    if let Some(c) = quote {
        format.quote = one_byte(c, "quote")?;
        format.escape = format.quote;
    }
    if let Some(c) = escape {
        format.escape = one_byte(c, "escape")?;
    }
    format.check().map_err(|what| PlanError::Invalid { what })?;
    Ok(format)
}

/// Where COPY reads or writes other than the client: refused, pointing at psql's `\copy`.
fn copy_target(target: &ast::CopyTarget, stdio: ast::CopyTarget) -> Result<(), PlanError> {
    match target {
        t if *t == stdio => Ok(()),
        ast::CopyTarget::File { .. } => unsupported(
            "COPY to or from a file on the server (use psql's \\copy, which reads and writes the file on the client)",
        ),
        ast::CopyTarget::Program { .. } => unsupported("COPY … PROGRAM"),
        _ => unsupported("COPY FROM STDOUT / TO STDIN"),
    }
}

fn plan_copy_from(
    source: &ast::CopySource,
    target: &ast::CopyTarget,
    format: CopyFormat,
) -> Result<Statement, PlanError> {
    copy_target(target, ast::CopyTarget::Stdin)?;
    let ast::CopySource::Table { table_name, columns } = source else {
        return unsupported("COPY (query) FROM");
    };
    let collection = collection_name(table_name)?;
    let mut order = Vec::with_capacity(2);
    for column in columns {
        let c = match ident_name(column).as_str() {
            "id" => CopyColumn::Id,
            "doc" => CopyColumn::Doc,
            other => {
                return unsupported(format!(
                    "COPY into column {other:?} (COPY loads whole documents: columns id and doc)"
                ));
            }
        };
        if order.contains(&c) {
            return Err(PlanError::Invalid {
                what: format!("column \"{}\" specified more than once", c.name()),
            });
        }
        order.push(c);
    }
    let columns = match order.as_slice() {
        [] | [CopyColumn::Id, CopyColumn::Doc] => [CopyColumn::Id, CopyColumn::Doc],
        [CopyColumn::Doc, CopyColumn::Id] => [CopyColumn::Doc, CopyColumn::Id],
        _ => return unsupported("COPY without both columns id and doc"),
    };
    Ok(Statement::CopyFrom { collection, columns, format })
}

fn plan_copy_to(
    source: &ast::CopySource,
    target: &ast::CopyTarget,
    format: CopyFormat,
) -> Result<Statement, PlanError> {
    copy_target(target, ast::CopyTarget::Stdout)?;
    let query = match source {
        ast::CopySource::Query(q) => plan_query(q)?,
        ast::CopySource::Table { table_name, columns } => {
            // `COPY c (a, b) TO STDOUT` is `SELECT a, b FROM c`, with `id` as `id()`.
            let list = if columns.is_empty() {
                "*".to_owned()
            } else {
                columns
                    .iter()
                    .map(|c| if ident_name(c) == "id" { "id()".to_owned() } else { c.to_string() })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let text = format!("SELECT {list} FROM {table_name}");
            let mut planned = plan_statements(crate::parse::parse_ast(&text)?)?;
            match (planned.pop(), planned.is_empty()) {
                (Some(one), true) => one,
                _ => return Err(PlanError::Invalid { what: format!("COPY of {table_name}") }),
            }
        }
    };
    if !matches!(query, Statement::Select(_)) {
        return unsupported("COPY (statement) TO other than a SELECT");
    }
    Ok(Statement::CopyTo { query: Box::new(query), format })
}

/// Names an unsupported statement without rendering it (rendering recurses through every
/// expression in it).
fn statement_construct(s: &ast::Statement) -> String {
    let name = match s {
        ast::Statement::Drop { .. } => "DROP",
        ast::Statement::CreateView(_) => "CREATE VIEW",
        ast::Statement::CreateIndex(_) => "CREATE INDEX",
        ast::Statement::CreateSchema { .. } => "CREATE SCHEMA",
        ast::Statement::CreateDatabase { .. } => "CREATE DATABASE",
        ast::Statement::CreateFunction(_) => "CREATE FUNCTION",
        ast::Statement::CreateRole(_) => "CREATE ROLE",
        ast::Statement::CreateSequence { .. } => "CREATE SEQUENCE",
        ast::Statement::CreateType { .. } => "CREATE TYPE",
        ast::Statement::CreateExtension(_) => "CREATE EXTENSION",
        ast::Statement::AlterIndex { .. } => "ALTER INDEX",
        ast::Statement::AlterView { .. } => "ALTER VIEW",
        ast::Statement::AlterRole { .. } => "ALTER ROLE",
        ast::Statement::Grant(_) => "GRANT",
        ast::Statement::Revoke(_) => "REVOKE",
        ast::Statement::Copy { .. } => "COPY",
        ast::Statement::Merge(_) => "MERGE",
        ast::Statement::Prepare { .. } => "PREPARE (use the extended protocol)",
        ast::Statement::Execute { .. } => "EXECUTE",
        ast::Statement::Deallocate { .. } => "DEALLOCATE",
        ast::Statement::Declare { .. } => "DECLARE",
        ast::Statement::Fetch { .. } => "FETCH",
        ast::Statement::Close { .. } => "CLOSE",
        ast::Statement::Savepoint { .. } => "SAVEPOINT",
        ast::Statement::ReleaseSavepoint { .. } => "RELEASE SAVEPOINT",
        ast::Statement::Rollback { .. } => "ROLLBACK TO SAVEPOINT / AND CHAIN",
        ast::Statement::Commit { .. } => "COMMIT AND CHAIN",
        ast::Statement::StartTransaction { .. } => "BEGIN with statements",
        ast::Statement::Analyze(_) => "ANALYZE",
        ast::Statement::Vacuum(_) => "VACUUM",
        ast::Statement::Call(_) => "CALL",
        ast::Statement::Comment { .. } => "COMMENT",
        ast::Statement::Lock(_) | ast::Statement::LockTables { .. } => "LOCK",
        ast::Statement::LISTEN { .. } => "LISTEN",
        ast::Statement::NOTIFY { .. } => "NOTIFY",
        ast::Statement::UNLISTEN { .. } => "UNLISTEN",
        ast::Statement::Discard { .. } => "DISCARD",
        ast::Statement::Reset(_) => "RESET",
        ast::Statement::ShowTables { .. } => "SHOW TABLES",
        ast::Statement::ShowColumns { .. } => "SHOW COLUMNS",
        ast::Statement::Use(_) => "USE",
        _ => "this statement",
    };
    format!("statement {name}")
}

fn plan_show(variable: &[ast::Ident]) -> Result<Statement, PlanError> {
    let names: Vec<String> = variable.iter().map(|i| i.value.to_lowercase()).collect();
    match names.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["fragments"] => Ok(Statement::ShowFragments),
        ["collections"] => Ok(Statement::ShowCollections),
        ["sharding"] => Ok(Statement::ShowSharding { collection: None }),
        ["sharding", _] => Ok(Statement::ShowSharding {
            collection: variable.get(1).map(|i| CollectionName(ident_name(i))),
        }),
        [] => unsupported("SHOW without a name"),
        _ => Ok(Statement::Show { name: names.join(" ") }),
    }
}

fn plan_set(set: &ast::Set) -> Result<Statement, PlanError> {
    match set {
        ast::Set::SingleAssignment { variable, values, hivevar: false, .. } => {
            let name = object_name_parts(variable)?.join(".");
            let value = values
                .iter()
                .map(|v| match v {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => s.clone(),
                        other => other.to_string(),
                    },
                    ast::Expr::Identifier(i) => i.value.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ");
            Ok(Statement::Set { name, value })
        }
        ast::Set::SetTimeZone { value, .. } => Ok(Statement::Set {
            name: "timezone".to_owned(),
            value: match value {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::SingleQuotedString(s) => s.clone(),
                    other => other.to_string(),
                },
                other => other.to_string(),
            },
        }),
        ast::Set::SetNames { charset_name, .. } => Ok(Statement::Set {
            name: "client_encoding".to_owned(),
            value: charset_name.value.clone(),
        }),
        // `SET [SESSION CHARACTERISTICS AS] TRANSACTION ISOLATION LEVEL …`: drivers send it;
        // every transaction is serializable already, so node may accept it as a setting.
        ast::Set::SetTransaction { modes, snapshot: None, session } => Ok(Statement::Set {
            name: if *session { "session_transaction" } else { "transaction" }.to_owned(),
            value: modes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        }),
        _ => unsupported("SET of this form"),
    }
}

/// The configuration in `sharding = '<json>'` of a WITH / SET option list; other options
/// refused.
fn sharding_option(options: &[ast::SqlOption]) -> Result<Option<ShardingConfig>, PlanError> {
    let mut sharding = None;
    for option in options {
        match option {
            ast::SqlOption::KeyValue { key, value } if ident_name(key) == "sharding" => match value
            {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::SingleQuotedString(s) | ast::Value::EscapedStringLiteral(s) => {
                        sharding = Some(
                            ShardingConfig::parse(s)
                                .map_err(|source| PlanError::InvalidSharding { source })?,
                        )
                    }
                    _ => {
                        return Err(PlanError::TypeMismatch {
                            what: "sharding",
                            expected: SqlType::Text,
                        });
                    }
                },
                _ => {
                    return Err(PlanError::TypeMismatch {
                        what: "sharding",
                        expected: SqlType::Text,
                    });
                }
            },
            other => return unsupported(format!("table option {other}")),
        }
    }
    Ok(sharding)
}

fn plan_create(create: &ast::CreateTable) -> Result<Statement, PlanError> {
    if !create.columns.is_empty() {
        return unsupported("column definitions (collections are schemaless: CREATE TABLE c ())");
    }
    if !create.constraints.is_empty() {
        return unsupported("table constraints");
    }
    if create.query.is_some() {
        return unsupported("CREATE TABLE AS");
    }
    if create.or_replace || create.temporary || create.external || create.like.is_some() {
        return unsupported("CREATE TABLE modifiers");
    }
    let sharding = match &create.table_options {
        ast::CreateTableOptions::None => None,
        ast::CreateTableOptions::With(options) => sharding_option(options)?,
        _ => return unsupported("table options other than WITH (sharding = '…')"),
    };
    Ok(Statement::CreateCollection {
        collection: collection_name(&create.name)?,
        sharding,
        if_not_exists: create.if_not_exists,
    })
}

fn plan_alter(alter: &ast::AlterTable) -> Result<Statement, PlanError> {
    let collection = collection_name(&alter.name)?;
    match alter.operations.as_slice() {
        [ast::AlterTableOperation::SetOptionsParens { options }] => match sharding_option(options)?
        {
            Some(sharding) => Ok(Statement::AlterSharding { collection, sharding }),
            None => unsupported("ALTER TABLE SET without sharding"),
        },
        _ => unsupported("ALTER TABLE other than SET (sharding = '…')"),
    }
}

/// How identifiers in an expression are read.
#[derive(Clone, Copy)]
enum Scope<'s> {
    /// Fields of the document; `alias.` prefixes dropped.
    Document { alias: Option<&'s str> },
    /// No document (INSERT VALUES): identifiers are an error.
    Values,
    /// `ON CONFLICT DO UPDATE`: fields of the existing document, `excluded.f` the new row.
    Upsert,
    /// An aggregate query's select list, HAVING and ORDER BY: values of the group.
    Group(&'s GroupScope<'s>),
}

#[derive(Clone, Copy)]
struct ExprPlanner<'s> {
    scope: Scope<'s>,
}

/// What an aggregate query's select list, HAVING and ORDER BY read, as in PostgreSQL: an
/// aggregate call becomes [`Expr::AggregateResult`] (each distinct call computed once), an
/// expression equal to a GROUP BY expression [`Expr::GroupKey`], and an expression that reads
/// no document stays as it is; anything else that reads the document is an error.
struct GroupScope<'s> {
    /// Plans GROUP BY expressions and aggregate arguments.
    doc: ExprPlanner<'s>,
    group_by: Vec<Expr>,
    aggregates: RefCell<Vec<Aggregate>>,
}

impl GroupScope<'_> {
    /// `e` as a value of the group, or `None` when its parts must be resolved one by one.
    #[inline(never)]
    fn resolve(&self, e: &ast::Expr, depth: usize) -> Result<Option<Expr>, PlanError> {
        if let Some(agg) = as_aggregate(e, &self.doc, depth)? {
            let ty = agg.ty;
            let mut aggregates = self.aggregates.borrow_mut();
            let index = match aggregates.iter().position(|a| *a == agg) {
                Some(i) => i,
                None => {
                    aggregates.push(agg);
                    aggregates.len() - 1
                }
            };
            return Ok(Some(Expr::AggregateResult { index, ty }));
        }
        if contains_aggregate(e) {
            return Ok(None);
        }
        let planned = self.doc.expr(e, depth)?;
        if let Some(index) = self.group_by.iter().position(|g| *g == planned) {
            return Ok(Some(Expr::GroupKey { index, ty: expr_type(&planned, &[]) }));
        }
        let mut reads_document = false;
        planned.walk(&mut |x| {
            reads_document |= matches!(x, Expr::Id | Expr::Field(_) | Expr::Excluded(_))
        });
        Ok((!reads_document).then_some(planned))
    }
}

impl ExprPlanner<'_> {
    fn path(&self, idents: &[ast::Ident]) -> Result<Expr, PlanError> {
        if idents.len() > PATH_STEPS_MAX {
            return Err(PlanError::LimitExceeded {
                what: "steps in a field path",
                limit: PATH_STEPS_MAX,
            });
        }
        let mut steps: Vec<String> = idents.iter().map(ident_name).collect();
        match self.scope {
            Scope::Values => Err(PlanError::Invalid {
                what: format!("column reference {} is not allowed in VALUES", steps.join(".")),
            }),
            Scope::Document { alias } => {
                if let (Some(alias), true) = (alias, steps.len() > 1)
                    && steps.first().map(String::as_str) == Some(alias)
                {
                    steps.remove(0);
                }
                Ok(Expr::Field(FieldPath::new(steps)))
            }
            Scope::Upsert => {
                if steps.len() > 1 && steps.first().map(String::as_str) == Some("excluded") {
                    steps.remove(0);
                    Ok(Expr::Excluded(FieldPath::new(steps)))
                } else {
                    Ok(Expr::Field(FieldPath::new(steps)))
                }
            }
            // Reached only for a field that is no GROUP BY expression (`GroupScope::resolve`).
            Scope::Group(g) => {
                Err(PlanError::NotGrouped { column: g.doc.path(idents)?.to_string() })
            }
        }
    }

    /// Plans one expression. Recursive, so each arm calls a separate function: in debug
    /// builds a frame holds every local of every arm, and this keeps the recursive frame small
    /// ([`EXPR_DEPTH_MAX`] levels must fit in a 2 MiB thread stack).
    fn expr(&self, e: &ast::Expr, depth: usize) -> Result<Expr, PlanError> {
        if depth > EXPR_DEPTH_MAX {
            return Err(PlanError::TooDeep { limit: EXPR_DEPTH_MAX });
        }
        if let Scope::Group(g) = self.scope
            && let Some(value) = g.resolve(e, depth)?
        {
            return Ok(value);
        }
        match e {
            ast::Expr::Identifier(ident) => self.path(std::slice::from_ref(ident)),
            ast::Expr::CompoundIdentifier(idents) => self.path(idents),
            ast::Expr::Value(v) => value_expr(&v.value),
            ast::Expr::Nested(inner) => self.expr(inner, depth + 1),
            ast::Expr::UnaryOp { op, expr } => self.unary(op, expr, depth),
            ast::Expr::BinaryOp { left, op, right } => self.binary(left, op, right, depth),
            ast::Expr::IsNull(inner) | ast::Expr::IsUnknown(inner) => {
                self.is_null(inner, false, depth)
            }
            ast::Expr::IsNotNull(inner) | ast::Expr::IsNotUnknown(inner) => {
                self.is_null(inner, true, depth)
            }
            ast::Expr::IsDistinctFrom(left, right) => {
                self.distinct(left, BinaryOp::IsDistinctFrom, Against::Expr(right), depth)
            }
            ast::Expr::IsNotDistinctFrom(left, right) => {
                self.distinct(left, BinaryOp::IsNotDistinctFrom, Against::Expr(right), depth)
            }
            // `x IS TRUE` is `x IS NOT DISTINCT FROM TRUE`: false for NULL, never NULL.
            ast::Expr::IsTrue(inner) => {
                self.distinct(inner, BinaryOp::IsNotDistinctFrom, Against::Bool(true), depth)
            }
            ast::Expr::IsNotTrue(inner) => {
                self.distinct(inner, BinaryOp::IsDistinctFrom, Against::Bool(true), depth)
            }
            ast::Expr::IsFalse(inner) => {
                self.distinct(inner, BinaryOp::IsNotDistinctFrom, Against::Bool(false), depth)
            }
            ast::Expr::IsNotFalse(inner) => {
                self.distinct(inner, BinaryOp::IsDistinctFrom, Against::Bool(false), depth)
            }
            ast::Expr::InList { expr, list, negated } => self.in_list(expr, list, *negated, depth),
            ast::Expr::Between { expr, negated, low, high } => {
                self.between(expr, low, high, *negated, depth)
            }
            ast::Expr::Like { negated, any: false, expr, pattern, escape_char: None } => {
                self.like(expr, pattern, *negated, false, depth)
            }
            ast::Expr::ILike { negated, any: false, expr, pattern, escape_char: None } => {
                self.like(expr, pattern, *negated, true, depth)
            }
            ast::Expr::Cast { kind, expr, data_type, format: None } => {
                self.cast(kind, expr, data_type, depth)
            }
            ast::Expr::Function(f) => self.function(f, depth),
            ast::Expr::Case { operand, conditions, else_result, .. } => {
                self.case(operand.as_deref(), conditions, else_result.as_deref(), depth)
            }
            ast::Expr::Substring { expr, substring_from, substring_for, .. } => {
                self.substring(expr, substring_from.as_deref(), substring_for.as_deref(), depth)
            }
            ast::Expr::Trim { expr, trim_where, trim_what, trim_characters: None } => {
                self.trim(expr, trim_where.as_ref(), trim_what.as_deref(), depth)
            }
            // sqlparser reads CEIL(x) and FLOOR(x) as constructs of their own.
            ast::Expr::Ceil {
                expr,
                field: ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime),
            } => self.call(ScalarFunc::Ceil, "ceil", &[Some(expr)], depth),
            ast::Expr::Floor {
                expr,
                field: ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime),
            } => self.call(ScalarFunc::Floor, "floor", &[Some(expr)], depth),
            other => unsupported(expr_construct(other)),
        }
    }

    fn sub(&self, e: &ast::Expr, depth: usize) -> Result<Box<Expr>, PlanError> {
        self.expr(e, depth + 1).map(Box::new)
    }

    #[inline(never)]
    fn unary(
        &self,
        op: &ast::UnaryOperator,
        expr: &ast::Expr,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        Ok(match op {
            ast::UnaryOperator::Not => {
                Expr::Unary { op: UnaryOp::Not, expr: self.sub(expr, depth)? }
            }
            ast::UnaryOperator::Plus => self.expr(expr, depth + 1)?,
            ast::UnaryOperator::Minus => match self.expr(expr, depth + 1)? {
                // Fold negative literals so `-5` is a literal (and `LIMIT -1` is caught).
                Expr::Literal(Literal::Int(i)) => match i.checked_neg() {
                    Some(n) => Expr::Literal(Literal::Int(n)),
                    // Only i64::MIN has no negation; its negation is exactly 2^63.
                    None => Expr::Literal(Literal::Float(9_223_372_036_854_775_808.0)),
                },
                Expr::Literal(Literal::Float(f)) => Expr::Literal(Literal::Float(-f)),
                other => Expr::Unary { op: UnaryOp::Neg, expr: Box::new(other) },
            },
            other => return unsupported(format!("operator {other}")),
        })
    }

    /// `left IS [NOT] DISTINCT FROM right`, or against a boolean (`IS [NOT] TRUE/FALSE`).
    #[inline(never)]
    fn distinct(
        &self,
        left: &ast::Expr,
        op: BinaryOp,
        right: Against<'_>,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        let right = match right {
            Against::Bool(b) => Box::new(Expr::Literal(Literal::Bool(b))),
            Against::Expr(r) => self.sub(r, depth)?,
        };
        Ok(Expr::Binary { op, left: self.sub(left, depth)?, right })
    }

    #[inline(never)]
    fn binary(
        &self,
        left: &ast::Expr,
        op: &ast::BinaryOperator,
        right: &ast::Expr,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        let op = match op {
            ast::BinaryOperator::Arrow
            | ast::BinaryOperator::LongArrow
            | ast::BinaryOperator::HashArrow
            | ast::BinaryOperator::HashLongArrow => {
                return self.json_access(left, op, right, depth);
            }
            ast::BinaryOperator::AtArrow => {
                return self.json_test(left, BinaryOp::Contains, right, depth);
            }
            ast::BinaryOperator::ArrowAt => {
                return self.json_test(left, BinaryOp::ContainedBy, right, depth);
            }
            ast::BinaryOperator::Question => {
                return self.json_test(left, BinaryOp::HasKey, right, depth);
            }
            ast::BinaryOperator::QuestionPipe => {
                return self.json_test(left, BinaryOp::HasAnyKey, right, depth);
            }
            ast::BinaryOperator::QuestionAnd => {
                return self.json_test(left, BinaryOp::HasAllKeys, right, depth);
            }
            ast::BinaryOperator::HashMinus => {
                return self.json_test(left, BinaryOp::JsonDeletePath, right, depth);
            }
            ast::BinaryOperator::Minus if text_operand(right) => {
                return self.json_test(left, BinaryOp::JsonMinus, right, depth);
            }
            ast::BinaryOperator::And => BinaryOp::And,
            ast::BinaryOperator::Or => BinaryOp::Or,
            ast::BinaryOperator::Eq => BinaryOp::Eq,
            ast::BinaryOperator::NotEq => BinaryOp::Ne,
            ast::BinaryOperator::Lt => BinaryOp::Lt,
            ast::BinaryOperator::LtEq => BinaryOp::Le,
            ast::BinaryOperator::Gt => BinaryOp::Gt,
            ast::BinaryOperator::GtEq => BinaryOp::Ge,
            ast::BinaryOperator::Plus => BinaryOp::Add,
            ast::BinaryOperator::Minus => BinaryOp::Sub,
            ast::BinaryOperator::Multiply => BinaryOp::Mul,
            ast::BinaryOperator::Divide => BinaryOp::Div,
            ast::BinaryOperator::Modulo => BinaryOp::Mod,
            ast::BinaryOperator::StringConcat => BinaryOp::Concat,
            other => return unsupported(format!("operator {other}")),
        };
        let (left, right) = (self.sub(left, depth)?, self.sub(right, depth)?);
        if op.is_comparison() {
            id_compared_with_text(&left, &right)?;
        }
        Ok(Expr::Binary { op, left, right })
    }

    /// PostgreSQL's jsonb access: `f -> 'k'` (json), `f ->> 'k'` (text), `#>` / `#>>` with
    /// a path array (`f #> '{a,0}'`), `f -> 0` an array element (negative: from the end).
    /// Keys on a document field fold into its [`FieldPath`] (so routing and GROUP BY see a
    /// plain field); a step that may index an array, or a base that is not a field (a json
    /// literal, a parameter, another expression), makes an [`Expr::JsonPath`].
    #[inline(never)]
    fn json_access(
        &self,
        left: &ast::Expr,
        op: &ast::BinaryOperator,
        right: &ast::Expr,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        let by_path =
            matches!(op, ast::BinaryOperator::HashArrow | ast::BinaryOperator::HashLongArrow);
        let as_text =
            matches!(op, ast::BinaryOperator::LongArrow | ast::BinaryOperator::HashLongArrow);
        let (literal, negative) = match right {
            ast::Expr::Value(v) => (Some(&v.value), false),
            ast::Expr::UnaryOp { op: ast::UnaryOperator::Minus, expr } => match expr.as_ref() {
                ast::Expr::Value(v) => (Some(&v.value), true),
                _ => (None, false),
            },
            _ => (None, false),
        };
        let steps: Vec<JsonStep> = match literal {
            Some(ast::Value::SingleQuotedString(s)) if !negative => {
                if by_path {
                    text_array(s)?.into_iter().map(JsonStep::Path).collect()
                } else {
                    vec![JsonStep::Key(s.clone())]
                }
            }
            Some(ast::Value::Number(n, _)) if !by_path => {
                let index: i64 = n.parse().map_err(|_| PlanError::InvalidLiteral {
                    literal: n.clone(),
                    reason: "an array index is an integer".to_owned(),
                })?;
                vec![JsonStep::Index(if negative { -index } else { index })]
            }
            _ => {
                return unsupported(format!(
                    "{op} with a right operand that is not a {} literal",
                    if by_path { "text array" } else { "string or integer" }
                ));
            }
        };
        // `'{"a":1}' -> 'a'`: an untyped literal is json here, as in PostgreSQL.
        let access = json_steps(self.json_operand(left, depth)?, steps)?;
        Ok(if as_text { Expr::Cast { expr: Box::new(access), to: SqlType::Text } } else { access })
    }

    /// An operand of a jsonb operator: a string literal as written (`'{"a":1}'`) is json
    /// there, as PostgreSQL types an unknown literal, parsed now.
    fn json_operand(&self, e: &ast::Expr, depth: usize) -> Result<Expr, PlanError> {
        match e {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::SingleQuotedString(s) => {
                    fold_cast(Expr::Literal(Literal::Str(s.clone())), SqlType::Json)
                }
                _ => self.expr(e, depth + 1),
            },
            _ => self.expr(e, depth + 1),
        }
    }

    /// jsonb's `@>`, `<@` (a string literal on either side is json, parsed now), `?` (a text
    /// on the right) and `?|`, `?&` (a text array literal `'{a,b}'` or `ARRAY['a', 'b']` on
    /// the right, kept as a JSON array of strings).
    #[inline(never)]
    fn json_test(
        &self,
        left: &ast::Expr,
        op: BinaryOp,
        right: &ast::Expr,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        let as_json = |e: &ast::Expr| self.json_operand(e, depth);
        let left = as_json(left)?;
        let right = match op {
            // A text array; for `-` only when written as ARRAY[…] (`- 'k'` is one key: an
            // unknown literal is text, as in PostgreSQL).
            BinaryOp::HasAnyKey | BinaryOp::HasAllKeys | BinaryOp::JsonDeletePath => {
                json_texts(text_list(right)?, op.symbol())?
            }
            BinaryOp::JsonMinus if matches!(right, ast::Expr::Array(_)) => {
                json_texts(text_list(right)?, op.symbol())?
            }
            BinaryOp::JsonMinus | BinaryOp::HasKey => self.expr(right, depth + 1)?,
            _ => as_json(right)?,
        };
        Ok(Expr::Binary { op, left: Box::new(left), right: Box::new(right) })
    }

    #[inline(never)]
    fn is_null(&self, inner: &ast::Expr, negated: bool, depth: usize) -> Result<Expr, PlanError> {
        Ok(Expr::IsNull { expr: self.sub(inner, depth)?, negated })
    }

    #[inline(never)]
    fn in_list(
        &self,
        expr: &ast::Expr,
        list: &[ast::Expr],
        negated: bool,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        if list.len() > IN_LIST_MAX {
            return Err(PlanError::LimitExceeded { what: "IN list elements", limit: IN_LIST_MAX });
        }
        let expr = self.sub(expr, depth)?;
        let list: Vec<Expr> =
            list.iter().map(|e| self.expr(e, depth + 1)).collect::<Result<_, _>>()?;
        for e in &list {
            id_compared_with_text(&expr, e)?;
        }
        Ok(Expr::InList { expr, list, negated })
    }

    #[inline(never)]
    fn between(
        &self,
        expr: &ast::Expr,
        low: &ast::Expr,
        high: &ast::Expr,
        negated: bool,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        Ok(Expr::Between {
            expr: self.sub(expr, depth)?,
            low: self.sub(low, depth)?,
            high: self.sub(high, depth)?,
            negated,
        })
    }

    #[inline(never)]
    fn like(
        &self,
        expr: &ast::Expr,
        pattern: &ast::Expr,
        negated: bool,
        case_insensitive: bool,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        Ok(Expr::Like {
            expr: self.sub(expr, depth)?,
            pattern: self.sub(pattern, depth)?,
            negated,
            case_insensitive,
        })
    }

    #[inline(never)]
    fn cast(
        &self,
        kind: &ast::CastKind,
        expr: &ast::Expr,
        data_type: &ast::DataType,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        if matches!(kind, ast::CastKind::TryCast | ast::CastKind::SafeCast) {
            return unsupported("TRY_CAST");
        }
        let to = sql_type(data_type)?;
        let inner = self.expr(expr, depth + 1)?;
        fold_cast(inner, to)
    }

    /// `SUBSTRING(s FROM a FOR n)` / `SUBSTRING(s, a, n)` / `SUBSTR(…)`: `substr`.
    #[inline(never)]
    fn substring(
        &self,
        expr: &ast::Expr,
        from: Option<&ast::Expr>,
        count: Option<&ast::Expr>,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        let mut args = vec![self.expr(expr, depth + 1)?];
        args.push(match from {
            Some(f) => self.expr(f, depth + 1)?,
            None => Expr::Literal(Literal::Int(1)),
        });
        if let Some(n) = count {
            args.push(self.expr(n, depth + 1)?);
        }
        Ok(Expr::Call { func: ScalarFunc::Substr, args })
    }

    /// `TRIM([BOTH | LEADING | TRAILING] [chars FROM] s)`: `btrim`, `ltrim`, `rtrim`.
    #[inline(never)]
    fn trim(
        &self,
        expr: &ast::Expr,
        side: Option<&ast::TrimWhereField>,
        chars: Option<&ast::Expr>,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        let func = match side {
            None | Some(ast::TrimWhereField::Both) => ScalarFunc::Btrim,
            Some(ast::TrimWhereField::Leading) => ScalarFunc::Ltrim,
            Some(ast::TrimWhereField::Trailing) => ScalarFunc::Rtrim,
        };
        let args: Vec<Option<&ast::Expr>> = std::iter::once(expr).chain(chars).map(Some).collect();
        self.call(func, "trim", &args, depth)
    }

    /// A call of scalar function `func` (`name` as written), its arguments (`None`: `*`)
    /// planned in order, then counted.
    #[inline(never)]
    fn call(
        &self,
        func: ScalarFunc,
        name: &str,
        args: &[Option<&ast::Expr>],
        depth: usize,
    ) -> Result<Expr, PlanError> {
        let args = args
            .iter()
            .map(|arg| match arg {
                Some(e) => self.expr(e, depth + 1),
                None => unsupported(format!("{name}(*)")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !func.takes(args.len()) {
            return Err(PlanError::Invalid {
                what: format!("{name}() does not take {} arguments", args.len()),
            });
        }
        Ok(Expr::Call { func, args })
    }

    /// `jsonb_set(target, path, value [, create_missing])`: the path is a text array literal
    /// (planned as a JSON array of texts) and string literals are json, as PostgreSQL types
    /// them there.
    #[inline(never)]
    fn json_set(&self, args: &[Option<&ast::Expr>], depth: usize) -> Result<Expr, PlanError> {
        if !ScalarFunc::JsonSet.takes(args.len()) {
            return Err(PlanError::Invalid {
                what: format!("jsonb_set() does not take {} arguments", args.len()),
            });
        }
        let mut planned = Vec::with_capacity(args.len());
        for (i, arg) in args.iter().enumerate() {
            let Some(arg) = arg else { return unsupported("jsonb_set(*)") };
            planned.push(match i {
                0 | 2 => self.json_operand(arg, depth)?,
                1 => json_texts(text_list(arg)?, "jsonb_set")?,
                _ => self.expr(arg, depth + 1)?,
            });
        }
        Ok(Expr::Call { func: ScalarFunc::JsonSet, args: planned })
    }

    /// `CASE [x] WHEN … THEN … [ELSE …] END`.
    #[inline(never)]
    fn case(
        &self,
        operand: Option<&ast::Expr>,
        conditions: &[ast::CaseWhen],
        otherwise: Option<&ast::Expr>,
        depth: usize,
    ) -> Result<Expr, PlanError> {
        let operand = operand.map(|x| self.sub(x, depth)).transpose()?;
        let whens = conditions
            .iter()
            .map(|w| Ok((self.expr(&w.condition, depth + 1)?, self.expr(&w.result, depth + 1)?)))
            .collect::<Result<Vec<_>, PlanError>>()?;
        let otherwise = otherwise.map(|e| self.sub(e, depth)).transpose()?;
        Ok(Expr::Case { operand, whens, otherwise })
    }

    #[inline(never)]
    fn function(&self, f: &ast::Function, depth: usize) -> Result<Expr, PlanError> {
        let name = function_name(f)?;
        if AggregateFunc::from_name(&name).is_some() {
            return unsupported(format!("aggregate function {name} in this position"));
        }
        let scalar = ScalarFunc::from_name(&name);
        let constant = constant_function(&name);
        let session = match name.as_str() {
            "current_user" | "session_user" | "user" => Some(SessionValue::User),
            "current_database" | "current_catalog" => Some(SessionValue::Database),
            _ => None,
        };
        if scalar.is_none()
            && constant.is_none()
            && session.is_none()
            && name != "id"
            && name != "doc"
        {
            return unsupported(format!("function {name}"));
        }
        let args = function_args(f)?;
        if let Some(value) = session {
            if !args.is_empty() {
                return unsupported(format!("function {name} with arguments"));
            }
            return Ok(Expr::Session(value));
        }
        if scalar == Some(ScalarFunc::JsonSet) {
            return self.json_set(&args, depth);
        }
        if let Some(func) = scalar {
            return self.call(func, &name, &args, depth);
        }
        if let Some(value) = constant {
            if !args.is_empty() {
                return unsupported(format!("function {name}"));
            }
            return Ok(Expr::Literal(Literal::Str(value)));
        }
        // `id()` is the document's id, `doc()` the whole document.
        if !args.is_empty() {
            return unsupported(format!("{name}() with arguments"));
        }
        match self.scope {
            Scope::Values => {
                Err(PlanError::Invalid { what: format!("{name}() is not allowed in VALUES") })
            }
            Scope::Group(_) => Err(PlanError::NotGrouped { column: format!("{name}()") }),
            Scope::Document { .. } | Scope::Upsert if name == "doc" => {
                Ok(Expr::Field(FieldPath::default()))
            }
            Scope::Document { .. } | Scope::Upsert => Ok(Expr::Id),
        }
    }
}

/// The value of a function without arguments that drivers and tools ask on connect, planned
/// as a literal.
fn constant_function(name: &str) -> Option<String> {
    match name {
        // The dialect, PostgreSQL's form first.
        "version" => Some(format!(
            "PostgreSQL {} (Tessera {})",
            crate::SERVER_VERSION,
            env!("CARGO_PKG_VERSION")
        )),
        // One namespace, which `public.c` names.
        "current_schema" => Some("public".to_owned()),
        _ => None,
    }
}

/// Names an unsupported expression without rendering it (rendering recurses through the
/// whole, possibly deep, tree).
fn expr_construct(e: &ast::Expr) -> String {
    let name = match e {
        ast::Expr::Subquery(_) | ast::Expr::InSubquery { .. } | ast::Expr::Exists { .. } => {
            "subquery"
        }
        ast::Expr::ILike { .. } => "ILIKE with ESCAPE or ANY",
        ast::Expr::Like { .. } => "LIKE with ESCAPE or ANY",
        ast::Expr::SimilarTo { .. } => "SIMILAR TO",
        ast::Expr::Cast { .. } => "CAST with FORMAT",
        ast::Expr::IsTrue(_)
        | ast::Expr::IsFalse(_)
        | ast::Expr::IsNotTrue(_)
        | ast::Expr::IsNotFalse(_) => "IS TRUE / IS FALSE",
        ast::Expr::IsUnknown(_) | ast::Expr::IsNotUnknown(_) => "IS UNKNOWN",
        ast::Expr::IsDistinctFrom(..) | ast::Expr::IsNotDistinctFrom(..) => "IS DISTINCT FROM",
        ast::Expr::InUnnest { .. } => "IN UNNEST",
        ast::Expr::AnyOp { .. } | ast::Expr::AllOp { .. } => "ANY / ALL",
        ast::Expr::Extract { .. } => "EXTRACT",
        ast::Expr::Substring { .. } => "SUBSTRING",
        ast::Expr::Trim { .. } => "TRIM",
        ast::Expr::Position { .. } => "POSITION",
        ast::Expr::Overlay { .. } => "OVERLAY",
        ast::Expr::Collate { .. } => "COLLATE",
        ast::Expr::AtTimeZone { .. } => "AT TIME ZONE",
        ast::Expr::Interval(_) => "INTERVAL",
        ast::Expr::TypedString(_) => "typed string literal",
        ast::Expr::Array(_) => "ARRAY",
        ast::Expr::Tuple(_) => "row constructor",
        ast::Expr::CompoundFieldAccess { .. } => "subscript or field access",
        ast::Expr::JsonAccess { .. } => "JSON access operator",
        _ => "this expression",
    };
    name.to_owned()
}

/// The elements of a one-dimensional text array literal (`'{a,b,"c d"}'`), for `#>` paths.
fn text_array(literal: &str) -> Result<Vec<String>, PlanError> {
    let invalid = |reason: &str| PlanError::InvalidLiteral {
        literal: literal.to_owned(),
        reason: reason.to_owned(),
    };
    let inner = literal
        .trim()
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .ok_or_else(|| invalid("a path is an array literal such as '{a,b}'"))?;
    if inner.contains(['{', '}', '\\']) {
        return Err(invalid("nested arrays and escapes are not supported in a path"));
    }
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(',')
        .map(|item| {
            let item = item.trim();
            match item.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                Some(quoted) if !quoted.contains('"') => Ok(quoted.to_owned()),
                Some(_) => Err(invalid("a quote inside a quoted path element")),
                None if item.is_empty() || item.contains('"') => {
                    Err(invalid("an empty or partly quoted path element"))
                }
                None => Ok(item.to_owned()),
            }
        })
        .collect()
}

/// Whether a `-` operand makes it jsonb's key removal: a string literal or an ARRAY (never a
/// number: `n - 1` stays arithmetic).
fn text_operand(e: &ast::Expr) -> bool {
    matches!(e, ast::Expr::Array(_))
        || matches!(e, ast::Expr::Value(v) if matches!(v.value, ast::Value::SingleQuotedString(_)))
}

/// The texts of a text array operand: a literal `'{a,b}'` or `ARRAY['a', 'b']` (`None`:
/// anything else).
fn text_list(e: &ast::Expr) -> Result<Option<Vec<String>>, PlanError> {
    Ok(match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => Some(text_array(s)?),
            _ => None,
        },
        ast::Expr::Array(array) => array
            .elem
            .iter()
            .map(|e| match e {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::SingleQuotedString(s) => Some(s.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
        _ => None,
    })
}

/// A text array operand of `what` (an operator or function) as a JSON array of strings
/// (bounded by `IN_LIST_MAX`).
fn json_texts(texts: Option<Vec<String>>, what: &str) -> Result<Expr, PlanError> {
    let Some(texts) = texts else {
        return unsupported(format!("{what} with an operand that is not a text array literal"));
    };
    if texts.len() > IN_LIST_MAX {
        return Err(PlanError::LimitExceeded {
            what: "texts in a key or path array",
            limit: IN_LIST_MAX,
        });
    }
    Ok(Expr::Literal(Literal::Json(serde_json::Value::Array(
        texts.into_iter().map(serde_json::Value::String).collect(),
    ))))
}

/// `'…'::json` of a literal is parsed at plan time so a malformed document is a plan error.
fn fold_cast(inner: Expr, to: SqlType) -> Result<Expr, PlanError> {
    match (&inner, to) {
        (Expr::Literal(Literal::Str(s)), SqlType::Json) => match serde_json::from_str(s) {
            Ok(v) => Ok(Expr::Literal(Literal::from_json(v))),
            Err(e) => Err(PlanError::InvalidLiteral { literal: s.clone(), reason: e.to_string() }),
        },
        _ => Ok(Expr::Cast { expr: Box::new(inner), to }),
    }
}

/// `base` walked by `steps`: keys (and path elements that are no integer) on a field extend
/// its path; the rest make a [`Expr::JsonPath`]. Bounded by [`PATH_STEPS_MAX`] in all.
fn json_steps(base: Expr, steps: Vec<JsonStep>) -> Result<Expr, PlanError> {
    let (base, mut all) = match base {
        Expr::JsonPath { base, steps: before } => (*base, before),
        other => (other, Vec::new()),
    };
    all.extend(steps);
    // A field (or `excluded.` field) takes the leading keys into its path.
    let field: Option<fn(FieldPath) -> Expr> = match &base {
        Expr::Field(_) => Some(Expr::Field),
        Expr::Excluded(_) => Some(Expr::Excluded),
        _ => None,
    };
    let mut path = match &base {
        Expr::Field(p) | Expr::Excluded(p) => p.steps().to_vec(),
        _ => Vec::new(),
    };
    let mut rest = all.as_slice();
    if field.is_some() {
        while let Some((step, tail)) = rest.split_first() {
            match step {
                JsonStep::Key(k) => path.push(k.clone()),
                JsonStep::Path(p) if p.parse::<i64>().is_err() => path.push(p.clone()),
                _ => break,
            }
            rest = tail;
        }
    }
    if path.len() + rest.len() > PATH_STEPS_MAX {
        return Err(PlanError::LimitExceeded {
            what: "steps in a field path",
            limit: PATH_STEPS_MAX,
        });
    }
    let base = match field {
        Some(field) => field(FieldPath::new(path)),
        None => base,
    };
    Ok(if rest.is_empty() {
        base
    } else {
        Expr::JsonPath { base: Box::new(base), steps: rest.to_vec() }
    })
}

fn function_name(f: &ast::Function) -> Result<String, PlanError> {
    if f.filter.is_some() {
        return unsupported("FILTER on a function that is not an aggregate");
    }
    call_name(f)
}

/// A call's name, FILTER allowed (aggregates take it).
fn call_name(f: &ast::Function) -> Result<String, PlanError> {
    let parts = object_name_parts(&f.name)?;
    if f.over.is_some() || !f.within_group.is_empty() || f.null_treatment.is_some() {
        return unsupported("OVER or WITHIN GROUP on a function");
    }
    match parts.as_slice() {
        [one] => Ok(one.clone()),
        // PostgreSQL's built-in functions live in pg_catalog, and drivers qualify them
        // (`pg_catalog.version()`).
        [schema, one] if schema == "pg_catalog" => Ok(one.clone()),
        _ => unsupported(format!("function {}", parts.join("."))),
    }
}

/// The plain argument list of a call (`None` entries stand for `*`).
fn function_args(f: &ast::Function) -> Result<Vec<Option<&ast::Expr>>, PlanError> {
    match function_args_distinct(f)? {
        (_, true) => unsupported("DISTINCT in a function call"),
        (args, false) => Ok(args),
    }
}

/// A call's arguments (`None` for `*`) and whether they are marked DISTINCT.
fn function_args_distinct(f: &ast::Function) -> Result<(Vec<Option<&ast::Expr>>, bool), PlanError> {
    let (args, distinct, order) = aggregate_args(f)?;
    if !order.is_empty() {
        return unsupported("clauses in a function call");
    }
    Ok((args, distinct))
}

/// The arguments of a call, whether they are `DISTINCT`, and an `ORDER BY` inside the call
/// (aggregates); any other clause is refused.
#[allow(clippy::type_complexity)] // three plain parts of one call
fn aggregate_args(
    f: &ast::Function,
) -> Result<(Vec<Option<&ast::Expr>>, bool, &[ast::OrderByExpr]), PlanError> {
    if !matches!(f.parameters, ast::FunctionArguments::None) {
        return unsupported("function parameters");
    }
    match &f.args {
        ast::FunctionArguments::None => Ok((Vec::new(), false, &[])),
        ast::FunctionArguments::Subquery(_) => unsupported("subquery"),
        ast::FunctionArguments::List(list) => {
            let distinct = match list.duplicate_treatment {
                None | Some(ast::DuplicateTreatment::All) => false,
                Some(ast::DuplicateTreatment::Distinct) => true,
            };
            let order: &[ast::OrderByExpr] = match list.clauses.as_slice() {
                [] => &[],
                [ast::FunctionArgumentClause::OrderBy(keys)] => keys,
                _ => return unsupported("clauses in a function call other than ORDER BY"),
            };
            let args = list
                .args
                .iter()
                .map(|a| match a {
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(Some(e)),
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => Ok(None),
                    _ => unsupported("named or qualified-wildcard function arguments"),
                })
                .collect::<Result<_, _>>()?;
            Ok((args, distinct, order))
        }
    }
}

fn value_expr(v: &ast::Value) -> Result<Expr, PlanError> {
    Ok(Expr::Literal(match v {
        ast::Value::Number(text, _) => number_literal(text)?,
        ast::Value::SingleQuotedString(s)
        | ast::Value::EscapedStringLiteral(s)
        | ast::Value::UnicodeStringLiteral(s) => Literal::Str(s.clone()),
        ast::Value::DollarQuotedString(d) => Literal::Str(d.value.clone()),
        ast::Value::Boolean(b) => Literal::Bool(*b),
        ast::Value::Null => Literal::Null,
        ast::Value::Placeholder(p) => return placeholder(p),
        other => return unsupported(format!("literal {other}")),
    }))
}

fn number_literal(text: &str) -> Result<Literal, PlanError> {
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Literal::Int(i));
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(Literal::Float(f)),
        _ => Err(PlanError::InvalidLiteral {
            literal: text.to_owned(),
            reason: "not a finite number".to_owned(),
        }),
    }
}

/// `$n` (1-based in SQL) as a 0-based parameter index.
fn placeholder(p: &str) -> Result<Expr, PlanError> {
    match p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
        Some(n) if (1..=PARAMS_MAX).contains(&n) => Ok(Expr::Param(n - 1)),
        Some(_) => Err(PlanError::LimitExceeded { what: "parameter number", limit: PARAMS_MAX }),
        None => unsupported(format!("placeholder {p}")),
    }
}

/// The SqlType for a cast target, by PostgreSQL's type names and aliases.
fn sql_type(dt: &ast::DataType) -> Result<SqlType, PlanError> {
    let text = dt.to_string().to_lowercase();
    let base = text.split('(').next().unwrap_or("").trim();
    Ok(match base {
        "int8" | "bigint" | "int" | "integer" | "int4" | "int2" | "smallint" => SqlType::Int8,
        "float8" | "double precision" | "double" | "float" | "float4" | "real" | "numeric"
        | "decimal" => SqlType::Float8,
        "text" | "varchar" | "character varying" | "char" | "character" | "string" | "name" => {
            SqlType::Text
        }
        "bool" | "boolean" => SqlType::Bool,
        "json" | "jsonb" => SqlType::Json,
        _ => return unsupported(format!("type {text}")),
    })
}

/// PostgreSQL's default name for an output column.
fn default_column_name(e: &ast::Expr) -> String {
    default_column_name_within(e, 0)
}

fn default_column_name_within(e: &ast::Expr, depth: usize) -> String {
    if depth > EXPR_DEPTH_MAX {
        return "?column?".to_owned();
    }
    let default_column_name = |e: &ast::Expr| default_column_name_within(e, depth + 1);
    match e {
        ast::Expr::Identifier(i) => ident_name(i),
        ast::Expr::CompoundIdentifier(ids) => {
            ids.last().map_or_else(|| "?column?".to_owned(), ident_name)
        }
        ast::Expr::Cast { expr, .. } => match expr.as_ref() {
            ast::Expr::Identifier(_)
            | ast::Expr::CompoundIdentifier(_)
            | ast::Expr::Function(_) => default_column_name(expr),
            _ => cast_name(e),
        },
        ast::Expr::Nested(inner) => default_column_name(inner),
        ast::Expr::Case { .. } => "case".to_owned(),
        ast::Expr::Function(f) => match object_name_parts(&f.name) {
            Ok(parts) => parts.last().cloned().unwrap_or_else(|| "?column?".to_owned()),
            Err(_) => "?column?".to_owned(),
        },
        _ => "?column?".to_owned(),
    }
}

/// PostgreSQL names `'x'::int8` by its type.
fn cast_name(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Cast { data_type, .. } => {
            sql_type(data_type).map_or_else(|_| "?column?".to_owned(), |t| t.pg_name().to_owned())
        }
        _ => "?column?".to_owned(),
    }
}

/// The type of a value that is one of `exprs` (coalesce's, greatest's and least's arguments,
/// CASE's results): their type when they agree, a bare NULL agreeing with any; float8 for
/// int8 and float8 together; else text (every value has a text form, where PostgreSQL would
/// refuse the mix).
fn common_type<'e>(exprs: impl Iterator<Item = &'e Expr>, params: &[Option<SqlType>]) -> SqlType {
    let mut types =
        exprs.filter(|e| !matches!(e, Expr::Literal(Literal::Null))).map(|e| expr_type(e, params));
    let first = types.next().unwrap_or(SqlType::Text);
    let numeric = |t: SqlType| matches!(t, SqlType::Int8 | SqlType::Float8);
    let mut all_numeric = numeric(first);
    let mut agree = true;
    for t in types {
        agree &= t == first;
        all_numeric &= numeric(t);
    }
    // int8 and float8 together are float8, as arithmetic on them is.
    match (agree, all_numeric) {
        (true, _) => first,
        (false, true) => SqlType::Float8,
        (false, false) => SqlType::Text,
    }
}

/// Refuses `id()` compared with a number or boolean literal (`id() = 12345`, as `pgbench -M
/// simple` writes an unquoted value): an id is text, so no document could match, and the
/// comparison routes nowhere useful (it would read every fragment to answer nothing).
/// PostgreSQL refuses `text = integer` too; a quoted `'12345'` is the id.
fn id_compared_with_text(a: &Expr, b: &Expr) -> Result<(), PlanError> {
    for (x, y) in [(a, b), (b, a)] {
        if matches!(x, Expr::Id)
            && matches!(y, Expr::Literal(Literal::Int(_) | Literal::Float(_) | Literal::Bool(_)))
        {
            return Err(PlanError::TypeMismatch {
                what: "a value compared with id() (quote it: id() = '12345')",
                expected: SqlType::Text,
            });
        }
    }
    Ok(())
}

/// The static type of an expression (see the typing rule in [`crate::types`]).
pub(crate) fn expr_type(e: &Expr, params: &[Option<SqlType>]) -> SqlType {
    match e {
        Expr::Literal(Literal::Null | Literal::Str(_) | Literal::Untyped(_)) | Expr::Id => {
            SqlType::Text
        }
        Expr::Literal(Literal::Bool(_)) => SqlType::Bool,
        Expr::Literal(Literal::Int(_)) => SqlType::Int8,
        Expr::Literal(Literal::Float(_)) => SqlType::Float8,
        Expr::Literal(Literal::Json(_))
        | Expr::Field(_)
        | Expr::Excluded(_)
        | Expr::JsonPath { .. } => SqlType::Json,
        Expr::Param(i) => params.get(*i).copied().flatten().unwrap_or(SqlType::Text),
        Expr::Cast { to, .. } => *to,
        Expr::GroupKey { ty, .. } | Expr::AggregateResult { ty, .. } => *ty,
        Expr::Session(_) => SqlType::Text,
        Expr::Call {
            func:
                ScalarFunc::Lower
                | ScalarFunc::Upper
                | ScalarFunc::Replace
                | ScalarFunc::Substr
                | ScalarFunc::Concat
                | ScalarFunc::Btrim
                | ScalarFunc::Ltrim
                | ScalarFunc::Rtrim,
            ..
        } => SqlType::Text,
        Expr::Call { func: ScalarFunc::Length | ScalarFunc::JsonArrayLength, .. } => SqlType::Int8,
        Expr::Call { func: ScalarFunc::JsonTypeof, .. } => SqlType::Text,
        Expr::Call {
            func:
                ScalarFunc::JsonSet
                | ScalarFunc::JsonBuildObject
                | ScalarFunc::JsonBuildArray
                | ScalarFunc::ToJson,
            ..
        } => SqlType::Json,
        Expr::Call {
            func: ScalarFunc::Coalesce | ScalarFunc::Greatest | ScalarFunc::Least,
            args,
        } => common_type(args.iter(), params),
        Expr::Call { func: ScalarFunc::NullIf, args } => {
            args.first().map_or(SqlType::Text, |a| expr_type(a, params))
        }
        // An integer stays one (`round(x, d)` is always float8, as PostgreSQL's numeric).
        Expr::Call {
            func: ScalarFunc::Abs | ScalarFunc::Floor | ScalarFunc::Ceil | ScalarFunc::Round,
            args,
        } => match args.as_slice() {
            [x] if expr_type(x, params) == SqlType::Int8 => SqlType::Int8,
            _ => SqlType::Float8,
        },
        Expr::Case { whens, otherwise, .. } => {
            common_type(whens.iter().map(|(_, r)| r).chain(otherwise.as_deref()), params)
        }
        Expr::Unary { op: UnaryOp::Not, .. }
        | Expr::IsNull { .. }
        | Expr::InList { .. }
        | Expr::Between { .. }
        | Expr::Like { .. } => SqlType::Bool,
        Expr::Unary { op: UnaryOp::Neg, expr } => match expr_type(expr, params) {
            SqlType::Int8 => SqlType::Int8,
            _ => SqlType::Float8,
        },
        Expr::Binary { op, left, right } => {
            if matches!(op, BinaryOp::And | BinaryOp::Or) || op.is_comparison() || op.is_json_test()
            {
                SqlType::Bool
            } else if *op == BinaryOp::Concat {
                SqlType::Text
            } else if matches!(op, BinaryOp::JsonMinus | BinaryOp::JsonDeletePath) {
                SqlType::Json
            } else if expr_type(left, params) == SqlType::Int8
                && expr_type(right, params) == SqlType::Int8
            {
                SqlType::Int8
            } else {
                SqlType::Float8
            }
        }
    }
}

/// A select list of plain rows. `tables`: the names `t.*` may qualify `*` with (the
/// collection and its alias).
fn plan_projection_rows(
    items: &[ast::SelectItem],
    planner: &ExprPlanner<'_>,
    tables: &[&str],
) -> Result<Vec<Output>, PlanError> {
    let mut outputs = Vec::new();
    for item in items {
        let wildcard = match item {
            ast::SelectItem::Wildcard(options) => Some(options),
            ast::SelectItem::QualifiedWildcard(
                ast::SelectItemQualifiedWildcardKind::ObjectName(name),
                options,
            ) if object_name_parts(name).is_ok_and(
                |parts| matches!(parts.as_slice(), [t] if tables.contains(&t.as_str())),
            ) =>
            {
                Some(options)
            }
            _ => None,
        };
        if let Some(options) = wildcard {
            if options.opt_exclude.is_some()
                || options.opt_except.is_some()
                || options.opt_replace.is_some()
                || options.opt_rename.is_some()
                || options.opt_ilike.is_some()
            {
                return unsupported("wildcard options");
            }
            outputs.push(Output {
                column: OutputColumn { name: "id".to_owned(), ty: SqlType::Text },
                expr: Expr::Id,
            });
            outputs.push(Output {
                column: OutputColumn { name: "doc".to_owned(), ty: SqlType::Json },
                expr: Expr::Field(FieldPath::default()),
            });
            continue;
        }
        match item {
            ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                return unsupported("qualified wildcard of another table");
            }
            ast::SelectItem::UnnamedExpr(e) => {
                let expr = planner.expr(e, 0)?;
                let ty = expr_type(&expr, &[]);
                outputs.push(Output {
                    column: OutputColumn { name: default_column_name(e), ty },
                    expr,
                });
            }
            ast::SelectItem::ExprWithAlias { expr: e, alias } => {
                let expr = planner.expr(e, 0)?;
                let ty = expr_type(&expr, &[]);
                outputs.push(Output { column: OutputColumn { name: ident_name(alias), ty }, expr });
            }
            ast::SelectItem::ExprWithAliases { .. } => return unsupported("multiple aliases"),
        }
    }
    Ok(outputs)
}

/// `e` as an aggregate call (its argument planned by `planner` at `depth + 1`), if it is one.
fn as_aggregate(
    e: &ast::Expr,
    planner: &ExprPlanner<'_>,
    depth: usize,
) -> Result<Option<Aggregate>, PlanError> {
    let ast::Expr::Function(f) = e else {
        return Ok(None);
    };
    let name = call_name(f)?;
    let Some(mut func) = AggregateFunc::from_name(&name) else {
        return Ok(None);
    };
    // FILTER (WHERE …) reads the document, as WHERE does.
    let filter = f.filter.as_deref().map(|w| planner.expr(w, depth + 1)).transpose()?;
    let (args, distinct, order) = aggregate_args(f)?;
    if distinct {
        func = match func {
            AggregateFunc::Count => AggregateFunc::CountDistinct,
            AggregateFunc::Sum => AggregateFunc::SumDistinct,
            AggregateFunc::Avg => AggregateFunc::AvgDistinct,
            // min and max of the distinct values are min and max.
            AggregateFunc::Min | AggregateFunc::Max => func,
            _ => return unsupported(format!("DISTINCT in {name}")),
        };
    }
    if !order.is_empty() && !func.collects() {
        return unsupported(format!(
            "ORDER BY inside {name} (only jsonb_agg, jsonb_object_agg and string_agg keep an order)"
        ));
    }
    let two = matches!(func, AggregateFunc::JsonObjectAgg | AggregateFunc::StringAgg);
    let (arg, arg2) = match (func, args.as_slice()) {
        (AggregateFunc::Count, [None]) => (None, None),
        (_, [Some(a)]) if !two => (Some(planner.expr(a, depth + 1)?), None),
        (_, [Some(a), Some(b)]) if two => {
            (Some(planner.expr(a, depth + 1)?), Some(planner.expr(b, depth + 1)?))
        }
        _ => return unsupported(format!("{name} with these arguments")),
    };
    let mut order_by = Vec::with_capacity(order.len());
    for o in order {
        let (descending, nulls_first) = order_options(o)?;
        let target = OrderTarget::Expr(planner.expr(&o.expr, depth + 1)?);
        order_by.push(OrderKey { target, descending, nulls_first });
    }
    // Aggregates inside aggregates are refused by the expression planner (it rejects
    // aggregate names), so only the argument's type matters here.
    let arg_ty = arg.as_ref().map(|a| expr_type(a, &[]));
    let ty = match func {
        AggregateFunc::Count | AggregateFunc::CountDistinct => SqlType::Int8,
        AggregateFunc::Sum | AggregateFunc::SumDistinct => {
            if arg_ty == Some(SqlType::Int8) {
                SqlType::Int8
            } else {
                SqlType::Float8
            }
        }
        AggregateFunc::Avg | AggregateFunc::AvgDistinct => SqlType::Float8,
        AggregateFunc::Min | AggregateFunc::Max => arg_ty.unwrap_or(SqlType::Json),
        AggregateFunc::JsonAgg | AggregateFunc::JsonObjectAgg => SqlType::Json,
        AggregateFunc::StringAgg => SqlType::Text,
    };
    Ok(Some(Aggregate { func, arg, arg2, order_by, ty, filter }))
}

fn contains_aggregate(e: &ast::Expr) -> bool {
    contains_aggregate_within(e, 0)
}

/// Whether an aggregate call appears anywhere in `e` that the expression planner reads.
/// Stops (answering false) past [`EXPR_DEPTH_MAX`]; the planner then refuses the depth itself.
fn contains_aggregate_within(e: &ast::Expr, depth: usize) -> bool {
    if depth > EXPR_DEPTH_MAX {
        return false;
    }
    let any = |e: &ast::Expr| contains_aggregate_within(e, depth + 1);
    match e {
        ast::Expr::Function(f) => {
            let aggregate = f
                .name
                .0
                .last()
                .and_then(|p| match p {
                    ast::ObjectNamePart::Identifier(i) => AggregateFunc::from_name(&ident_name(i)),
                    ast::ObjectNamePart::Function(_) => None,
                })
                .is_some();
            aggregate
                || match &f.args {
                    ast::FunctionArguments::List(list) => list.args.iter().any(|a| match a {
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e))
                        | ast::FunctionArg::Named { arg: ast::FunctionArgExpr::Expr(e), .. }
                        | ast::FunctionArg::ExprNamed {
                            arg: ast::FunctionArgExpr::Expr(e), ..
                        } => any(e),
                        _ => false,
                    }),
                    _ => false,
                }
        }
        ast::Expr::Nested(inner)
        | ast::Expr::Cast { expr: inner, .. }
        | ast::Expr::UnaryOp { expr: inner, .. }
        | ast::Expr::IsNull(inner)
        | ast::Expr::IsNotNull(inner)
        | ast::Expr::IsTrue(inner)
        | ast::Expr::IsNotTrue(inner)
        | ast::Expr::IsFalse(inner)
        | ast::Expr::IsNotFalse(inner)
        | ast::Expr::IsUnknown(inner)
        | ast::Expr::IsNotUnknown(inner) => any(inner),
        ast::Expr::BinaryOp { left, right, .. }
        | ast::Expr::IsDistinctFrom(left, right)
        | ast::Expr::IsNotDistinctFrom(left, right)
        | ast::Expr::Like { expr: left, pattern: right, .. }
        | ast::Expr::ILike { expr: left, pattern: right, .. } => any(left) || any(right),
        ast::Expr::InList { expr, list, .. } => any(expr) || list.iter().any(any),
        ast::Expr::Between { expr, low, high, .. } => any(expr) || any(low) || any(high),
        ast::Expr::Substring { expr, substring_from, substring_for, .. } => {
            any(expr)
                || substring_from.as_deref().is_some_and(any)
                || substring_for.as_deref().is_some_and(any)
        }
        ast::Expr::Trim { expr, trim_what, .. } => {
            any(expr) || trim_what.as_deref().is_some_and(any)
        }
        ast::Expr::Ceil { expr, .. } | ast::Expr::Floor { expr, .. } => any(expr),
        ast::Expr::Case { operand, conditions, else_result, .. } => {
            operand.as_deref().is_some_and(any)
                || conditions.iter().any(|w| any(&w.condition) || any(&w.result))
                || else_result.as_deref().is_some_and(any)
        }
        _ => false,
    }
}

fn plan_query(q: &ast::Query) -> Result<Statement, PlanError> {
    if q.with.is_some() {
        return unsupported("WITH");
    }
    let fetch = match &q.fetch {
        None => None,
        Some(ast::Fetch { with_ties: false, percent: false, quantity }) => Some(match quantity {
            Some(e) => plan_count(e, "FETCH FIRST")?,
            None => Some(Count::Value(1)),
        }),
        Some(_) => return unsupported("FETCH … WITH TIES or PERCENT"),
    };
    if !q.locks.is_empty() {
        return unsupported("FOR UPDATE / FOR SHARE");
    }
    if q.for_clause.is_some()
        || q.settings.is_some()
        || q.format_clause.is_some()
        || !q.pipe_operators.is_empty()
    {
        return unsupported("query clauses other than ORDER BY, LIMIT and OFFSET");
    }
    let select = match q.body.as_ref() {
        ast::SetExpr::Select(s) => s,
        ast::SetExpr::Query(inner) => return plan_query(inner),
        ast::SetExpr::SetOperation { op, .. } => return unsupported(format!("{op}")),
        ast::SetExpr::Values(_) => return unsupported("VALUES as a query"),
        _ => return unsupported("this kind of query"),
    };
    let distinct = match &select.distinct {
        None | Some(ast::Distinct::All) => false,
        Some(ast::Distinct::Distinct) => true,
        Some(ast::Distinct::On(_)) => return unsupported("DISTINCT ON"),
    };
    if select.top.is_some() || select.into.is_some() || select.exclude.is_some() {
        return unsupported("TOP / INTO / EXCLUDE");
    }
    if !select.lateral_views.is_empty()
        || select.prewhere.is_some()
        || !select.connect_by.is_empty()
        || !select.cluster_by.is_empty()
        || !select.distribute_by.is_empty()
        || !select.sort_by.is_empty()
        || !select.named_window.is_empty()
        || select.qualify.is_some()
    {
        return unsupported("SELECT clauses other than WHERE, GROUP BY, ORDER BY, LIMIT");
    }
    for table in &select.from {
        refuse_catalogs(table)?;
    }
    let (collection, alias) = match select.from.as_slice() {
        [] => (None, None),
        [table] => {
            if !table.joins.is_empty() {
                return unsupported("JOIN");
            }
            match &table.relation {
                ast::TableFactor::Table {
                    name,
                    alias,
                    args,
                    with_hints,
                    version,
                    partitions,
                    sample,
                    ..
                } => {
                    if !with_hints.is_empty()
                        || version.is_some()
                        || !partitions.is_empty()
                        || sample.is_some()
                    {
                        return unsupported("table hints, versions, partitions or samples");
                    }
                    if let Some(args) = args {
                        return plan_table_function(name, args, select, q);
                    }
                    if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
                        return unsupported("column aliases on a table");
                    }
                    (Some(collection_name(name)?), alias.as_ref().map(|a| ident_name(&a.name)))
                }
                ast::TableFactor::Derived { .. } => return unsupported("subquery in FROM"),
                _ => return unsupported("this kind of FROM item"),
            }
        }
        _ => return unsupported("JOIN (several tables in FROM)"),
    };
    let planner = ExprPlanner { scope: Scope::Document { alias: alias.as_deref() } };
    if collection.is_none() && select.selection.is_some() {
        return unsupported("WHERE without FROM");
    }
    let filter = select.selection.as_ref().map(|e| planner.expr(e, 0)).transpose()?;

    let group_exprs: &[ast::Expr] = match &select.group_by {
        ast::GroupByExpr::Expressions(exprs, modifiers) => {
            if !modifiers.is_empty() {
                return unsupported("GROUP BY modifiers");
            }
            exprs
        }
        ast::GroupByExpr::All(_) => return unsupported("GROUP BY ALL"),
    };
    let is_aggregate = !group_exprs.is_empty()
        || select.having.is_some()
        || select.projection.iter().any(|item| match item {
            ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                contains_aggregate(e)
            }
            _ => false,
        });
    if is_aggregate && collection.is_none() {
        return unsupported("aggregates without FROM");
    }
    // SELECT DISTINCT x, y is SELECT x, y … GROUP BY x, y. Rows of `*` are distinct already
    // (each has its own id), and so is the one row of a SELECT without FROM.
    let only_star = matches!(select.projection.as_slice(), [ast::SelectItem::Wildcard(_)]);
    let distinct_by: Option<Vec<ast::Expr>> = if distinct && !only_star && collection.is_some() {
        if is_aggregate {
            return unsupported("DISTINCT with aggregates or GROUP BY");
        }
        let items = select.projection.iter().map(|item| match item {
            ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                Ok(e.clone())
            }
            _ => unsupported("DISTINCT with * beside other columns"),
        });
        Some(items.collect::<Result<_, _>>()?)
    } else {
        None
    };

    let (shape, order_by) = if is_aggregate || distinct_by.is_some() {
        let group_exprs = distinct_by.as_deref().unwrap_or(group_exprs);
        let group = GroupScope {
            doc: planner,
            group_by: plan_group_by(&select.projection, group_exprs, &planner)?,
            aggregates: RefCell::default(),
        };
        let values = ExprPlanner { scope: Scope::Group(&group) };
        let outputs = plan_projection_groups(&select.projection, &values)?;
        let having = select.having.as_ref().map(|h| values.expr(h, 0)).transpose()?;
        let order = OrderScope {
            items: &select.projection,
            outputs: &outputs,
            distinct: distinct_by.is_some(),
        };
        let order_by = plan_order_by(q.order_by.as_ref(), &order, &values)?;
        let GroupScope { group_by, aggregates, .. } = group;
        let aggregates = aggregates.into_inner();
        (SelectShape::Aggregate { group_by, aggregates, outputs, having }, order_by)
    } else {
        let names: Vec<&str> = collection
            .as_ref()
            .map(CollectionName::as_str)
            .into_iter()
            .chain(alias.as_deref())
            .collect();
        let outputs = plan_projection_rows(&select.projection, &planner, &names)?;
        let order = OrderScope { items: &select.projection, outputs: &outputs, distinct: false };
        let order_by = plan_order_by(q.order_by.as_ref(), &order, &planner)?;
        (SelectShape::Rows { outputs }, order_by)
    };
    let (mut limit, offset) = plan_limit(q.limit_clause.as_ref())?;
    if let Some(fetch) = fetch {
        if limit.is_some() {
            return Err(PlanError::Invalid { what: "LIMIT and FETCH FIRST together".to_owned() });
        }
        limit = fetch;
    }
    if collection.is_none() && (!order_by.is_empty() || limit.is_some() || offset.is_some()) {
        return unsupported("ORDER BY, LIMIT or OFFSET without FROM");
    }
    Ok(Statement::Select(Select { collection, filter, shape, order_by, limit, offset }))
}

fn plan_table_function(
    name: &ast::ObjectName,
    args: &ast::TableFunctionArgs,
    select: &ast::Select,
    q: &ast::Query,
) -> Result<Statement, PlanError> {
    let fname = object_name_parts(name)?.join(".");
    if fname != "verify_sharding" {
        return unsupported(format!("table function {fname}"));
    }
    let is_star = matches!(select.projection.as_slice(), [ast::SelectItem::Wildcard(_)]);
    if !is_star
        || select.selection.is_some()
        || q.order_by.is_some()
        || q.limit_clause.is_some()
        || !matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty())
    {
        return unsupported("verify_sharding other than SELECT * FROM verify_sharding('c')");
    }
    match args.args.as_slice() {
        [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::Value(v)))] => {
            match &v.value {
                ast::Value::SingleQuotedString(s) => {
                    Ok(Statement::VerifySharding { collection: CollectionName(s.clone()) })
                }
                _ => Err(PlanError::TypeMismatch {
                    what: "verify_sharding argument",
                    expected: SqlType::Text,
                }),
            }
        }
        _ => Err(PlanError::TypeMismatch {
            what: "verify_sharding argument",
            expected: SqlType::Text,
        }),
    }
}

/// GROUP BY's expressions; an item may name a select-list expression by position or alias.
fn plan_group_by(
    items: &[ast::SelectItem],
    group_exprs: &[ast::Expr],
    planner: &ExprPlanner<'_>,
) -> Result<Vec<Expr>, PlanError> {
    // GROUP BY may name a select-list item by position or alias.
    let mut group_by = Vec::new();
    for g in group_exprs {
        let resolved = match g {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => {
                    let pos: usize = n.parse().map_err(|_| PlanError::Invalid {
                        what: format!("GROUP BY position {n} is not in the select list"),
                    })?;
                    match pos.checked_sub(1).and_then(|i| items.get(i)) {
                        Some(
                            ast::SelectItem::UnnamedExpr(e)
                            | ast::SelectItem::ExprWithAlias { expr: e, .. },
                        ) if !contains_aggregate(e) => e,
                        _ => {
                            return Err(PlanError::Invalid {
                                what: format!("GROUP BY position {n} is not in the select list"),
                            });
                        }
                    }
                }
                _ => g,
            },
            ast::Expr::Identifier(ident) => items
                .iter()
                .find_map(|item| match item {
                    ast::SelectItem::ExprWithAlias { expr, alias }
                        if ident_name(alias) == ident_name(ident) && !contains_aggregate(expr) =>
                    {
                        Some(expr)
                    }
                    _ => None,
                })
                .unwrap_or(g),
            _ => g,
        };
        if contains_aggregate(resolved) {
            return Err(PlanError::Invalid {
                what: "aggregate functions are not allowed in GROUP BY".to_owned(),
            });
        }
        group_by.push(planner.expr(resolved, 0)?);
    }
    Ok(group_by)
}

/// An aggregate query's select list, each item an expression over the group's values.
fn plan_projection_groups(
    items: &[ast::SelectItem],
    values: &ExprPlanner<'_>,
) -> Result<Vec<Output>, PlanError> {
    let mut outputs = Vec::with_capacity(items.len());
    for item in items {
        let (e, name) = match item {
            ast::SelectItem::UnnamedExpr(e) => (e, default_column_name(e)),
            ast::SelectItem::ExprWithAlias { expr, alias } => (expr, ident_name(alias)),
            ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                return Err(PlanError::Invalid {
                    what: "* is not allowed with aggregates or GROUP BY".to_owned(),
                });
            }
            ast::SelectItem::ExprWithAliases { .. } => return unsupported("multiple aliases"),
        };
        let expr = values.expr(e, 0)?;
        outputs.push(Output { column: OutputColumn { name, ty: expr_type(&expr, &[]) }, expr });
    }
    Ok(outputs)
}

/// What ORDER BY may name: the select list and the outputs planned from it (`distinct`: a
/// SELECT DISTINCT, whose keys must be in the select list).
struct OrderScope<'a> {
    items: &'a [ast::SelectItem],
    outputs: &'a [Output],
    distinct: bool,
}

fn plan_order_by(
    order_by: Option<&ast::OrderBy>,
    scope: &OrderScope<'_>,
    planner: &ExprPlanner<'_>,
) -> Result<Vec<OrderKey>, PlanError> {
    let Some(order_by) = order_by else {
        return Ok(Vec::new());
    };
    if order_by.interpolate.is_some() {
        return unsupported("INTERPOLATE");
    }
    let exprs = match &order_by.kind {
        ast::OrderByKind::Expressions(exprs) => exprs,
        ast::OrderByKind::All(_) => return unsupported("ORDER BY ALL"),
    };
    let mut keys = Vec::new();
    for o in exprs {
        let (descending, nulls_first) = order_options(o)?;
        let target = order_target(&o.expr, scope, planner)?;
        keys.push(OrderKey { target, descending, nulls_first });
    }
    Ok(keys)
}

/// `DESC` and `NULLS FIRST` of one ORDER BY key (PostgreSQL's default: NULLs first only
/// when descending).
fn order_options(o: &ast::OrderByExpr) -> Result<(bool, bool), PlanError> {
    if o.with_fill.is_some() {
        return unsupported("WITH FILL");
    }
    let descending = match &o.options.sort {
        None | Some(ast::OrderBySort::Asc) => false,
        Some(ast::OrderBySort::Desc) => true,
        Some(ast::OrderBySort::Using(_)) => return unsupported("ORDER BY USING"),
    };
    Ok((descending, o.options.nulls_first.unwrap_or(descending)))
}

fn order_target(
    e: &ast::Expr,
    scope: &OrderScope<'_>,
    planner: &ExprPlanner<'_>,
) -> Result<OrderTarget, PlanError> {
    let OrderScope { items, outputs, distinct } = *scope;
    // A position: ORDER BY 2.
    if let ast::Expr::Value(v) = e
        && let ast::Value::Number(n, _) = &v.value
    {
        return match n.parse::<usize>() {
            Ok(p) if (1..=outputs.len()).contains(&p) => Ok(OrderTarget::Output(p - 1)),
            _ => Err(PlanError::Invalid {
                what: format!("ORDER BY position {n} is not in select list"),
            }),
        };
    }
    // An output alias: ORDER BY total.
    if let ast::Expr::Identifier(ident) = e {
        let name = ident_name(ident);
        let mut column = 0usize;
        for item in items {
            match item {
                ast::SelectItem::ExprWithAlias { alias, .. } if ident_name(alias) == name => {
                    return Ok(OrderTarget::Output(column));
                }
                ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                    column += 2
                }
                _ => column += 1,
            }
        }
    }
    // An expression: an output's if one computes it, else its own (per document, or per
    // group in an aggregate query).
    let distinct_error = || PlanError::Invalid {
        what: "for SELECT DISTINCT, ORDER BY expressions must appear in the select list".to_owned(),
    };
    let expr = match planner.expr(e, 0) {
        Err(PlanError::NotGrouped { .. }) if distinct => return Err(distinct_error()),
        planned => planned?,
    };
    match outputs.iter().position(|o| o.expr == expr) {
        Some(i) => Ok(OrderTarget::Output(i)),
        None if distinct => Err(distinct_error()),
        None => Ok(OrderTarget::Expr(expr)),
    }
}

fn plan_count(e: &ast::Expr, what: &'static str) -> Result<Option<Count>, PlanError> {
    let planned = ExprPlanner { scope: Scope::Values }.expr(e, 0)?;
    match planned {
        Expr::Literal(Literal::Null) => Ok(None),
        Expr::Literal(Literal::Int(i)) => match u64::try_from(i) {
            Ok(n) => Ok(Some(Count::Value(n))),
            Err(_) => Err(PlanError::Invalid { what: format!("{what} must not be negative") }),
        },
        Expr::Param(i) => Ok(Some(Count::Param(i))),
        _ => Err(PlanError::TypeMismatch { what, expected: SqlType::Int8 }),
    }
}

fn plan_limit(
    clause: Option<&ast::LimitClause>,
) -> Result<(Option<Count>, Option<Count>), PlanError> {
    match clause {
        None => Ok((None, None)),
        Some(ast::LimitClause::LimitOffset { limit, offset, limit_by }) => {
            if !limit_by.is_empty() {
                return unsupported("LIMIT BY");
            }
            let limit = match limit {
                Some(e) => plan_count(e, "LIMIT")?,
                None => None,
            };
            let offset = match offset {
                Some(o) => plan_count(&o.value, "OFFSET")?,
                None => None,
            };
            Ok((limit, offset))
        }
        Some(ast::LimitClause::OffsetCommaLimit { .. }) => unsupported("LIMIT offset, count"),
    }
}

fn plan_returning(
    returning: Option<&Vec<ast::SelectItem>>,
    planner: &ExprPlanner<'_>,
) -> Result<Vec<Output>, PlanError> {
    match returning {
        None => Ok(Vec::new()),
        Some(items) => plan_projection_rows(items, planner, &[]),
    }
}

fn plan_assignments(
    assignments: &[ast::Assignment],
    planner: &ExprPlanner<'_>,
) -> Result<Vec<Assignment>, PlanError> {
    let mut out = Vec::new();
    for a in assignments {
        let ast::AssignmentTarget::ColumnName(name) = &a.target else {
            return unsupported("tuple assignment");
        };
        let steps = object_name_parts(name)?;
        if steps.len() > PATH_STEPS_MAX {
            return Err(PlanError::LimitExceeded {
                what: "steps in a field path",
                limit: PATH_STEPS_MAX,
            });
        }
        if steps.len() == 1 && steps.first().map(String::as_str) == Some("id") {
            return unsupported("changing a document's id (SET id)");
        }
        if out.iter().any(|o: &Assignment| o.path.steps() == steps.as_slice()) {
            return Err(PlanError::Invalid {
                what: format!("multiple assignments to the same field {}", steps.join(".")),
            });
        }
        // An unquoted DEFAULT (sqlparser reads it as an identifier) removes the field.
        let expr = match &a.value {
            ast::Expr::Identifier(i)
                if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default") =>
            {
                None
            }
            value => Some(planner.expr(value, 0)?),
        };
        out.push(Assignment { path: FieldPath::new(steps), expr });
    }
    Ok(out)
}

fn plan_insert(insert: &ast::Insert) -> Result<Insert, PlanError> {
    if insert.or.is_some()
        || insert.ignore
        || insert.overwrite
        || insert.replace_into
        || !insert.assignments.is_empty()
    {
        return unsupported("INSERT modifiers");
    }
    if insert.partitioned.is_some()
        || !insert.after_columns.is_empty()
        || insert.insert_alias.is_some()
        || insert.output.is_some()
    {
        return unsupported("INSERT modifiers");
    }
    if insert.table_alias.is_some() {
        return unsupported("INSERT table alias");
    }
    let collection = match &insert.table {
        ast::TableObject::TableName(name) => collection_name(name)?,
        _ => return unsupported("INSERT INTO a table function"),
    };
    let Some(source) = &insert.source else {
        return unsupported("INSERT without VALUES");
    };
    let rows_ast = match source.body.as_ref() {
        ast::SetExpr::Values(values) => &values.rows,
        _ => return unsupported("INSERT … SELECT"),
    };
    if source.order_by.is_some() || source.limit_clause.is_some() || source.with.is_some() {
        return unsupported("INSERT VALUES with ORDER BY, LIMIT or WITH");
    }
    if rows_ast.len() > INSERT_ROWS_MAX {
        return Err(PlanError::LimitExceeded {
            what: "rows in one INSERT",
            limit: INSERT_ROWS_MAX,
        });
    }
    let mut columns = Vec::new();
    for c in &insert.columns {
        let parts = object_name_parts(c)?;
        match parts.as_slice() {
            [one] => {
                if columns.contains(one) {
                    return Err(PlanError::Invalid {
                        what: format!("column {one} specified more than once"),
                    });
                }
                columns.push(one.clone());
            }
            _ => return unsupported("dotted column names in INSERT"),
        }
    }
    let id_index = if columns.is_empty() {
        None
    } else {
        Some(columns.iter().position(|c| c == "id").ok_or_else(|| PlanError::Invalid {
            what: "INSERT with a column list needs the id column".to_owned(),
        })?)
    };
    let values = ExprPlanner { scope: Scope::Values };
    let mut rows = Vec::with_capacity(rows_ast.len());
    for row in rows_ast {
        let exprs = row.content.iter().map(|e| values.expr(e, 0)).collect::<Result<Vec<_>, _>>()?;
        match id_index {
            None => match <[Expr; 2]>::try_from(exprs) {
                Ok([id, doc]) => rows.push(InsertRow { id, body: InsertBody::Document(doc) }),
                Err(_) => {
                    return Err(PlanError::Invalid {
                        what: "INSERT without a column list takes VALUES ('<id>', '<json object>')"
                            .to_owned(),
                    });
                }
            },
            Some(id_at) => {
                if exprs.len() != columns.len() {
                    return Err(PlanError::Invalid {
                        what: format!(
                            "INSERT has {} columns but a row has {} values",
                            columns.len(),
                            exprs.len()
                        ),
                    });
                }
                let mut id = None;
                let mut fields = Vec::with_capacity(columns.len().saturating_sub(1));
                for (i, (name, e)) in columns.iter().zip(exprs).enumerate() {
                    if i == id_at {
                        id = Some(e);
                    } else {
                        fields.push((name.clone(), e));
                    }
                }
                let Some(id) = id else {
                    return Err(PlanError::Invalid { what: "INSERT row without an id".to_owned() });
                };
                rows.push(InsertRow { id, body: InsertBody::Fields(fields) });
            }
        }
    }
    let on_conflict = match &insert.on {
        None => OnConflict::Error,
        Some(ast::OnInsert::OnConflict(c)) => {
            match &c.conflict_target {
                None => {}
                Some(ast::ConflictTarget::Columns(cols))
                    if cols.len() == 1 && cols.first().map(ident_name).as_deref() == Some("id") => {
                }
                _ => return unsupported("ON CONFLICT target other than (id)"),
            }
            match &c.action {
                ast::OnConflictAction::DoNothing => OnConflict::DoNothing,
                ast::OnConflictAction::DoUpdate(u) => {
                    if c.conflict_target.is_none() {
                        return Err(PlanError::Invalid {
                            what: "ON CONFLICT DO UPDATE requires a conflict target (id)"
                                .to_owned(),
                        });
                    }
                    let upsert = ExprPlanner { scope: Scope::Upsert };
                    OnConflict::DoUpdate {
                        assignments: plan_assignments(&u.assignments, &upsert)?,
                        filter: u.selection.as_ref().map(|e| upsert.expr(e, 0)).transpose()?,
                    }
                }
            }
        }
        Some(_) => return unsupported("ON DUPLICATE KEY UPDATE"),
    };
    let returning = plan_returning(
        insert.returning.as_ref(),
        &ExprPlanner { scope: Scope::Document { alias: None } },
    )?;
    Ok(Insert { collection, rows, on_conflict, returning })
}

fn single_table(
    table: &ast::TableWithJoins,
) -> Result<(CollectionName, Option<String>), PlanError> {
    refuse_catalogs(table)?;
    if !table.joins.is_empty() {
        return unsupported("JOIN");
    }
    match &table.relation {
        ast::TableFactor::Table { name, alias, args: None, .. } => {
            Ok((collection_name(name)?, alias.as_ref().map(|a| ident_name(&a.name))))
        }
        _ => unsupported("this kind of table reference"),
    }
}

fn plan_update(update: &ast::Update) -> Result<Update, PlanError> {
    if update.from.is_some() {
        return unsupported("UPDATE … FROM");
    }
    if update.or.is_some()
        || update.output.is_some()
        || !update.order_by.is_empty()
        || update.limit.is_some()
    {
        return unsupported("UPDATE modifiers");
    }
    let (collection, alias) = single_table(&update.table)?;
    let planner = ExprPlanner { scope: Scope::Document { alias: alias.as_deref() } };
    Ok(Update {
        collection,
        assignments: plan_assignments(&update.assignments, &planner)?,
        filter: update.selection.as_ref().map(|e| planner.expr(e, 0)).transpose()?,
        returning: plan_returning(update.returning.as_ref(), &planner)?,
    })
}

fn plan_delete(delete: &ast::Delete) -> Result<Delete, PlanError> {
    if !delete.tables.is_empty() || delete.using.is_some() || delete.output.is_some() {
        return unsupported("DELETE with several tables or USING");
    }
    if !delete.order_by.is_empty() || delete.limit.is_some() {
        return unsupported("DELETE with ORDER BY or LIMIT");
    }
    let tables = match &delete.from {
        ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => t,
    };
    let [table] = tables.as_slice() else {
        return unsupported("DELETE from several tables");
    };
    let (collection, alias) = single_table(table)?;
    let planner = ExprPlanner { scope: Scope::Document { alias: alias.as_deref() } };
    Ok(Delete {
        collection,
        filter: delete.selection.as_ref().map(|e| planner.expr(e, 0)).transpose()?,
        returning: plan_returning(delete.returning.as_ref(), &planner)?,
        per_fragment_max: None,
    })
}

/// `TRUNCATE [TABLE] [ONLY] c [, …] [RESTART IDENTITY | CONTINUE IDENTITY] [CASCADE |
/// RESTRICT]`: there are no sequences or foreign keys, so those options change nothing.
fn plan_truncate(truncate: &ast::Truncate) -> Result<Statement, PlanError> {
    if truncate.partitions.is_some() || truncate.on_cluster.is_some() {
        return unsupported("TRUNCATE … PARTITION or ON CLUSTER");
    }
    let names = truncate.table_names.iter().map(|t| &t.name);
    Ok(Statement::Truncate { collections: distinct_collections(names)? })
}

/// The collections named, each once, in the order written.
fn distinct_collections<'a>(
    names: impl Iterator<Item = &'a ast::ObjectName>,
) -> Result<Vec<CollectionName>, PlanError> {
    let mut collections = Vec::new();
    for name in names {
        let collection = collection_name(name)?;
        if !collections.contains(&collection) {
            collections.push(collection);
        }
    }
    Ok(collections)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(sql: &str) -> Select {
        match crate::parse(sql).expect("parses").remove(0) {
            Statement::Select(s) => s,
            other => panic!("not a select: {other:?}"),
        }
    }

    // Checks a collection name with the reserved prefix is refused in every statement that
    // names one, quoted or not, qualified or not; a name that only contains it is not.
    #[test]
    fn reserved_collection_names_are_refused() {
        for sql in [
            "SELECT * FROM __tessera_txn",
            "SELECT * FROM public.\"__tessera_x\"",
            "INSERT INTO __tessera_txn VALUES ('a', '{}')",
            "UPDATE __TESSERA_txn SET a = 1",
            "DELETE FROM __tessera_txn",
            "CREATE TABLE __tessera_txn ()",
        ] {
            let e = crate::parse(sql).expect_err(sql);
            assert!(e.to_string().contains("reserved"), "{sql}: {e}");
        }
        assert!(crate::parse("SELECT * FROM my__tessera_txn").is_ok());
    }

    // Checks identifier folding: unquoted lower-cased, quoted kept, dotted paths split, and
    // an explicit alias prefix dropped.
    #[test]
    fn identifiers_and_paths() {
        let s = select("SELECT Name, \"Name\", a.\"B\".c, x.y FROM Users AS x");
        assert_eq!(s.collection.as_ref().map(CollectionName::as_str), Some("users"));
        let SelectShape::Rows { outputs } = &s.shape else { panic!("rows") };
        let paths: Vec<String> = outputs.iter().map(|o| o.expr.to_string()).collect();
        assert_eq!(paths, ["name", "\"Name\"", "a.\"B\".c", "y"]);
        let names: Vec<&str> = outputs.iter().map(|o| o.column.name.as_str()).collect();
        assert_eq!(names, ["name", "Name", "c", "y"]);
    }

    // Checks GROUP BY by position and alias, repeated aggregates computed once, and ORDER BY
    // resolved to output columns.
    #[test]
    fn aggregate_shape() {
        let s = select(
            "SELECT g AS k, count(*), count(*) AS again, max(v) FROM c GROUP BY 1 ORDER BY again DESC, k",
        );
        let SelectShape::Aggregate { group_by, aggregates, outputs, having: None } = &s.shape
        else {
            panic!("aggregate")
        };
        assert_eq!(group_by.len(), 1);
        assert_eq!(aggregates.len(), 2, "count(*) is computed once");
        assert_eq!(outputs[1].expr, outputs[2].expr);
        assert_eq!(s.order_by[0].target, OrderTarget::Output(2));
        assert!(s.order_by[0].descending);
        assert!(s.order_by[0].nulls_first, "DESC defaults to NULLS FIRST");
        assert_eq!(s.order_by[1].target, OrderTarget::Output(0));
        // A name that is no alias is a field, so `g` is then not grouped.
        let e = crate::parse("SELECT g, count(*) FROM c GROUP BY other").expect_err("not grouped");
        assert!(matches!(e, PlanError::NotGrouped { .. }), "{e:?}");
    }

    // Checks literal planning: negative folding, big integers as floats, placeholders.
    #[test]
    fn literals() {
        let s = select("SELECT -5, 9223372036854775808, -9223372036854775808, $2 FROM c");
        let SelectShape::Rows { outputs } = &s.shape else { panic!("rows") };
        assert_eq!(outputs[0].expr, Expr::Literal(Literal::Int(-5)));
        assert_eq!(outputs[1].expr, Expr::Literal(Literal::Float(9_223_372_036_854_775_808.0)));
        assert_eq!(outputs[2].expr, Expr::Literal(Literal::Float(-9_223_372_036_854_775_808.0)));
        assert_eq!(outputs[3].expr, Expr::Param(1));
        assert!(crate::parse("SELECT $0 FROM c").is_err());
    }
}

//! SQL text to plan (sqlparser 0.63, PostgreSQL dialect), expression evaluation over
//! documents seen through `router::doc::DocValue`, per-fragment execution, the merge of
//! partial results, EXPLAIN.
//!
//! Opens no files or sockets, knows no executors and no PostgreSQL wire messages. `node`
//! drives it:
//!
//! 1. [`parse`] SQL text once into [`Statement`]s (a prepared statement keeps its plan);
//!    [`param_types`] tells the client the parameter types and
//!    [`Statement::result_columns`] the row description.
//! 2. [`bind()`] the plan to parameter values ([`Datum::decode_param`] reads them from text or
//!    binary format) without parsing again.
//! 3. [`route_statement`] asks `router::prune` which fragments and shard ranges the bound
//!    statement can touch (with the collection's `router::ShardingConfig` and the
//!    `router::ShardMap`).
//! 4. For each of those fragments, run [`exec::execute_select`] (or `execute_update`,
//!    `execute_delete`, `execute_verify_sharding`) on the executor that owns it, over a
//!    [`exec::FragmentSource`] and the routed ranges inside the fragment. The result
//!    ([`exec::Partial`], [`exec::WritePartial`], [`exec::VerifyPartial`]) is owned and
//!    small, so it crosses executors as a message. INSERT: [`plan::Insert::documents`]
//!    evaluates the rows; node places each id (`router::shard_of`, or `router::assign` for a
//!    trailing `$`), groups them by fragment and runs [`exec::execute_insert`] there.
//!    Write intents carry the version read; node validates them against the content
//!    configuration (`router::validate`, 23514) and hands them to storage.
//! 5. [`exec::merge`] the partials on the session's executor into a typed
//!    [`exec::ResultSet`]; encode cells with [`Datum::encode_text`] /
//!    [`Datum::encode_binary`]. `SELECT` without FROM: [`exec::execute_constant`].
//! 6. `EXPLAIN`: [`explain::explain`] renders the route (and, for ANALYZE, node's
//!    [`explain::FragmentAnalysis`] per fragment) as `QUERY PLAN` lines.
//!
//! Errors: [`PlanError`] (parse, plan, bind) and [`ExecError`] (evaluate, merge), each with a
//! `category()` for node's exhaustive SQLSTATE match. Limits live in [`limits`].
//!
//! The rules users see are documented where they are implemented: identifiers and paths in
//! [`plan`], comparisons and arithmetic in [`expr`], column types and ordering in [`types`],
//! parameter types in [`mod@bind`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)
)]

mod alter_fragment;
pub mod bind;
pub mod copy;
pub mod error;
pub mod exec;
pub mod explain;
pub mod expr;
#[doc(hidden)]
pub mod fuzzing;
pub mod limits;
pub mod memory;
mod parse;
pub mod parse_cache;
pub mod plan;
pub mod route;
pub mod types;

/// The PostgreSQL version Tessera speaks for: reported to clients at startup (psql and
/// drivers parse it), by `SHOW server_version` and in `version()`.
pub const SERVER_VERSION: &str = "15.0";

pub use bind::{bind, param_types};
pub use error::{ExecError, ExecErrorCategory, PlanError, PlanErrorCategory};
pub use exec::{
    Collected, DocVersion, FragmentSource, PagedSource, Partial, PlacedDocument, ResultSet,
    ScanPos, SelectScan, SourceDoc, VerifyPartial, WriteIntent, WritePartial, WriteScan,
    execute_constant, execute_delete, execute_insert, execute_select, execute_select_page,
    execute_update, execute_verify_sharding, merge, resume_point,
};
pub use explain::{FragmentAnalysis, explain, explain_columns};
pub use memory::json_bytes;
pub use parse_cache::{ParseCache, ParseCacheStats};
pub use plan::{CollectionName, OutputColumn, Statement};
pub use route::{predicate, route_statement};
pub use types::{Datum, Format, SqlType};

/// Parses and plans SQL text: one plan per statement (the text may hold several, separated by
/// `;`). Parameters `$1..$n` stay placeholders until [`bind()`].
pub fn parse(sql: &str) -> Result<Vec<Statement>, PlanError> {
    if let Some(statement) = alter_fragment::parse(sql)? {
        return Ok(vec![statement]);
    }
    plan::plan_statements(parse::parse_ast(sql)?)
}

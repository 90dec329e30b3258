//! SQL text to plan (sqlparser 0.63, PostgreSQL dialect), expression evaluation over
//! documents seen through `router::doc::DocValue`, per-fragment execution, the merge of
//! partial results, EXPLAIN.
//!
//! Opens no files or sockets, knows no executors and no PostgreSQL wire messages. `node`
//! drives it:
//!
//! 1. [`parse`] SQL text once into [`Statement`]s (a prepared statement keeps its plan);
//!    [`param_types`] tells the client the parameter types.
//! 2. [`bind`] the plan to parameter values ([`Datum::decode_param`] reads them from text or
//!    binary format) without parsing again.
//! 3. For each fragment the statement touches, run [`exec::execute_select`] (or
//!    `execute_update` / `execute_delete` / `execute_insert`) on the executor that owns it,
//!    over a [`exec::FragmentSource`]; the result ([`exec::Partial`], [`exec::WritePartial`])
//!    is owned and small, so it crosses executors as a message.
//! 4. [`exec::merge`] the partials on the session's executor into a typed
//!    [`exec::ResultSet`]; encode cells with [`Datum::encode_text`] /
//!    [`Datum::encode_binary`].
//!
//! Errors: [`PlanError`] (parse, plan, bind) and [`ExecError`] (evaluate, merge), each with a
//! `category()` for node's exhaustive SQLSTATE match. Limits live in [`limits`].
//!
//! The rules users see are documented where they are implemented: identifiers and paths in
//! [`plan`], comparisons and arithmetic in [`expr`], column types and ordering in [`types`],
//! parameter types in [`bind`].
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)
)]

pub mod bind;
pub mod error;
pub mod exec;
pub mod explain;
pub mod expr;
#[doc(hidden)]
pub mod fuzzing;
pub mod limits;
mod parse;
pub mod plan;
pub mod route;
pub mod types;

pub use bind::{bind, param_types};
pub use error::{ExecError, ExecErrorCategory, PlanError, PlanErrorCategory};
pub use exec::{
    DocVersion, FragmentSource, Partial, PlacedDocument, ResultSet, SourceDoc, VerifyPartial,
    WriteIntent, WritePartial, execute_constant, execute_delete, execute_insert, execute_select,
    execute_update, execute_verify_sharding, merge,
};
pub use explain::{FragmentAnalysis, explain, explain_columns};
pub use plan::{CollectionName, OutputColumn, Statement};
pub use route::{predicate, route_statement};
pub use types::{Datum, Format, SqlType};

/// Parses and plans SQL text: one plan per statement (the text may hold several, separated by
/// `;`). Parameters `$1..$n` stay placeholders until [`bind`].
pub fn parse(sql: &str) -> Result<Vec<Statement>, PlanError> {
    plan::plan_statements(parse::parse_ast(sql)?)
}

//! Errors of the query crate, one enum per operation family.
//!
//! [`PlanError`] covers parsing, planning and binding parameters; [`ExecError`] covers
//! evaluating a plan over documents and merging partial results. Each has a `category()`
//! returning a small exhaustive enum so `node::pg::sqlstate` can choose a SQLSTATE with a
//! `match` that has no `_` arm.

use crate::types::SqlType;

/// Why SQL text could not become a plan, or a plan could not be bound to parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The text is not valid SQL. `position` is the 1-based character offset of the error in
    /// the statement text, as in PostgreSQL's ErrorResponse `P` field.
    #[error("syntax error at position {position}: {message}")]
    Syntax {
        /// What the parser expected and found.
        message: String,
        /// 1-based character offset into the SQL text.
        position: usize,
    },
    /// Valid SQL that Tessera does not implement; `construct` names it.
    #[error("unsupported: {construct}")]
    Unsupported {
        /// The construct, as a user would name it (`JOIN`, `DISTINCT ON`, `function initcap`).
        construct: String,
    },
    /// The statement nests deeper than the parser's recursion limit or [`crate::limits::EXPR_DEPTH_MAX`].
    #[error("statement nests too deeply (limit {limit})")]
    TooDeep {
        /// The depth limit that was hit.
        limit: usize,
    },
    /// A named limit from [`crate::limits`] was exceeded.
    #[error("{what} exceeds the limit of {limit}")]
    LimitExceeded {
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A parameter value could not be decoded as its type, or the wrong number was given.
    #[error("bad parameter ${index}: {reason}")]
    BadParameter {
        /// 1-based parameter number (`$1` is 1); 0 when the count itself is wrong.
        index: usize,
        /// What was wrong.
        reason: String,
    },
    /// A value in the statement has the wrong type for where it is used.
    #[error("type mismatch: {what} must be {expected}")]
    TypeMismatch {
        /// Where the value is used (`LIMIT`, `OFFSET`, `sharding`, …).
        what: &'static str,
        /// The type it must have.
        expected: SqlType,
    },
    /// A literal could not be read (a number out of range, a malformed JSON document).
    #[error("invalid literal {literal:?}: {reason}")]
    InvalidLiteral {
        /// The literal as written.
        literal: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A sharding configuration (`WITH (sharding = '…')`) that router refuses.
    #[error("invalid sharding configuration: {source}")]
    InvalidSharding {
        /// Router's reason.
        source: router::ConfigError,
    },
    /// An aggregate query reads a column (or `id()`) outside GROUP BY and aggregate calls.
    #[error(
        "column {column} must appear in the GROUP BY clause or be used in an aggregate function"
    )]
    NotGrouped {
        /// The column as planned (`a.b`, `id()`).
        column: String,
    },
    /// The statement names something the plan needs but does not have (a column, an alias).
    #[error("{what}")]
    Invalid {
        /// A sentence saying what is wrong.
        what: String,
    },
}

/// The class of a [`PlanError`], for mapping to SQLSTATE.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PlanErrorCategory {
    /// 42601
    Syntax,
    /// 0A000
    Unsupported,
    /// 54001 (statement too complex)
    TooDeep,
    /// 54000
    LimitExceeded,
    /// 22023 / 08P01
    BadParameter,
    /// 42804
    TypeMismatch,
    /// 42803
    Grouping,
    /// 22P02
    InvalidLiteral,
    /// 22023 (invalid parameter value)
    InvalidSharding,
    /// 42703 / 42P10 (the statement refers to something that does not exist)
    Invalid,
}

impl PlanError {
    /// The category, for node's exhaustive SQLSTATE match.
    pub fn category(&self) -> PlanErrorCategory {
        match self {
            PlanError::Syntax { .. } => PlanErrorCategory::Syntax,
            PlanError::Unsupported { .. } => PlanErrorCategory::Unsupported,
            PlanError::TooDeep { .. } => PlanErrorCategory::TooDeep,
            PlanError::LimitExceeded { .. } => PlanErrorCategory::LimitExceeded,
            PlanError::BadParameter { .. } => PlanErrorCategory::BadParameter,
            PlanError::TypeMismatch { .. } => PlanErrorCategory::TypeMismatch,
            PlanError::NotGrouped { .. } => PlanErrorCategory::Grouping,
            PlanError::InvalidLiteral { .. } => PlanErrorCategory::InvalidLiteral,
            PlanError::InvalidSharding { .. } => PlanErrorCategory::InvalidSharding,
            PlanError::Invalid { .. } => PlanErrorCategory::Invalid,
        }
    }

    pub(crate) fn unsupported(construct: impl Into<String>) -> PlanError {
        PlanError::Unsupported { construct: construct.into() }
    }
}

/// Why executing a plan over documents, or merging partial results, failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// Integer division or modulo by zero.
    #[error("division by zero")]
    DivisionByZero,
    /// An integer result does not fit in `int8`.
    #[error("{what} is out of range for int8")]
    Overflow {
        /// The operation.
        what: &'static str,
    },
    /// A value cannot be cast to the requested type (`'abc'::int8`).
    #[error("invalid input for type {to}: {value}")]
    InvalidCast {
        /// The value (or its kind, for documents).
        value: String,
        /// The target type.
        to: SqlType,
    },
    /// A `$n` parameter was evaluated before the plan was bound.
    #[error("parameter ${index} is not bound")]
    UnboundParameter {
        /// 1-based parameter number.
        index: usize,
    },
    /// An INSERT would create a document whose id already exists and has no `ON CONFLICT`.
    #[error("duplicate document id {id:?}")]
    DuplicateId {
        /// The id as the new row spelled it.
        id: String,
    },
    /// A document built by INSERT or UPDATE is not a JSON object, or its id is not text.
    #[error("invalid document: {reason}")]
    InvalidDocument {
        /// Why.
        reason: String,
    },
    /// `SET a.b = …` where `a` holds something that is not an object.
    #[error("cannot set {path}: {step:?} is not an object")]
    PathConflict {
        /// The dotted path being set.
        path: String,
        /// The step that is not an object.
        step: String,
    },
    /// A document nests deeper than [`crate::limits::JSON_DEPTH_MAX`].
    #[error("document nests deeper than {limit}")]
    DocumentTooDeep {
        /// The limit.
        limit: usize,
    },
    /// A named limit from [`crate::limits`] was exceeded.
    #[error("{what} exceeds the limit of {limit}")]
    LimitExceeded {
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// One write statement would change more on one fragment than one transaction may write
    /// ([`crate::limits::WRITE_DOCS_MAX`], [`crate::limits::WRITE_BYTES_MAX`]): the scan stops
    /// there instead of holding every match.
    #[error(
        "a write statement changes more than {limit} {what} on one fragment: split it into \
         smaller statements (for example narrower WHERE conditions; TRUNCATE empties a whole \
         collection)"
    )]
    WriteTooLarge {
        /// What was counted (`documents`, `bytes of new documents`).
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A function was given an argument outside its domain (`substr` with a negative length).
    #[error("invalid argument to {function}: {reason}")]
    InvalidArgument {
        /// The function.
        function: &'static str,
        /// What is wrong with the argument.
        reason: &'static str,
    },
    /// A partial result does not have the shape its plan produces: a bug in the caller, which
    /// merged partials of different statements.
    #[error("partial result does not match the plan: {what}")]
    PartialMismatch {
        /// What did not match.
        what: &'static str,
    },
    /// The statement is not one this function executes (e.g. `merge` of an UPDATE plan).
    #[error("wrong statement kind: {what}")]
    WrongStatement {
        /// What was expected.
        what: &'static str,
    },
}

/// The class of an [`ExecError`], for mapping to SQLSTATE.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExecErrorCategory {
    /// 22012
    DivisionByZero,
    /// 22003
    Overflow,
    /// 22P02
    InvalidCast,
    /// 08P01 / 42P02
    UnboundParameter,
    /// 23505
    DuplicateId,
    /// 22023 (invalid parameter value) / 23514 when node reports it as a check violation
    InvalidDocument,
    /// 54000
    LimitExceeded,
    /// 22023 (invalid parameter value)
    InvalidArgument,
    /// XX000: a bug in the caller.
    Internal,
}

impl ExecError {
    /// The category, for node's exhaustive SQLSTATE match.
    pub fn category(&self) -> ExecErrorCategory {
        match self {
            ExecError::DivisionByZero => ExecErrorCategory::DivisionByZero,
            ExecError::Overflow { .. } => ExecErrorCategory::Overflow,
            ExecError::InvalidCast { .. } => ExecErrorCategory::InvalidCast,
            ExecError::UnboundParameter { .. } => ExecErrorCategory::UnboundParameter,
            ExecError::DuplicateId { .. } => ExecErrorCategory::DuplicateId,
            ExecError::InvalidDocument { .. }
            | ExecError::PathConflict { .. }
            | ExecError::DocumentTooDeep { .. } => ExecErrorCategory::InvalidDocument,
            ExecError::LimitExceeded { .. } | ExecError::WriteTooLarge { .. } => {
                ExecErrorCategory::LimitExceeded
            }
            ExecError::InvalidArgument { .. } => ExecErrorCategory::InvalidArgument,
            ExecError::PartialMismatch { .. } | ExecError::WrongStatement { .. } => {
                ExecErrorCategory::Internal
            }
        }
    }
}

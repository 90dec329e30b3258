//! SQLSTATE codes: the one place they live.
//!
//! Every error a client sees carries a [`SqlState`] from this module. The wire layer maps its own
//! protocol errors here; the mapping of query and storage errors (an exhaustive `match`, no `_`
//! arm, so a new variant fails to compile until mapped) is added next to it by the integration.

use std::fmt;

/// A five-character SQLSTATE code (ASCII digits and upper-case letters).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState([u8; 5]);

impl SqlState {
    /// The code as text, for instance `"08P01"`.
    pub fn code(&self) -> &str {
        // The constructor only takes ASCII, so this never fails; the fallback keeps the input
        // path free of panics anyway.
        std::str::from_utf8(&self.0).unwrap_or("XX000")
    }

    /// Builds a code from five ASCII upper-case letters or digits; `None` otherwise.
    pub const fn new(code: &[u8; 5]) -> Option<SqlState> {
        const fn valid(c: u8) -> bool {
            c.is_ascii_digit() || c.is_ascii_uppercase()
        }
        let [a, b, c, d, e] = *code;
        if valid(a) && valid(b) && valid(c) && valid(d) && valid(e) {
            Some(SqlState(*code))
        } else {
            None
        }
    }

    // Only evaluated in the `const` items below: a bad literal fails to compile, so the panic
    // can never fire at run time.
    #[allow(clippy::panic)]
    const fn of(code: &[u8; 5]) -> SqlState {
        match SqlState::new(code) {
            Some(s) => s,
            None => panic!("invalid SQLSTATE constant"),
        }
    }

    /// 00000 successful_completion.
    pub const SUCCESSFUL_COMPLETION: SqlState = SqlState::of(b"00000");
    /// 01000 warning (for notices).
    pub const WARNING: SqlState = SqlState::of(b"01000");
    /// 08006 connection_failure.
    pub const CONNECTION_FAILURE: SqlState = SqlState::of(b"08006");
    /// 08P01 protocol_violation: a malformed or unexpected frontend message.
    pub const PROTOCOL_VIOLATION: SqlState = SqlState::of(b"08P01");
    /// 0A000 feature_not_supported.
    pub const FEATURE_NOT_SUPPORTED: SqlState = SqlState::of(b"0A000");
    /// 22021 character_not_in_repertoire: text that is not UTF-8.
    pub const CHARACTER_NOT_IN_REPERTOIRE: SqlState = SqlState::of(b"22021");
    /// 22P03 invalid_binary_representation.
    pub const INVALID_BINARY_REPRESENTATION: SqlState = SqlState::of(b"22P03");
    /// 22P02 invalid_text_representation.
    pub const INVALID_TEXT_REPRESENTATION: SqlState = SqlState::of(b"22P02");
    /// 26000 invalid_sql_statement_name: unknown prepared statement.
    pub const INVALID_SQL_STATEMENT_NAME: SqlState = SqlState::of(b"26000");
    /// 28000 invalid_authorization_specification.
    pub const INVALID_AUTHORIZATION_SPECIFICATION: SqlState = SqlState::of(b"28000");
    /// 28P01 invalid_password.
    pub const INVALID_PASSWORD: SqlState = SqlState::of(b"28P01");
    /// 34000 invalid_cursor_name: unknown portal.
    pub const INVALID_CURSOR_NAME: SqlState = SqlState::of(b"34000");
    /// 3D000 invalid_catalog_name: unknown database.
    pub const INVALID_CATALOG_NAME: SqlState = SqlState::of(b"3D000");
    /// 40001 serialization_failure: a transaction conflict; retry the transaction.
    pub const SERIALIZATION_FAILURE: SqlState = SqlState::of(b"40001");
    /// BEGIN inside a transaction block (a warning).
    pub const ACTIVE_SQL_TRANSACTION: SqlState = SqlState::of(b"25001");
    /// COMMIT or ROLLBACK outside a transaction block (a warning).
    pub const NO_ACTIVE_SQL_TRANSACTION: SqlState = SqlState::of(b"25P01");
    /// A statement in a failed transaction block.
    pub const IN_FAILED_SQL_TRANSACTION: SqlState = SqlState::of(b"25P02");
    /// 42601 syntax_error.
    pub const SYNTAX_ERROR: SqlState = SqlState::of(b"42601");
    /// 42P05 duplicate_prepared_statement.
    pub const DUPLICATE_PREPARED_STATEMENT: SqlState = SqlState::of(b"42P05");
    /// 42P03 duplicate_cursor: a named portal that already exists.
    pub const DUPLICATE_CURSOR: SqlState = SqlState::of(b"42P03");
    /// 53300 too_many_connections.
    pub const TOO_MANY_CONNECTIONS: SqlState = SqlState::of(b"53300");
    /// 53400 configuration_limit_exceeded (a region buffer is full).
    pub const CONFIGURATION_LIMIT_EXCEEDED: SqlState = SqlState::of(b"53400");
    /// 54000 program_limit_exceeded: a configured limit was hit.
    pub const PROGRAM_LIMIT_EXCEEDED: SqlState = SqlState::of(b"54000");
    /// 57014 query_canceled.
    pub const QUERY_CANCELED: SqlState = SqlState::of(b"57014");
    /// 57P01 admin_shutdown.
    pub const ADMIN_SHUTDOWN: SqlState = SqlState::of(b"57P01");
    /// 57P05 idle_session_timeout.
    pub const IDLE_SESSION_TIMEOUT: SqlState = SqlState::of(b"57P05");
    /// XX000 internal_error: a bug of ours.
    pub const INTERNAL_ERROR: SqlState = SqlState::of(b"XX000");
    /// XX001 data_corrupted.
    pub const DATA_CORRUPTED: SqlState = SqlState::of(b"XX001");
    /// 22003 numeric_value_out_of_range.
    pub const NUMERIC_VALUE_OUT_OF_RANGE: SqlState = SqlState::of(b"22003");
    /// 22012 division_by_zero.
    pub const DIVISION_BY_ZERO: SqlState = SqlState::of(b"22012");
    /// 22023 invalid_parameter_value: a value that parses but is not allowed (a bad id).
    pub const INVALID_PARAMETER_VALUE: SqlState = SqlState::of(b"22023");
    /// 22000 data_exception: a document that is not a valid JSON object.
    pub const DATA_EXCEPTION: SqlState = SqlState::of(b"22000");
    /// 22P04 bad_copy_file_format: COPY input that does not parse as its format.
    pub const BAD_COPY_FILE_FORMAT: SqlState = SqlState::of(b"22P04");
    /// 23502 not_null_violation: a NULL id or document in COPY input.
    pub const NOT_NULL_VIOLATION: SqlState = SqlState::of(b"23502");
    /// 23505 unique_violation: a document with that id exists.
    pub const UNIQUE_VIOLATION: SqlState = SqlState::of(b"23505");
    /// 23514 check_violation: a document breaks its collection's content configuration.
    pub const CHECK_VIOLATION: SqlState = SqlState::of(b"23514");
    /// 42804 datatype_mismatch.
    pub const DATATYPE_MISMATCH: SqlState = SqlState::of(b"42804");
    /// 42803 grouping_error: a column outside GROUP BY and aggregates in an aggregate query.
    pub const GROUPING_ERROR: SqlState = SqlState::of(b"42803");
    /// 42P02 undefined_parameter: `$n` without a value.
    pub const UNDEFINED_PARAMETER: SqlState = SqlState::of(b"42P02");
    /// 42P07 duplicate_table: CREATE TABLE of a configured collection.
    pub const DUPLICATE_TABLE: SqlState = SqlState::of(b"42P07");
    /// 42704 undefined_object: an unknown setting.
    pub const UNDEFINED_OBJECT: SqlState = SqlState::of(b"42704");
    /// 42809 wrong_object_type: `ALTER FRAGMENT` to a proxy node.
    pub const WRONG_OBJECT_TYPE: SqlState = SqlState::of(b"42809");
    /// 57P03 cannot_connect_now: no cluster coordinator reachable right now.
    pub const CANNOT_CONNECT_NOW: SqlState = SqlState::of(b"57P03");
    /// 42P01 undefined_table.
    pub const UNDEFINED_TABLE: SqlState = SqlState::of(b"42P01");
    /// 55000 object_not_in_prerequisite_state: a refused configuration change.
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: SqlState = SqlState::of(b"55000");
    /// 58030 io_error: the disk failed; the fragment stopped taking writes.
    pub const IO_ERROR: SqlState = SqlState::of(b"58030");
}

impl fmt::Debug for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SqlState({})", self.code())
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The SQLSTATE, message and hint a client gets for an engine error. The matches are
/// exhaustive (no `_` arm): a new error variant does not compile until it is mapped here.
pub fn engine_error(error: &crate::engine::EngineError) -> super::PgError {
    use crate::engine::EngineError as E;
    use query::{ExecErrorCategory as X, PlanErrorCategory as P};
    let code = match error {
        E::Plan(e) => match e.category() {
            P::Syntax => SqlState::SYNTAX_ERROR,
            P::Unsupported => SqlState::FEATURE_NOT_SUPPORTED,
            P::TooDeep | P::LimitExceeded => SqlState::PROGRAM_LIMIT_EXCEEDED,
            P::BadParameter => SqlState::INVALID_TEXT_REPRESENTATION,
            P::TypeMismatch => SqlState::DATATYPE_MISMATCH,
            P::Grouping => SqlState::GROUPING_ERROR,
            P::InvalidLiteral => SqlState::INVALID_TEXT_REPRESENTATION,
            P::InvalidSharding | P::Invalid => SqlState::INVALID_PARAMETER_VALUE,
        },
        E::Exec(e) => match e.category() {
            X::DivisionByZero => SqlState::DIVISION_BY_ZERO,
            X::Overflow => SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            X::InvalidCast => SqlState::INVALID_TEXT_REPRESENTATION,
            X::UnboundParameter => SqlState::UNDEFINED_PARAMETER,
            X::DuplicateId => SqlState::UNIQUE_VIOLATION,
            X::InvalidDocument => SqlState::DATA_EXCEPTION,
            X::LimitExceeded => SqlState::PROGRAM_LIMIT_EXCEEDED,
            X::InvalidArgument => SqlState::INVALID_PARAMETER_VALUE,
            X::Internal => SqlState::INTERNAL_ERROR,
        },
        E::Append(e) => append_state(e),
        E::Id(_) => SqlState::INVALID_PARAMETER_VALUE,
        E::Assign(_) => SqlState::CHECK_VIOLATION,
        E::Validation(_) => SqlState::CHECK_VIOLATION,
        E::Change(_) => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        E::Call(_) => SqlState::ADMIN_SHUTDOWN,
        E::Catalog(_) => SqlState::IO_ERROR,
        E::CollectionExists(_) => SqlState::DUPLICATE_TABLE,
        E::NoConfiguration(_) | E::NoSuchCollection(_) => SqlState::UNDEFINED_TABLE,
        E::Copy(e) => match e.category() {
            query::copy::CopyErrorCategory::BadFormat => SqlState::BAD_COPY_FILE_FORMAT,
            query::copy::CopyErrorCategory::NotNull => SqlState::NOT_NULL_VIOLATION,
            query::copy::CopyErrorCategory::Encoding => SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            query::copy::CopyErrorCategory::LimitExceeded => SqlState::PROGRAM_LIMIT_EXCEEDED,
        },
        E::NotSupported { .. } => SqlState::FEATURE_NOT_SUPPORTED,
        E::Param { .. } => SqlState::INVALID_TEXT_REPRESENTATION,
        E::Contention { .. } => SqlState::SERIALIZATION_FAILURE,
        E::ContentIdWithoutConfig { .. } => SqlState::INVALID_PARAMETER_VALUE,
        E::UnknownSetting(_) => SqlState::UNDEFINED_OBJECT,
        E::Wire(_) => SqlState::CONNECTION_FAILURE,
        E::Cancelled => SqlState::QUERY_CANCELED,
        E::TxnConflict { .. } | E::TxnPhantom { .. } => SqlState::SERIALIZATION_FAILURE,
        E::TxnAborted | E::TxnHeld { .. } => SqlState::SERIALIZATION_FAILURE,
        E::TxnLimit { .. } | E::FragmentOpsLimit { .. } => SqlState::PROGRAM_LIMIT_EXCEEDED,
        E::Journal(_) => SqlState::IO_ERROR,
        E::BackupTarget(_) => SqlState::INVALID_PARAMETER_VALUE,
        E::Backup(_) => SqlState::IO_ERROR,
        E::Move(e) => move_state(e),
        E::NotHere { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        // Refused before anything was written, by a fragment a handoff fenced: a conflict
        // with the move, which the client retries like any other (40001).
        E::Fenced { .. } => SqlState::SERIALIZATION_FAILURE,
        E::FragmentLifecycle(_) => SqlState::IO_ERROR,
        E::Region(e) => region_state(e),
    };
    let mut pg = super::PgError::new(code, error.to_string());
    if let E::Plan(query::PlanError::Syntax { position, .. }) = error {
        // query's position is already PostgreSQL's: a 1-based character offset.
        pg = pg.with_position(u32::try_from(*position).unwrap_or(u32::MAX));
    }
    if let Some(hint) = hint(error) {
        pg = pg.with_hint(hint);
    }
    pg
}

fn move_state(error: &crate::cluster::ops::MoveError) -> SqlState {
    use crate::cluster::ops::MoveError as M;
    match error {
        M::NotCluster => SqlState::FEATURE_NOT_SUPPORTED,
        M::UnknownFragment { .. } | M::UnknownNode { .. } => SqlState::UNDEFINED_OBJECT,
        M::ProxyNode { .. } => SqlState::WRONG_OBJECT_TYPE,
        M::AlreadyOwner { .. } | M::AlreadyMoving { .. } | M::NoMap | M::Refused { .. } => {
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
        }
        M::NoCoordinator { .. } => SqlState::CANNOT_CONNECT_NOW,
        // Other catalog changes kept winning the race: retry, as after any conflict.
        M::CatalogChanged { .. } => SqlState::SERIALIZATION_FAILURE,
    }
}

fn region_state(error: &crate::cluster::region::RegionError) -> SqlState {
    use crate::cluster::region::RegionError as R;
    match error {
        R::BufferFull { .. } => SqlState::CONFIGURATION_LIMIT_EXCEEDED,
        R::RequestTooLarge { .. } => SqlState::PROGRAM_LIMIT_EXCEEDED,
        R::CrossNode { .. } => SqlState::FEATURE_NOT_SUPPORTED,
        R::WaitExpired { .. } | R::MapChurn { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        // Nothing is wrong with the statement or the connection: run it again, as after a
        // conflict (a client's retry loop already knows 40001).
        R::MapChangedMidStream => SqlState::SERIALIZATION_FAILURE,
        R::Forward { .. } | R::UnknownNode { .. } => SqlState::CONNECTION_FAILURE,
        R::Remote { code, .. } => code
            .as_bytes()
            .first_chunk::<5>()
            .and_then(SqlState::new)
            .unwrap_or(SqlState::INTERNAL_ERROR),
    }
}

fn append_state(error: &storage::AppendError) -> SqlState {
    use storage::AppendError as A;
    match error {
        A::Conflict { .. } | A::Locked { .. } => SqlState::SERIALIZATION_FAILURE,
        A::WrongShard { .. } => SqlState::INTERNAL_ERROR,
        A::Input(_) => SqlState::PROGRAM_LIMIT_EXCEEDED,
        A::TxnExists { .. } | A::TxnUnknown { .. } => SqlState::INTERNAL_ERROR,
        A::Fatal { .. } => SqlState::IO_ERROR,
        A::Closed { .. } => SqlState::ADMIN_SHUTDOWN,
        other => {
            // AppendError is #[non_exhaustive] across crates, so the compiler requires this
            // arm; every variant known when this was written is listed above.
            tracing::error!(error = %other, "unmapped storage error");
            SqlState::INTERNAL_ERROR
        }
    }
}

fn hint(error: &crate::engine::EngineError) -> Option<&'static str> {
    use crate::engine::EngineError as E;
    match error {
        E::NotSupported { hint, .. } => Some(hint),
        E::Contention { .. } | E::Append(storage::AppendError::Conflict { .. }) => {
            Some("retry the statement")
        }
        E::TxnConflict { .. } | E::TxnPhantom { .. } | E::TxnHeld { .. } | E::TxnAborted => {
            Some("retry the transaction")
        }
        E::Exec(e) if e.category() == query::ExecErrorCategory::DuplicateId => {
            Some("use INSERT … ON CONFLICT (id) DO UPDATE or DO NOTHING to write over it")
        }
        E::Append(storage::AppendError::Fatal { .. }) => {
            Some("the fragment stopped taking writes after a disk error; see the server log")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that a syntax error keeps query's 1-based position unchanged (psql draws its
    // caret under that character) and maps to 42601.
    #[test]
    fn unit_syntax_error_position_is_not_shifted() {
        let plan = match query::parse("SELEC 1") {
            Err(e) => e,
            Ok(_) => panic!("SELEC is not SQL"),
        };
        let query::PlanError::Syntax { position, .. } = &plan else {
            panic!("expected a syntax error, got {plan:?}");
        };
        assert_eq!(*position, 1, "query reports the first character as 1");
        let pg = engine_error(&crate::engine::EngineError::Plan(plan.clone()));
        assert_eq!(pg.code(), SqlState::SYNTAX_ERROR);
        assert_eq!(pg.position(), Some(1));
    }

    // Checks that codes print as their five characters and that bad codes are refused.
    #[test]
    fn unit_code_text_and_validation() {
        assert_eq!(SqlState::PROTOCOL_VIOLATION.code(), "08P01");
        assert_eq!(SqlState::IDLE_SESSION_TIMEOUT.to_string(), "57P05");
        assert!(SqlState::new(b"0a000").is_none());
        assert!(SqlState::new(b"42 01").is_none());
        assert_eq!(SqlState::new(b"42601"), Some(SqlState::SYNTAX_ERROR));
    }
}

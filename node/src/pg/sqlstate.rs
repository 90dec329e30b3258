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
    /// 42601 syntax_error.
    pub const SYNTAX_ERROR: SqlState = SqlState::of(b"42601");
    /// 42P05 duplicate_prepared_statement.
    pub const DUPLICATE_PREPARED_STATEMENT: SqlState = SqlState::of(b"42P05");
    /// 42P03 duplicate_cursor: a named portal that already exists.
    pub const DUPLICATE_CURSOR: SqlState = SqlState::of(b"42P03");
    /// 53300 too_many_connections.
    pub const TOO_MANY_CONNECTIONS: SqlState = SqlState::of(b"53300");
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

#[cfg(test)]
mod tests {
    use super::*;

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

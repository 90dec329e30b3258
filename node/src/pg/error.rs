//! Errors of the wire layer: [`PgError`], what a client sees, and [`ServeError`], why a
//! connection ended.

use std::fmt;
use std::io;

use crate::pg::sqlstate::SqlState;

/// Severity of an [`PgError`] as sent in the ErrorResponse `S`/`V` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The statement failed; the session goes on.
    Error,
    /// The session ends after this message.
    Fatal,
}

impl Severity {
    /// The word PostgreSQL sends for this severity.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        }
    }
}

/// An error reported to the client as an ErrorResponse: a SQLSTATE, a message that says what
/// went wrong, and where useful a detail and a hint that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgError {
    severity: Severity,
    code: SqlState,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
    position: Option<u32>,
    context: Option<String>,
}

impl PgError {
    /// An ERROR with a code and a message; the session continues after it.
    pub fn new(code: SqlState, message: impl Into<String>) -> PgError {
        PgError {
            severity: Severity::Error,
            code,
            message: message.into(),
            detail: None,
            hint: None,
            position: None,
            context: None,
        }
    }

    /// A FATAL error: the connection is closed after sending it.
    pub fn fatal(code: SqlState, message: impl Into<String>) -> PgError {
        PgError { severity: Severity::Fatal, ..PgError::new(code, message) }
    }

    /// The same error as FATAL (detail, hint and position kept).
    pub fn into_fatal(self) -> PgError {
        PgError { severity: Severity::Fatal, ..self }
    }

    /// Adds a detail line (facts about the failure).
    pub fn with_detail(mut self, detail: impl Into<String>) -> PgError {
        self.detail = Some(detail.into());
        self
    }

    /// Adds a hint (what the user should do about it).
    pub fn with_hint(mut self, hint: impl Into<String>) -> PgError {
        self.hint = Some(hint.into());
        self
    }

    /// Adds the 1-based character position in the statement text the error refers to.
    pub fn with_position(mut self, position: u32) -> PgError {
        self.position = Some(position);
        self
    }

    /// Adds where the error happened (the `W` field, psql's `CONTEXT:` line), for instance
    /// `COPY orders, line 3`.
    pub fn with_context(mut self, context: impl Into<String>) -> PgError {
        self.context = Some(context.into());
        self
    }

    /// The severity.
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// The SQLSTATE.
    pub fn code(&self) -> SqlState {
        self.code
    }

    /// The primary message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The detail, if any.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// The hint, if any.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The position, if any.
    pub fn position(&self) -> Option<u32> {
        self.position
    }

    /// The ErrorResponse / NoticeResponse fields, in the order PostgreSQL sends them.
    pub(crate) fn fields(&self) -> Vec<(u8, String)> {
        let severity = self.severity.as_str().to_owned();
        let mut fields = vec![
            (b'S', severity.clone()),
            (b'V', severity),
            (b'C', self.code.code().to_owned()),
            (b'M', self.message.clone()),
        ];
        if let Some(detail) = &self.detail {
            fields.push((b'D', detail.clone()));
        }
        if let Some(hint) = &self.hint {
            fields.push((b'H', hint.clone()));
        }
        if let Some(position) = self.position {
            fields.push((b'P', position.to_string()));
        }
        if let Some(context) = &self.context {
            fields.push((b'W', context.clone()));
        }
        fields
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity.as_str(), self.code, self.message)
    }
}

impl std::error::Error for PgError {}

/// A NoticeResponse: an informational message that does not fail the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    severity: &'static str,
    code: SqlState,
    message: String,
    hint: Option<String>,
}

impl Notice {
    /// A NOTICE with SQLSTATE 00000.
    pub fn new(message: impl Into<String>) -> Notice {
        Notice {
            severity: "NOTICE",
            code: SqlState::SUCCESSFUL_COMPLETION,
            message: message.into(),
            hint: None,
        }
    }

    /// A WARNING with SQLSTATE 01000.
    pub fn warning(message: impl Into<String>) -> Notice {
        Notice { severity: "WARNING", code: SqlState::WARNING, message: message.into(), hint: None }
    }

    /// Sets the SQLSTATE (a WARNING's class-25 code, say).
    pub fn with_code(mut self, code: SqlState) -> Notice {
        self.code = code;
        self
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Notice {
        self.hint = Some(hint.into());
        self
    }

    pub(crate) fn fields(&self) -> Vec<(u8, String)> {
        let mut fields = vec![
            (b'S', self.severity.to_owned()),
            (b'V', self.severity.to_owned()),
            (b'C', self.code.code().to_owned()),
            (b'M', self.message.clone()),
        ];
        if let Some(hint) = &self.hint {
            fields.push((b'H', hint.clone()));
        }
        fields
    }
}

/// Why [`crate::pg::serve_connection`] returned. A client closing its socket or sending
/// Terminate is `Ok(())`, not an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The socket failed.
    #[error("connection i/o failed: {0}")]
    Io(#[from] io::Error),
    /// We sent a FATAL error and closed the connection (bad startup, bad credentials, an
    /// unframeable message, idle timeout, too many connections).
    #[error("connection closed after {0}")]
    Fatal(PgError),
    /// Encoding a backend message failed (a bug: our own messages are always encodable).
    #[error("encoding a backend message failed: {0}")]
    Encode(String),
}

//! The boundary between the wire protocol and SQL: the [`Engine`] trait the node implements
//! with `query` and `storage`, and the types it speaks in.
//!
//! The wire layer owns framing, sessions, statements and portals by name, formats, errors and
//! flushing. The engine owns SQL: it turns text into statements, describes them, runs them and
//! writes their rows into a [`RowSink`], which encodes DataRow frames straight into the
//! connection's output buffer (no per-row allocation).

use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::AsyncWriteExt;
use glommio::net::TcpStream;

use crate::pg::error::{Notice, PgError};
use crate::pg::limits::{PG_RESULT_BYTES_MAX, PG_RESULT_FLUSH_BYTES};
use crate::pg::sqlstate::SqlState;

/// A PostgreSQL type OID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Oid(pub u32);

impl Oid {
    /// 0: unspecified, let the server infer.
    pub const UNSPECIFIED: Oid = Oid(0);
    /// bool.
    pub const BOOL: Oid = Oid(16);
    /// bytea.
    pub const BYTEA: Oid = Oid(17);
    /// int8.
    pub const INT8: Oid = Oid(20);
    /// int2.
    pub const INT2: Oid = Oid(21);
    /// int4.
    pub const INT4: Oid = Oid(23);
    /// text.
    pub const TEXT: Oid = Oid(25);
    /// json.
    pub const JSON: Oid = Oid(114);
    /// float4.
    pub const FLOAT4: Oid = Oid(700);
    /// float8.
    pub const FLOAT8: Oid = Oid(701);
    /// varchar.
    pub const VARCHAR: Oid = Oid(1043);
    /// numeric.
    pub const NUMERIC: Oid = Oid(1700);
    /// jsonb.
    pub const JSONB: Oid = Oid(3802);
}

/// Wire format of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Format code 0: text.
    #[default]
    Text,
    /// Format code 1: binary.
    Binary,
}

impl Format {
    /// Maps a wire format code.
    pub fn from_code(code: i16) -> Option<Format> {
        match code {
            0 => Some(Format::Text),
            1 => Some(Format::Binary),
            _ => None,
        }
    }

    /// The format of column `i` under Bind's rule: no codes means all text, one code applies
    /// to every column, otherwise one code per column.
    pub(crate) fn for_column(formats: &[Format], i: usize) -> Format {
        match formats {
            [] => Format::Text,
            [one] => *one,
            many => many.get(i).copied().unwrap_or_default(),
        }
    }

    /// The wire format code.
    pub fn code(self) -> i16 {
        match self {
            Format::Text => 0,
            Format::Binary => 1,
        }
    }
}

/// One result column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Column name as the client sees it.
    pub name: String,
    /// Its type.
    pub type_oid: Oid,
    /// `pg_type.typlen`: the fixed size in bytes, or -1 for variable length.
    pub type_size: i16,
}

impl Column {
    /// A column with a variable-length type (size -1).
    pub fn new(name: impl Into<String>, type_oid: Oid) -> Column {
        let type_size = match type_oid {
            Oid::BOOL => 1,
            Oid::INT2 => 2,
            Oid::INT4 | Oid::FLOAT4 => 4,
            Oid::INT8 | Oid::FLOAT8 => 8,
            _ => -1,
        };
        Column { name: name.into(), type_oid, type_size }
    }
}

/// What a prepared statement takes and returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Description {
    /// Parameter types, one per `$n`.
    pub params: Vec<Oid>,
    /// Result columns; `None` for a statement that returns no rows (INSERT, BEGIN, ...).
    pub columns: Option<Vec<Column>>,
}

/// The CommandComplete tag of a statement, for instance `SELECT 3` or `INSERT 0 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTag(String);

impl CommandTag {
    /// A tag without a row count (`BEGIN`, `COMMIT`, `SET`, `CREATE TABLE`).
    pub fn new(verb: impl Into<String>) -> CommandTag {
        CommandTag(verb.into())
    }

    /// `<verb> <rows>`, for SELECT, UPDATE, DELETE.
    pub fn with_rows(verb: &str, rows: u64) -> CommandTag {
        CommandTag(format!("{verb} {rows}"))
    }

    /// `INSERT 0 <rows>` (the 0 is the legacy OID field).
    pub fn insert(rows: u64) -> CommandTag {
        CommandTag(format!("INSERT 0 {rows}"))
    }

    /// The tag text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The transaction state reported in ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransactionStatus {
    /// 'I': not in a transaction block.
    #[default]
    Idle,
    /// 'T': in a transaction block.
    InTransaction,
    /// 'E': in a failed transaction block; statements are refused until ROLLBACK.
    Failed,
}

/// What a statement asks of the connection itself, whose prepared statements and portals
/// live in the wire layer, not in the engine ([`Engine::connection_effect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionEffect {
    /// `DEALLOCATE name` (a missing one is 26000), or every prepared statement (`None`).
    Deallocate(Option<String>),
    /// `DISCARD ALL`: every prepared statement and portal (refused inside a transaction
    /// block, 25001); the engine resets its own settings when it runs the statement.
    DiscardAll,
}

/// What a COPY statement exchanges with the client ([`Engine::copy_mode`]); both directions
/// carry text-format rows (format code 0), whatever the statement's text or CSV options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMode {
    /// `COPY … FROM STDIN`: the client sends rows of this many columns in CopyData messages,
    /// then CopyDone (or CopyFail); the wire layer hands them to [`Engine::copy_data`] and
    /// [`Engine::copy_done`].
    In {
        /// Columns per row.
        columns: usize,
    },
    /// `COPY … TO STDOUT`: [`Engine::execute`] writes each row with [`RowSink::copy_data`];
    /// the wire layer sends CopyOutResponse before and CopyDone after.
    Out {
        /// Columns per row.
        columns: usize,
    },
}

/// The error for COPY data when no `COPY … FROM STDIN` is running.
pub(crate) fn no_copy_running() -> PgError {
    PgError::new(SqlState::PROTOCOL_VIOLATION, "no COPY FROM STDIN is running")
}

/// Who connected: the startup parameters after authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The `user` parameter.
    pub user: String,
    /// The `database` parameter (defaults to the user name, as in PostgreSQL).
    pub database: String,
    /// Every startup parameter, in the order sent.
    pub parameters: Vec<(String, String)>,
}

/// One bound parameter value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param<'a> {
    /// The statement's type for this parameter.
    pub type_oid: Oid,
    /// The format the client sent it in.
    pub format: Format,
    /// The bytes; `None` is SQL NULL.
    pub value: Option<&'a [u8]>,
}

/// The parameters of one execution.
#[derive(Debug, Clone, Copy)]
pub struct Params<'a> {
    types: &'a [Oid],
    formats: &'a [Format],
    values: &'a [Option<Bytes>],
}

impl<'a> Params<'a> {
    /// No parameters (simple query).
    pub fn empty() -> Params<'static> {
        Params { types: &[], formats: &[], values: &[] }
    }

    pub(crate) fn new(
        types: &'a [Oid],
        formats: &'a [Format],
        values: &'a [Option<Bytes>],
    ) -> Params<'a> {
        Params { types, formats, values }
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Parameter `i` (0-based: `$1` is 0).
    pub fn get(&self, i: usize) -> Option<Param<'a>> {
        let value = self.values.get(i)?;
        Some(Param {
            type_oid: self.types.get(i).copied().unwrap_or(Oid::UNSPECIFIED),
            format: self.formats.get(i).copied().unwrap_or_default(),
            value: value.as_deref(),
        })
    }

    /// All parameters in order.
    pub fn iter(&self) -> impl Iterator<Item = Param<'a>> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

/// Set by a CancelRequest (from any thread); read by the engine between units of work.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// True once a cancel was requested for the running statement.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub(crate) fn reset(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Where a statement's rows go: DataRow frames encoded in place, in the formats the client
/// asked for. Unsent rows are bounded by [`PG_RESULT_BYTES_MAX`]; an engine producing large
/// results calls [`RowSink::flush_if_needed`] between rows to stream them to the client.
pub struct RowSink<'a> {
    rows_out: &'a mut BytesMut,
    /// The client socket in streaming mode (rows may be sent before the statement ends).
    writer: Option<&'a mut TcpStream>,
    row_ends: Option<&'a mut Vec<usize>>,
    /// Where notices go when rows are captured; `None` when they share `rows_out`.
    notices_out: Option<&'a mut BytesMut>,
    formats: &'a [Format],
    column_count: usize,
    start: usize,
    /// Unsent row bytes allowed: [`PG_RESULT_BYTES_MAX`] when streaming, what is left of the
    /// session's budget for rows kept in portals when capturing.
    bytes_max: usize,
    rows: u64,
    cancel: &'a CancelFlag,
}

impl<'a> RowSink<'a> {
    /// Rows and notices both go to `out`; with a `writer`, [`RowSink::flush_if_needed`] sends
    /// them early.
    pub(crate) fn streaming(
        out: &'a mut BytesMut,
        writer: Option<&'a mut TcpStream>,
        formats: &'a [Format],
        column_count: usize,
        cancel: &'a CancelFlag,
    ) -> RowSink<'a> {
        let start = out.len();
        RowSink {
            rows_out: out,
            writer,
            row_ends: None,
            notices_out: None,
            formats,
            column_count,
            start,
            bytes_max: PG_RESULT_BYTES_MAX,
            rows: 0,
            cancel,
        }
    }

    /// Rows go to `rows` with their end offsets recorded (for Execute with a row limit), at
    /// most `bytes_max` bytes of them; notices go to `out`.
    pub(crate) fn capturing(
        rows: &'a mut BytesMut,
        row_ends: &'a mut Vec<usize>,
        out: &'a mut BytesMut,
        formats: &'a [Format],
        column_count: usize,
        cancel: &'a CancelFlag,
        bytes_max: usize,
    ) -> RowSink<'a> {
        let start = rows.len();
        RowSink {
            rows_out: rows,
            writer: None,
            row_ends: Some(row_ends),
            notices_out: Some(out),
            formats,
            column_count,
            start,
            bytes_max,
            rows: 0,
            cancel,
        }
    }

    /// The format column `i` must be encoded in.
    pub fn format(&self, column: usize) -> Format {
        Format::for_column(self.formats, column)
    }

    /// Number of result columns the statement described.
    pub fn column_count(&self) -> usize {
        self.column_count
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// True once the client asked to cancel this statement.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// `Err(57014 query_canceled)` once the client asked to cancel this statement.
    pub fn check_cancelled(&self) -> Result<(), PgError> {
        if self.is_cancelled() {
            return Err(PgError::new(
                SqlState::QUERY_CANCELED,
                "canceling statement due to user request",
            ));
        }
        Ok(())
    }

    /// A clone of the cancel flag, for work that outlives a borrow of the sink.
    pub fn cancel_flag(&self) -> CancelFlag {
        self.cancel.clone()
    }

    /// Sends the rows encoded so far to the client once more than [`PG_RESULT_FLUSH_BYTES`] are
    /// pending, so a large result streams instead of hitting [`PG_RESULT_BYTES_MAX`]. Cheap when
    /// there is little to send: call it after every row or every few rows. Does nothing for an
    /// Execute with a row limit (those rows are kept for the next Execute).
    pub async fn flush_if_needed(&mut self) -> Result<(), PgError> {
        let Some(writer) = self.writer.as_deref_mut() else { return Ok(()) };
        if self.rows_out.len() < PG_RESULT_FLUSH_BYTES {
            return Ok(());
        }
        writer.write_all(self.rows_out).await.map_err(|e| {
            PgError::new(SqlState::CONNECTION_FAILURE, format!("sending rows failed: {e}"))
        })?;
        self.rows_out.clear();
        self.start = 0;
        Ok(())
    }

    /// Sends a NoticeResponse ahead of the statement's completion.
    pub fn notice(&mut self, notice: &Notice) {
        let out = match self.notices_out.as_deref_mut() {
            Some(out) => out,
            None => &mut *self.rows_out,
        };
        crate::pg::conn::encode_notice(out, notice);
    }

    /// Sends one row of `COPY … TO STDOUT`, already in the statement's format (newline
    /// included), as a CopyData message. A row above the unsent-rows budget is 54000.
    pub fn copy_data(&mut self, row: &[u8]) -> Result<(), PgError> {
        let len =
            i32::try_from(row.len().saturating_add(4)).ok().filter(|_| row.len() <= self.bytes_max);
        let Some(len) = len else {
            return Err(PgError::new(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "COPY row of {} bytes exceeds the result limit of {} bytes",
                    row.len(),
                    self.bytes_max
                ),
            ));
        };
        self.rows_out.put_u8(b'd');
        self.rows_out.put_i32(len);
        self.rows_out.put_slice(row);
        self.rows += 1;
        Ok(())
    }

    /// Starts a DataRow; add each column's value in order, then [`RowWriter::finish`].
    pub fn row(&mut self) -> RowWriter<'_, 'a> {
        let start = self.rows_out.len();
        self.rows_out.put_u8(b'D');
        self.rows_out.put_i32(0); // length, patched in finish
        self.rows_out.put_i16(0); // column count, patched in finish
        RowWriter { sink: self, start, columns: 0, finished: false, oversized: false }
    }
}

/// One DataRow being written. Dropping it without [`RowWriter::finish`] discards the row.
pub struct RowWriter<'s, 'a> {
    sink: &'s mut RowSink<'a>,
    start: usize,
    columns: usize,
    finished: bool,
    /// A value was refused for size; `finish` fails with 54000.
    oversized: bool,
}

impl RowWriter<'_, '_> {
    /// The format of the next column.
    pub fn format(&self) -> Format {
        self.sink.format(self.columns)
    }

    /// A NULL value.
    pub fn null(&mut self) {
        self.sink.rows_out.put_i32(-1);
        self.columns += 1;
    }

    /// A value already encoded in [`RowWriter::format`].
    pub fn bytes(&mut self, value: &[u8]) {
        // A value larger than the budget is not copied at all; `finish` reports 54000. This also
        // keeps every length below i32::MAX (PG_RESULT_BYTES_MAX <= i32::MAX).
        let Ok(len) = i32::try_from(value.len()) else {
            self.oversized = true;
            return;
        };
        if value.len() > self.sink.bytes_max {
            self.oversized = true;
            return;
        }
        self.sink.rows_out.put_i32(len);
        self.sink.rows_out.put_slice(value);
        self.columns += 1;
    }

    /// A text value (valid for text format, and for binary text/json/varchar columns).
    pub fn text(&mut self, value: &str) {
        self.bytes(value.as_bytes());
    }

    /// A value written by `Display` (numbers, for instance), without a temporary String.
    pub fn display(&mut self, value: impl fmt::Display) {
        let len_at = self.sink.rows_out.len();
        self.sink.rows_out.put_i32(0);
        let mut w = BufWriter(self.sink.rows_out);
        // Writing to a BytesMut cannot fail; a Display impl that errors leaves what it wrote.
        let _ = write!(w, "{value}");
        let written = self.sink.rows_out.len() - len_at - 4;
        let len = i32::try_from(written).unwrap_or(i32::MAX).to_be_bytes();
        patch(self.sink.rows_out, len_at, &len);
        self.columns += 1;
    }

    /// Ends the row. Fails with 54000 when the statement's rows exceed [`PG_RESULT_BYTES_MAX`]
    /// or a row has more than 65535 columns.
    pub fn finish(mut self) -> Result<(), PgError> {
        self.finished = true;
        let out = &mut *self.sink.rows_out;
        let frame_len = out.len() - self.start - 1;
        let columns = i16::try_from(self.columns);
        let bytes_max = self.sink.bytes_max;
        let too_big = self.oversized || out.len() - self.sink.start > bytes_max;
        let (Ok(columns), Ok(frame_len), false) = (columns, i32::try_from(frame_len), too_big)
        else {
            out.truncate(self.start);
            return Err(PgError::new(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                format!("result is larger than {bytes_max} unsent bytes"),
            )
            .with_hint("Add a LIMIT or select fewer columns, or fetch in pages with a cursor."));
        };
        patch(out, self.start + 1, &frame_len.to_be_bytes());
        patch(out, self.start + 5, &columns.to_be_bytes());
        self.sink.rows += 1;
        if let Some(ends) = self.sink.row_ends.as_deref_mut() {
            ends.push(out.len());
        }
        Ok(())
    }
}

impl Drop for RowWriter<'_, '_> {
    fn drop(&mut self) {
        if !self.finished {
            self.sink.rows_out.truncate(self.start);
        }
    }
}

fn patch(out: &mut BytesMut, at: usize, bytes: &[u8]) {
    if let Some(dst) = out.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

struct BufWriter<'a>(&'a mut BytesMut);

impl fmt::Write for BufWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.put_slice(s.as_bytes());
        Ok(())
    }
}

/// The SQL side of a session. One value per connection; `!Send` is fine (glommio runs a
/// connection on one executor).
///
/// The methods are `async fn`s without `Send` bounds, on purpose: executors are
/// single-threaded.
#[allow(async_fn_in_trait)]
pub trait Engine {
    /// One statement after parsing (syntax only is enough), not yet planned.
    type Parsed;

    /// A planned statement, kept by name for reuse (prepared statements) and shared by the
    /// portals bound from it.
    type Statement;

    /// Called once after authentication, before the first ReadyForQuery. An error here is sent
    /// as FATAL (for instance 3D000 for an unknown database) and the connection closes.
    async fn start_session(&mut self, session: &SessionInfo) -> Result<(), PgError> {
        let _ = session;
        Ok(())
    }

    /// Splits and parses `sql` into statements: several for a simple query, none for an empty
    /// or comment-only string (the client gets EmptyQueryResponse). A syntax error anywhere
    /// fails the whole string before any statement runs, as in PostgreSQL. The wire layer
    /// refuses more than one statement in an extended-protocol Parse (42601).
    async fn parse(&mut self, sql: &str) -> Result<Vec<Self::Parsed>, PgError>;

    /// Resolves names, types and plan of one parsed statement. `param_types` are the types the
    /// client gave in Parse (`Oid::UNSPECIFIED` where it left them open; empty for a simple
    /// query). Extended protocol: called at Parse. Simple query: called for each statement
    /// right before it runs, after the statements before it in the same string have run, so a
    /// later statement may use what an earlier one created (`CREATE ...; INSERT ...`), as in
    /// PostgreSQL.
    async fn plan(
        &mut self,
        parsed: Self::Parsed,
        param_types: &[Oid],
    ) -> Result<Self::Statement, PgError>;

    /// Parameter types and result columns of a prepared statement.
    fn describe<'s>(&'s self, statement: &'s Self::Statement) -> &'s Description;

    /// Runs a statement with bound parameters, writing rows into `sink` in the formats it gives
    /// (see [`RowSink::format`]) and returning the CommandComplete tag. Long statements check
    /// [`RowSink::check_cancelled`] between units of work.
    async fn execute(
        &mut self,
        statement: &Self::Statement,
        params: Params<'_>,
        sink: &mut RowSink<'_>,
    ) -> Result<CommandTag, PgError>;

    /// The transaction state for ReadyForQuery.
    fn transaction_status(&self) -> TransactionStatus;

    /// A simple Query of several statements starts: until [`Engine::end_implicit`], the
    /// statements that run outside an explicit block form one implicit transaction, as in
    /// PostgreSQL (a `BEGIN` among them makes it explicit, a `COMMIT` or `ROLLBACK` ends it).
    /// Default: nothing, each statement stands alone.
    fn begin_implicit(&mut self) {}

    /// The simple Query of several statements ended; `failed`: a statement failed and the
    /// rest were skipped. The engine commits the implicit transaction, or rolls it back after
    /// a failure; a commit's error is the query's last message.
    async fn end_implicit(&mut self, failed: bool) -> Result<(), PgError> {
        let _ = failed;
        Ok(())
    }

    /// Whether `statement` is a COPY, and which way its rows go. Default: never.
    fn copy_mode(&self, _statement: &Self::Statement) -> Option<CopyMode> {
        None
    }

    /// One CopyData message of a `COPY … FROM STDIN` that [`Engine::execute`] started. An
    /// error ends the COPY (the wire layer then calls [`Engine::copy_abort`]).
    async fn copy_data(&mut self, _data: &[u8]) -> Result<(), PgError> {
        Err(no_copy_running())
    }

    /// CopyDone: the rest of the rows are written; the tag (`COPY n`).
    async fn copy_done(&mut self) -> Result<CommandTag, PgError> {
        Err(no_copy_running())
    }

    /// The COPY ends without CopyDone (CopyFail, an error, a protocol violation): rows not yet
    /// written are dropped.
    fn copy_abort(&mut self) {}

    /// What `statement` asks of the connection before it runs (almost always nothing).
    fn connection_effect(&self, statement: &Self::Statement) -> Option<ConnectionEffect> {
        let _ = statement;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks DataRow framing: lengths and column counts are patched, NULL is -1, an unfinished
    // row is discarded, and captured rows record their ends.
    #[test]
    fn unit_row_sink_frames_rows() {
        let cancel = CancelFlag::default();
        let mut out = BytesMut::new();
        let mut sink = RowSink::streaming(&mut out, None, &[], 2, &cancel);
        let mut row = sink.row();
        row.display(42);
        row.null();
        row.finish().unwrap();
        {
            let mut dropped = sink.row();
            dropped.text("lost");
        }
        assert_eq!(sink.rows(), 1);
        assert_eq!(
            &out[..],
            &[b'D', 0, 0, 0, 16, 0, 2, 0, 0, 0, 2, b'4', b'2', 0xff, 0xff, 0xff, 0xff][..]
        );

        let mut rows = BytesMut::new();
        let mut ends = Vec::new();
        let mut notices = BytesMut::new();
        let formats = [Format::Binary];
        let mut sink =
            RowSink::capturing(&mut rows, &mut ends, &mut notices, &formats, 1, &cancel, 1 << 20);
        assert_eq!(sink.format(5), Format::Binary);
        for i in 0..3u8 {
            let mut row = sink.row();
            row.bytes(&[i]);
            row.finish().unwrap();
        }
        sink.notice(&Notice::new("hello"));
        assert_eq!(ends, vec![12, 24, 36]);
        assert_eq!(notices.first(), Some(&b'N'));
    }

    // Checks that unsent rows past PG_RESULT_BYTES_MAX fail the row with 54000 and a hint, and
    // the oversized row is not left in the buffer.
    #[test]
    fn unit_result_limit_is_54000() {
        let cancel = CancelFlag::default();
        let mut out = BytesMut::new();
        let mut sink = RowSink::streaming(&mut out, None, &[], 1, &cancel);
        // A value over the budget is refused without being copied.
        let mut row = sink.row();
        row.bytes(&vec![b'x'; PG_RESULT_BYTES_MAX + 1]);
        let err = row.finish().unwrap_err();
        assert_eq!(err.code(), SqlState::PROGRAM_LIMIT_EXCEEDED);
        // Just under the value limit, but the framing pushes the row over.
        let mut row = sink.row();
        row.bytes(&vec![b'x'; PG_RESULT_BYTES_MAX - 4]);
        let err = row.finish().unwrap_err();
        assert_eq!(err.code(), SqlState::PROGRAM_LIMIT_EXCEEDED);
        assert!(err.hint().is_some());
        assert_eq!(sink.rows(), 0);
        assert!(out.is_empty());
    }

    // Checks that the cancel flag turns into 57014.
    #[test]
    fn unit_cancel_flag() {
        let cancel = CancelFlag::default();
        let mut out = BytesMut::new();
        let sink = RowSink::streaming(&mut out, None, &[], 0, &cancel);
        assert!(sink.check_cancelled().is_ok());
        cancel.cancel();
        assert_eq!(sink.check_cancelled().unwrap_err().code(), SqlState::QUERY_CANCELED);
        cancel.reset();
        assert!(!sink.is_cancelled());
    }
}

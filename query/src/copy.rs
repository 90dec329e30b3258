//! COPY's data formats: PostgreSQL's text and CSV formats, read row by row from the bytes of
//! CopyData messages ([`Decoder`]) and written from rows' text values ([`encode_row`]).
//!
//! The rules are PostgreSQL's (`COPY` in its manual):
//!
//! - **text**: one row per line (`\n`, or `\r\n`), fields split by the delimiter (tab by
//!   default). A backslash escapes: `\b \f \n \r \t \v`, `\` with one to three octal digits or
//!   `\x` with one or two hex digits is that byte, a backslash before any other character is
//!   that character (so `\\`, an escaped delimiter, an escaped newline). A field whose text as
//!   written equals the NULL string (`\N` by default) is NULL. A raw carriage return inside a
//!   line is an error (write `\r`).
//! - **csv**: fields split by the delimiter (`,`); a field may be quoted (`"`), and a quoted
//!   part may hold delimiters, newlines and the quote itself, doubled (or preceded by the
//!   ESCAPE character when one is given). An unquoted field equal to the NULL string (empty by
//!   default) is NULL; a quoted empty string is the empty string.
//! - Either format: `HEADER` skips the first line (input) or writes the column names
//!   (output); a line holding just `\.` ends the data, as psql sends it.
//!
//! Decoded bytes must be UTF-8 (octal and hex escapes can make any byte). A row longer than
//! [`crate::limits::COPY_ROW_BYTES_MAX`] is refused before more of it is buffered.

use std::fmt;

use crate::limits::COPY_ROW_BYTES_MAX;

/// Text or CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// PostgreSQL's text format (backslash escapes).
    Text,
    /// Comma-separated values with quoting.
    Csv,
}

/// How COPY data is written: the format and its options, as the statement gave them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyFormat {
    /// Text or CSV.
    pub kind: CopyKind,
    /// Field separator, one ASCII byte.
    pub delimiter: u8,
    /// The text of a NULL field.
    pub null: String,
    /// The first line holds column names (skipped when reading, written when writing).
    pub header: bool,
    /// CSV's quote, one ASCII byte.
    pub quote: u8,
    /// CSV's escape inside quotes (the quote itself unless given), one ASCII byte.
    pub escape: u8,
}

impl CopyFormat {
    /// The text format's defaults: tab, `\N`, no header.
    pub fn text() -> CopyFormat {
        CopyFormat {
            kind: CopyKind::Text,
            delimiter: b'\t',
            null: "\\N".to_owned(),
            header: false,
            quote: b'"',
            escape: b'"',
        }
    }

    /// CSV's defaults: comma, empty NULL, `"` as quote and escape, no header.
    pub fn csv() -> CopyFormat {
        CopyFormat { kind: CopyKind::Csv, delimiter: b',', null: String::new(), ..Self::text() }
    }

    /// Checks the options against each other, as PostgreSQL does; the reason when they
    /// cannot work.
    pub fn check(&self) -> Result<(), String> {
        let d = self.delimiter;
        if d == b'\n' || d == b'\r' {
            return Err("COPY delimiter cannot be newline or carriage return".to_owned());
        }
        if self.null.contains(['\n', '\r']) {
            return Err("COPY null representation cannot use newline or carriage return".to_owned());
        }
        match self.kind {
            CopyKind::Text => {
                if d == b'\\' || d.is_ascii_lowercase() || d.is_ascii_digit() || d == b'.' {
                    return Err(format!("COPY delimiter cannot be \"{}\"", char::from(d)));
                }
            }
            CopyKind::Csv => {
                if d == self.quote {
                    return Err("COPY delimiter and quote must be different".to_owned());
                }
                if self.null.as_bytes().contains(&d) {
                    return Err(
                        "COPY delimiter must not appear in the NULL specification".to_owned()
                    );
                }
                if self.null.as_bytes().contains(&self.quote) {
                    return Err(
                        "CSV quote character must not appear in the NULL specification".to_owned()
                    );
                }
                if [self.quote, self.escape].iter().any(|&c| c == b'\n' || c == b'\r') {
                    return Err(
                        "COPY quote and escape cannot be newline or carriage return".to_owned()
                    );
                }
            }
        }
        Ok(())
    }
}

/// What is wrong with COPY input, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}")]
pub struct CopyError {
    /// 1-based line (row) of the input, the header included.
    pub line: u64,
    /// What.
    pub kind: CopyErrorKind,
}

/// The kinds of [`CopyError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyErrorKind {
    /// A row with fewer fields than columns (PostgreSQL's 22P04).
    MissingData {
        /// The first column without a value.
        column: String,
    },
    /// A row with more fields than columns (22P04).
    ExtraData,
    /// A NULL for a column that cannot be NULL (23502).
    NullValue {
        /// The column.
        column: String,
    },
    /// A carriage return inside a line, not escaped (text) or not quoted (CSV) (22P04).
    CarriageReturn,
    /// The input ended inside a quoted CSV field (22P04).
    UnterminatedQuote,
    /// A field whose bytes are not UTF-8 (22021).
    InvalidUtf8,
    /// A row longer than [`COPY_ROW_BYTES_MAX`] (54000).
    RowTooLong,
}

impl fmt::Display for CopyErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyErrorKind::MissingData { column } => {
                write!(f, "missing data for column \"{column}\"")
            }
            CopyErrorKind::ExtraData => f.write_str("extra data after last expected column"),
            CopyErrorKind::NullValue { column } => {
                write!(f, "null value in column \"{column}\" violates not-null constraint")
            }
            CopyErrorKind::CarriageReturn => f.write_str(
                "literal carriage return found in data (write \\r in text format, or quote the \
                 field in CSV)",
            ),
            CopyErrorKind::UnterminatedQuote => f.write_str("unterminated CSV quoted field"),
            CopyErrorKind::InvalidUtf8 => {
                f.write_str("invalid byte sequence for encoding \"UTF8\"")
            }
            CopyErrorKind::RowTooLong => {
                write!(f, "COPY row exceeds the limit of {COPY_ROW_BYTES_MAX} bytes")
            }
        }
    }
}

/// The class of a [`CopyError`], for node's SQLSTATE match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyErrorCategory {
    /// 22P04 bad_copy_file_format.
    BadFormat,
    /// 23502 not_null_violation.
    NotNull,
    /// 22021 character_not_in_repertoire.
    Encoding,
    /// 54000 program_limit_exceeded.
    LimitExceeded,
}

impl CopyError {
    /// The category.
    pub fn category(&self) -> CopyErrorCategory {
        match self.kind {
            CopyErrorKind::MissingData { .. }
            | CopyErrorKind::ExtraData
            | CopyErrorKind::CarriageReturn
            | CopyErrorKind::UnterminatedQuote => CopyErrorCategory::BadFormat,
            CopyErrorKind::NullValue { .. } => CopyErrorCategory::NotNull,
            CopyErrorKind::InvalidUtf8 => CopyErrorCategory::Encoding,
            CopyErrorKind::RowTooLong => CopyErrorCategory::LimitExceeded,
        }
    }
}

/// One decoded row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyRow {
    /// 1-based line of the input it came from.
    pub line: u64,
    /// One value per column, in column order.
    pub fields: Vec<String>,
}

/// Reads rows out of COPY input as it arrives: [`Decoder::push`] each CopyData's bytes, take
/// rows with [`Decoder::next_row`] until it answers `None`, and [`Decoder::finish`] at
/// CopyDone for a last line without a newline. Every column is NOT NULL.
#[derive(Debug)]
pub struct Decoder {
    format: CopyFormat,
    columns: Vec<String>,
    buf: Vec<u8>,
    /// First byte of `buf` not yet consumed.
    start: usize,
    /// Where the search for the end of the current row resumes.
    scan: usize,
    /// Search state at `scan`: after an escaping backslash (text), inside quotes (CSV), after
    /// an escape inside quotes (CSV).
    escaped: bool,
    in_quote: bool,
    quote_escape: bool,
    /// Lines consumed so far.
    line: u64,
    header_pending: bool,
    /// `\.` was read: everything after it is ignored.
    ended: bool,
}

impl Decoder {
    /// A decoder for rows of `columns` (named in errors).
    pub fn new(format: CopyFormat, columns: Vec<String>) -> Decoder {
        let header_pending = format.header;
        Decoder {
            format,
            columns,
            buf: Vec::new(),
            start: 0,
            scan: 0,
            escaped: false,
            in_quote: false,
            quote_escape: false,
            line: 0,
            header_pending,
            ended: false,
        }
    }

    /// Lines consumed so far (the header included).
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// Adds input bytes.
    pub fn push(&mut self, data: &[u8]) {
        if self.ended {
            return;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scan = self.scan.saturating_sub(self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The next complete row, `None` when more input is needed (or after `\.`).
    pub fn next_row(&mut self) -> Result<Option<CopyRow>, CopyError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let Some(end) = self.find_row_end() else {
                if self.buf.len().saturating_sub(self.start) > COPY_ROW_BYTES_MAX {
                    return Err(self.error_next(CopyErrorKind::RowTooLong));
                }
                return Ok(None);
            };
            let from = self.start;
            self.start = end.saturating_add(1);
            self.scan = self.start;
            if let Some(row) = self.take_line(from, end)? {
                return Ok(Some(row));
            }
        }
    }

    /// At the end of the input: the last line if it had no newline. An unterminated CSV
    /// quote is an error.
    pub fn finish(&mut self) -> Result<Option<CopyRow>, CopyError> {
        if let Some(row) = self.next_row()? {
            return Ok(Some(row));
        }
        if self.ended || self.start >= self.buf.len() {
            return Ok(None);
        }
        // `next_row` left the search state at the end of the input.
        if self.format.kind == CopyKind::Csv && self.in_quote {
            return Err(self.error_next(CopyErrorKind::UnterminatedQuote));
        }
        let (from, end) = (self.start, self.buf.len());
        self.start = end;
        self.scan = end;
        self.take_line(from, end)
    }

    fn error_next(&self, kind: CopyErrorKind) -> CopyError {
        CopyError { line: self.line.saturating_add(1), kind }
    }

    /// Consumes the line `buf[from..end]`: the end marker, the header, or a row.
    fn take_line(&mut self, from: usize, end: usize) -> Result<Option<CopyRow>, CopyError> {
        self.line = self.line.saturating_add(1);
        self.escaped = false;
        self.in_quote = false;
        self.quote_escape = false;
        let mut content = self.buf.get(from..end).unwrap_or_default();
        // `\r\n` ends a line too; a carriage return escaped in text format is data.
        if let Some(stripped) = content.strip_suffix(b"\r")
            && (self.format.kind == CopyKind::Csv || !ends_escaped(content))
        {
            content = stripped;
        }
        if content == b"\\." {
            self.ended = true;
            return Ok(None);
        }
        if self.header_pending {
            self.header_pending = false;
            return Ok(None);
        }
        let line = self.line;
        let err = |kind| CopyError { line, kind };
        let fields = match self.format.kind {
            CopyKind::Text => split_text(content, &self.format),
            CopyKind::Csv => split_csv(content, &self.format),
        }
        .map_err(err)?;
        if fields.len() > self.columns.len() {
            return Err(err(CopyErrorKind::ExtraData));
        }
        let mut values = Vec::with_capacity(fields.len());
        for (field, column) in fields.into_iter().zip(&self.columns) {
            match field {
                Some(value) => values.push(value),
                None => return Err(err(CopyErrorKind::NullValue { column: column.clone() })),
            }
        }
        if let Some(column) = self.columns.get(values.len()) {
            return Err(err(CopyErrorKind::MissingData { column: column.clone() }));
        }
        Ok(Some(CopyRow { line, fields: values }))
    }

    /// The offset of the newline ending the current row, resuming the search where the last
    /// one stopped.
    fn find_row_end(&mut self) -> Option<usize> {
        let (quote, escape) = (self.format.quote, self.format.escape);
        let csv = self.format.kind == CopyKind::Csv;
        let rest = self.buf.get(self.scan..).unwrap_or_default();
        for (i, &b) in rest.iter().enumerate() {
            if csv {
                if self.quote_escape {
                    self.quote_escape = false;
                    if b == quote || b == escape {
                        continue;
                    }
                }
                if self.in_quote {
                    if b == escape && escape != quote {
                        self.quote_escape = true;
                    } else if b == quote {
                        self.in_quote = false;
                    }
                    continue;
                }
                if b == quote {
                    self.in_quote = true;
                } else if b == b'\n' {
                    return Some(self.scan + i);
                }
            } else if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'\n' {
                return Some(self.scan + i);
            }
        }
        self.scan = self.buf.len();
        None
    }
}

/// Every row `decoder` reads from `chunks` (the last line at the end too), up to the first
/// error, and that error: the fuzz target's and the tests' whole-input read (node reads
/// message by message instead, writing batches as they fill).
pub(crate) fn decode<'a>(
    decoder: &mut Decoder,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<CopyRow>, Option<CopyError>) {
    let mut rows = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        loop {
            match decoder.next_row() {
                Ok(Some(row)) => rows.push(row),
                Ok(None) => break,
                Err(e) => return (rows, Some(e)),
            }
        }
    }
    match decoder.finish() {
        Ok(row) => rows.extend(row),
        Err(e) => return (rows, Some(e)),
    }
    (rows, None)
}

/// Whether the last byte of `line` is escaped by a backslash (an odd run of them before it).
fn ends_escaped(line: &[u8]) -> bool {
    let Some((_, before)) = line.split_last() else { return false };
    before.iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// The fields of one text-format line (without its newline).
fn split_text(line: &[u8], format: &CopyFormat) -> Result<Vec<Option<String>>, CopyErrorKind> {
    let mut fields = Vec::new();
    let mut raw_start = 0;
    let mut value = Vec::new();
    let mut i = 0;
    let byte = |i: usize| line.get(i).copied();
    while let Some(b) = byte(i) {
        i += 1;
        if b == format.delimiter {
            fields.push(text_field(
                line.get(raw_start..i - 1).unwrap_or_default(),
                &mut value,
                format,
            )?);
            raw_start = i;
            continue;
        }
        match b {
            b'\\' => {
                let Some(next) = byte(i) else {
                    value.push(b'\\');
                    continue;
                };
                i += 1;
                match next {
                    b'b' => value.push(8),
                    b'f' => value.push(12),
                    b'n' => value.push(b'\n'),
                    b'r' => value.push(b'\r'),
                    b't' => value.push(b'\t'),
                    b'v' => value.push(11),
                    b'0'..=b'7' => {
                        let mut n = u32::from(next - b'0');
                        for _ in 0..2 {
                            match byte(i) {
                                Some(d @ b'0'..=b'7') => {
                                    n = n * 8 + u32::from(d - b'0');
                                    i += 1;
                                }
                                _ => break,
                            }
                        }
                        value.push((n & 0xff) as u8);
                    }
                    b'x' => match byte(i).and_then(hex) {
                        Some(h) => {
                            i += 1;
                            let mut n = h;
                            if let Some(l) = byte(i).and_then(hex) {
                                n = n * 16 + l;
                                i += 1;
                            }
                            value.push(n);
                        }
                        None => value.push(b'x'),
                    },
                    other => value.push(other),
                }
            }
            b'\r' => return Err(CopyErrorKind::CarriageReturn),
            other => value.push(other),
        }
    }
    fields.push(text_field(line.get(raw_start..).unwrap_or_default(), &mut value, format)?);
    Ok(fields)
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// One text-format field: NULL when written as the NULL string, else its decoded bytes.
fn text_field(
    raw: &[u8],
    value: &mut Vec<u8>,
    format: &CopyFormat,
) -> Result<Option<String>, CopyErrorKind> {
    let decoded = std::mem::take(value);
    if raw == format.null.as_bytes() {
        return Ok(None);
    }
    String::from_utf8(decoded).map(Some).map_err(|_| CopyErrorKind::InvalidUtf8)
}

/// The fields of one CSV line (without its newline; quoted parts may hold newlines).
fn split_csv(line: &[u8], format: &CopyFormat) -> Result<Vec<Option<String>>, CopyErrorKind> {
    let (quote, escape) = (format.quote, format.escape);
    let mut fields = Vec::new();
    let mut value = Vec::new();
    let mut quoted = false;
    let mut in_quote = false;
    let mut i = 0;
    while let Some(&b) = line.get(i) {
        i += 1;
        if in_quote {
            let next = line.get(i).copied();
            if b == escape && (next == Some(quote) || (escape != quote && next == Some(escape))) {
                value.extend(next);
                i += 1;
            } else if b == quote {
                in_quote = false;
            } else {
                value.push(b);
            }
            continue;
        }
        if b == format.delimiter {
            fields.push(csv_field(std::mem::take(&mut value), quoted, format)?);
            quoted = false;
        } else if b == quote {
            in_quote = true;
            quoted = true;
        } else if b == b'\r' {
            return Err(CopyErrorKind::CarriageReturn);
        } else {
            value.push(b);
        }
    }
    if in_quote {
        return Err(CopyErrorKind::UnterminatedQuote);
    }
    fields.push(csv_field(value, quoted, format)?);
    Ok(fields)
}

fn csv_field(
    value: Vec<u8>,
    quoted: bool,
    format: &CopyFormat,
) -> Result<Option<String>, CopyErrorKind> {
    if !quoted && value == format.null.as_bytes() {
        return Ok(None);
    }
    String::from_utf8(value).map(Some).map_err(|_| CopyErrorKind::InvalidUtf8)
}

/// Appends one row (`None` is NULL) in `format`, newline included.
pub fn encode_row<'a>(
    out: &mut Vec<u8>,
    format: &CopyFormat,
    fields: impl IntoIterator<Item = Option<&'a str>>,
) {
    for (i, field) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(format.delimiter);
        }
        match (field, format.kind) {
            (None, _) => out.extend_from_slice(format.null.as_bytes()),
            (Some(value), CopyKind::Text) => encode_text(out, value, format.delimiter),
            (Some(value), CopyKind::Csv) => encode_csv(out, value, format),
        }
    }
    out.push(b'\n');
}

fn encode_text(out: &mut Vec<u8>, value: &str, delimiter: u8) {
    for &b in value.as_bytes() {
        let escaped = match b {
            8 => Some(b'b'),
            12 => Some(b'f'),
            b'\n' => Some(b'n'),
            b'\r' => Some(b'r'),
            b'\t' => Some(b't'),
            11 => Some(b'v'),
            b'\\' => Some(b'\\'),
            _ if b == delimiter => Some(b),
            _ => None,
        };
        match escaped {
            Some(e) => out.extend_from_slice(&[b'\\', e]),
            None => out.push(b),
        }
    }
}

fn encode_csv(out: &mut Vec<u8>, value: &str, format: &CopyFormat) {
    let bytes = value.as_bytes();
    let needs_quotes = value == format.null
        || value == "\\."
        || bytes.iter().any(|&b| {
            b == format.delimiter
                || b == format.quote
                || b == format.escape
                || b == b'\n'
                || b == b'\r'
        });
    if !needs_quotes {
        out.extend_from_slice(bytes);
        return;
    }
    out.push(format.quote);
    for &b in bytes {
        if b == format.quote || b == format.escape {
            out.push(format.escape);
        }
        out.push(b);
    }
    out.push(format.quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cols() -> Vec<String> {
        vec!["id".to_owned(), "doc".to_owned()]
    }

    fn decode_all(format: CopyFormat, chunks: &[&[u8]]) -> Result<Vec<Vec<String>>, CopyError> {
        match decode(&mut Decoder::new(format, cols()), chunks.iter().copied()) {
            (_, Some(e)) => Err(e),
            (rows, None) => Ok(rows.into_iter().map(|r| r.fields).collect()),
        }
    }

    fn row(a: &str, b: &str) -> Vec<String> {
        vec![a.to_owned(), b.to_owned()]
    }

    #[test]
    fn unit_text_rows_escapes_and_end_marker() {
        let input = b"a/1\t{\"x\": 1}\nb\\\\2\t\\x41\\101\\n\\t\\q\r\n\\.\nignored\tafter\n";
        let rows = decode_all(CopyFormat::text(), &[input]).unwrap();
        assert_eq!(rows, vec![row("a/1", "{\"x\": 1}"), row("b\\2", "AA\n\tq")]);
    }

    #[test]
    fn unit_text_rows_split_anywhere() {
        let input = b"a\tb\\\tc\nd\te";
        for cut in 0..=input.len() {
            let (x, y) = input.split_at(cut);
            let rows = decode_all(CopyFormat::text(), &[x, y]).unwrap();
            assert_eq!(rows, vec![row("a", "b\tc"), row("d", "e")], "cut at {cut}");
        }
    }

    #[test]
    fn unit_text_errors_name_the_line() {
        let err = |input: &[u8]| decode_all(CopyFormat::text(), &[input]).unwrap_err();
        assert_eq!(err(b"a\tb\nc\n").kind, CopyErrorKind::MissingData { column: "doc".into() });
        assert_eq!(err(b"a\tb\nc\n").line, 2);
        assert_eq!(err(b"a\tb\tc\n").kind, CopyErrorKind::ExtraData);
        assert_eq!(err(b"\\N\tb\n").kind, CopyErrorKind::NullValue { column: "id".into() });
        assert_eq!(err(b"a\rb\tc\n").kind, CopyErrorKind::CarriageReturn);
        assert_eq!(err(b"a\t\\xff\n").kind, CopyErrorKind::InvalidUtf8);
        assert_eq!(err(b"a\t\\xff\n").category(), CopyErrorCategory::Encoding);
        // `\N` inside a longer field is no NULL; an escaped `\\N` is the text `\N`.
        assert_eq!(
            decode_all(CopyFormat::text(), &[b"\\\\N\ta\\Nb\n"]).unwrap(),
            vec![row("\\N", "aNb")]
        );
    }

    #[test]
    fn unit_header_is_skipped_and_counted() {
        let format = CopyFormat { header: true, ..CopyFormat::csv() };
        let mut d = Decoder::new(format, cols());
        d.push(b"id,doc\nx,\"{\"\"a\"\": 1}\"\ny\n");
        assert_eq!(
            d.next_row().unwrap().unwrap(),
            CopyRow { line: 2, fields: row("x", "{\"a\": 1}") }
        );
        let e = d.next_row().unwrap_err();
        assert_eq!((e.line, e.kind), (3, CopyErrorKind::MissingData { column: "doc".into() }));
    }

    #[test]
    fn unit_csv_quotes_newlines_nulls_and_escape() {
        let rows = decode_all(CopyFormat::csv(), &[b"\"a,1\",\"line\none\"\r\n\"\",x\n"]).unwrap();
        assert_eq!(rows, vec![row("a,1", "line\none"), row("", "x")]);
        let e = decode_all(CopyFormat::csv(), &[b",x\n"]).unwrap_err();
        assert_eq!(e.kind, CopyErrorKind::NullValue { column: "id".into() });
        let e = decode_all(CopyFormat::csv(), &[b"a,\"open\n"]).unwrap_err();
        assert_eq!((e.line, e.kind), (1, CopyErrorKind::UnterminatedQuote));
        let format = CopyFormat { escape: b'\\', ..CopyFormat::csv() };
        let rows = decode_all(format, &[b"a,\"x\\\"y\\\\z\"\n"]).unwrap();
        assert_eq!(rows, vec![row("a", "x\"y\\z")]);
    }

    #[test]
    fn unit_row_too_long_is_refused_before_buffering_more() {
        let mut d = Decoder::new(CopyFormat::text(), cols());
        let piece = vec![b'a'; COPY_ROW_BYTES_MAX / 2 + 1];
        d.push(&piece);
        assert_eq!(d.next_row(), Ok(None));
        d.push(&piece);
        assert_eq!(d.next_row().unwrap_err().kind, CopyErrorKind::RowTooLong);
    }

    #[test]
    fn unit_format_checks() {
        assert!(CopyFormat::text().check().is_ok());
        assert!(CopyFormat::csv().check().is_ok());
        assert!(CopyFormat { delimiter: b'\\', ..CopyFormat::text() }.check().is_err());
        assert!(CopyFormat { delimiter: b'\n', ..CopyFormat::csv() }.check().is_err());
        assert!(CopyFormat { delimiter: b'"', ..CopyFormat::csv() }.check().is_err());
        assert!(CopyFormat { null: "a\nb".into(), ..CopyFormat::csv() }.check().is_err());
    }

    #[test]
    fn unit_encode_matches_postgres() {
        let mut out = Vec::new();
        encode_row(&mut out, &CopyFormat::text(), [Some("a\tb\\c\nd"), None]);
        assert_eq!(out, b"a\\tb\\\\c\\nd\t\\N\n");
        out.clear();
        encode_row(&mut out, &CopyFormat::csv(), [Some("x,\"y\""), Some(""), None, Some("plain")]);
        assert_eq!(out, b"\"x,\"\"y\"\"\",\"\",,plain\n");
    }

    fn formats() -> impl Strategy<Value = CopyFormat> {
        prop_oneof![
            Just(CopyFormat::text()),
            Just(CopyFormat { delimiter: b'|', null: "NULL".into(), ..CopyFormat::text() }),
            Just(CopyFormat::csv()),
            Just(CopyFormat {
                delimiter: b';',
                escape: b'\\',
                null: "\\N".into(),
                ..CopyFormat::csv()
            }),
        ]
    }

    proptest! {
        // Whatever a row holds, writing it and reading it back gives it again, however the
        // bytes are cut into messages.
        #[test]
        fn prop_encode_then_decode_round_trips(
            format in formats(),
            rows in proptest::collection::vec(
                ("[a-z\\\\\t\n\r,;|\"\\.N ]{0,8}", "\\PC{0,6}|[\\\\\t\n\r\",;|.]{0,6}"), 0..8),
            cut in 0usize..200,
        ) {
            let mut out = Vec::new();
            for (a, b) in &rows {
                encode_row(&mut out, &format, [Some(a.as_str()), Some(b.as_str())]);
            }
            let (x, y) = out.split_at(cut.min(out.len()));
            let decoded = decode_all(format, &[x, y]).unwrap();
            let expected: Vec<Vec<String>> = rows.iter().map(|(a, b)| row(a, b)).collect();
            prop_assert_eq!(decoded, expected);
        }
    }
}

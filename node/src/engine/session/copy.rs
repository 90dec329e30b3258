//! COPY between the client and a collection.
//!
//! `COPY c FROM STDIN`: the client's CopyData bytes go through `query::copy::Decoder`; every
//! [`COPY_BATCH_ROWS`] rows (or [`COPY_BATCH_BYTES`]) become one `INSERT INTO c VALUES ($1,
//! $2), …` bound to the rows' text, planned once per batch size and run exactly as a
//! client's INSERT would be (placement, content validation, two-phase commit over several
//! fragments, forwarding on a cluster by that text). Outside a transaction block each batch
//! commits on its own, so a failure leaves the batches before it written, and the error says
//! how many rows that is; inside a block the rows join the block (its limits apply) and a
//! failure fails the block.
//!
//! `COPY … TO STDOUT`: the SELECT runs as any SELECT (in the block when one is open) and each
//! row is written as one CopyData message in the statement's format.

use std::sync::Arc;

use bytes::BytesMut;
use query::copy::{CopyFormat, CopyRow, Decoder, encode_row};
use query::plan::{CopyColumn, Statement};
use query::{CollectionName, Datum};

use super::{Block, Running, Session, internal};
use crate::engine::error::EngineError;
use crate::engine::limits::{COPY_BATCH_BYTES, COPY_BATCH_ROWS};
use crate::pg::engine::no_copy_running;
use crate::pg::sqlstate::engine_error;
use crate::pg::{CancelFlag, CommandTag, PgError, RowSink};

/// A running `COPY … FROM STDIN`.
pub(super) struct CopyIn {
    collection: CollectionName,
    columns: [CopyColumn; 2],
    decoder: Decoder,
    pending: Vec<CopyRow>,
    pending_bytes: usize,
    /// Rows written by the batches so far.
    written: u64,
    /// The INSERT of a full batch: its text and plan, made once.
    full_batch: Option<(Arc<str>, Statement)>,
}

impl CopyIn {
    pub(super) fn new(
        collection: CollectionName,
        columns: [CopyColumn; 2],
        format: CopyFormat,
    ) -> CopyIn {
        let names = columns.iter().map(|c| c.name().to_owned()).collect();
        CopyIn {
            collection,
            columns,
            decoder: Decoder::new(format, names),
            pending: Vec::new(),
            pending_bytes: 0,
            written: 0,
            full_batch: None,
        }
    }

    /// The INSERT text and plan for a batch of `rows` rows.
    fn insert_for(&mut self, rows: usize) -> Result<(Arc<str>, Statement), EngineError> {
        if rows == COPY_BATCH_ROWS
            && let Some(cached) = &self.full_batch
        {
            return Ok(cached.clone());
        }
        let mut sql = format!("INSERT INTO {} VALUES ", self.collection.quoted());
        for i in 0..rows {
            let sep = if i == 0 { "" } else { ", " };
            sql.push_str(&format!("{sep}(${}, ${})", 2 * i + 1, 2 * i + 2));
        }
        let mut planned = query::parse(&sql)?;
        let statement = planned.pop().ok_or_else(|| internal("COPY's INSERT planned nothing"))?;
        let made = (Arc::<str>::from(sql), statement);
        if rows == COPY_BATCH_ROWS {
            self.full_batch = Some(made.clone());
        }
        Ok(made)
    }
}

/// Where in the input a COPY failed.
enum Failed {
    /// One line.
    Line(u64),
    /// A batch of lines, written or refused together.
    Lines(u64, u64),
}

impl Session {
    /// Starts `COPY … FROM STDIN` (its rows arrive through `copy_data`).
    pub(super) fn copy_from(
        &mut self,
        collection: &CollectionName,
        columns: [CopyColumn; 2],
        format: &CopyFormat,
    ) -> CommandTag {
        self.copy = Some(CopyIn::new(collection.clone(), columns, format.clone()));
        CommandTag::new("COPY")
    }

    /// Runs `COPY (SELECT …) TO STDOUT`: the rows as CopyData messages.
    pub(super) async fn copy_to(
        &mut self,
        query: &Statement,
        format: &CopyFormat,
        sink: &mut RowSink<'_>,
    ) -> Result<CommandTag, EngineError> {
        let Statement::Select(select) = query else {
            return Err(internal("COPY TO of a non-SELECT"));
        };
        let wire = |e: PgError| EngineError::Wire(e.message().to_owned());
        let mut line = Vec::new();
        if format.header {
            let names: Vec<String> = select.columns().into_iter().map(|c| c.name).collect();
            encode_row(&mut line, format, names.iter().map(|n| Some(n.as_str())));
            sink.copy_data(&line).map_err(wire)?;
        }
        let statement = Arc::new(query.clone());
        let n = self
            .select_each(&statement, async |rows| copy_rows(sink, format, &mut line, &rows).await)
            .await?;
        Ok(CommandTag::with_rows("COPY", n))
    }

    /// One CopyData message: its complete rows are queued, full batches written.
    pub(super) async fn copy_input(&mut self, data: &[u8]) -> Result<(), PgError> {
        let Some(copy) = self.copy.as_mut() else { return Err(no_copy_running()) };
        copy.decoder.push(data);
        self.drain_rows(false).await
    }

    /// CopyDone: the last line (if it had no newline) and the last batch; `COPY n`.
    pub(super) async fn copy_finish(&mut self) -> Result<CommandTag, PgError> {
        self.drain_rows(true).await?;
        self.copy_batch().await?;
        let copy = self.copy.take().ok_or_else(no_copy_running)?;
        Ok(CommandTag::with_rows("COPY", copy.written))
    }

    /// Queues the decoder's complete rows (at the end of the input, the unterminated last
    /// one too), writing each batch as it fills.
    async fn drain_rows(&mut self, end: bool) -> Result<(), PgError> {
        loop {
            let Some(copy) = self.copy.as_mut() else { return Err(no_copy_running()) };
            let next = match copy.decoder.next_row() {
                Ok(None) if end => copy.decoder.finish(),
                other => other,
            };
            let row = match next {
                Ok(Some(row)) => row,
                Ok(None) => return Ok(()),
                Err(e) => {
                    let line = Failed::Line(e.line);
                    return Err(self.copy_failed(engine_error(&EngineError::Copy(e)), line));
                }
            };
            copy.pending_bytes += row.fields.iter().map(String::len).sum::<usize>();
            copy.pending.push(row);
            if copy.pending.len() >= COPY_BATCH_ROWS || copy.pending_bytes >= COPY_BATCH_BYTES {
                self.copy_batch().await?;
            }
        }
    }

    /// Writes the queued rows as one INSERT.
    async fn copy_batch(&mut self) -> Result<(), PgError> {
        let Some(copy) = self.copy.as_mut() else { return Err(no_copy_running()) };
        let rows = std::mem::take(&mut copy.pending);
        copy.pending_bytes = 0;
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else { return Ok(()) };
        let lines = Failed::Lines(first.line, last.line);
        let count = rows.len();
        if self.ctx.shutdown.is_triggered() {
            self.copy = None;
            return Err(super::shutting_down());
        }
        let result = async {
            let Some(copy) = self.copy.as_mut() else { return Err(internal("COPY vanished")) };
            let (sql, planned) = copy.insert_for(count)?;
            let id_first = copy.columns[0] == CopyColumn::Id;
            let mut values = Vec::with_capacity(count * 2);
            for row in rows {
                let mut fields = row.fields.into_iter();
                let (a, b) = (fields.next().unwrap_or_default(), fields.next().unwrap_or_default());
                let (id, doc) = if id_first { (a, b) } else { (b, a) };
                values.push(Datum::Text(id));
                values.push(Datum::Text(doc));
            }
            let bound = Arc::new(query::bind(&planned, &values)?);
            *self.forwardable.borrow_mut() = Some((sql, 0, values));
            let _running = Running::start(self.core.shared());
            let mut out = BytesMut::new();
            let cancel = CancelFlag::default();
            let mut sink = RowSink::streaming(&mut out, None, &[], 0, &cancel);
            self.run(bound, &mut sink).await
        }
        .await;
        match result {
            Ok(_) => {
                if let Some(copy) = self.copy.as_mut() {
                    copy.written += count as u64;
                }
                Ok(())
            }
            Err(e) => Err(self.copy_failed(engine_error(&e), lines)),
        }
    }

    /// Ends a failed COPY: the block fails, and the error says where and what was written.
    fn copy_failed(&mut self, error: PgError, at: Failed) -> PgError {
        let copy = self.copy.take();
        let name = copy.as_ref().map_or("", |c| c.collection.as_str()).to_owned();
        let context = match at {
            Failed::Line(line) => format!("COPY {name}, line {line}"),
            Failed::Lines(a, b) if a == b => format!("COPY {name}, line {a}"),
            Failed::Lines(a, b) => format!("COPY {name}, lines {a}-{b} (one batch)"),
        };
        let error = error.with_context(context);
        if matches!(self.block, Block::Open(_)) {
            self.fail_block();
            return error;
        }
        let written = copy.map_or(0, |c| c.written);
        error.with_detail(if written == 0 {
            "Nothing was written.".to_owned()
        } else {
            format!(
                "The {written} rows before it were written: outside a transaction block COPY \
                 commits every {COPY_BATCH_ROWS} rows."
            )
        })
    }

    /// CopyFail or a protocol error: drop what was not written.
    pub(super) fn copy_dropped(&mut self) {
        if self.copy.take().is_some() && matches!(self.block, Block::Open(_)) {
            self.fail_block();
        }
    }
}

/// Rows as CopyData messages, flushed as the sink fills.
async fn copy_rows(
    sink: &mut RowSink<'_>,
    format: &CopyFormat,
    line: &mut Vec<u8>,
    rows: &[Vec<Datum>],
) -> Result<(), EngineError> {
    let wire = |e: PgError| EngineError::Wire(e.message().to_owned());
    for row in rows {
        sink.check_cancelled().map_err(|_| EngineError::Cancelled)?;
        let texts: Vec<Option<String>> = row.iter().map(Datum::encode_text).collect();
        line.clear();
        encode_row(line, format, texts.iter().map(Option::as_deref));
        sink.copy_data(line).map_err(wire)?;
        sink.flush_if_needed().await.map_err(wire)?;
    }
    Ok(())
}

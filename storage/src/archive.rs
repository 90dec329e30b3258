//! The only module that reads archived records without checking them again.
//!
//! A record's bytes are checked once: by recovery (CRC, then checked `rkyv::access`, which runs
//! bytecheck over the whole record), or they were serialized by this process and written by the
//! log. Either way the result is a [`RecordSpan`], which only this module can make. Reads then
//! go through [`record`], which trusts the span and skips validation: that is what makes point
//! reads zero-copy and cheap. Debug builds still validate each span once per segment, on its
//! first read (`Segment::record`), so tests catch a span used with the wrong bytes.

use rkyv::rancor::Error as RkyvError;

use crate::format::Damage;
use crate::record::ArchivedRecord;

/// The position of a validated record in one segment's bytes. Private fields: only `check`
/// (after validation) and `written` (for bytes we serialized) make one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpan {
    offset: usize,
    len: usize,
}

impl RecordSpan {
    /// Offset of the payload in the segment.
    pub fn offset(self) -> u64 {
        self.offset as u64
    }

    /// Length of the payload.
    pub fn len(self) -> usize {
        self.len
    }

    /// Always false: records are never empty.
    pub fn is_empty(self) -> bool {
        self.len == 0
    }
}

/// Validates the archived record at `bytes[offset..offset + len]` with bytecheck.
pub fn check(
    bytes: &[u8],
    offset: usize,
    len: usize,
) -> Result<(RecordSpan, &ArchivedRecord), Damage> {
    let end = offset.checked_add(len).ok_or(Damage::FrameLength)?;
    let payload = bytes.get(offset..end).ok_or(Damage::FrameLength)?;
    let record = rkyv::access::<ArchivedRecord, RkyvError>(payload).map_err(|_| Damage::Record)?;
    Ok((RecordSpan { offset, len }, record))
}

/// A span for a record this process serialized with rkyv and wrote at `offset` of the segment
/// that will be read with it, or one `check` just validated (the recovery scan validates a whole
/// chunk first, then walks its records again through this).
pub(crate) fn written(offset: usize, len: usize) -> RecordSpan {
    RecordSpan { offset, len }
}

/// The record at `span` of the segment bytes it was made for; `None` only if the span lies
/// outside `bytes` (a bug, reported rather than risked). Never validates: debug builds check
/// each span once per segment in `Segment::record` instead, so reading every document of a
/// large batch record stays linear.
pub fn record(bytes: &[u8], span: RecordSpan) -> Option<&ArchivedRecord> {
    let payload = bytes.get(span.offset..span.offset.checked_add(span.len)?)?;
    // SAFETY: spans are made only by `check`, after checked access validated exactly these
    // bytes of this segment, or by `written`, for bytes rkyv serialized in this process and
    // the log wrote at this offset. Segment bytes are never modified after they are written
    // (blocks holding a chunk are never rewritten; the mapping lives as long as the `Segment`
    // that carries the span, and while the segment is staged the log writes only past the
    // readable prefix `bytes` comes from), so the bytes are still a valid archive.
    Some(unsafe { rkyv::access_unchecked::<ArchivedRecord>(payload) })
}

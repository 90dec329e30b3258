//! The byte layout of a segment (the same diagram heads `storage/FORMAT.md`).
//!
//! ```text
//! segment file (preallocated, zero-filled, named <seq:016x>-<gen:04x>.seg)
//! +--------------------------------------------------------------+ 0
//! | segment header (64 bytes used, rest of the block zero)       |
//! |  magic "TESSLOG\0" | version u32 | crc u32 | fragment u32 |  |
//! |  kind u32 | seq u64 | generation u64 | salt u64 |             |
//! |  lsn_through u64 | reserved u64                               |
//! +--------------------------------------------------------------+ 4096
//! | chunk: one group-commit write, starts block-aligned          |
//! |  chunk header (32 bytes): magic "CHNK" u32 | crc u32 |        |
//! |    lsn_first u64 | lsn_last u64 | frames_bytes u32 | count u32|
//! |  frame: len u32 | crc32(len ++ payload) u32 |                |
//! |         payload (rkyv-archived Record, 8-aligned) | zero pad  |
//! |  frame ... (count frames, frames_bytes in all)               |
//! |  zero pad to the next 4096 boundary                          |
//! +--------------------------------------------------------------+
//! | chunk ...                                                    |
//! +--------------------------------------------------------------+
//! | zeros (preallocation) up to the segment size                 |
//! +--------------------------------------------------------------+
//! ```
//!
//! All integers are little-endian. The segment header CRC covers bytes `0..12` and `16..64`.
//! The chunk header CRC covers the segment's random salt followed by chunk bytes `0..4` and
//! `8..32`, so a chunk header can't be forged by document bytes and a chunk of an older
//! segment can't pass in a new one. Every pad byte must be zero.
//!
//! A chunk is all or nothing: it is valid only when its header, every frame CRC, every pad
//! and every archived record check out. A block that holds a valid chunk is never written again.

use std::fmt;

use crate::archive::{self, RecordSpan};
use crate::limits::{
    BLOCK_BYTES, CHUNK_HEADER_BYTES, FRAME_HEADER_BYTES, GROUP_COMMIT_BATCH_BYTES_MAX,
    RECORD_ALIGN_BYTES, RECORD_BYTES_MAX, SEGMENT_HEADER_BYTES, TORN_WINDOW_BYTES,
};
use crate::record::ArchivedRecord;

/// The format version written in every segment header. Version 1 is the first; version 2
/// logs a batch too large for one record as several Prepare records of one transaction
/// (`limits::LOCAL_TXID_TAG`), which version 1 would misread, so a version-1 reader refuses it.
pub const FORMAT_VERSION: u32 = 2;

/// The oldest format version this build reads. Its records mean the same in version 2; a
/// version-1 segment is never appended to again (recovery starts a new segment after it).
pub const FORMAT_VERSION_OLDEST: u32 = 1;

/// Magic bytes opening a segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"TESSLOG\0";

/// Magic opening a chunk header ("CHNK" little-endian).
pub const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"CHNK");

/// Bytes of the segment header that carry data; the rest of its block is zero.
pub const SEGMENT_HEADER_USED_BYTES: usize = 64;

/// What is wrong with a piece of a segment. Names the part, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// The file is shorter than a segment header.
    ShortFile,
    /// The segment header's magic is wrong.
    HeaderMagic,
    /// The segment header's format version is not one this build reads.
    HeaderVersion(u32),
    /// The segment header's CRC does not match.
    HeaderCrc,
    /// A segment header field is out of range.
    HeaderField,
    /// A chunk header is not valid (magic, CRC or fields).
    ChunkHeader,
    /// A frame does not fit in its chunk or has a bad length.
    FrameLength,
    /// A frame's CRC does not match.
    FrameCrc,
    /// A pad byte is not zero.
    Padding,
    /// The archived record fails validation.
    Record,
    /// Record LSNs are out of order or do not match the chunk header.
    LsnOrder,
    /// A valid chunk or segment continues past a gap in LSNs: data is missing.
    LsnGap,
    /// Bytes after the end of the log are neither zero nor the cleanable remains of the
    /// last, unacknowledged write.
    AfterTail,
    /// Segment files are missing or out of sequence.
    SegmentSequence,
    /// An index entry rebuilt from the log does not resolve to the record it names (found
    /// only by `verify`, which cross-checks the index after replay).
    IndexMismatch,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::ShortFile => write!(f, "file shorter than a segment header"),
            Damage::HeaderMagic => write!(f, "bad segment magic"),
            Damage::HeaderVersion(v) => write!(f, "unsupported format version {v}"),
            Damage::HeaderCrc => write!(f, "segment header checksum mismatch"),
            Damage::HeaderField => write!(f, "segment header field out of range"),
            Damage::ChunkHeader => write!(f, "bad chunk header"),
            Damage::FrameLength => write!(f, "bad frame length"),
            Damage::FrameCrc => write!(f, "frame checksum mismatch"),
            Damage::Padding => write!(f, "non-zero padding"),
            Damage::Record => write!(f, "archived record fails validation"),
            Damage::LsnOrder => write!(f, "record LSNs out of order"),
            Damage::LsnGap => write!(f, "LSN gap: records are missing"),
            Damage::AfterTail => write!(f, "data after the end of the log"),
            Damage::SegmentSequence => write!(f, "segment files missing or out of sequence"),
            Damage::IndexMismatch => write!(f, "index entry does not match its record"),
        }
    }
}

/// The kind of segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// Written by the group-commit log; LSNs contiguous.
    Normal,
    /// Written by compaction; replaces every segment with a lower (seq, generation).
    Compacted,
}

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The fragment number.
    pub fragment: u32,
    /// Normal or compacted.
    pub kind: SegmentKind,
    /// Sequence number: the order of segments.
    pub seq: u64,
    /// Generation: 0 for normal segments, increasing for compacted ones.
    pub generation: u64,
    /// Random salt mixed into chunk header CRCs.
    pub salt: u64,
    /// Compacted segments: the last LSN of the log prefix they replace. Normal: 0.
    pub lsn_through: u64,
}

fn crc_parts(parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let raw: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(raw))
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let raw: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(raw))
}

impl SegmentHeader {
    /// The header's bytes (the first `SEGMENT_HEADER_USED_BYTES` of the segment).
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_USED_BYTES] {
        let mut b = [0u8; SEGMENT_HEADER_USED_BYTES];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[16..20].copy_from_slice(&self.fragment.to_le_bytes());
        let kind: u32 = match self.kind {
            SegmentKind::Normal => 0,
            SegmentKind::Compacted => 1,
        };
        b[20..24].copy_from_slice(&kind.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        b[32..40].copy_from_slice(&self.generation.to_le_bytes());
        b[40..48].copy_from_slice(&self.salt.to_le_bytes());
        b[48..56].copy_from_slice(&self.lsn_through.to_le_bytes());
        let crc = crc_parts(&[&b[0..12], &b[16..64]]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The format version in the header at the start of `bytes` (read without any check:
    /// call after [`SegmentHeader::decode`] accepted it).
    pub fn version_of(bytes: &[u8]) -> Option<u32> {
        read_u32(bytes, 8)
    }

    /// Decodes and checks the header at the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, Damage> {
        let b = bytes.get(..SEGMENT_HEADER_USED_BYTES).ok_or(Damage::ShortFile)?;
        if b.get(0..8) != Some(&SEGMENT_MAGIC[..]) {
            return Err(Damage::HeaderMagic);
        }
        let field32 = |at| read_u32(b, at).ok_or(Damage::ShortFile);
        let field64 = |at| read_u64(b, at).ok_or(Damage::ShortFile);
        let version = field32(8)?;
        let crc = field32(12)?;
        let (Some(head), Some(tail)) = (b.get(0..12), b.get(16..64)) else {
            return Err(Damage::ShortFile);
        };
        if crc != crc_parts(&[head, tail]) {
            return Err(Damage::HeaderCrc);
        }
        if !(FORMAT_VERSION_OLDEST..=FORMAT_VERSION).contains(&version) {
            return Err(Damage::HeaderVersion(version));
        }
        let kind = match field32(20)? {
            0 => SegmentKind::Normal,
            1 => SegmentKind::Compacted,
            _ => return Err(Damage::HeaderField),
        };
        let header = SegmentHeader {
            fragment: field32(16)?,
            kind,
            seq: field64(24)?,
            generation: field64(32)?,
            salt: field64(40)?,
            lsn_through: field64(48)?,
        };
        if field64(56)? != 0 || (kind == SegmentKind::Normal) != (header.generation == 0) {
            return Err(Damage::HeaderField);
        }
        Ok(header)
    }
}

/// A decoded chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// LSN of the first record.
    pub lsn_first: u64,
    /// LSN of the last record.
    pub lsn_last: u64,
    /// Bytes of frames following the header.
    pub frames_bytes: u32,
    /// Number of frames.
    pub record_count: u32,
}

impl ChunkHeader {
    /// The header's bytes, CRC included.
    pub fn encode(&self, salt: u64) -> [u8; CHUNK_HEADER_BYTES] {
        let mut b = [0u8; CHUNK_HEADER_BYTES];
        b[0..4].copy_from_slice(&CHUNK_MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.lsn_first.to_le_bytes());
        b[16..24].copy_from_slice(&self.lsn_last.to_le_bytes());
        b[24..28].copy_from_slice(&self.frames_bytes.to_le_bytes());
        b[28..32].copy_from_slice(&self.record_count.to_le_bytes());
        let crc = crc_parts(&[&salt.to_le_bytes(), &b[0..4], &b[8..32]]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the header at `bytes[at..]`; `None` when it is not a valid header.
    pub fn decode(bytes: &[u8], at: usize, salt: u64) -> Option<ChunkHeader> {
        let b = bytes.get(at..at.checked_add(CHUNK_HEADER_BYTES)?)?;
        if read_u32(b, 0)? != CHUNK_MAGIC {
            return None;
        }
        if read_u32(b, 4)? != crc_parts(&[&salt.to_le_bytes(), b.get(0..4)?, b.get(8..32)?]) {
            return None;
        }
        let header = ChunkHeader {
            lsn_first: read_u64(b, 8)?,
            lsn_last: read_u64(b, 16)?,
            frames_bytes: read_u32(b, 24)?,
            record_count: read_u32(b, 28)?,
        };
        if header.record_count == 0 || header.lsn_first > header.lsn_last {
            return None;
        }
        Some(header)
    }
}

/// Bytes a frame with a payload of `len` bytes occupies, padding included.
pub const fn frame_bytes(len: usize) -> usize {
    FRAME_HEADER_BYTES + len.next_multiple_of(RECORD_ALIGN_BYTES)
}

/// Writes one frame for `payload` into `out` (which must be `frame_bytes(payload.len())` long
/// and zeroed). Returns the payload's offset inside `out`.
pub fn encode_frame(payload: &[u8], out: &mut [u8]) -> usize {
    assert!(payload.len() <= RECORD_BYTES_MAX);
    assert_eq!(out.len(), frame_bytes(payload.len()));
    let (_, rest) = out.split_at_mut(FRAME_HEADER_BYTES);
    let (body, _pad) = rest.split_at_mut(payload.len());
    body.copy_from_slice(payload);
    seal_frame(out, payload.len());
    FRAME_HEADER_BYTES
}

/// Writes the header (length and CRC) of the frame at the start of `frame`, whose payload of
/// `payload_len` bytes is already in place after the header. `payload_len` is at most
/// `RECORD_BYTES_MAX`; a `frame` too short to hold it is left alone.
pub fn seal_frame(frame: &mut [u8], payload_len: usize) {
    // Callers bound the length far below u32::MAX.
    let len = u32::try_from(payload_len).unwrap_or(u32::MAX);
    if frame.len() < FRAME_HEADER_BYTES + payload_len {
        return;
    }
    let (head, rest) = frame.split_at_mut(FRAME_HEADER_BYTES);
    let crc = crc_parts(&[&len.to_le_bytes(), rest.get(..payload_len).unwrap_or_default()]);
    let (len_bytes, crc_bytes) = head.split_at_mut(4);
    len_bytes.copy_from_slice(&len.to_le_bytes());
    crc_bytes.copy_from_slice(&crc.to_le_bytes());
}

/// One frame found in a byte area: its payload offset and length (within the area).
#[derive(Debug, Clone, Copy)]
pub struct FrameAt {
    /// Offset of the payload.
    pub offset: usize,
    /// Payload length.
    pub len: usize,
    /// Offset after the frame's padding.
    pub end: usize,
}

/// Reads the frame at `bytes[at..limit]`: length, CRC and zero padding.
pub fn decode_frame(bytes: &[u8], at: usize, limit: usize) -> Result<FrameAt, Damage> {
    let len32 = read_u32(bytes, at).ok_or(Damage::FrameLength)?;
    let crc = read_u32(bytes, at.checked_add(4).ok_or(Damage::FrameLength)?)
        .ok_or(Damage::FrameLength)?;
    let len = usize::try_from(len32).map_err(|_| Damage::FrameLength)?;
    if len == 0 || len > RECORD_BYTES_MAX {
        return Err(Damage::FrameLength);
    }
    let offset = at.checked_add(FRAME_HEADER_BYTES).ok_or(Damage::FrameLength)?;
    let end = at.checked_add(frame_bytes(len)).ok_or(Damage::FrameLength)?;
    if end > limit {
        return Err(Damage::FrameLength);
    }
    let payload = bytes.get(offset..offset + len).ok_or(Damage::FrameLength)?;
    if crc != crc_parts(&[&len32.to_le_bytes(), payload]) {
        return Err(Damage::FrameCrc);
    }
    let pad = bytes.get(offset + len..end).ok_or(Damage::FrameLength)?;
    if pad.iter().any(|&b| b != 0) {
        return Err(Damage::Padding);
    }
    Ok(FrameAt { offset, len, end })
}

/// How LSNs must follow each other in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LsnRule {
    /// Each record's LSN is the previous one plus one (normal segments).
    Contiguous,
    /// Each record's LSN is at least the previous one (compacted segments, where the ops of one batch become several records with the batch's LSN).
    NonDecreasing,
}

/// Where a segment scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanEnd {
    /// Offset after the last valid chunk: where the next chunk goes.
    pub offset: u64,
    /// LSN of the last valid record (or the `prev_lsn` given when there is none).
    pub last_lsn: u64,
    /// `None`: the scan stopped at an all-zero chunk header (clean end) or the end of the file.
    /// `Some`: the chunk at `offset` is damaged in this way.
    pub damage: Option<Damage>,
}

/// One valid record found by a scan.
pub struct RecordAt<'a> {
    /// Where its payload is in the segment.
    pub span: RecordSpan,
    /// The validated archived record.
    pub record: &'a ArchivedRecord,
}

/// Scans the chunks of a segment (`bytes` is the whole file, mapped at a page-aligned base),
/// calling `visit` for each record of each valid chunk, in order. Never panics on any input.
pub fn scan_segment<'a>(
    bytes: &'a [u8],
    header: &SegmentHeader,
    rule: LsnRule,
    prev_lsn: u64,
    mut visit: impl FnMut(RecordAt<'a>),
) -> ScanEnd {
    let mut pos = usize::try_from(SEGMENT_HEADER_BYTES).unwrap_or(usize::MAX);
    let block = usize::try_from(BLOCK_BYTES).unwrap_or(usize::MAX);
    let mut last_lsn = prev_lsn;
    loop {
        let end = ScanEnd { offset: pos as u64, last_lsn, damage: None };
        let Some(raw) = bytes.get(pos..pos.saturating_add(CHUNK_HEADER_BYTES)) else {
            return end;
        };
        if raw.iter().all(|&b| b == 0) {
            return end;
        }
        match check_chunk(bytes, pos, header.salt, rule, last_lsn) {
            Ok((chunk, next)) => {
                let frames_start = pos + CHUNK_HEADER_BYTES;
                let frames_end = frames_start + chunk.frames_bytes as usize;
                let mut at = frames_start;
                while at < frames_end {
                    // Checked by check_chunk just above; a failure here would be our bug, and
                    // is handled by stopping rather than panicking.
                    let Ok(frame) = decode_frame(bytes, at, frames_end) else { break };
                    // check_chunk validated this record with bytecheck: read it without
                    // validating a second time.
                    let span = archive::written(frame.offset, frame.len);
                    let Some(record) = archive::record(bytes, span) else { break };
                    visit(RecordAt { span, record });
                    at = frame.end;
                }
                last_lsn = chunk.lsn_last;
                pos = next.next_multiple_of(block);
            }
            Err(damage) => return ScanEnd { damage: Some(damage), ..end },
        }
    }
}

/// Checks the whole chunk at `pos`; returns its header and the offset after its frames.
fn check_chunk(
    bytes: &[u8],
    pos: usize,
    salt: u64,
    rule: LsnRule,
    prev_lsn: u64,
) -> Result<(ChunkHeader, usize), Damage> {
    let chunk = ChunkHeader::decode(bytes, pos, salt).ok_or(Damage::ChunkHeader)?;
    let follows = match rule {
        LsnRule::Contiguous => prev_lsn.checked_add(1) == Some(chunk.lsn_first),
        LsnRule::NonDecreasing => chunk.lsn_first >= prev_lsn,
    };
    if !follows {
        return Err(Damage::LsnGap);
    }
    let frames_start = pos + CHUNK_HEADER_BYTES;
    let frames_end = frames_start
        .checked_add(usize::try_from(chunk.frames_bytes).map_err(|_| Damage::ChunkHeader)?)
        .filter(|&e| e <= bytes.len())
        .ok_or(Damage::ChunkHeader)?;
    let mut at = frames_start;
    let mut count = 0u32;
    let mut lsn = prev_lsn;
    while at < frames_end {
        let frame = decode_frame(bytes, at, frames_end)?;
        let (_, record) = archive::check(bytes, frame.offset, frame.len)?;
        let record_lsn = record.lsn.to_native();
        let ordered = match rule {
            LsnRule::Contiguous => lsn.checked_add(1) == Some(record_lsn),
            LsnRule::NonDecreasing => record_lsn >= lsn,
        };
        if !ordered || record_lsn < chunk.lsn_first || record_lsn > chunk.lsn_last {
            return Err(Damage::LsnOrder);
        }
        lsn = record_lsn;
        count = count.checked_add(1).ok_or(Damage::ChunkHeader)?;
        at = frame.end;
    }
    if count != chunk.record_count || lsn != chunk.lsn_last {
        return Err(Damage::LsnOrder);
    }
    let block = usize::try_from(BLOCK_BYTES).unwrap_or(usize::MAX);
    let pad_end = frames_end.next_multiple_of(block).min(bytes.len());
    if bytes.get(frames_end..pad_end).is_none_or(|pad| pad.iter().any(|&b| b != 0)) {
        return Err(Damage::Padding);
    }
    Ok((chunk, frames_end))
}

/// Whether any block-aligned offset in `bytes[from..]` holds a valid chunk header of this
/// segment (salt) whose first LSN is above `after_lsn`: proof that data was written after a
/// damaged spot, so the damage is not a torn tail. Returns the offset of the first such header.
pub fn find_chunk_after(bytes: &[u8], from: u64, salt: u64, after_lsn: u64) -> Option<u64> {
    let block = usize::try_from(BLOCK_BYTES).ok()?;
    let mut pos = usize::try_from(from).ok()?.next_multiple_of(block);
    while pos < bytes.len() {
        if let Some(chunk) = ChunkHeader::decode(bytes, pos, salt)
            && chunk.lsn_first > after_lsn
        {
            return Some(pos as u64);
        }
        pos = pos.checked_add(block)?;
    }
    None
}

/// The bytes after the last valid chunk of a log's last segment, once judged a possible torn
/// tail (see [`classify_tail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailWindow {
    /// Where the torn window ends (at most `TORN_WINDOW_BYTES` after the tail, within the file):
    /// every byte from here on is zero.
    pub window_end: usize,
    /// Whether any byte in the window is not zero.
    pub dirty: bool,
}

/// Judges what follows the last valid chunk (ending at `end`, last LSN `last_lsn`) of a log's
/// last segment. Up to `CHUNKS_IN_FLIGHT_MAX` (two) chunks are in flight at a crash: the
/// first may be torn while the second reached the disk whole, so one valid chunk may follow
/// the damage, and it must start within one maximal chunk of `end`. A second valid chunk after
/// the damage, a valid chunk further away, or a non-zero byte beyond the torn window means
/// data was written after data that is now damaged: corruption, returned as the offset and
/// what is wrong there. Never panics.
pub fn classify_tail(
    bytes: &[u8],
    end: u64,
    salt: u64,
    last_lsn: u64,
    damage: Option<Damage>,
) -> Result<TailWindow, (u64, Damage)> {
    let corrupt = (end, damage.unwrap_or(Damage::AfterTail));
    let max_chunk = GROUP_COMMIT_BATCH_BYTES_MAX as u64;
    if let Some(at) = find_chunk_after(bytes, end.saturating_add(BLOCK_BYTES), salt, last_lsn)
        && (at > end.saturating_add(max_chunk)
            || find_chunk_after(bytes, at.saturating_add(BLOCK_BYTES), salt, last_lsn).is_some())
    {
        return Err(corrupt);
    }
    let start = usize::try_from(end).unwrap_or(usize::MAX).min(bytes.len());
    let window_end = start.saturating_add(TORN_WINDOW_BYTES).min(bytes.len());
    if let Some(beyond) = bytes.get(window_end..)
        && let Some(at) = beyond.iter().position(|&b| b != 0)
    {
        return Err(((window_end + at) as u64, Damage::AfterTail));
    }
    let dirty = bytes.get(start..window_end).is_some_and(|w| w.iter().any(|&b| b != 0));
    Ok(TailWindow { window_end, dirty })
}

/// Reads a whole segment image (header and chunks) and reports what recovery would: the
/// fuzz target's entry point. Never panics.
pub fn read_segment_image(bytes: &[u8]) -> Result<(usize, ScanEnd), Damage> {
    let header = SegmentHeader::decode(bytes)?;
    let rule = match header.kind {
        SegmentKind::Normal => LsnRule::Contiguous,
        SegmentKind::Compacted => LsnRule::NonDecreasing,
    };
    let mut records = 0usize;
    let end = scan_segment(bytes, &header, rule, 0, |_| records += 1);
    let _ = classify_tail(bytes, end.offset, header.salt, end.last_lsn, end.damage);
    Ok((records, end))
}

/// [`read_segment_image`] for bytes at any alignment: copies them into an aligned buffer first
/// (records need 8-byte alignment relative to the segment start).
pub fn read_segment_unaligned(data: &[u8]) -> Result<(usize, ScanEnd), Damage> {
    let mut buf = rkyv::util::AlignedVec::<16>::with_capacity(data.len());
    buf.extend_from_slice(data);
    read_segment_image(&buf)
}

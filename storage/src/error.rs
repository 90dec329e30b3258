//! Error enums, one per operation family. Corruption always has its own variant naming the
//! segment and offset; it is never folded into `Io`.

use std::io;
use std::path::PathBuf;

use router::{FragmentId, ShardId, ShardRange};

use crate::format::Damage;
use crate::{TxId, Version};

/// A document, id or batch outside the limits in `limits.rs`, or malformed input.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputError {
    /// The document id is empty.
    #[error("document id is empty")]
    IdEmpty,
    /// The document id is longer than allowed.
    #[error("document id is {bytes} bytes, the limit is {max}")]
    IdTooLong {
        /// Length of the id.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The collection name is empty or longer than allowed.
    #[error("collection name is {bytes} bytes, allowed is 1..={max}")]
    CollectionName {
        /// Length of the name.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The document nests arrays and objects deeper than allowed.
    #[error("document nests deeper than {max} levels")]
    DocTooDeep {
        /// The limit.
        max: usize,
    },
    /// The archived document is larger than allowed.
    #[error("document is {bytes} bytes archived, the limit is {max}")]
    DocTooLarge {
        /// Archived size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The archived record (one write, or a part of a batch) is larger than one log chunk
    /// can carry.
    #[error("record is {bytes} bytes archived, the limit is {max}")]
    RecordTooLarge {
        /// Archived size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The batch has no operations or too many.
    #[error("batch has {ops} operations, allowed is 1..={max}")]
    BatchSize {
        /// Number of operations.
        ops: usize,
        /// The limit.
        max: usize,
    },
    /// The batch's documents are larger in all than allowed.
    #[error("batch writes {bytes} bytes of documents (archived), the limit is {max}")]
    BatchBytes {
        /// Estimated archived size of its writes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A number that JSON cannot carry (NaN or infinite) was given.
    #[error("document holds a number JSON cannot represent")]
    NonFiniteNumber,
    /// A hold ([`crate::Fragment::hold`]) was given writes; it takes checks only.
    #[error("a hold takes checks only, the batch has {writes} writes")]
    HoldWrites {
        /// Puts and deletes in the batch.
        writes: usize,
    },
}

/// Why a fragment could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The file system refused an operation.
    #[error("fragment {fragment}: i/o error on {path}: {source}")]
    Io {
        /// The fragment being opened.
        fragment: FragmentId,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A segment holds a bad record before its tail, or segments are missing or inconsistent.
    /// Acknowledged data may be damaged: the fragment refuses to open rather than drop it.
    #[error("fragment {fragment}: corruption in {segment} at offset {offset}: {what}")]
    Corruption {
        /// The fragment being opened.
        fragment: FragmentId,
        /// The segment file.
        segment: PathBuf,
        /// Byte offset inside the segment.
        offset: u64,
        /// What is wrong.
        what: Damage,
    },
    /// The directory belongs to another fragment.
    #[error("fragment {fragment}: segment {segment} belongs to fragment {found}")]
    WrongFragment {
        /// The fragment being opened.
        fragment: FragmentId,
        /// The segment file.
        segment: PathBuf,
        /// The fragment named in its header.
        found: FragmentId,
    },
    /// Another `Fragment` (in this or another process) has the directory open.
    #[error("fragment {fragment}: {path} is locked by another owner")]
    Locked {
        /// The fragment being opened.
        fragment: FragmentId,
        /// The lock file.
        path: PathBuf,
    },
    /// The options are out of range.
    #[error("fragment {fragment}: segment size {segment_bytes} is outside the allowed range")]
    SegmentSize {
        /// The fragment being opened.
        fragment: FragmentId,
        /// The requested size.
        segment_bytes: u64,
    },
}

/// Why a write (or a prepare, commit or abort) was not applied.
#[derive(Debug, thiserror::Error, Clone)]
#[non_exhaustive]
pub enum AppendError {
    /// Optimistic concurrency: the document's version is not the expected one. Nothing was written.
    #[error("conflict on {collection}/{id}: expected {expected:?}, found {found:?}")]
    Conflict {
        /// The collection.
        collection: String,
        /// The document id as given.
        id: String,
        /// The version the writer expected (`Version::ABSENT`: must not exist).
        expected: Version,
        /// The current version, `None` when the document does not exist.
        found: Option<Version>,
    },
    /// Optimistic concurrency: a scanned range ([`crate::ScanCheck`]) no longer holds the
    /// documents it held when it was scanned (one was added, or moved there). Nothing was
    /// written.
    #[error(
        "conflict on {collection} in shards {range}: {expected} documents when scanned, {found} now"
    )]
    Phantom {
        /// The collection.
        collection: String,
        /// The shards scanned.
        range: ShardRange,
        /// Documents then.
        expected: u64,
        /// Documents now.
        found: u64,
    },
    /// The document is part of a prepared (in-doubt) distributed transaction.
    #[error("conflict on {collection}/{id}: locked by prepared transaction {txid}")]
    Locked {
        /// The collection.
        collection: String,
        /// The document id as given.
        id: String,
        /// The transaction holding it.
        txid: TxId,
    },
    /// The document's shard is not in this fragment's range.
    #[error("shard {shard} is not in fragment {fragment}'s range {range}")]
    WrongShard {
        /// This fragment.
        fragment: FragmentId,
        /// Its range.
        range: ShardRange,
        /// The shard given.
        shard: ShardId,
    },
    /// The input breaks a limit.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A transaction id is already prepared.
    #[error("transaction {txid} is already prepared")]
    TxnExists {
        /// The transaction.
        txid: TxId,
    },
    /// A transaction was resolved without this fragment's Prepare (it came too late:
    /// [`crate::Fragment::prepared_state_or_fence`]).
    #[error("transaction {txid} was resolved without this fragment; its prepare came too late")]
    TxnFenced {
        /// The transaction.
        txid: TxId,
    },
    /// A transaction id is not prepared here.
    #[error("transaction {txid} is not prepared in this fragment")]
    TxnUnknown {
        /// The transaction.
        txid: TxId,
    },
    /// The log failed (a write or fdatasync error). The fragment accepts no more writes until it
    /// is reopened, and the outcome of writes in flight at that moment is unknown: they were not
    /// acknowledged, and recovery may or may not find them.
    #[error("fragment {fragment} stopped accepting writes: {reason}")]
    Fatal {
        /// This fragment.
        fragment: FragmentId,
        /// What failed, as the operating system said it.
        reason: String,
    },
    /// The fragment is closing.
    #[error("fragment {fragment} is closed")]
    Closed {
        /// This fragment.
        fragment: FragmentId,
    },
}

/// Why compaction did not finish. Compaction is crash-safe at every step: an error leaves the
/// fragment's data as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// The file system refused an operation.
    #[error("fragment {fragment}: compaction i/o error on {path}: {source}")]
    Io {
        /// This fragment.
        fragment: FragmentId,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The log failed while rolling to a new segment.
    #[error(transparent)]
    Append(#[from] AppendError),
}

/// Why an import stream was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The stream is damaged at this byte offset (of the chunk given).
    #[error("import stream damaged at offset {offset}: {what}")]
    Corruption {
        /// Offset in the chunk.
        offset: u64,
        /// What is wrong.
        what: Damage,
    },
    /// A record of the stream holds something other than a put.
    #[error("import stream record at offset {offset} is not a put")]
    NotAPut {
        /// Offset in the chunk.
        offset: u64,
    },
    /// Writing the imported documents failed.
    #[error(transparent)]
    Append(#[from] AppendError),
}

/// Why a journal could not be opened or appended to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The file system refused an operation.
    #[error("journal i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A journal file is damaged where no torn write can explain it (a header, or a chunk
    /// followed by a later valid one).
    #[error("journal {path} damaged at offset {offset}: {what}")]
    Corruption {
        /// The file.
        path: PathBuf,
        /// Byte offset of the damage.
        offset: u64,
        /// What is wrong.
        what: Damage,
    },
    /// A record is empty or longer than the limit.
    #[error("journal record of {bytes} bytes is outside 1 ..= {max}")]
    RecordSize {
        /// Its length.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// Too many appends are waiting for the disk.
    #[error("journal queue is full ({max} records)")]
    QueueFull {
        /// The limit.
        max: usize,
    },
    /// An earlier write or fdatasync failed: the journal accepts nothing more.
    #[error("journal stopped after a failed write: {reason}")]
    Fatal {
        /// The first failure.
        reason: String,
    },
}

/// Why a backup cut of a fragment could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CutError {
    /// A segment file could not be opened.
    #[error("fragment {fragment}: cannot open {path} for a backup: {source}")]
    Io {
        /// The fragment.
        fragment: FragmentId,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The fragment stopped accepting writes or is closing.
    #[error(transparent)]
    Append(#[from] AppendError),
}

//! One fragment's durable state: the append-only log of checksummed rkyv records, group commit,
//! recovery, the in-memory index, compaction, scans by shard range, export and import.
//!
//! Never knows SQL, the network or other fragments. Everything here runs inside one glommio
//! executor: a [`Fragment`] is `!Send`, owned by the executor that opened it, and used by many
//! tasks of that executor at once (interior mutability, never a borrow held across `.await`).
//!
//! The byte layout is in `storage/FORMAT.md` and the [`format`] module.
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)
)]

pub mod archive;
mod backup;
mod compaction;
pub mod disk;
pub mod error;
mod export;
pub mod format;
mod fragment;
mod growmap;
pub mod hugepages;
mod index;
pub mod iostats;
pub mod journal;
mod keyhash;
pub mod limits;
mod log;
pub mod pagecache;
pub mod park;
pub mod record;
mod recovery;
pub mod segment;
pub mod syncgate;
pub mod value;
mod verify;

use std::borrow::Cow;
use std::fmt;

pub use backup::{BackupCut, CutFile};
pub use disk::{ChunkIo, ChunkTimes, CrashMode, Disk, DmaDisk, FaultyDisk};
pub use error::{
    AppendError, CompactError, CutError, ImportError, InputError, JournalError, OpenError,
};
pub use export::Export;
pub use fragment::{
    CommitDurable, CommitInfo, CompactStats, DocRef, Fragment, FragmentOptions, FragmentStats,
    ImportStats, PreparedState, ScanCheck, ScanCursor, WriteBatch, WriteOp, WritePause,
};
pub use index::ShardStats;
pub use iostats::{ChunkPhases, Histogram, IoStats};
pub use journal::Journal;
pub use keyhash::{KeyedState, keyed_state};
pub use syncgate::{SyncGate, SyncGateStats};
pub use value::{ArchivedJsonValue, JsonValue};
pub use verify::{OfflineFragment, TornTail, VerifyReport, verify_dir};

/// A document's version: the LSN of the write that produced it, so versions of one document
/// only grow, even across a delete and a re-insert.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Version(u64);

impl Version {
    /// As an expected version: "the document must not exist".
    pub const ABSENT: Version = Version(0);

    /// A version from its number.
    pub const fn new(value: u64) -> Version {
        Version(value)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// A log sequence number: the position of a record in a fragment's log. Starts at 1.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Lsn(u64);

impl Lsn {
    /// An LSN from its number.
    pub const fn new(value: u64) -> Lsn {
        Lsn(value)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lsn {}", self.0)
    }
}

/// A distributed transaction's id, chosen by the coordinator.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct TxId(u64);

impl TxId {
    /// A transaction id from its number.
    pub const fn new(value: u64) -> TxId {
        TxId(value)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Storage's own id of a batch logged in parts (`limits::LOCAL_TXID_TAG`): a coordinator
    /// never uses one, and one never shows in [`Fragment::in_doubt`].
    pub const fn is_local(self) -> bool {
        self.0 & limits::LOCAL_TXID_TAG == limits::LOCAL_TXID_TAG
    }
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tx{}", self.0)
    }
}

/// The index key of a document id: Unicode default lower-casing (`str::to_lowercase`).
/// **Must equal router's normalisation** (SHARDING.md §1): ids differing only in case are the
/// same document. Borrows when the id has no upper-case ASCII and is all ASCII.
pub fn doc_key(id: &str) -> Cow<'_, str> {
    if id.is_ascii() && !id.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Borrowed(id)
    } else {
        Cow::Owned(id.to_lowercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks doc_key lower-cases like str::to_lowercase, borrowing on the fast path.
    #[test]
    fn doc_key_matches_to_lowercase() {
        for id in ["orders/1-a", "Orders/1-A", "ÄBC", "İstanbul", "ß", "x$@5"] {
            assert_eq!(doc_key(id), id.to_lowercase());
        }
        assert!(matches!(doc_key("users/1"), Cow::Borrowed(_)));
    }
}

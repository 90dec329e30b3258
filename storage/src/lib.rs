//! One fragment's durable state: the append-only log of checksummed rkyv records, group commit,
//! recovery, the in-memory index, compaction, scans by shard range, export and import.
//!
//! Never knows SQL, the network or other fragments.
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)
)]

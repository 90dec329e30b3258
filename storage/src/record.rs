//! The archived log records. Changing any type here changes the on-disk format: bump
//! `format::FORMAT_VERSION` and add a compatibility fixture.
// rkyv derives public resolver types whose fields carry no docs; every type written here does.
#![allow(missing_docs)]

use rkyv::{Archive, Deserialize, Serialize};

use crate::value::JsonValue;

/// One log record: its log position and what it does.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Record {
    /// Log sequence number; contiguous in a normal segment, increasing in a compacted one.
    pub lsn: u64,
    /// What the record does.
    pub body: RecordBody,
}

/// The kinds of record.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(attr(allow(missing_docs)))]
pub enum RecordBody {
    /// An autocommit write of one document.
    Put(PutOp),
    /// An autocommit delete of one document.
    Delete(DeleteOp),
    /// The writes of one transaction, applied all or nothing (one frame, one CRC).
    Batch(Vec<Op>),
    /// Phase one of a distributed transaction: its writes, durable but not yet visible.
    Prepare {
        /// The transaction.
        txid: u64,
        /// Its writes.
        ops: Vec<Op>,
    },
    /// The prepared transaction `txid` commits: its writes become visible.
    Commit {
        /// The transaction.
        txid: u64,
    },
    /// The prepared transaction `txid` is abandoned.
    Abort {
        /// The transaction.
        txid: u64,
    },
}

/// One write inside a batch or a prepared transaction.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Op {
    /// Write a document.
    Put(PutOp),
    /// Delete a document.
    Delete(DeleteOp),
}

/// Write a whole document.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PutOp {
    /// The collection.
    pub collection: String,
    /// The document id, as first written (case kept).
    pub id: String,
    /// The document's shard.
    pub shard: u32,
    /// The version this write gives the document.
    pub version: u64,
    /// The document.
    pub doc: JsonValue,
}

/// Delete a document.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeleteOp {
    /// The collection.
    pub collection: String,
    /// The document id.
    pub id: String,
    /// The document's shard.
    pub shard: u32,
    /// The version of the tombstone.
    pub version: u64,
}

impl ArchivedRecordBody {
    /// The number of document operations the record carries.
    pub fn op_count(&self) -> usize {
        match self {
            ArchivedRecordBody::Put(_) | ArchivedRecordBody::Delete(_) => 1,
            ArchivedRecordBody::Batch(ops) | ArchivedRecordBody::Prepare { ops, .. } => ops.len(),
            ArchivedRecordBody::Commit { .. } | ArchivedRecordBody::Abort { .. } => 0,
        }
    }

    /// Operation `index` as a put, when it is one.
    pub fn put_at(&self, index: usize) -> Option<&ArchivedPutOp> {
        match self {
            ArchivedRecordBody::Put(put) if index == 0 => Some(put),
            ArchivedRecordBody::Batch(ops) | ArchivedRecordBody::Prepare { ops, .. } => {
                match ops.get(index)? {
                    ArchivedOp::Put(put) => Some(put),
                    ArchivedOp::Delete(_) => None,
                }
            }
            _ => None,
        }
    }
}

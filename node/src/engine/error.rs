//! Errors of statement execution in the node, before they become PostgreSQL errors.
//!
//! Every variant wraps a typed error of the layer that raised it; `pg::sqlstate` chooses the
//! SQLSTATE with an exhaustive match, so a new variant does not compile until it is mapped.

use query::{ExecError, PlanError};
use storage::AppendError;

use crate::runtime::CallError;

/// Why a statement failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Parsing, planning or binding.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Evaluating over documents or merging.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// Writing to a fragment's log.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// A document id that places nowhere.
    #[error("invalid document id: {0}")]
    Id(#[from] router::IdError),
    /// A trailing-`$` id that could not be assigned from the document's content.
    #[error(transparent)]
    Assign(#[from] router::AssignError),
    /// A document that breaks its collection's content configuration.
    #[error(transparent)]
    Validation(#[from] router::ValidationError),
    /// A refused configuration change.
    #[error(transparent)]
    Change(#[from] router::ChangeError),
    /// A cross-core call failed (the node is stopping).
    #[error(transparent)]
    Call(#[from] CallError),
    /// The catalog could not be changed durably.
    #[error("cannot change the catalog: {0}")]
    Catalog(String),
    /// A collection already has a configuration (`CREATE TABLE` without `IF NOT EXISTS`).
    #[error("collection {0:?} already exists")]
    CollectionExists(String),
    /// `ALTER TABLE … SET` or `verify_sharding` of a collection without a configuration.
    #[error("collection {0:?} has no sharding configuration")]
    NoConfiguration(String),
    /// COPY input that does not read as its format (the session adds the line's context).
    #[error(transparent)]
    Copy(#[from] query::copy::CopyError),
    /// `DROP TABLE` (without `IF EXISTS`) of a collection with no documents and no
    /// configuration.
    #[error("collection {0:?} does not exist (it has no documents and no configuration)")]
    NoSuchCollection(String),
    /// A statement kind this node does not run yet.
    #[error("{what} is not supported yet")]
    NotSupported {
        /// The construct.
        what: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// A parameter value the client sent that cannot be read as its type.
    #[error("parameter ${index}: {reason}")]
    Param {
        /// 1-based parameter number.
        index: usize,
        /// Why.
        reason: String,
    },
    /// The writes of an autocommit statement kept conflicting with concurrent writes.
    #[error("statement kept conflicting with concurrent writes after {attempts} attempts")]
    Contention {
        /// How many times it was run.
        attempts: u32,
    },
    /// A trailing-`$` id written to a collection without a content configuration.
    #[error(
        "id {id:?} ends with `$` (content-based placement) but collection {collection:?} has no sharding configuration"
    )]
    ContentIdWithoutConfig {
        /// The id.
        id: String,
        /// The collection.
        collection: String,
    },
    /// `SHOW` of a setting the node does not know.
    #[error("unrecognized configuration parameter \"{0}\"")]
    UnknownSetting(String),
    /// The connection failed while results were being sent.
    #[error("cannot send results: {0}")]
    Wire(String),
    /// The client cancelled the statement.
    #[error("canceling statement due to user request")]
    Cancelled,
    /// A transaction's commit found a document it read or wrote changed (or held by another
    /// transaction's commit): nothing was applied.
    #[error(
        "could not serialize access due to a concurrent update of {collection:?} document {id:?}"
    )]
    TxnConflict {
        /// The collection.
        collection: String,
        /// The document id.
        id: String,
    },
    /// A transaction's commit found a range it scanned to the end holding other documents
    /// than it saw (one was added or moved there since: a phantom); 40001, nothing applied.
    #[error(
        "could not serialize access: a document of {collection:?} entered a range this transaction read"
    )]
    TxnPhantom {
        /// The collection.
        collection: String,
    },
    /// A transaction's commit found a document held by another transaction's prepared commit
    /// (40001, like [`EngineError::TxnConflict`]): nothing was applied. The session waits for
    /// the holder on the fragment's executor and commits again before answering it.
    #[error(
        "could not serialize access: {collection:?} document {id:?} is held by the prepared transaction {txid}"
    )]
    TxnHeld {
        /// The collection.
        collection: String,
        /// The document id.
        id: String,
        /// The fragment holding it.
        fragment: router::FragmentId,
        /// The transaction holding it.
        txid: storage::TxId,
    },
    /// The coordinator's log says the transaction aborted (its prepare outlived the timeout).
    #[error("the transaction was aborted by the prepared-transaction timeout")]
    TxnAborted,
    /// A transaction went past one of its bounds.
    #[error(
        "transaction exceeds the limit of {max} {what}: split it into smaller statements or \
         transactions (for example narrower WHERE conditions, or fewer VALUES rows; TRUNCATE \
         empties a whole collection)"
    )]
    TxnLimit {
        /// What was counted.
        what: &'static str,
        /// The limit.
        max: usize,
    },
    /// One commit would change (or, with writes beside them, check) more documents of one
    /// fragment than one storage batch holds: a write statement or transaction changes (and
    /// checks) at most `TXN_FRAGMENT_OPS_MAX` documents of each fragment, atomically.
    #[error(
        "{ops} documents written or read on fragment {fragment} in one commit, the limit is \
         {max} per fragment: split the write into smaller statements or transactions (for \
         example narrower WHERE conditions, or fewer VALUES rows; TRUNCATE empties a whole \
         collection)"
    )]
    FragmentOpsLimit {
        /// The fragment.
        fragment: router::FragmentId,
        /// Its writes and checks in the commit.
        ops: usize,
        /// The limit.
        max: usize,
    },
    /// The coordinator's journal failed.
    #[error(transparent)]
    Journal(#[from] storage::JournalError),
    /// A backup destination the node will not write to (relative, not empty).
    #[error("backup destination: {0}")]
    BackupTarget(String),
    /// The fragment is not open on this executor (the map moved it, or not opened yet).
    #[error("fragment {fragment} is not served by {executor}")]
    NotHere {
        /// The fragment.
        fragment: router::FragmentId,
        /// Where it was looked for.
        executor: crate::runtime::ExecutorIndex,
    },
    /// The fragment accepts no writes: it is being handed off.
    #[error("fragment {fragment} is being handed off and accepts no writes; retry")]
    Fenced {
        /// The fragment.
        fragment: router::FragmentId,
    },
    /// Opening, closing or deleting a fragment at runtime failed.
    #[error("{0}")]
    FragmentLifecycle(String),
    /// The cluster's region could not place or forward the statement (see `cluster::region`).
    #[error(transparent)]
    Region(#[from] crate::cluster::region::RegionError),
    /// A backup failed while taking the cut or copying.
    #[error("backup failed: {0}")]
    Backup(String),
    /// A cluster operation (`ALTER FRAGMENT`) was refused or could not reach the coordinator.
    #[error(transparent)]
    Move(#[from] crate::cluster::ops::MoveError),
}

//! Bounds of transactions in the engine (unit and reason with each).

use std::time::Duration;

/// Documents one transaction may write (buffered in the session until COMMIT). Each one is a
/// copy of the new document in memory; past this the statement fails with 54000.
pub const TXN_WRITES_MAX: usize = 65_536;

/// Documents one transaction may buffer, in bytes of memory (`query::json_bytes` of each
/// document, which `query::memory` checks against the allocator, and its entry; a rewritten
/// document counts once, as last written): each is held in the session until COMMIT, so past
/// this the statement fails with 54000 instead of the node's memory filling. The same number
/// as one fragment's storage batch (`storage::limits::BATCH_BYTES_MAX`), which counts the
/// documents archived, smaller than in memory: this bound is met first.
pub const TXN_WRITE_BYTES_MAX: usize = 256 << 20;

const _: () = assert!(TXN_WRITE_BYTES_MAX == storage::limits::BATCH_BYTES_MAX);
// A write statement's share stops where a transaction's writes would (query's own bounds).
const _: () = assert!(TXN_WRITE_BYTES_MAX == query::limits::WRITE_BYTES_MAX);
const _: () = assert!(TXN_WRITES_MAX == query::limits::WRITE_DOCS_MAX);

/// Read versions one transaction may record (every document a point read or a scan returned,
/// validated at COMMIT). Past this the statement fails with 54000.
pub const TXN_READS_MAX: usize = 262_144;

/// Checks and writes of one transaction (or write statement) on one fragment it writes: one
/// storage batch (storage's own `BATCH_OPS_MAX`, which logs a batch past one record's 4,096
/// operations or 2 MiB as several records of one transaction); past it the commit fails with
/// 54000 (`EngineError::FragmentOpsLimit`) and changes nothing. As many as the transaction may
/// write in all (`TXN_WRITES_MAX`), so a transaction's writes may all fall on one fragment.
/// A read-only transaction validates in slices of `core::CHECK_SLICE_OPS` (smaller), and a
/// read-only participant of a two-phase commit holds any number of checks.
pub const TXN_FRAGMENT_OPS_MAX: usize = storage::limits::BATCH_OPS_MAX;

/// How long a transaction may stay prepared on a participant before the timeout resolves it
/// from the coordinator's log (abort, recorded first, when no decision is there). Far above a
/// healthy commit's two fdatasyncs; reached when a session or an executor died mid-commit.
pub const TXN_PREPARED_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a commit or an autocommit write that met a document held by a prepared
/// transaction waits for it to be released before answering 40001 (`Core::wait_released`).
/// Far above a healthy two-phase commit's two fdatasyncs, so a disk stall is waited out
/// instead of burning the client's retries; well below the prepared timeout, so a holder
/// that died costs a waiter this long, not that long.
pub const TXN_HELD_WAIT_MAX: Duration = Duration::from_secs(2);

/// Times one commit waits for a holder and runs again before answering 40001: each wait is
/// for a different holder (or the same one again after a holder's retry got in first).
pub const TXN_HELD_WAITS_MAX: u32 = 4;

/// How often each executor looks for transactions prepared longer than the timeout.
pub const TXN_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Coordinator journal size past which it is rewritten with only the decisions still needed
/// (commits some participant has not made durable, recent aborts), in bytes.
pub const COORDINATOR_JOURNAL_BYTES_MAX: u64 = 8 << 20;

/// How long the coordinator remembers a timeout's ABORT decision, so a session that wakes up
/// late cannot commit the transaction afterwards. Many timeouts long.
pub const COORDINATOR_ABORT_MEMORY: Duration = Duration::from_secs(600);

/// Times an autocommit statement spanning fragments is run again after its commit conflicted.
pub const TXN_AUTOCOMMIT_ATTEMPTS_MAX: u32 = 16;

/// For this long after an autocommit UPDATE / DELETE over several fragments conflicted on an
/// executor, such statements of the same collection from that executor's sessions prepare as
/// they read from their first attempt (`Session::autocommit_prepared`): under a writer that keeps rewriting what
/// they write, a first attempt that reads and then commits fails every time, and costs a whole
/// read. Short, so an executor goes back to the cheaper first attempt once the contention is
/// over (a prepared attempt holds what it writes from its read to its decision, and commits
/// by two-phase commit even when it writes on one fragment only).
pub const AUTOCOMMIT_CONTENTION_WINDOW: Duration = Duration::from_secs(1);

/// Rows of `COPY … FROM STDIN` written as one INSERT (one atomic write; outside a block, one
/// commit): large enough that the per-statement cost (planning is cached, a two-phase commit
/// over several fragments) is spread thin, well inside `TXN_FRAGMENT_OPS_MAX` per fragment
/// and query's `INSERT_ROWS_MAX`.
pub const COPY_BATCH_ROWS: usize = 1_000;

/// Bytes of COPY input (ids and documents as text) after which a batch is written before it
/// reaches `COPY_BATCH_ROWS`: bounds the memory one COPY holds.
pub const COPY_BATCH_BYTES: usize = 8 << 20;

//! Every bound the load generator enforces, with its unit and the reason for it.
//!
//! A value past a limit is a configuration error reported before any connection opens
//! (see `error::ConfigError::Limit`); nothing here grows without bound during a run.

/// Most targets in one run. Interleaving more than this many servers makes each slice too
/// short to say anything; run them in separate invocations.
pub const TARGETS_MAX: usize = 8;

/// Most client connections per target. Each is a tokio task and a server backend; past this
/// the client itself becomes the bottleneck on the small machines we run on.
pub const CONNECTIONS_MAX: usize = 1024;

/// Most requests in flight on one connection (pipelining depth).
pub const PIPELINE_DEPTH_MAX: usize = 256;

/// Highest open-loop arrival rate, operations per second per target. The open-loop driver
/// records a lower-bound latency for every scheduled operation it could not send, so this also
/// bounds the work done at the end of an overloaded run.
pub const RATE_PER_SEC_MAX: u64 = 1_000_000;

/// Longest measured duration of one workload on one target, in seconds (one hour).
pub const DURATION_SECS_MAX: u64 = 3_600;

/// Longest warm-up, in seconds.
pub const WARMUP_SECS_MAX: u64 = 600;

/// Most rounds a workload's duration is split into (targets alternate each round).
pub const ROUNDS_MAX: u32 = 100;

/// Most documents the loader writes (ten million: about 2 GB of JSON on the server side).
pub const DOCS_MAX: u64 = 10_000_000;

/// Documents per loader batch. PostgreSQL: one transaction whose inserts are pipelined on one
/// connection and committed together, so loading pays one commit (fsync) per batch instead of
/// per document. Tessera: one multi-row INSERT (well below its 10,000 rows per INSERT).
pub const LOAD_BATCH_DOCS: usize = 256;

/// Highest latency a histogram can hold, in microseconds (one minute). Longer latencies are
/// clamped to this value (and so still counted); a stall that long is visible as the max.
pub const LATENCY_US_MAX: u64 = 60_000_000;

/// Significant decimal digits of every latency histogram (0.1 % value resolution).
pub const HISTOGRAM_SIGFIGS: u8 = 3;

/// Default of how long the driver waits, after a run's end, for requests still in flight, in
/// seconds (`--drain-timeout`). Past it the remaining requests are counted as errors
/// (`timeout`), so a hung server cannot hang the benchmark.
pub const DRAIN_TIMEOUT_SECS: u64 = 30;

/// Longest `--drain-timeout`, in seconds.
pub const DRAIN_TIMEOUT_SECS_MAX: u64 = 600;

/// How long preparing a workload's statements on one connection may take, in seconds.
pub const PREPARE_TIMEOUT_SECS: u64 = 10;

/// How long connecting to a target may take, in seconds.
pub const CONNECT_TIMEOUT_SECS: u64 = 10;

/// Documents that share one customer (and so, for Tessera, one shard via the `$` suffix).
pub const DOCS_PER_CUSTOMER: u64 = 8;

/// Distinct values of the unindexed `tag` field that the scatter query filters on.
pub const TAG_COUNT: u64 = 100;

/// Bytes of filler in every generated document (`field0`), like a YCSB field.
pub const FILLER_BYTES: usize = 100;

/// Most distinct error kinds remembered per run; further kinds are counted under `other`.
pub const ERROR_KINDS_MAX: usize = 32;

/// Longest error message kept as an example per kind, in bytes.
pub const ERROR_EXAMPLE_BYTES_MAX: usize = 300;

/// Most attempts of one transfer transaction. A serialization failure (40001, or PostgreSQL's
/// deadlock 40P01) is retried from BEGIN, as an application would; past this many the
/// transfer counts as an error of that SQLSTATE. Every retry is counted and reported.
pub const TXN_ATTEMPTS_MAX: u32 = 16;

/// The node layout assumed when no Tessera target is measured (so PostgreSQL-only runs draw
/// the same transfer pairs): `tessera serve`'s default on the 2-core reference machine, two
/// executors with four fragments each.
pub const DEFAULT_LAYOUT_EXECUTORS: u32 = 2;
/// See `DEFAULT_LAYOUT_EXECUTORS`.
pub const DEFAULT_LAYOUT_FRAGMENTS: u32 = 8;

/// Largest frame the null server (`null_server`) accepts, in bytes. pgbench's and psql's
/// messages are a few hundred bytes; a longer length is a broken client, closed at once.
pub const NULL_FRAME_BYTES_MAX: u32 = 1 << 20;

/// Bytes the null server reads per `read` (and the initial size of its buffers).
pub const NULL_READ_BYTES: usize = 8 * 1024;

/// Most named prepared statements the null server remembers per connection (pgbench
/// prepares one per script command).
pub const NULL_STATEMENTS_MAX: usize = 64;

/// Most event loops of the null server's epoll flavour (the machines we run on have 2-8 cores).
pub const NULL_LOOPS_MAX: usize = 64;

/// Registered I/O memory of each glommio executor of the null server, in bytes: as Tessera's
/// executors (`node::runtime::EXECUTOR_IO_MEMORY_BYTES`); sockets do not use it, and glommio's
/// 10 MiB default needs a locked-memory limit some machines do not grant.
pub const NULL_GLOMMIO_IO_MEMORY_BYTES: usize = 1 << 20;

/// Size of each log file of the durable null server (`null_log`), in bytes: a ring the log
/// wraps around in (a recycled WAL segment), preallocated and zero-filled at start so writes
/// never extend it. A 32-client insert run writes about 10 MB per second.
pub const NULL_LOG_BYTES: u64 = 64 << 20;

/// Block size of the glommio flavour's `O_DIRECT` log writes (every write is whole blocks
/// from a block boundary); it divides [`NULL_LOG_BYTES`].
pub const NULL_LOG_BLOCK_BYTES: u64 = 4096;

/// Bytes of zeros written per call while preallocating a log file.
pub const NULL_LOG_ZERO_CHUNK_BYTES: usize = 1 << 20;

/// Slots of each glommio shared channel between an executor and the one that owns the
/// node's one log (durable null server, `--logs one`): forwarded groups in flight.
pub const NULL_LOG_CHANNEL_SLOTS: usize = 1024;

/// Most group commits a glommio executor's durable null-server log may have in flight at
/// once (`pg-null-server --syncs-in-flight`; Tessera's executors allow 2 by default).
pub const NULL_LOG_SYNCS_IN_FLIGHT_MAX: usize = 8;

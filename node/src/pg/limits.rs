//! Every bound of the PostgreSQL wire layer, with its unit and the reason for its value.
//!
//! Hitting one of these is an error sent to the client (SQLSTATE 54000 or 53300), never
//! unbounded growth.

use std::time::Duration;

/// Largest frontend message body we accept, in bytes (the length word excluded).
/// PostgreSQL allows 1 GiB; a document store has no business receiving a statement or a bind
/// parameter that large, and a smaller bound keeps one connection from pinning a lot of memory.
/// A larger frame cannot be skipped safely (we would have to read and discard it), so it closes
/// the connection after a FATAL 54000.
pub const PG_MESSAGE_BYTES_MAX: usize = 16 << 20;

/// Largest startup packet (StartupMessage, SSLRequest, CancelRequest), in bytes including the
/// length word. PostgreSQL uses 10 000 (`MAX_STARTUP_PACKET_LENGTH`); we match it.
pub const PG_STARTUP_BYTES_MAX: usize = 10_000;

/// Smallest startup packet: length word plus protocol code, in bytes.
pub const PG_STARTUP_BYTES_MIN: usize = 8;

/// Most parameters a StartupMessage may carry (user, database, options, application_name, ...).
/// Drivers send fewer than a dozen.
pub const PG_STARTUP_PARAMETERS_MAX: usize = 64;

/// Authenticated sessions per node, across all executors. Above it a new client gets FATAL 53300.
/// PostgreSQL's default `max_connections` is 100; a shard-per-core node multiplexes far more
/// cheaply, so we allow more, but a bound there must be.
pub const PG_CONNECTIONS_MAX: usize = 1024;

/// Sockets held by clients that have not finished startup, beyond [`PG_CONNECTIONS_MAX`]. They
/// are needed to tell a client politely that the node is full (the FATAL comes after its startup
/// packet). Past this the accept loop closes sockets without a word.
pub const PG_CONNECTIONS_STARTING_MAX: usize = 64;

/// Default idle timeout: a session that sends nothing for this long gets FATAL 57P05 and is
/// closed. Configurable per node ([`crate::pg::PgConfig::idle_timeout`]).
pub const PG_IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(600);

/// Time allowed for startup and authentication, like PostgreSQL's `authentication_timeout`.
pub const PG_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Named prepared statements per session. Drivers with statement caches keep tens to hundreds.
pub const PG_PREPARED_STATEMENTS_MAX: usize = 4096;

/// Named portals per session. Portals normally live from Bind to Sync.
pub const PG_PORTALS_MAX: usize = 256;

/// Bind parameters per statement; the wire format counts them in an i16 (PostgreSQL: 65535).
pub const PG_BIND_PARAMETERS_MAX: usize = u16::MAX as usize;

/// Bytes of encoded result rows a session may hold unsent: rows in the output buffer between
/// flushes (see [`PG_RESULT_FLUSH_BYTES`]), and, as one budget for the whole session, rows kept
/// in portals for the next Execute with a row limit. Past it the statement fails with 54000 and
/// a hint to add LIMIT.
pub const PG_RESULT_BYTES_MAX: usize = 64 << 20;

/// Pending result bytes past which [`crate::pg::RowSink::flush_if_needed`] writes them to the
/// client: large enough that a write carries many rows, small enough to keep memory per
/// streaming connection low.
pub const PG_RESULT_FLUSH_BYTES: usize = 256 << 10;

/// Pause after a failed `accept` (out of file descriptors, for instance) before trying again,
/// so a persistent failure does not spin the executor.
pub const PG_ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// Size of one socket read, in bytes. Large enough to take a pipelined batch of small frames in
/// one syscall.
pub const PG_READ_CHUNK_BYTES: usize = 16 << 10;

/// Initial capacity of a connection's output buffer, in bytes; it grows up to what one batch of
/// responses needs (bounded by [`PG_RESULT_BYTES_MAX`] plus small framing).
pub const PG_WRITE_BUFFER_BYTES: usize = 16 << 10;

/// SCRAM iteration count for credentials derived from a configured password (PostgreSQL's
/// `scram_iterations` default).
pub const SCRAM_ITERATIONS_DEFAULT: u32 = 4096;

/// Largest SCRAM iteration count accepted when credentials are supplied pre-computed; bounds the
/// work a misconfiguration can make every login do.
pub const SCRAM_ITERATIONS_MAX: u32 = 1 << 20;

/// Length of the server's random SCRAM nonce part, in bytes before base64 (PostgreSQL: 18).
pub const SCRAM_NONCE_BYTES: usize = 18;

/// Length of the random salt for credentials derived from a password (PostgreSQL: 16).
pub const SCRAM_SALT_BYTES: usize = 16;

const _: () = assert!(PG_STARTUP_BYTES_MIN < PG_STARTUP_BYTES_MAX);
const _: () = assert!(PG_STARTUP_BYTES_MAX < PG_MESSAGE_BYTES_MAX);
const _: () = assert!(PG_MESSAGE_BYTES_MAX <= i32::MAX as usize - 4);
const _: () = assert!(PG_RESULT_BYTES_MAX <= i32::MAX as usize);
const _: () = assert!(PG_RESULT_FLUSH_BYTES < PG_RESULT_BYTES_MAX);

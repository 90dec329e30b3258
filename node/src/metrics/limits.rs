//! Every bound of the metrics endpoint and the operator logs.

use std::time::Duration;

/// Largest HTTP request (request line and headers) the metrics endpoint reads; past it the
/// answer is 431 and the connection closes.
pub const HTTP_REQUEST_BYTES_MAX: usize = 8 << 10;

/// Most header lines in one request (431 past it).
pub const HTTP_HEADERS_MAX: usize = 64;

/// Longest request target (path and query) accepted (414 past it).
pub const HTTP_TARGET_BYTES_MAX: usize = 1024;

/// How long a client may take to send its request, and to read the answer.
pub const HTTP_IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a client may take to send its whole request head, however it trickles the bytes
/// (the I/O timeout bounds each read only).
pub const HTTP_REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// Scrape connections served at once; more are closed at accept.
pub const HTTP_CONNECTIONS_MAX: usize = 16;

/// Bytes read from the socket per call.
pub const HTTP_READ_CHUNK_BYTES: usize = 2048;

/// Characters of statement text in a slow-statement log line.
pub const SLOW_STATEMENT_TEXT_CHARS_MAX: usize = 512;

/// Fragments named in a slow-statement log line (the count is always given).
pub const SLOW_STATEMENT_FRAGMENTS_MAX: usize = 16;

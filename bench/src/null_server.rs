//! A "null" PostgreSQL-protocol server: it answers every query with one canned row and does
//! no other work. It measures the ceiling a real server can reach on this machine for
//! pgbench's prepared point read: whatever a server costs beyond it is its own work.
//!
//! It speaks just enough protocol 3 for psql, pgbench and tokio-postgres: SSLRequest and
//! GSSENCRequest are refused with 'N', the StartupMessage gets AuthenticationOk (trust), the
//! usual ParameterStatus values, BackendKeyData and ReadyForQuery; then Parse, Bind,
//! Describe, Execute, Sync, Flush, Close and simple Query are answered from the canned row,
//! Terminate closes. Responses to every complete frame read are written together, once, when
//! the input holds no further complete frame (as Tessera's `node::pg::conn` does).
//!
//! Two flavours of I/O, so the server's model can be compared too:
//! - [`Flavor::Threads`]: one blocking thread per connection (PostgreSQL's process model);
//! - [`Flavor::Epoll`]: `loops` single-threaded event loops (tokio's current-thread runtime
//!   on epoll), each accepting from the one listening socket;
//! - [`Flavor::Glommio`]: `executors` glommio executors, each with its own SO_REUSEPORT
//!   listener and one task per connection: Tessera's I/O model (`node::pg::accept_loop`)
//!   with none of its work, so Tessera minus this is what the node itself costs.
//!
//! Write statements (INSERT, UPDATE, DELETE; pgbench's insert and upsert scripts) get no row
//! but their command tag. With [`Durable`] ([`spawn_durable`], `pg-null-server --durable`)
//! each one is also appended to a log and answered only after a group-committed fdatasync
//! that covers it (`null_log`): the threads flavour has one log with a syncer thread
//! (PostgreSQL's WAL writer), the epoll flavour one per loop or one for all, each with its
//! syncer thread, and the glommio flavour one per executor, written with `O_DIRECT` and
//! synced through io_uring by the executor itself (as Tessera's storage does), or one for
//! the node, owned by executor 0, the others forwarding their groups to it.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::limits::{
    NULL_FRAME_BYTES_MAX, NULL_GLOMMIO_IO_MEMORY_BYTES, NULL_LOG_BLOCK_BYTES,
    NULL_LOG_CHANNEL_SLOTS, NULL_LOG_SYNCS_IN_FLIGHT_MAX, NULL_LOOPS_MAX, NULL_READ_BYTES,
    NULL_STATEMENTS_MAX,
};
use crate::null_log::{
    DurableStats, ExecutorLog, FileSink, GroupLog, LocalLog, LogAck, LogError, LogRequest,
    RemoteLog, prepare_file, serve_forwarded,
};
use glommio::channels::shared_channel;

/// The canned reply's `id` column.
pub const CANNED_ID: &str = "10000";

/// The canned reply's `doc` column: the shape and size of a document pgbench's point read
/// gets from Tessera (`scripts/pgbench-vs-postgres.sh` loads a 100-character filler).
pub const CANNED_DOC: &str = concat!(
    r#"{"balance":1000,"customer":"1250","field0":""#,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "aaaa",
    r#""}"#
);

/// PostgreSQL type oid of `text`.
const TEXT_OID: u32 = 25;
/// PostgreSQL type oid of `json`.
const JSON_OID: u32 = 114;

/// Startup codes (the "protocol version" field of an untagged startup packet).
const PROTOCOL_3: u32 = 196_608;
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

/// How the server does its I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// One blocking thread per connection.
    Threads,
    /// `loops` event loops on epoll (tokio current-thread runtimes), one thread each.
    Epoll {
        /// Number of loops (threads), 1..=[`NULL_LOOPS_MAX`].
        loops: usize,
    },
    /// `executors` glommio executors (io_uring), one thread each.
    Glommio {
        /// Number of executors, 1..=[`NULL_LOOPS_MAX`].
        executors: usize,
    },
}

/// How many logs a durable null server keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logs {
    /// One log per epoll loop or glommio executor (the threads flavour always has one).
    PerLoop,
    /// One log for the whole server: a syncer thread (threads, epoll), or glommio executor
    /// 0's log, to which the other executors forward their groups over shared channels.
    One,
}

/// Where and how a durable null server logs its write statements.
#[derive(Clone, Debug)]
pub struct Durable {
    /// Directory for the log files (`null-log-<n>`), created if missing.
    pub dir: PathBuf,
    /// One log per loop or one for all.
    pub logs: Logs,
    /// The syncer-thread logs (threads, epoll) write with `O_DIRECT` rather than buffered
    /// (glommio's logs are always `O_DIRECT`).
    pub direct: bool,
    /// Group commits a glommio log may have in flight at once, 1..=
    /// [`NULL_LOG_SYNCS_IN_FLIGHT_MAX`] (1: writers arriving during a sync wait for the next
    /// group; the syncer-thread logs always have 1).
    pub syncs_in_flight: usize,
    /// Size of each log file (a ring), a multiple of [`NULL_LOG_BLOCK_BYTES`];
    /// [`NULL_LOG_BYTES`](crate::limits::NULL_LOG_BYTES) for a benchmark.
    pub log_bytes: u64,
}

/// A running null server.
#[derive(Debug)]
pub struct Spawned {
    /// The bound address.
    pub addr: SocketAddr,
    /// Its logs' counters (all zero unless durable).
    pub stats: Arc<DurableStats>,
}

/// Why a connection (or the server) stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NullServerError {
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// A frame announced a length outside 4..=[`NULL_FRAME_BYTES_MAX`].
    #[error("frame of {len} bytes (limit {NULL_FRAME_BYTES_MAX})")]
    FrameLength {
        /// The announced length.
        len: u32,
    },
    /// A startup packet with a code we do not speak.
    #[error("unsupported startup code {code}")]
    StartupCode {
        /// The code (protocol version or request code).
        code: u32,
    },
    /// A message type the null server does not answer.
    #[error("unsupported message type {tag:#04x}")]
    Message {
        /// The type byte.
        tag: u8,
    },
    /// A malformed message body.
    #[error("malformed {tag:#04x} message")]
    Malformed {
        /// The type byte.
        tag: u8,
    },
    /// More named statements than [`NULL_STATEMENTS_MAX`] on one connection.
    #[error("more than {NULL_STATEMENTS_MAX} prepared statements")]
    Statements,
    /// `Flavor::Epoll` or `Flavor::Glommio` with a number of loops outside
    /// 1..=[`NULL_LOOPS_MAX`].
    #[error("{loops} event loops (allowed: 1..={NULL_LOOPS_MAX})")]
    Loops {
        /// What was asked for.
        loops: usize,
    },
    /// A durable write was not made durable.
    #[error(transparent)]
    Log(#[from] LogError),
    /// A log size that is zero or not a multiple of [`NULL_LOG_BLOCK_BYTES`].
    #[error("log size {bytes} is not a positive multiple of {NULL_LOG_BLOCK_BYTES}")]
    LogBytes {
        /// What was asked for.
        bytes: u64,
    },
    /// A number of syncs in flight outside 1..=[`NULL_LOG_SYNCS_IN_FLIGHT_MAX`].
    #[error("{syncs} syncs in flight (allowed: 1..={NULL_LOG_SYNCS_IN_FLIGHT_MAX})")]
    SyncsInFlight {
        /// What was asked for.
        syncs: usize,
    },
    /// A combination of model and log layout the null server does not offer.
    #[error("{0}")]
    Unsupported(&'static str),
    /// A glommio executor could not start or bind.
    #[error("glommio executor {index}: {reason}")]
    Glommio {
        /// Which executor.
        index: usize,
        /// What failed.
        reason: String,
    },
}

/// What the caller does after [`Protocol::answer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write the output (if any) and read more.
    Continue,
    /// Write the output (if any) and close the connection.
    Close,
}

/// A write statement's kind, by its first keyword.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteKind {
    Insert,
    Update,
    Delete,
}

impl WriteKind {
    /// The kind of `sql` if it is a write statement.
    fn of(sql: &[u8]) -> Option<WriteKind> {
        let start = sql.iter().position(|b| !b.is_ascii_whitespace() && *b != b'(')?;
        let word: Vec<u8> = sql[start..]
            .iter()
            .take_while(|b| b.is_ascii_alphabetic())
            .map(u8::to_ascii_uppercase)
            .collect();
        match word.as_slice() {
            b"INSERT" => Some(WriteKind::Insert),
            b"UPDATE" => Some(WriteKind::Update),
            b"DELETE" => Some(WriteKind::Delete),
            _ => None,
        }
    }

    fn tag(self) -> &'static [u8] {
        match self {
            WriteKind::Insert => b"INSERT 0 1",
            WriteKind::Update => b"UPDATE 1",
            WriteKind::Delete => b"DELETE 1",
        }
    }
}

/// A prepared statement: its parameter count and, for a write, its kind and text.
#[derive(Debug)]
struct Prepared {
    params: u16,
    write: Option<(WriteKind, Vec<u8>)>,
}

/// The last bound portal: its name, its statement's name and the Bind body (parameters).
#[derive(Debug, Default)]
struct Portal {
    name: Vec<u8>,
    statement: Vec<u8>,
    bind: Vec<u8>,
}

/// One connection's protocol state, independent of how bytes move.
#[derive(Debug, Default)]
pub struct Protocol {
    /// The StartupMessage was answered.
    started: bool,
    /// Each prepared statement, by name ("" is the unnamed one).
    params_of: HashMap<Vec<u8>, Prepared>,
    /// The last Bind (pgbench and drivers use the unnamed portal, one at a time).
    portal: Portal,
    /// Records of the write statements answered since [`Protocol::clear_writes`]: each
    /// statement's text, then for a prepared one its Bind body.
    writes: Vec<u8>,
    /// How many write statements `writes` holds.
    write_count: u64,
}

impl Protocol {
    /// The write statements answered since the last [`Protocol::clear_writes`]: their
    /// records and how many. A durable server makes them durable before sending the answer.
    pub fn writes(&self) -> (&[u8], u64) {
        (&self.writes, self.write_count)
    }

    /// Forgets the write statements (once they are durable, or in a server that is not).
    pub fn clear_writes(&mut self) {
        self.writes.clear();
        self.write_count = 0;
    }

    /// Answers every complete frame at the front of `input` (removing them) into `out`.
    pub fn answer(
        &mut self,
        input: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<Step, NullServerError> {
        let mut used = 0;
        let step = loop {
            let rest = input.get(used..).unwrap_or_default();
            let Some((frame_len, step)) = self.answer_one(rest, out)? else { break Step::Continue };
            used += frame_len;
            if step == Step::Close {
                break Step::Close;
            }
        };
        input.drain(..used);
        Ok(step)
    }

    /// Answers the first frame of `input` if it is complete: `Some((its length, step))`.
    fn answer_one(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<(usize, Step)>, NullServerError> {
        // A startup packet has no type byte; every later frame has one.
        let head = usize::from(self.started);
        let Some(len) = input.get(head..head + 4) else { return Ok(None) };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        if !(4..=NULL_FRAME_BYTES_MAX).contains(&len) {
            return Err(NullServerError::FrameLength { len });
        }
        let total = head + len as usize;
        let Some(frame) = input.get(..total) else { return Ok(None) };
        let step = if self.started {
            self.message(frame[0], &frame[5..], out)?
        } else {
            self.startup(&frame[4..], out)?
        };
        Ok(Some((total, step)))
    }

    fn startup(&mut self, body: &[u8], out: &mut Vec<u8>) -> Result<Step, NullServerError> {
        let Some(code) = body.get(..4) else {
            return Err(NullServerError::StartupCode { code: 0 });
        };
        let code = u32::from_be_bytes([code[0], code[1], code[2], code[3]]);
        match code {
            SSL_REQUEST | GSSENC_REQUEST => {
                out.push(b'N');
                Ok(Step::Continue)
            }
            CANCEL_REQUEST => Ok(Step::Close),
            PROTOCOL_3 => {
                self.started = true;
                // AuthenticationOk.
                message(out, b'R', |m| m.extend_from_slice(&0u32.to_be_bytes()));
                for (name, value) in [
                    ("server_version", "15.0 (null server)"),
                    ("server_encoding", "UTF8"),
                    ("client_encoding", "UTF8"),
                    ("DateStyle", "ISO, MDY"),
                    ("IntervalStyle", "postgres"),
                    ("TimeZone", "UTC"),
                    ("integer_datetimes", "on"),
                    ("standard_conforming_strings", "on"),
                ] {
                    message(out, b'S', |m| {
                        cstring(m, name.as_bytes());
                        cstring(m, value.as_bytes());
                    });
                }
                message(out, b'K', |m| {
                    m.extend_from_slice(&1u32.to_be_bytes());
                    m.extend_from_slice(&2u32.to_be_bytes());
                });
                ready(out);
                Ok(Step::Continue)
            }
            code => Err(NullServerError::StartupCode { code }),
        }
    }

    fn message(
        &mut self,
        tag: u8,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Step, NullServerError> {
        let malformed = NullServerError::Malformed { tag };
        match tag {
            b'P' => {
                let (name, rest) = split_cstring(body).ok_or(malformed)?;
                let (sql, _) = split_cstring(rest).ok_or(NullServerError::Malformed { tag })?;
                if !self.params_of.contains_key(name) && self.params_of.len() >= NULL_STATEMENTS_MAX
                {
                    return Err(NullServerError::Statements);
                }
                let write = WriteKind::of(sql).map(|kind| (kind, sql.to_vec()));
                let prepared = Prepared { params: highest_parameter(sql), write };
                self.params_of.insert(name.to_vec(), prepared);
                message(out, b'1', |_| {});
            }
            b'B' => {
                let (portal, rest) = split_cstring(body).ok_or(malformed)?;
                let (statement, _) =
                    split_cstring(rest).ok_or(NullServerError::Malformed { tag })?;
                self.portal.name.clear();
                self.portal.name.extend_from_slice(portal);
                self.portal.statement.clear();
                self.portal.statement.extend_from_slice(statement);
                self.portal.bind.clear();
                self.portal.bind.extend_from_slice(body);
                message(out, b'2', |_| {});
            }
            b'D' => {
                let (&kind, rest) = body.split_first().ok_or(malformed)?;
                let (name, _) = split_cstring(rest).ok_or(NullServerError::Malformed { tag })?;
                let write = if kind == b'S' {
                    let prepared = self.params_of.get(name);
                    let params = prepared.map_or(0, |p| p.params);
                    message(out, b't', |m| {
                        m.extend_from_slice(&params.to_be_bytes());
                        for _ in 0..params {
                            m.extend_from_slice(&TEXT_OID.to_be_bytes());
                        }
                    });
                    prepared.is_some_and(|p| p.write.is_some())
                } else {
                    self.bound_write(name).is_some()
                };
                if write {
                    // NoData: a write statement returns no rows.
                    message(out, b'n', |_| {});
                } else {
                    row_description(out);
                }
            }
            b'E' => {
                let (portal, _) = split_cstring(body).ok_or(malformed)?;
                match self.bound_write(portal) {
                    Some(kind) => {
                        self.record_bound_write();
                        message(out, b'C', |m| cstring(m, kind.tag()));
                    }
                    None => {
                        data_row(out);
                        command_complete(out);
                    }
                }
            }
            b'S' => ready(out),
            // Flush: the caller writes what is pending anyway once the input runs dry.
            b'H' => {}
            b'C' => message(out, b'3', |_| {}),
            b'Q' => {
                let (sql, _) = split_cstring(body).ok_or(malformed)?;
                if sql.iter().all(|b| b.is_ascii_whitespace() || *b == b';') {
                    message(out, b'I', |_| {});
                } else if let Some(kind) = WriteKind::of(sql) {
                    self.writes.extend_from_slice(sql);
                    self.write_count += 1;
                    message(out, b'C', |m| cstring(m, kind.tag()));
                } else {
                    row_description(out);
                    data_row(out);
                    command_complete(out);
                }
                ready(out);
            }
            b'X' => return Ok(Step::Close),
            tag => return Err(NullServerError::Message { tag }),
        }
        Ok(Step::Continue)
    }
}

impl Protocol {
    /// The kind of the write statement bound to `portal`, if the last Bind named it and its
    /// statement is a write.
    fn bound_write(&self, portal: &[u8]) -> Option<WriteKind> {
        if self.portal.name != portal {
            return None;
        }
        let prepared = self.params_of.get(&self.portal.statement)?;
        prepared.write.as_ref().map(|(kind, _)| *kind)
    }

    /// Adds the bound write's record: its statement's text and the Bind body.
    fn record_bound_write(&mut self) {
        if let Some(Prepared { write: Some((_, sql)), .. }) =
            self.params_of.get(&self.portal.statement)
        {
            self.writes.extend_from_slice(sql);
            self.writes.extend_from_slice(&self.portal.bind);
            self.write_count += 1;
        }
    }
}

/// The highest `$n` in `sql` (the statement's parameter count for our purposes).
fn highest_parameter(sql: &[u8]) -> u16 {
    let mut highest = 0u16;
    let mut i = 0;
    while i < sql.len() {
        if sql[i] == b'$' {
            let digits = sql[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
            let n = std::str::from_utf8(&sql[i + 1..i + 1 + digits])
                .ok()
                .and_then(|d| d.parse::<u16>().ok())
                .unwrap_or(0);
            highest = highest.max(n);
            i += digits;
        }
        i += 1;
    }
    highest
}

/// Appends a frame `tag`, length, body (written by `body`).
fn message(out: &mut Vec<u8>, tag: u8, body: impl FnOnce(&mut Vec<u8>)) {
    out.push(tag);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    body(out);
    // Every frame we write is a few hundred bytes at most.
    let len = u32::try_from(out.len() - at).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn cstring(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(text);
    out.push(0);
}

fn split_cstring(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let nul = bytes.iter().position(|&b| b == 0)?;
    Some((&bytes[..nul], &bytes[nul + 1..]))
}

fn ready(out: &mut Vec<u8>) {
    message(out, b'Z', |m| m.push(b'I'));
}

fn row_description(out: &mut Vec<u8>) {
    message(out, b'T', |m| {
        m.extend_from_slice(&2u16.to_be_bytes());
        for (name, oid) in [("id", TEXT_OID), ("doc", JSON_OID)] {
            cstring(m, name.as_bytes());
            m.extend_from_slice(&0u32.to_be_bytes()); // table oid
            m.extend_from_slice(&0u16.to_be_bytes()); // column number
            m.extend_from_slice(&oid.to_be_bytes());
            m.extend_from_slice(&(-1i16).to_be_bytes()); // variable size
            m.extend_from_slice(&(-1i32).to_be_bytes()); // no modifier
            m.extend_from_slice(&0u16.to_be_bytes()); // text format
        }
    });
}

fn data_row(out: &mut Vec<u8>) {
    message(out, b'D', |m| {
        m.extend_from_slice(&2u16.to_be_bytes());
        for value in [CANNED_ID, CANNED_DOC] {
            // Both are short constants.
            let len = u32::try_from(value.len()).unwrap_or(0);
            m.extend_from_slice(&len.to_be_bytes());
            m.extend_from_slice(value.as_bytes());
        }
    });
}

fn command_complete(out: &mut Vec<u8>) {
    message(out, b'C', |m| cstring(m, b"SELECT 1"));
}

/// Binds `addr` and serves it in background threads; returns the bound address. The server
/// runs until the process ends. Write statements are answered at once (not durable).
pub fn spawn(addr: SocketAddr, flavor: Flavor) -> Result<SocketAddr, NullServerError> {
    spawn_durable(addr, flavor, None).map(|spawned| spawned.addr)
}

/// As [`spawn`], and with `durable` every write statement is answered only after a
/// group-committed fdatasync of a log that covers it.
pub fn spawn_durable(
    addr: SocketAddr,
    flavor: Flavor,
    durable: Option<&Durable>,
) -> Result<Spawned, NullServerError> {
    if let Flavor::Epoll { loops } | Flavor::Glommio { executors: loops } = flavor
        && !(1..=NULL_LOOPS_MAX).contains(&loops)
    {
        return Err(NullServerError::Loops { loops });
    }
    let stats = Arc::new(DurableStats::default());
    if let Some(durable) = durable {
        let bytes = durable.log_bytes;
        if bytes == 0 || bytes % NULL_LOG_BLOCK_BYTES != 0 {
            return Err(NullServerError::LogBytes { bytes });
        }
        let syncs = durable.syncs_in_flight;
        if !(1..=NULL_LOG_SYNCS_IN_FLIGHT_MAX).contains(&syncs) {
            return Err(NullServerError::SyncsInFlight { syncs });
        }
        std::fs::create_dir_all(&durable.dir)?;
    }
    if let Flavor::Glommio { executors } = flavor {
        let logs = durable.map(|d| (d.dir.clone(), d.log_bytes, d.logs, d.syncs_in_flight));
        let addr = spawn_glommio(addr, executors, logs, Arc::clone(&stats))?;
        return Ok(Spawned { addr, stats });
    }
    // The syncer-thread logs of the threads and epoll flavours: one per loop or one in all.
    let log_count = match (flavor, durable) {
        (_, None) => 0,
        (Flavor::Epoll { loops }, Some(Durable { logs: Logs::PerLoop, .. })) => loops,
        _ => 1,
    };
    let mut logs = Vec::with_capacity(log_count);
    if let Some(durable) = durable {
        for index in 0..log_count {
            let path = durable.dir.join(format!("null-log-{index}"));
            prepare_file(&path, durable.log_bytes)?;
            let sink = FileSink::open(&path, durable.direct)?;
            let name = format!("null-syncer-{index}");
            logs.push(GroupLog::start(sink, durable.log_bytes, name, Arc::clone(&stats))?);
        }
    }
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    match flavor {
        Flavor::Threads => {
            let log = logs.pop();
            let conn_stats = Arc::clone(&stats);
            std::thread::Builder::new().name("null-accept".into()).spawn(move || {
                for stream in listener.incoming().flatten() {
                    let log = log.clone();
                    let stats = Arc::clone(&conn_stats);
                    let spawned = std::thread::Builder::new()
                        .name("null-conn".into())
                        .spawn(move || serve_blocking(stream, log.as_deref(), &stats));
                    if let Err(e) = spawned {
                        eprintln!("null server: cannot start a connection thread: {e}");
                    }
                }
            })?;
        }
        // Started above; its listeners are glommio's own.
        Flavor::Glommio { .. } => {}
        Flavor::Epoll { loops } => {
            listener.set_nonblocking(true)?;
            for i in 0..loops {
                let listener = listener.try_clone()?;
                let log = logs.get(i).or(logs.first()).cloned();
                let stats = Arc::clone(&stats);
                std::thread::Builder::new()
                    .name(format!("null-loop-{i}"))
                    .spawn(move || run_loop(listener, log, stats))?;
            }
        }
    }
    Ok(Spawned { addr: bound, stats })
}

/// One connection on its own thread, blocking I/O.
fn serve_blocking(mut stream: TcpStream, log: Option<&GroupLog>, stats: &DurableStats) {
    let result = (|| -> Result<(), NullServerError> {
        stream.set_nodelay(true)?;
        let mut protocol = Protocol::default();
        let mut chunk = vec![0u8; NULL_READ_BYTES];
        let mut input = Vec::with_capacity(NULL_READ_BYTES);
        let mut out = Vec::with_capacity(NULL_READ_BYTES);
        loop {
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                return Ok(());
            }
            input.extend_from_slice(&chunk[..n]);
            let step = protocol.answer(&mut input, &mut out)?;
            let (records, count) = protocol.writes();
            if count > 0 {
                if let Some(log) = log {
                    let ticket = log.append(records, count);
                    log.wait(ticket)?;
                    stats.acked.fetch_add(count, Ordering::Relaxed);
                }
                protocol.clear_writes();
            }
            if !out.is_empty() {
                stream.write_all(&out)?;
                out.clear();
            }
            if step == Step::Close {
                return Ok(());
            }
        }
    })();
    if let Err(e) = result {
        eprintln!("null server: connection ended: {e}");
    }
}

/// One event loop: accepts from the shared listener and serves its connections as tasks.
fn run_loop(listener: TcpListener, log: Option<Arc<GroupLog>>, stats: Arc<DurableStats>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_io().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("null server: cannot start an event loop: {e}");
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("null server: cannot register the listener: {e}");
                return;
            }
        };
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let log = log.clone();
                    let stats = Arc::clone(&stats);
                    tokio::spawn(async move {
                        if let Err(e) = serve_async(stream, log.as_deref(), &stats).await {
                            eprintln!("null server: connection ended: {e}");
                        }
                    });
                }
                Err(e) => eprintln!("null server: accept: {e}"),
            }
        }
    });
}

async fn serve_async(
    mut stream: tokio::net::TcpStream,
    log: Option<&GroupLog>,
    stats: &DurableStats,
) -> Result<(), NullServerError> {
    stream.set_nodelay(true)?;
    let mut protocol = Protocol::default();
    let mut chunk = vec![0u8; NULL_READ_BYTES];
    let mut input = Vec::with_capacity(NULL_READ_BYTES);
    let mut out = Vec::with_capacity(NULL_READ_BYTES);
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        input.extend_from_slice(&chunk[..n]);
        let step = protocol.answer(&mut input, &mut out)?;
        let (records, count) = protocol.writes();
        if count > 0 {
            if let Some(log) = log {
                let ticket = log.append(records, count);
                log.synced(ticket).await?;
                stats.acked.fetch_add(count, Ordering::Relaxed);
            }
            protocol.clear_writes();
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if step == Step::Close {
            return Ok(());
        }
    }
}

/// Starts `executors` glommio executors one after the other, each binding its own listener
/// on the address the first one bound (glommio sets SO_REUSEPORT, so the kernel spreads
/// connections over them, as for Tessera's executors). With `logs` (a directory, a log size
/// and a layout), executor `n` logs to `null-log-<n>` in that directory, or with
/// [`Logs::One`] every executor to executor 0's `null-log-0`.
fn spawn_glommio(
    addr: SocketAddr,
    executors: usize,
    logs: Option<(PathBuf, u64, Logs, usize)>,
    stats: Arc<DurableStats>,
) -> Result<SocketAddr, NullServerError> {
    let mut plans: Vec<LogPlan> = Vec::with_capacity(executors);
    match logs {
        None => plans.resize_with(executors, || LogPlan::None),
        Some((dir, bytes, Logs::PerLoop, syncs)) => {
            for index in 0..executors {
                let path = dir.join(format!("null-log-{index}"));
                prepare_file(&path, bytes)?;
                plans.push(LogPlan::Own { path, bytes, syncs, peers: Vec::new() });
            }
        }
        Some((dir, bytes, Logs::One, syncs)) => {
            let path = dir.join("null-log-0");
            prepare_file(&path, bytes)?;
            let mut peers = Vec::new();
            let mut remotes = Vec::new();
            for _ in 1..executors {
                let (to_owner, requests) = shared_channel::new_bounded(NULL_LOG_CHANNEL_SLOTS);
                let (acks, from_owner) = shared_channel::new_bounded(NULL_LOG_CHANNEL_SLOTS);
                peers.push((requests, acks));
                remotes.push(LogPlan::Remote { to_owner, from_owner });
            }
            plans.push(LogPlan::Own { path, bytes, syncs, peers });
            plans.extend(remotes);
        }
    }
    let mut addr = addr;
    for (index, plan) in plans.into_iter().enumerate() {
        let stats = Arc::clone(&stats);
        let (bound_tx, bound_rx) = std::sync::mpsc::channel::<Result<SocketAddr, String>>();
        let builder = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name(&format!("null-glommio-{index}"))
            .io_memory(NULL_GLOMMIO_IO_MEMORY_BYTES);
        let spawned = builder.spawn(move || async move {
            let log = match plan {
                LogPlan::None => None,
                LogPlan::Own { path, bytes, syncs, peers } => {
                    match LocalLog::open(&path, bytes, syncs, Arc::clone(&stats)).await {
                        Ok(log) => {
                            for (requests, acks) in peers {
                                let log = Rc::clone(&log);
                                glommio::spawn_local(serve_forwarded(log, requests, acks)).detach();
                            }
                            Some(ExecutorLog::Own(log))
                        }
                        Err(e) => {
                            let _ = bound_tx.send(Err(e.to_string()));
                            return;
                        }
                    }
                }
                LogPlan::Remote { to_owner, from_owner } => {
                    Some(ExecutorLog::Remote(RemoteLog::start(to_owner, from_owner).await))
                }
            };
            let listener = match glommio::net::TcpListener::bind(addr) {
                Ok(listener) => listener,
                Err(e) => {
                    let _ = bound_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = bound_tx.send(listener.local_addr().map_err(|e| e.to_string()));
            loop {
                match listener.accept().await {
                    Ok(stream) => {
                        let log = log.clone();
                        let stats = Arc::clone(&stats);
                        glommio::spawn_local(async move {
                            if let Err(e) = serve_glommio(stream, log, &stats).await {
                                eprintln!("null server: connection ended: {e}");
                            }
                        })
                        .detach();
                    }
                    Err(e) => eprintln!("null server: accept: {e}"),
                }
            }
        });
        if let Err(e) = spawned {
            return Err(NullServerError::Glommio { index, reason: e.to_string() });
        }
        addr = match bound_rx.recv() {
            Ok(Ok(bound)) => bound,
            Ok(Err(reason)) => return Err(NullServerError::Glommio { index, reason }),
            Err(_) => {
                let reason = "stopped before binding".to_owned();
                return Err(NullServerError::Glommio { index, reason });
            }
        };
    }
    Ok(addr)
}

/// A glommio executor's part in the durable logs.
enum LogPlan {
    /// Not durable.
    None,
    /// Owns a log; `peers` are the channels of the executors that forward to it.
    Own {
        path: PathBuf,
        bytes: u64,
        syncs: usize,
        peers:
            Vec<(shared_channel::SharedReceiver<LogRequest>, shared_channel::SharedSender<LogAck>)>,
    },
    /// Forwards to the executor that owns the log.
    Remote {
        to_owner: shared_channel::SharedSender<LogRequest>,
        from_owner: shared_channel::SharedReceiver<LogAck>,
    },
}

async fn serve_glommio(
    mut stream: glommio::net::TcpStream,
    log: Option<ExecutorLog>,
    stats: &DurableStats,
) -> Result<(), NullServerError> {
    use futures_lite::{AsyncReadExt as _, AsyncWriteExt as _};
    stream.set_nodelay(true).map_err(io::Error::from)?;
    let mut protocol = Protocol::default();
    let mut chunk = vec![0u8; NULL_READ_BYTES];
    let mut input = Vec::with_capacity(NULL_READ_BYTES);
    let mut out = Vec::with_capacity(NULL_READ_BYTES);
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        input.extend_from_slice(&chunk[..n]);
        let step = protocol.answer(&mut input, &mut out)?;
        let (records, count) = protocol.writes();
        if count > 0 {
            if let Some(log) = &log {
                let ticket = log.append(records, count);
                log.commit(ticket).await?;
                stats.acked.fetch_add(count, Ordering::Relaxed);
            }
            protocol.clear_writes();
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if step == Step::Close {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        message(&mut out, tag, |m| m.extend_from_slice(body));
        out
    }

    fn tags(mut bytes: &[u8]) -> Vec<u8> {
        let mut tags = Vec::new();
        while bytes.len() >= 5 {
            let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
            tags.push(bytes[0]);
            bytes = &bytes[1 + len..];
        }
        assert!(bytes.is_empty(), "a trailing partial frame");
        tags
    }

    fn started() -> Protocol {
        Protocol { started: true, ..Protocol::default() }
    }

    /// The parameter count is the highest `$n`, whatever the order or repetition.
    #[test]
    fn unit_highest_parameter() {
        assert_eq!(highest_parameter(b"SELECT 1"), 0);
        assert_eq!(highest_parameter(b"SELECT * FROM t WHERE id = $1"), 1);
        assert_eq!(highest_parameter(b"SELECT $2, $10, $1"), 10);
        assert_eq!(highest_parameter(b"SELECT '$' || $3"), 3);
        assert_eq!(highest_parameter(b"$"), 0);
    }

    /// pgbench's prepared point read, sent as one batch and split at every byte: the answer
    /// is the same frames, written only once the batch's last frame is complete.
    #[test]
    fn unit_prepared_batch_answered_at_any_split() {
        let mut batch = Vec::new();
        let mut parse = Vec::new();
        cstring(&mut parse, b"P0_0");
        cstring(&mut parse, b"SELECT * FROM pgb_docs WHERE id() = $1");
        parse.extend_from_slice(&0u16.to_be_bytes());
        batch.extend(frame(b'P', &parse));
        batch.extend(frame(b'D', b"SP0_0\0"));
        batch.extend(frame(b'S', b""));
        batch.extend(frame(b'B', b"\0P0_0\0\0\0\0\x01\0\0\0\x017\0\0"));
        batch.extend(frame(b'D', b"P\0"));
        batch.extend(frame(b'E', b"\0\0\0\0\0"));
        batch.extend(frame(b'S', b""));
        for split in 0..batch.len() {
            let mut protocol = started();
            let mut input = batch[..split].to_vec();
            let mut out = Vec::new();
            assert_eq!(protocol.answer(&mut input, &mut out).unwrap(), Step::Continue);
            input.extend_from_slice(&batch[split..]);
            assert_eq!(protocol.answer(&mut input, &mut out).unwrap(), Step::Continue);
            assert!(input.is_empty());
            assert_eq!(tags(&out), b"1tTZ2TDCZ");
        }
    }

    /// SSLRequest gets 'N'; the StartupMessage then gets AuthenticationOk, ParameterStatus,
    /// BackendKeyData and ReadyForQuery, and later frames are typed frames.
    #[test]
    fn unit_startup_refuses_ssl_then_answers() {
        let mut protocol = Protocol::default();
        let mut input = vec![0, 0, 0, 8];
        input.extend_from_slice(&SSL_REQUEST.to_be_bytes());
        let mut out = Vec::new();
        assert_eq!(protocol.answer(&mut input, &mut out).unwrap(), Step::Continue);
        assert_eq!(out, b"N");
        let mut body = PROTOCOL_3.to_be_bytes().to_vec();
        cstring(&mut body, b"user");
        cstring(&mut body, b"bench");
        body.push(0);
        let mut input = (u32::try_from(body.len() + 4).unwrap()).to_be_bytes().to_vec();
        input.extend_from_slice(&body);
        input.extend(frame(b'Q', b"SELECT 1\0"));
        let mut out = Vec::new();
        assert_eq!(protocol.answer(&mut input, &mut out).unwrap(), Step::Continue);
        assert!(input.is_empty());
        assert_eq!(tags(&out), b"RSSSSSSSSKZTDCZ");
        let mut input = frame(b'X', b"");
        assert_eq!(protocol.answer(&mut input, &mut Vec::new()).unwrap(), Step::Close);
    }

    /// pgbench's prepared insert: Describe answers NoData, Execute the command tag and no
    /// row, and the statement's text with its Bind body is a write record.
    #[test]
    fn unit_prepared_write_is_recorded_and_answered_with_its_tag() {
        let sql: &[u8] = b"INSERT INTO pgb_docs VALUES ($1, '{}')";
        let mut parse = Vec::new();
        cstring(&mut parse, b"P0_1");
        cstring(&mut parse, sql);
        parse.extend_from_slice(&0u16.to_be_bytes());
        let bind: &[u8] = b"\0P0_1\0\0\0\0\x01\0\0\0\x027\0\0\0";
        let mut batch = frame(b'P', &parse);
        batch.extend(frame(b'D', b"SP0_1\0"));
        batch.extend(frame(b'S', b""));
        batch.extend(frame(b'B', bind));
        batch.extend(frame(b'D', b"P\0"));
        batch.extend(frame(b'E', b"\0\0\0\0\0"));
        batch.extend(frame(b'S', b""));
        let mut protocol = started();
        let mut out = Vec::new();
        protocol.answer(&mut batch, &mut out).unwrap();
        assert_eq!(tags(&out), b"1tnZ2nCZ");
        assert!(out.windows(11).any(|w| w == b"INSERT 0 1\0"));
        let (records, count) = protocol.writes();
        assert_eq!(count, 1);
        assert_eq!(records, [sql, bind].concat());
        protocol.clear_writes();
        assert_eq!(protocol.writes().1, 0);
        // A read bound after the write is not a write.
        let mut input = frame(b'B', b"\0\0\0\0\0\0\0\0");
        input.extend(frame(b'E', b"\0\0\0\0\0"));
        out.clear();
        protocol.answer(&mut input, &mut out).unwrap();
        assert_eq!(tags(&out), b"2DC");
        assert_eq!(protocol.writes().1, 0);
    }

    /// A simple-query write (any case, leading blanks) is recorded with its tag; a read is not.
    #[test]
    fn unit_simple_query_writes() {
        let mut protocol = started();
        let mut input = frame(b'Q', b"  update t SET a = 1\0");
        input.extend(frame(b'Q', b"delete from t\0"));
        input.extend(frame(b'Q', b"SELECT 1\0"));
        let mut out = Vec::new();
        protocol.answer(&mut input, &mut out).unwrap();
        assert_eq!(tags(&out), b"CZCZTDCZ");
        let (records, count) = protocol.writes();
        assert_eq!(count, 2);
        assert_eq!(records, b"  update t SET a = 1delete from t");
        assert_eq!(WriteKind::of(b"(INSERT"), Some(WriteKind::Insert));
        assert_eq!(WriteKind::of(b"inserted"), None);
        assert_eq!(WriteKind::of(b""), None);
    }

    /// Named statements are bounded per connection; re-preparing a known name is not a new one.
    #[test]
    fn unit_statements_are_bounded() {
        let mut protocol = started();
        let parse = |name: &str| {
            let mut body = Vec::new();
            cstring(&mut body, name.as_bytes());
            cstring(&mut body, b"SELECT $1");
            body.extend_from_slice(&0u16.to_be_bytes());
            frame(b'P', &body)
        };
        for i in 0..NULL_STATEMENTS_MAX {
            let mut input = parse(&format!("s{i}"));
            protocol.answer(&mut input, &mut Vec::new()).unwrap();
        }
        let mut input = parse("s0");
        assert_eq!(protocol.answer(&mut input, &mut Vec::new()).unwrap(), Step::Continue);
        let mut input = parse("one too many");
        assert!(matches!(
            protocol.answer(&mut input, &mut Vec::new()),
            Err(NullServerError::Statements)
        ));
    }

    /// A length outside the bounds is an error, never an allocation or a panic.
    #[test]
    fn unit_bad_lengths_are_errors() {
        let mut out = Vec::new();
        let mut input = vec![b'Q', 0, 0, 0, 3];
        assert!(matches!(
            started().answer(&mut input, &mut out),
            Err(NullServerError::FrameLength { len: 3 })
        ));
        let mut input = vec![b'Q', 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            started().answer(&mut input, &mut out),
            Err(NullServerError::FrameLength { .. })
        ));
        let mut input = frame(b'Q', b"no terminator");
        assert!(matches!(
            started().answer(&mut input, &mut out),
            Err(NullServerError::Malformed { tag: b'Q' })
        ));
    }
}

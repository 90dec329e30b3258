//! Shared by the `pg_*` integration tests: a tiny test engine and a server on its own glommio
//! executor thread, listening on 127.0.0.1 port 0.
//!
//! The test engine understands a handful of statements (case-insensitive, `;`-separated):
//! - `select <int>`: one int4 column `?column?`;
//! - `select $1::int4, $2::text, ...`: echoes each parameter in the requested format;
//! - `series <n>`: int8 column `n` with rows 1..=n;
//! - `wide <rows> <bytes>`: text column `w`, each row one value of `<bytes>` bytes;
//! - `insert`: no rows, tag `INSERT 0 1`;
//! - `begin`, `commit`, `rollback`: transaction status for ReadyForQuery;
//! - `notice`: sends a NoticeResponse, then tag `DO`;
//! - `wait_for_cancel`: signals `started`, then runs until cancelled (57014);
//! - `fail`: fails at execution with 22012 (and fails an open transaction);
//! - `doomed`: tag `DO`; the query of several statements it is in then fails at its end
//!   (`Engine::end_implicit`) with 40001;
//! - `implicit_ends`: one text row listing how this session's queries of several statements
//!   ended (`ok` or `failed`, comma-separated, oldest first);
//! - `create <name>`: remembers a name for the session; `use <name>`: fails at plan time with
//!   42P01 unless the name was created (checks plans happen after earlier statements ran);
//! - anything else: a syntax error 42601 at parse time, with position and hint.
//!
//! Sessions for the database `nodb` are refused at start with 3D000 and a hint.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use node::pg::{
    Column, CommandTag, Description, Engine, Format, Notice, Oid, Params, PgConfig, PgError,
    PgRegistry, RowSink, SessionInfo, SqlState, TransactionStatus, accept_loop,
};

/// Counters and signals shared between the test and the engines of one server.
#[derive(Default)]
pub struct Shared {
    /// Number of `Engine::plan` calls.
    pub plans: AtomicUsize,
    /// Notified when `wait_for_cancel` starts running.
    pub started: tokio::sync::Notify,
}

pub enum Kind {
    Int(i32),
    Echo,
    Series(i64),
    Wide(usize, usize),
    Insert,
    Begin,
    Commit,
    Rollback,
    Notice,
    WaitForCancel,
    Fail,
    Create(String),
    Use(String),
    Doomed,
    ImplicitEnds,
}

pub struct Statement {
    kind: Kind,
    description: Description,
}

pub struct TestEngine {
    shared: Arc<Shared>,
    status: TransactionStatus,
    names: std::collections::HashSet<String>,
    /// How each query of several statements ended (`Engine::end_implicit`'s `failed`).
    implicit_ends: Vec<bool>,
    /// A `doomed` statement ran in the current query of several statements.
    doomed: bool,
}

impl TestEngine {
    pub fn new(shared: Arc<Shared>) -> TestEngine {
        TestEngine {
            shared,
            status: TransactionStatus::Idle,
            names: Default::default(),
            implicit_ends: Vec::new(),
            doomed: false,
        }
    }
}

fn syntax_error(sql: &str, at: &str) -> PgError {
    let position = sql.find(at).map_or(1, |p| p + 1);
    PgError::new(SqlState::SYNTAX_ERROR, format!("syntax error at or near \"{at}\""))
        .with_position(u32::try_from(position).unwrap())
        .with_hint("The test engine knows select, series, insert, begin, commit, rollback.")
}

fn parse_one(sql: &str, text: &str) -> Result<Statement, PgError> {
    let lower = text.trim().to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let no_rows = |kind| Ok(Statement { kind, description: Description::default() });
    match words.as_slice() {
        ["insert"] => no_rows(Kind::Insert),
        ["begin"] | ["start", "transaction"] => no_rows(Kind::Begin),
        ["commit"] => no_rows(Kind::Commit),
        ["rollback"] => no_rows(Kind::Rollback),
        ["notice"] => no_rows(Kind::Notice),
        ["fail"] => no_rows(Kind::Fail),
        ["doomed"] => no_rows(Kind::Doomed),
        ["implicit_ends"] => Ok(Statement {
            kind: Kind::ImplicitEnds,
            description: Description {
                params: vec![],
                columns: Some(vec![Column::new("ends", Oid::TEXT)]),
            },
        }),
        ["wait_for_cancel"] => no_rows(Kind::WaitForCancel),
        ["create", name] => no_rows(Kind::Create((*name).to_owned())),
        ["use", name] => no_rows(Kind::Use((*name).to_owned())),
        ["series", n] => {
            let n = n.parse().map_err(|_| syntax_error(sql, n))?;
            Ok(Statement {
                kind: Kind::Series(n),
                description: Description {
                    params: vec![],
                    columns: Some(vec![Column::new("n", Oid::INT8)]),
                },
            })
        }
        ["wide", rows, bytes] => {
            let rows = rows.parse().map_err(|_| syntax_error(sql, rows))?;
            let bytes = bytes.parse().map_err(|_| syntax_error(sql, bytes))?;
            Ok(Statement {
                kind: Kind::Wide(rows, bytes),
                description: Description {
                    params: vec![],
                    columns: Some(vec![Column::new("w", Oid::TEXT)]),
                },
            })
        }
        ["select", n] if !n.starts_with('$') => {
            let n = n.parse().map_err(|_| syntax_error(sql, n))?;
            Ok(Statement {
                kind: Kind::Int(n),
                description: Description {
                    params: vec![],
                    columns: Some(vec![Column::new("?column?", Oid::INT4)]),
                },
            })
        }
        ["select", ..] => {
            let list = lower.trim().trim_start_matches("select").trim();
            let mut params = Vec::new();
            let mut columns = Vec::new();
            for (i, item) in list.split(',').map(str::trim).enumerate() {
                let (param, ty) = item.split_once("::").ok_or_else(|| syntax_error(sql, item))?;
                if param != format!("${}", i + 1) {
                    return Err(syntax_error(sql, item));
                }
                let oid = match ty {
                    "int4" => Oid::INT4,
                    "int8" => Oid::INT8,
                    "text" => Oid::TEXT,
                    _ => return Err(syntax_error(sql, ty)),
                };
                params.push(oid);
                columns.push(Column::new(format!("c{}", i + 1), oid));
            }
            Ok(Statement {
                kind: Kind::Echo,
                description: Description { params, columns: Some(columns) },
            })
        }
        [first, ..] => Err(syntax_error(sql, first)),
        [] => Err(syntax_error(sql, text)),
    }
}

fn decode_int(oid: Oid, format: Format, bytes: &[u8]) -> Result<i64, PgError> {
    let bad = || PgError::new(SqlState::INVALID_BINARY_REPRESENTATION, "bad integer parameter");
    match format {
        Format::Text => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| PgError::new(SqlState::INVALID_TEXT_REPRESENTATION, "bad integer")),
        Format::Binary if oid == Oid::INT4 => {
            Ok(i32::from_be_bytes(bytes.try_into().map_err(|_| bad())?).into())
        }
        Format::Binary => Ok(i64::from_be_bytes(bytes.try_into().map_err(|_| bad())?)),
    }
}

impl Engine for TestEngine {
    type Parsed = Statement;
    type Statement = Statement;

    async fn start_session(&mut self, session: &SessionInfo) -> Result<(), PgError> {
        if session.database == "nodb" {
            return Err(PgError::new(
                SqlState::new(b"3D000").unwrap(),
                "database \"nodb\" does not exist",
            )
            .with_hint("Connect to database test."));
        }
        Ok(())
    }

    async fn parse(&mut self, sql: &str) -> Result<Vec<Statement>, PgError> {
        sql.split(';').filter(|s| !s.trim().is_empty()).map(|s| parse_one(sql, s)).collect()
    }

    async fn plan(&mut self, parsed: Statement, _types: &[Oid]) -> Result<Statement, PgError> {
        self.shared.plans.fetch_add(1, Ordering::SeqCst);
        if let Kind::Use(name) = &parsed.kind
            && !self.names.contains(name)
        {
            return Err(PgError::new(
                SqlState::new(b"42P01").unwrap(),
                format!("relation \"{name}\" does not exist"),
            ));
        }
        Ok(parsed)
    }

    fn describe<'s>(&'s self, statement: &'s Statement) -> &'s Description {
        &statement.description
    }

    async fn execute(
        &mut self,
        statement: &Statement,
        params: Params<'_>,
        sink: &mut RowSink<'_>,
    ) -> Result<CommandTag, PgError> {
        if self.status == TransactionStatus::Failed
            && !matches!(statement.kind, Kind::Rollback | Kind::Commit)
        {
            return Err(PgError::new(
                SqlState::new(b"25P02").unwrap(),
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        match &statement.kind {
            Kind::Create(name) => {
                self.names.insert(name.clone());
                Ok(CommandTag::new("CREATE TABLE"))
            }
            Kind::Use(_) => Ok(CommandTag::new("USE")),
            Kind::Doomed => {
                self.doomed = true;
                Ok(CommandTag::new("DO"))
            }
            Kind::ImplicitEnds => {
                let ends: Vec<&str> =
                    self.implicit_ends.iter().map(|&f| if f { "failed" } else { "ok" }).collect();
                let mut row = sink.row();
                row.text(&ends.join(","));
                row.finish()?;
                Ok(CommandTag::with_rows("SELECT", 1))
            }
            &Kind::Int(n) => {
                let mut row = sink.row();
                match row.format() {
                    Format::Text => row.display(n),
                    Format::Binary => row.bytes(&n.to_be_bytes()),
                }
                row.finish()?;
                Ok(CommandTag::with_rows("SELECT", 1))
            }
            &Kind::Series(n) => {
                for i in 1..=n {
                    sink.check_cancelled()?;
                    let mut row = sink.row();
                    match row.format() {
                        Format::Text => row.display(i),
                        Format::Binary => row.bytes(&i.to_be_bytes()),
                    }
                    row.finish()?;
                    sink.flush_if_needed().await?;
                }
                Ok(CommandTag::with_rows("SELECT", sink.rows()))
            }
            &Kind::Wide(rows, bytes) => {
                let value = vec![b'w'; bytes];
                for _ in 0..rows {
                    let mut row = sink.row();
                    row.bytes(&value);
                    row.finish()?;
                    sink.flush_if_needed().await?;
                }
                Ok(CommandTag::with_rows("SELECT", sink.rows()))
            }
            Kind::Echo => {
                let mut row = sink.row();
                for param in params.iter() {
                    let Some(value) = param.value else {
                        row.null();
                        continue;
                    };
                    let out_format = row.format();
                    match param.type_oid {
                        Oid::TEXT => row.bytes(value),
                        oid => {
                            let n = decode_int(oid, param.format, value)?;
                            match (out_format, oid) {
                                (Format::Text, _) => row.display(n),
                                (Format::Binary, Oid::INT4) => {
                                    row.bytes(&i32::try_from(n).unwrap().to_be_bytes())
                                }
                                (Format::Binary, _) => row.bytes(&n.to_be_bytes()),
                            }
                        }
                    }
                }
                row.finish()?;
                Ok(CommandTag::with_rows("SELECT", 1))
            }
            Kind::Insert => Ok(CommandTag::insert(1)),
            Kind::Begin => {
                self.status = TransactionStatus::InTransaction;
                Ok(CommandTag::new("BEGIN"))
            }
            Kind::Commit => {
                self.status = TransactionStatus::Idle;
                Ok(CommandTag::new("COMMIT"))
            }
            Kind::Rollback => {
                self.status = TransactionStatus::Idle;
                Ok(CommandTag::new("ROLLBACK"))
            }
            Kind::Notice => {
                sink.notice(&Notice::new("hello from the test engine"));
                Ok(CommandTag::new("DO"))
            }
            Kind::WaitForCancel => {
                self.shared.started.notify_one();
                // The engine side of cancellation: poll the flag between units of work. This
                // is the statement's own work loop, not test synchronisation.
                while !sink.is_cancelled() {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
                sink.check_cancelled()?;
                Ok(CommandTag::new("DONE"))
            }
            Kind::Fail => {
                if self.status == TransactionStatus::InTransaction {
                    self.status = TransactionStatus::Failed;
                }
                Err(PgError::new(SqlState::new(b"22012").unwrap(), "division by zero")
                    .with_hint("Do not divide by zero."))
            }
        }
    }

    fn transaction_status(&self) -> TransactionStatus {
        self.status
    }

    async fn end_implicit(&mut self, failed: bool) -> Result<(), PgError> {
        self.implicit_ends.push(failed);
        if std::mem::take(&mut self.doomed) && !failed {
            return Err(PgError::new(
                SqlState::new(b"40001").unwrap(),
                "could not serialize access due to concurrent update",
            ));
        }
        Ok(())
    }
}

/// WARN and ERROR events logged by the server since the test process started.
static WARNINGS: AtomicUsize = AtomicUsize::new(0);

/// Counts (and prints) every WARN or ERROR event: the tests expect none.
struct WarnCounter;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WarnCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() <= tracing::Level::WARN {
            WARNINGS.fetch_add(1, Ordering::SeqCst);
            eprintln!("unexpected {} log event: {event:?}", event.metadata().level());
        }
    }
}

/// Fails the test if the server logged any WARN or ERROR so far. Every test calls it at its
/// end, and the connect helpers call it too.
pub fn assert_no_warnings() {
    assert_eq!(WARNINGS.load(Ordering::SeqCst), 0, "the server logged WARN/ERROR lines (above)");
}

fn install_log_check() {
    use tracing_subscriber::layer::SubscriberExt;
    // Only the first call per test process installs it; later ones find it in place.
    let subscriber = tracing_subscriber::registry().with(WarnCounter);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// The first column of every row in a simple-query answer.
pub fn first_column(messages: &[tokio_postgres::SimpleQueryMessage]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// A running test server.
pub struct Server {
    pub addr: SocketAddr,
    pub shared: Arc<Shared>,
    pub registry: Arc<PgRegistry>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<glommio::ExecutorJoinHandle<()>>,
}

impl Server {
    /// Stops the accept loop and waits for the executor thread to end (the listener is closed
    /// when this returns).
    pub fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().expect("server thread");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Server {
    /// A connection string for tokio-postgres.
    pub fn conn_str(&self, extra: &str) -> String {
        format!(
            "host={} port={} user=tester dbname=test sslmode=disable {extra}",
            self.addr.ip(),
            self.addr.port()
        )
    }

    /// Connects with tokio-postgres (no TLS) and drives the connection in the background.
    pub async fn connect(&self) -> tokio_postgres::Client {
        self.connect_with("").await.expect("connect")
    }

    pub async fn connect_with(
        &self,
        extra: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, connection) =
            tokio_postgres::connect(&self.conn_str(extra), tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }
}

/// Starts a server with `config` and at most `connections_max` sessions on a new executor
/// thread, which ends when the returned `Server` is dropped (servers kept in a `static` live
/// until the test process exits).
pub fn start(config: PgConfig, connections_max: usize) -> Server {
    install_log_check();
    let shared = Arc::new(Shared::default());
    let registry = Arc::new(PgRegistry::new(connections_max));
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let engine_shared = Arc::clone(&shared);
    let loop_registry = Arc::clone(&registry);
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .name("pg-test")
        .spawn(move || async move {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send addr");
            let make_engine = move || TestEngine::new(Arc::clone(&engine_shared));
            // A oneshot receiver is a plain future: it needs no tokio runtime to be awaited.
            let stop = async {
                let _ = stop_rx.await;
            };
            accept_loop(listener, Rc::new(config), loop_registry, make_engine, stop).await;
            // Stopped: the executor ends with this future, dropping its connection tasks.
        })
        .expect("executor");
    let addr = rx.recv().expect("server address");
    // Dropping the Server stops the accept loop and the thread ends by itself (not joined).
    Server { addr, shared, registry, stop: Some(stop_tx), thread: Some(handle) }
}

/// A blocking raw-protocol client for tests that send bytes no driver would.
pub mod raw {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::Duration;

    /// A connected socket. The read timeout only turns a server bug (no answer) into a test
    /// failure instead of a hang; no test relies on it for ordering.
    pub fn connect(addr: SocketAddr) -> TcpStream {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        stream
    }

    /// A StartupMessage for protocol `major.minor` with these parameters.
    pub fn startup_packet(major: u16, minor: u16, params: &[(&str, &str)]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&major.to_be_bytes());
        body.extend_from_slice(&minor.to_be_bytes());
        for (k, v) in params {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut packet = u32::try_from(body.len() + 4).unwrap().to_be_bytes().to_vec();
        packet.extend_from_slice(&body);
        packet
    }

    /// A regular frame: type byte, length, body.
    pub fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut f = vec![tag];
        f.extend_from_slice(&u32::try_from(body.len() + 4).unwrap().to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    /// A simple Query frame.
    pub fn query(sql: &str) -> Vec<u8> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        frame(b'Q', &body)
    }

    /// Parse: statement `name` from `sql`, no parameter types.
    pub fn parse(name: &str, sql: &str) -> Vec<u8> {
        let mut body = format!("{name}\0{sql}\0").into_bytes();
        body.extend_from_slice(&0u16.to_be_bytes());
        frame(b'P', &body)
    }

    /// Bind: portal from statement with parameter format codes and values; text results.
    pub fn bind(portal: &str, statement: &str, formats: &[i16], params: &[&[u8]]) -> Vec<u8> {
        let mut body = format!("{portal}\0{statement}\0").into_bytes();
        body.extend_from_slice(&u16::try_from(formats.len()).unwrap().to_be_bytes());
        for f in formats {
            body.extend_from_slice(&f.to_be_bytes());
        }
        body.extend_from_slice(&u16::try_from(params.len()).unwrap().to_be_bytes());
        for p in params {
            body.extend_from_slice(&i32::try_from(p.len()).unwrap().to_be_bytes());
            body.extend_from_slice(p);
        }
        body.extend_from_slice(&0u16.to_be_bytes());
        frame(b'B', &body)
    }

    /// Execute: every row of `portal`.
    pub fn execute(portal: &str) -> Vec<u8> {
        let mut body = format!("{portal}\0").into_bytes();
        body.extend_from_slice(&0i32.to_be_bytes());
        frame(b'E', &body)
    }

    /// Sync.
    pub fn sync() -> Vec<u8> {
        frame(b'S', b"")
    }

    /// Reads one backend message; `None` at EOF.
    pub fn read_message(stream: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
        let mut header = [0u8; 5];
        if stream.read_exact(&mut header).is_err() {
            return None;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let mut body = vec![0u8; usize::try_from(len).unwrap() - 4];
        stream.read_exact(&mut body).expect("message body");
        Some((header[0], body))
    }

    /// Reads messages up to and including ReadyForQuery (or EOF).
    pub fn read_until_ready(stream: &mut TcpStream) -> Vec<(u8, Vec<u8>)> {
        let mut messages = Vec::new();
        while let Some((tag, body)) = read_message(stream) {
            messages.push((tag, body));
            if tag == b'Z' {
                break;
            }
        }
        messages
    }

    /// Reads every message until the server closes the connection.
    pub fn read_to_eof(stream: &mut TcpStream) -> Vec<(u8, Vec<u8>)> {
        let mut messages = Vec::new();
        while let Some(m) = read_message(stream) {
            messages.push(m);
        }
        messages
    }

    /// The field `field` ('C' code, 'S' severity, 'M' message) of an ErrorResponse body.
    pub fn error_field(body: &[u8], field: u8) -> Option<String> {
        let mut rest = body;
        while let Some((&kind, tail)) = rest.split_first() {
            if kind == 0 {
                return None;
            }
            let end = tail.iter().position(|&b| b == 0)?;
            if kind == field {
                return Some(String::from_utf8_lossy(&tail[..end]).into_owned());
            }
            rest = &tail[end + 1..];
        }
        None
    }

    /// The SQLSTATEs of every ErrorResponse among `messages`.
    pub fn error_codes(messages: &[(u8, Vec<u8>)]) -> Vec<String> {
        messages
            .iter()
            .filter(|(tag, _)| *tag == b'E')
            .map(|(_, body)| error_field(body, b'C').unwrap_or_default())
            .collect()
    }

    /// The type bytes of `messages`, as a string for compact assertions.
    pub fn tags(messages: &[(u8, Vec<u8>)]) -> String {
        messages.iter().map(|(tag, _)| char::from(*tag)).collect()
    }

    /// Connects and completes a trust startup; returns the socket ready for queries.
    pub fn session(addr: SocketAddr) -> TcpStream {
        super::assert_no_warnings();
        let mut stream = connect(addr);
        stream.write_all(&startup_packet(3, 0, &[("user", "raw"), ("database", "test")])).unwrap();
        let messages = read_until_ready(&mut stream);
        assert_eq!(messages.last().map(|m| m.0), Some(b'Z'), "startup: {}", tags(&messages));
        stream
    }
}

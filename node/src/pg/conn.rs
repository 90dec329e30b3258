//! One connection's state machine: startup (SSL/GSS refusal, cancel, protocol version),
//! authentication (trust or SCRAM-SHA-256), then simple and extended query until Terminate,
//! EOF, a fatal error or the idle timeout.
//!
//! I/O discipline: bytes are read in chunks of [`PG_READ_CHUNK_BYTES`]; every complete frame in
//! the buffer is handled before the next read; responses accumulate in one output buffer that
//! is written with one `write_all` when we are about to wait for the client again (so a
//! pipelined batch of Parse/Bind/Execute/Sync, or several queries, costs one write), or
//! earlier once [`PG_RESULT_FLUSH_BYTES`] are pending.

use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use pgwire::messages::PgWireBackendMessage as B;
use pgwire::messages::copy::{CopyDone, CopyInResponse, CopyOutResponse};
use pgwire::messages::data::{FieldDescription, NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    BindComplete, CloseComplete, ParseComplete, PortalSuspended,
};
use pgwire::messages::response::{
    CommandComplete, EmptyQueryResponse, ErrorResponse, NoticeResponse, ReadyForQuery, SslResponse,
    TransactionStatus as PgTxStatus,
};
use pgwire::messages::startup::{
    Authentication, BackendKeyData, NegotiateProtocolVersion, ParameterStatus, SecretKey,
};
use tracing::debug;

use crate::pg::engine::{
    CancelFlag, Column, ConnectionEffect, CopyMode, Description, Engine, Format, Oid, Params,
    RowSink, SessionInfo, TransactionStatus,
};
use crate::pg::error::{Notice, PgError, ServeError};
use crate::pg::frame::{
    AfterExecute, Frame, FrameError, FrontendMessage, StartupRequest, Target, after_execute,
    decode_message, decode_sasl_initial, decode_startup, split_frame, split_startup,
};
use crate::pg::limits::{
    PG_BIND_PARAMETERS_MAX, PG_MESSAGE_BYTES_MAX, PG_PORTALS_MAX, PG_PREPARED_STATEMENTS_MAX,
    PG_READ_CHUNK_BYTES, PG_RESULT_BYTES_MAX, PG_RESULT_FLUSH_BYTES, PG_WRITE_BUFFER_BYTES,
};
use crate::pg::scram::{SCRAM_SHA_256, ScramError, ScramExchange, random_nonce};
use crate::pg::server::{PgAuth, PgConfig, PgRegistry, SessionSlot};
use crate::pg::sqlstate::SqlState;

/// Longest text of one ErrorResponse/NoticeResponse field, in bytes. pgwire refuses backend
/// messages above 10 000 bytes; long messages are cut at a character boundary.
const ERROR_FIELD_BYTES_MAX: usize = 2000;

/// Serves one client connection until it ends. Returns `Ok(())` when the client leaves
/// (Terminate or EOF) or after a CancelRequest; `Err` after a FATAL error or an I/O failure.
pub async fn serve_connection<E: Engine>(
    stream: TcpStream,
    engine: E,
    config: &PgConfig,
    registry: &Arc<PgRegistry>,
) -> Result<(), ServeError> {
    // Latency matters more than packet count: our writes are already batched.
    stream.set_nodelay(true).map_err(io::Error::from)?;
    let mut conn = Conn {
        stream,
        chunk: vec![0u8; PG_READ_CHUNK_BYTES].into_boxed_slice(),
        inbuf: BytesMut::with_capacity(PG_READ_CHUNK_BYTES),
        out: BytesMut::with_capacity(PG_WRITE_BUFFER_BYTES),
        engine,
        statements: HashMap::new(),
        portals: HashMap::new(),
        skip_until_sync: false,
        in_extended: false,
        implicit_batch: false,
        cancel: CancelFlag::default(),
        starting: true,
        peer_data: false,
        copy_in: None,
    };
    let result = conn.run(config, registry).await;
    if conn.peer_data
        && let Some(hook) = config.peer_data
    {
        let Conn { stream, inbuf, .. } = conn;
        hook(stream, inbuf).await;
        return Ok(());
    }
    if let Err(ServeError::Fatal(err)) = &result {
        // Best effort: the client may already be gone.
        conn.send_error(err);
        let _ = conn.flush().await;
    }
    result
}

/// A prepared statement: the engine's statement, or `None` for an empty query string.
struct Prepared<S> {
    statement: Option<S>,
}

enum PortalState {
    /// Bound, not executed yet.
    Ready,
    /// Executed with a row limit: all rows encoded, `sent` of them delivered.
    Captured { rows: BytesMut, ends: Vec<usize>, sent: usize, tag: String },
    /// Ran to completion.
    Done { tag: String },
}

struct Portal<S> {
    prepared: Rc<Prepared<S>>,
    param_types: Vec<Oid>,
    param_formats: Vec<Format>,
    params: Vec<Option<Bytes>>,
    result_formats: Vec<Format>,
    column_count: usize,
    state: PortalState,
}

struct Conn<E: Engine> {
    stream: TcpStream,
    /// One socket read lands here, then is appended to `inbuf` (allocated once per connection).
    chunk: Box<[u8]>,
    inbuf: BytesMut,
    out: BytesMut,
    engine: E,
    statements: HashMap<String, Rc<Prepared<E::Statement>>>,
    portals: HashMap<String, Portal<E::Statement>>,
    /// After an error in an extended-query batch, messages are discarded until Sync.
    skip_until_sync: bool,
    /// An extended-query batch is open (a message since the last Sync).
    in_extended: bool,
    /// The engine was told (`Engine::begin_implicit`) that the statements of this simple
    /// Query, or this extended batch's Executes, form one implicit transaction, which the
    /// query's end or the batch's Sync ends (`end_implicit_batch`).
    implicit_batch: bool,
    cancel: CancelFlag,
    /// Before the first ReadyForQuery: a read timeout is the startup timeout, not idleness.
    starting: bool,
    /// The connection is a cluster data connection, handed to `PgConfig::peer_data`.
    peer_data: bool,
    /// A `COPY … FROM STDIN` is receiving the client's data.
    copy_in: Option<CopyIn>,
}

/// A running `COPY … FROM STDIN`.
#[derive(Clone, Copy)]
struct CopyIn {
    /// Started by Execute (the client ends with Sync) rather than by a simple query.
    extended: bool,
}

enum Next {
    Continue,
    Terminate,
}

static EMPTY_DESCRIPTION: Description = Description { params: Vec::new(), columns: None };

impl<E: Engine> Conn<E> {
    async fn run(
        &mut self,
        config: &PgConfig,
        registry: &Arc<PgRegistry>,
    ) -> Result<(), ServeError> {
        self.stream.set_read_timeout(Some(config.startup_timeout)).map_err(io::Error::from)?;
        let Some(session) = self.startup(config, registry).await? else { return Ok(()) };
        self.starting = false;
        self.stream.set_read_timeout(Some(config.idle_timeout)).map_err(io::Error::from)?;
        // A client that stops reading its results is as gone as one that stops sending.
        self.stream.set_write_timeout(Some(config.idle_timeout)).map_err(io::Error::from)?;
        debug!(pid = session.pid(), "session ready");
        let result = self.serve().await;
        drop(session);
        result
    }

    // ---- I/O -------------------------------------------------------------------------------

    /// Reads more bytes. `Ok(false)` on EOF; FATAL 57P05 on the idle timeout.
    async fn fill(&mut self) -> Result<bool, ServeError> {
        match self.stream.read(&mut self.chunk).await {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.inbuf.extend_from_slice(self.chunk.get(..n).unwrap_or_default());
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut && self.starting => {
                Err(fatal_protocol("startup and authentication did not complete in time"))
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(ServeError::Fatal(
                PgError::fatal(
                    SqlState::IDLE_SESSION_TIMEOUT,
                    "terminating connection due to idle-session timeout",
                )
                .with_hint("Reconnect; the server closes sessions that send nothing for a while."),
            )),
            Err(e) => Err(e.into()),
        }
    }

    async fn flush(&mut self) -> Result<(), ServeError> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    fn encode(&mut self, message: B) {
        put(&mut self.out, message);
    }

    fn send_error(&mut self, err: &PgError) {
        let fields = err.fields().into_iter().map(|(k, v)| (k, truncate(v))).collect();
        self.encode(B::ErrorResponse(ErrorResponse::new(fields)));
    }

    fn send_ready(&mut self) {
        let status = match self.engine.transaction_status() {
            TransactionStatus::Idle => PgTxStatus::Idle,
            TransactionStatus::InTransaction => PgTxStatus::Transaction,
            TransactionStatus::Failed => PgTxStatus::Error,
        };
        self.encode(B::ReadyForQuery(ReadyForQuery::new(status)));
    }

    // ---- startup and authentication --------------------------------------------------------

    /// Runs the startup phase. `Ok(None)` when the connection ends normally before a session
    /// (a CancelRequest, or EOF).
    async fn startup(
        &mut self,
        config: &PgConfig,
        registry: &Arc<PgRegistry>,
    ) -> Result<Option<SessionSlot>, ServeError> {
        // SSLRequest, then maybe GSSENCRequest, then the StartupMessage.
        let mut negotiations = 0;
        let (major, minor, parameters) = loop {
            let body = loop {
                match split_startup(&mut self.inbuf) {
                    Ok(Some(body)) => break body,
                    Ok(None) => {
                        if !self.fill().await? {
                            return Ok(None);
                        }
                    }
                    Err(e) => return Err(fatal_protocol(format!("invalid startup packet: {e}"))),
                }
            };
            match decode_startup(body) {
                Ok(StartupRequest::Ssl | StartupRequest::GssEnc) if negotiations < 2 => {
                    negotiations += 1;
                    // 'N': no encryption here; the client continues in plain text or gives up.
                    self.encode(B::SslResponse(SslResponse::Refuse));
                    self.flush().await?;
                }
                Ok(StartupRequest::Ssl | StartupRequest::GssEnc) => {
                    return Err(fatal_protocol("too many encryption requests"));
                }
                Ok(StartupRequest::PeerData) if negotiations == 0 && config.peer_data.is_some() => {
                    self.peer_data = true;
                    return Ok(None);
                }
                Ok(StartupRequest::PeerData) => {
                    return Err(fatal_protocol("this server accepts no cluster data connections"));
                }
                Ok(StartupRequest::Cancel { pid, secret }) => {
                    let found = registry.cancel(pid, &secret);
                    debug!(pid, found, "cancel request");
                    return Ok(None);
                }
                Ok(StartupRequest::Startup { major, minor, parameters }) => {
                    break (major, minor, parameters);
                }
                Err(e) => {
                    return Err(fatal_protocol(format!("invalid startup packet layout: {e}")));
                }
            }
        };
        if major != 3 {
            return Err(ServeError::Fatal(
                PgError::fatal(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    format!("unsupported frontend protocol {major}.{minor}: server supports 3.0"),
                )
                .with_hint(
                    "Use a client that speaks PostgreSQL protocol 3 (any driver since 2003).",
                ),
            ));
        }
        let unsupported: Vec<String> = parameters
            .iter()
            .filter(|(k, _)| k.starts_with("_pq_."))
            .map(|(k, _)| k.clone())
            .collect();
        if minor > 0 || !unsupported.is_empty() {
            self.encode(B::NegotiateProtocolVersion(NegotiateProtocolVersion::new(0, unsupported)));
        }
        let param = |name: &str| parameters.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let Some(user) = param("user").filter(|u| !u.is_empty()) else {
            return Err(ServeError::Fatal(PgError::fatal(
                SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                "no PostgreSQL user name specified in startup packet",
            )));
        };
        let database = param("database").filter(|d| !d.is_empty()).unwrap_or_else(|| user.clone());
        let application_name = param("application_name").unwrap_or_default();

        let session = registry.register(self.cancel.clone()).map_err(ServeError::Fatal)?;
        self.authenticate(config, &user).await?;
        let info = SessionInfo { user: user.clone(), database, parameters };
        self.engine.start_session(&info).await.map_err(|e| ServeError::Fatal(e.into_fatal()))?;

        self.encode(B::Authentication(Authentication::Ok));
        let statuses: [(&str, &str); 11] = [
            ("server_version", &config.server_version),
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("IntervalStyle", "postgres"),
            ("TimeZone", "UTC"),
            ("integer_datetimes", "on"),
            ("standard_conforming_strings", "on"),
            ("is_superuser", "off"),
            ("session_authorization", &user),
            ("application_name", &application_name),
        ];
        for (name, value) in statuses {
            self.encode(B::ParameterStatus(ParameterStatus::new(
                name.to_owned(),
                value.to_owned(),
            )));
        }
        let secret = session.secret().first_chunk::<4>().copied().unwrap_or_default();
        self.encode(B::BackendKeyData(BackendKeyData::new(
            session.pid(),
            SecretKey::I32(i32::from_be_bytes(secret)),
        )));
        self.send_ready();
        self.flush().await?;
        Ok(Some(session))
    }

    /// Reads one regular frame during authentication ('p' expected).
    async fn read_auth_frame(&mut self) -> Result<Option<Bytes>, ServeError> {
        loop {
            match split_frame(&mut self.inbuf) {
                Ok(Some(Frame { tag: b'p', body })) => return Ok(Some(body)),
                Ok(Some(Frame { tag: b'X', .. })) => return Ok(None),
                Ok(Some(Frame { tag, .. })) => {
                    return Err(fatal_protocol(format!(
                        "expected a password message, got message type {tag:#04x}"
                    )));
                }
                Ok(None) => {
                    self.flush().await?;
                    if !self.fill().await? {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(fatal_frame(&e)),
            }
        }
    }

    async fn authenticate(&mut self, config: &PgConfig, user: &str) -> Result<(), ServeError> {
        let credentials = match &config.auth {
            PgAuth::Trust => return Ok(()),
            PgAuth::Scram(credentials) => credentials,
        };
        let failed = || {
            ServeError::Fatal(
                PgError::fatal(
                    SqlState::INVALID_PASSWORD,
                    format!("password authentication failed for user \"{user}\""),
                )
                .with_hint("Check the password configured for this node."),
            )
        };
        let gone = || ServeError::Io(io::Error::from(io::ErrorKind::UnexpectedEof));
        let scram_error = |e: ScramError| match e {
            ScramError::InvalidProof => failed(),
            ScramError::ChannelBindingUnsupported | ScramError::AuthzidUnsupported => {
                ServeError::Fatal(PgError::fatal(SqlState::FEATURE_NOT_SUPPORTED, e.to_string()))
            }
            other => fatal_protocol(other.to_string()),
        };

        self.encode(B::Authentication(Authentication::SASL(vec![SCRAM_SHA_256.to_owned()])));
        let body = self.read_auth_frame().await?.ok_or_else(gone)?;
        let initial = decode_sasl_initial(body).map_err(|e| fatal_protocol(e.to_string()))?;
        if initial.mechanism != SCRAM_SHA_256 {
            return Err(ServeError::Fatal(
                PgError::fatal(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    format!("SASL mechanism {:?} is not supported", initial.mechanism),
                )
                .with_hint(
                    "Use SCRAM-SHA-256 without channel binding (sslmode=disable or prefer).",
                ),
            ));
        }
        let client_first =
            initial.data.ok_or_else(|| fatal_protocol("SASLInitialResponse without data"))?;
        let nonce = random_nonce().map_err(scram_error)?;
        let (exchange, server_first) =
            ScramExchange::start(credentials, &client_first, &nonce).map_err(scram_error)?;
        self.encode(B::Authentication(Authentication::SASLContinue(Bytes::from(server_first))));
        let client_final = self.read_auth_frame().await?.ok_or_else(gone)?;
        let server_final = exchange.finish(credentials, &client_final).map_err(scram_error)?;
        self.encode(B::Authentication(Authentication::SASLFinal(Bytes::from(server_final))));
        Ok(())
    }

    // ---- the query phase -------------------------------------------------------------------

    async fn serve(&mut self) -> Result<(), ServeError> {
        loop {
            loop {
                let frame = match split_frame(&mut self.inbuf) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(e) => return Err(fatal_frame(&e)),
                };
                if let Next::Terminate = self.handle(frame).await? {
                    self.flush().await?;
                    return Ok(());
                }
                // A long pipeline of queries with large answers: write as we go rather than
                // holding every answer of the batch.
                if self.out.len() >= PG_RESULT_FLUSH_BYTES {
                    self.flush().await?;
                }
            }
            // Everything the client sent so far is answered: one write for the whole batch.
            self.flush().await?;
            if !self.fill().await? {
                return Ok(());
            }
        }
    }

    async fn handle(&mut self, frame: Frame) -> Result<Next, ServeError> {
        if let Some(copy) = self.copy_in {
            return Ok(self.copy_in_frame(frame, copy).await);
        }
        let extended_tag = matches!(frame.tag, b'P' | b'B' | b'D' | b'E' | b'C' | b'H' | b'S');
        let is_sync = frame.tag == b'S';
        let message = match decode_message(frame) {
            Ok(message) => message,
            Err(e) => {
                if !self.skip_until_sync {
                    self.send_error(&frame_error(&e));
                    self.after_error(extended_tag);
                }
                if is_sync {
                    // A Sync with a malformed body still ends the batch: the client waits for
                    // ReadyForQuery after it.
                    self.sync().await;
                }
                return Ok(Next::Continue);
            }
        };
        if self.skip_until_sync
            && !matches!(message, FrontendMessage::Sync | FrontendMessage::Terminate)
        {
            return Ok(Next::Continue);
        }
        let result = match message {
            FrontendMessage::Terminate => return Ok(Next::Terminate),
            FrontendMessage::Sync => {
                self.sync().await;
                return Ok(Next::Continue);
            }
            FrontendMessage::Query { sql } => {
                // A Query inside an extended batch (no Sync yet) ends its transaction first.
                self.end_implicit_batch(false).await;
                self.simple_query(&sql).await;
                return Ok(Next::Continue);
            }
            FrontendMessage::Copy => return Ok(Next::Continue),
            FrontendMessage::Password { .. } => {
                Err(PgError::new(SqlState::PROTOCOL_VIOLATION, "unexpected password message"))
            }
            FrontendMessage::Flush => {
                self.in_extended = true;
                self.flush().await?;
                Ok(())
            }
            FrontendMessage::Parse { name, sql, param_types } => {
                self.in_extended = true;
                self.parse(name, &sql, &param_types).await
            }
            FrontendMessage::Bind { portal, statement, param_formats, params, result_formats } => {
                self.in_extended = true;
                self.bind(portal, &statement, &param_formats, params, &result_formats)
            }
            FrontendMessage::Describe { target, name } => {
                self.in_extended = true;
                self.describe(target, &name)
            }
            FrontendMessage::Execute { portal, max_rows } => {
                self.in_extended = true;
                // As in PostgreSQL, the Executes before one Sync are one transaction. An
                // Execute whose Sync follows with no other Execute between stands alone (the
                // common case: the autocommit path); otherwise the batch is an implicit block
                // its Sync ends.
                if !self.implicit_batch
                    && self.engine.transaction_status() == TransactionStatus::Idle
                    && self.await_after_execute().await? != AfterExecute::SyncAlone
                {
                    self.engine.begin_implicit();
                    self.implicit_batch = true;
                }
                self.execute(&portal, max_rows).await
            }
            FrontendMessage::Close { target, name } => {
                self.in_extended = true;
                match target {
                    Target::Statement => self.statements.remove(&name).map(drop),
                    Target::Portal => self.portals.remove(&name).map(drop),
                };
                self.encode(B::CloseComplete(CloseComplete::new()));
                Ok(())
            }
        };
        if let Err(err) = result {
            self.send_error(&err);
            self.after_error(true);
        }
        Ok(Next::Continue)
    }

    /// What follows an Execute outside a transaction ([`after_execute`]), reading more of the
    /// client's bytes while they do not tell yet: a driver's Sync may arrive in a later TCP
    /// segment than its Execute, and that Execute is still alone (an autocommit statement,
    /// its conflicts retried inside). Nothing is owed to the client meanwhile: it gets
    /// answers at its Sync or Flush (PostgreSQL sends nothing before either). Past
    /// `PG_MESSAGE_BYTES_MAX` bytes still undecided, or at end of input, the batch goes on.
    async fn await_after_execute(&mut self) -> Result<AfterExecute, ServeError> {
        loop {
            let after = after_execute(&self.inbuf);
            if after != AfterExecute::Unknown || self.inbuf.len() > PG_MESSAGE_BYTES_MAX {
                return Ok(after);
            }
            if !self.fill().await? {
                return Ok(AfterExecute::More);
            }
        }
    }

    /// A message while the client sends COPY data, by PostgreSQL's rules: CopyData goes to the
    /// engine, CopyDone finishes, CopyFail or a CancelRequest fails the COPY (57014), Flush and
    /// Sync are ignored, anything else ends the COPY with 08P01. After a failure, later copy
    /// messages are dropped (as outside a COPY) and an extended batch skips to its Sync.
    async fn copy_in_frame(&mut self, frame: Frame, copy: CopyIn) -> Next {
        let err = match frame.tag {
            // A CancelRequest (psql's Ctrl-C) ends the COPY at the next message.
            b'd' | b'c' if self.cancel.is_cancelled() => {
                PgError::new(SqlState::QUERY_CANCELED, "canceling statement due to user request")
            }
            b'd' => match self.engine.copy_data(&frame.body).await {
                Ok(()) => return Next::Continue,
                Err(e) => e,
            },
            b'c' => match self.engine.copy_done().await {
                Ok(tag) => {
                    self.copy_in = None;
                    self.encode(B::CommandComplete(CommandComplete::new(tag.as_str().to_owned())));
                    if !copy.extended {
                        self.send_ready();
                    }
                    return Next::Continue;
                }
                Err(e) => e,
            },
            b'f' => {
                let text = frame.body.split(|&b| b == 0).next().unwrap_or_default();
                PgError::new(
                    SqlState::QUERY_CANCELED,
                    format!("COPY from stdin failed: {}", String::from_utf8_lossy(text)),
                )
            }
            b'H' | b'S' => return Next::Continue,
            b'X' => {
                self.engine.copy_abort();
                self.copy_in = None;
                return Next::Terminate;
            }
            other => PgError::new(
                SqlState::PROTOCOL_VIOLATION,
                format!("unexpected message type 0x{other:02X} during COPY from stdin"),
            ),
        };
        self.engine.copy_abort();
        self.copy_in = None;
        self.send_error(&err);
        self.after_error(copy.extended);
        Next::Continue
    }

    /// Ends an extended batch: its implicit transaction (committed, or rolled back after an
    /// error in the batch), then stop skipping, answer ReadyForQuery.
    async fn sync(&mut self) {
        self.end_implicit_batch(self.skip_until_sync).await;
        self.skip_until_sync = false;
        self.in_extended = false;
        if self.engine.transaction_status() == TransactionStatus::Idle {
            // The implicit transaction ended: its portals go with it, as in PostgreSQL.
            self.portals.clear();
        }
        self.send_ready();
    }

    /// Ends the simple Query's or extended batch's implicit transaction, if it has one
    /// (`failed`: roll back); a commit's error is sent.
    async fn end_implicit_batch(&mut self, failed: bool) {
        if std::mem::take(&mut self.implicit_batch)
            && let Err(err) = self.engine.end_implicit(failed).await
        {
            self.send_error(&err);
        }
    }

    /// After an ErrorResponse: in an extended batch, discard until Sync; otherwise the client
    /// waits for ReadyForQuery.
    fn after_error(&mut self, extended: bool) {
        if extended || self.in_extended {
            self.skip_until_sync = true;
        } else {
            self.send_ready();
        }
    }

    async fn simple_query(&mut self, sql: &str) {
        self.in_extended = false;
        // A simple query closes the unnamed statement and portal, as in PostgreSQL.
        self.statements.remove("");
        self.portals.remove("");
        let parsed = match self.engine.parse(sql).await {
            Ok(parsed) => parsed,
            Err(err) => {
                self.send_error(&err);
                self.send_ready();
                return;
            }
        };
        if parsed.is_empty() {
            self.encode(B::EmptyQueryResponse(EmptyQueryResponse::new()));
        }
        let only = parsed.len() == 1;
        if parsed.len() > 1 {
            self.engine.begin_implicit();
            self.implicit_batch = true;
        }
        let mut failed = false;
        for parsed in parsed {
            if let Err(err) = self.simple_statement(parsed, only).await {
                self.send_error(&err);
                failed = true;
                break;
            }
        }
        self.end_implicit_batch(failed).await;
        // A COPY FROM STDIN answers ReadyForQuery once its data has arrived.
        if self.copy_in.is_none() {
            self.send_ready();
        }
    }

    /// Plans and runs one statement of a simple query (`only`: the query holds no other):
    /// RowDescription, rows, CommandComplete.
    async fn simple_statement(&mut self, parsed: E::Parsed, only: bool) -> Result<(), PgError> {
        let statement = self.engine.plan(parsed, &[]).await?;
        if let Some(effect) = self.engine.connection_effect(&statement) {
            self.apply_effect(effect, None)?;
        }
        if let Some(mode) = self.engine.copy_mode(&statement) {
            if matches!(mode, CopyMode::In { .. }) && !only {
                return Err(PgError::new(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "COPY FROM STDIN must be the only statement of its query",
                )
                .with_hint("Send the COPY as a query of its own."));
            }
            self.cancel.reset();
            let tag = copy_start(
                mode,
                &mut self.engine,
                &statement,
                Params::empty(),
                &mut self.out,
                &mut self.stream,
                &self.cancel,
            )
            .await?;
            match tag {
                Some(tag) => self.encode(B::CommandComplete(CommandComplete::new(tag))),
                None => self.copy_in = Some(CopyIn { extended: false }),
            }
            return Ok(());
        }
        let description = self.engine.describe(&statement);
        let column_count = description.columns.as_ref().map_or(0, Vec::len);
        if let Some(columns) = &description.columns {
            let message = row_description(columns, &[]);
            self.encode(message);
        }
        self.cancel.reset();
        let mut sink = RowSink::streaming(
            &mut self.out,
            Some(&mut self.stream),
            &[],
            column_count,
            &self.cancel,
        );
        let tag = self.engine.execute(&statement, Params::empty(), &mut sink).await?;
        self.encode(B::CommandComplete(CommandComplete::new(tag.as_str().to_owned())));
        Ok(())
    }

    /// Drops what a DEALLOCATE or DISCARD ALL names, before the engine runs the statement
    /// (`running`: the portal executing it, which stays until its Execute is answered).
    fn apply_effect(
        &mut self,
        effect: ConnectionEffect,
        running: Option<&str>,
    ) -> Result<(), PgError> {
        match effect {
            ConnectionEffect::Deallocate(Some(name)) => {
                if self.statements.remove(&name).is_none() {
                    return Err(unknown_statement(&name));
                }
            }
            ConnectionEffect::Deallocate(None) => self.statements.clear(),
            ConnectionEffect::DiscardAll => {
                if self.engine.transaction_status() != TransactionStatus::Idle {
                    return Err(PgError::new(
                        SqlState::ACTIVE_SQL_TRANSACTION,
                        "DISCARD ALL cannot run inside a transaction block",
                    ));
                }
                self.statements.clear();
                self.portals.retain(|name, _| Some(name.as_str()) == running);
            }
        }
        Ok(())
    }

    async fn parse(&mut self, name: String, sql: &str, param_types: &[u32]) -> Result<(), PgError> {
        if !name.is_empty() {
            if self.statements.contains_key(&name) {
                return Err(PgError::new(
                    SqlState::DUPLICATE_PREPARED_STATEMENT,
                    format!("prepared statement \"{name}\" already exists"),
                )
                .with_hint("Close it first, or use another name."));
            }
            if self.statements.len() >= PG_PREPARED_STATEMENTS_MAX {
                return Err(PgError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    format!("too many prepared statements (limit {PG_PREPARED_STATEMENTS_MAX})"),
                )
                .with_hint("Close prepared statements you no longer use."));
            }
        }
        let mut parsed = self.engine.parse(sql).await?;
        if parsed.len() > 1 {
            return Err(PgError::new(
                SqlState::SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            )
            .with_hint("Prepare each statement separately, or send them as a simple query."));
        }
        let statement = match parsed.pop() {
            Some(parsed) => {
                let types: Vec<Oid> = param_types.iter().map(|&t| Oid(t)).collect();
                Some(self.engine.plan(parsed, &types).await?)
            }
            None => None,
        };
        let prepared = Prepared { statement };
        self.statements.insert(name, Rc::new(prepared));
        self.encode(B::ParseComplete(ParseComplete::new()));
        Ok(())
    }

    fn description<'s>(&'s self, prepared: &'s Prepared<E::Statement>) -> &'s Description {
        match &prepared.statement {
            Some(statement) => self.engine.describe(statement),
            None => &EMPTY_DESCRIPTION,
        }
    }

    fn bind(
        &mut self,
        portal: String,
        statement: &str,
        param_formats: &[i16],
        params: Vec<Option<Bytes>>,
        result_formats: &[i16],
    ) -> Result<(), PgError> {
        let prepared =
            self.statements.get(statement).cloned().ok_or_else(|| unknown_statement(statement))?;
        if !portal.is_empty() {
            if self.portals.contains_key(&portal) {
                return Err(PgError::new(
                    SqlState::DUPLICATE_CURSOR,
                    format!("portal \"{portal}\" already exists"),
                )
                .with_hint("Close it first, or use another name."));
            }
            if self.portals.len() >= PG_PORTALS_MAX {
                return Err(PgError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    format!("too many portals (limit {PG_PORTALS_MAX})"),
                )
                .with_hint("Close portals you no longer use, or Sync to end the transaction."));
            }
        }
        let description = self.description(&prepared);
        let expected = description.params.len();
        if params.len() != expected || params.len() > PG_BIND_PARAMETERS_MAX {
            return Err(PgError::new(
                SqlState::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{statement}\" requires {expected}",
                    params.len()
                ),
            )
            .with_hint("Send one value (or NULL) per parameter of the statement."));
        }
        let column_count = description.columns.as_ref().map_or(0, Vec::len);
        let param_types = description.params.clone();
        let param_formats = resolve_formats(param_formats, params.len(), "parameter")?;
        let result_formats = resolve_formats(result_formats, column_count, "result column")?;
        self.portals.insert(
            portal,
            Portal {
                prepared,
                param_types,
                param_formats,
                params,
                result_formats,
                column_count,
                state: PortalState::Ready,
            },
        );
        self.encode(B::BindComplete(BindComplete::new()));
        Ok(())
    }

    fn describe(&mut self, target: Target, name: &str) -> Result<(), PgError> {
        match target {
            Target::Statement => {
                let prepared =
                    self.statements.get(name).cloned().ok_or_else(|| unknown_statement(name))?;
                let description = self.description(&prepared);
                let params = description.params.iter().map(|o| o.0).collect();
                let rows = description.columns.as_ref().map(|c| row_description(c, &[]));
                self.encode(B::ParameterDescription(ParameterDescription::new(params)));
                self.encode(rows.unwrap_or(B::NoData(NoData::new())));
            }
            Target::Portal => {
                let portal = self.portals.get(name).ok_or_else(|| unknown_portal(name))?;
                let description = match &portal.prepared.statement {
                    Some(statement) => self.engine.describe(statement),
                    None => &EMPTY_DESCRIPTION,
                };
                let rows = description
                    .columns
                    .as_ref()
                    .map(|c| row_description(c, &portal.result_formats));
                self.encode(rows.unwrap_or(B::NoData(NoData::new())));
            }
        }
        Ok(())
    }

    async fn execute(&mut self, name: &str, max_rows: i32) -> Result<(), PgError> {
        // Rows kept in portals for later Executes share one budget per session.
        let captured_bytes: usize = self
            .portals
            .values()
            .map(|p| match &p.state {
                PortalState::Captured { rows, .. } => rows.len(),
                PortalState::Ready | PortalState::Done { .. } => 0,
            })
            .sum();
        // A DEALLOCATE or DISCARD ALL acts on this connection first (once, on its first
        // Execute).
        let effect = self
            .portals
            .get(name)
            .filter(|p| matches!(p.state, PortalState::Ready))
            .and_then(|p| p.prepared.statement.as_ref())
            .and_then(|statement| self.engine.connection_effect(statement));
        if let Some(effect) = effect {
            self.apply_effect(effect, Some(name))?;
        }
        let portal = self.portals.get_mut(name).ok_or_else(|| unknown_portal(name))?;
        let Some(statement) = &portal.prepared.statement else {
            put(&mut self.out, B::EmptyQueryResponse(EmptyQueryResponse::new()));
            return Ok(());
        };
        let limit = usize::try_from(max_rows).ok().filter(|&n| n > 0);
        if let PortalState::Ready = portal.state {
            self.cancel.reset();
            let params = Params::new(&portal.param_types, &portal.param_formats, &portal.params);
            if let Some(mode) = self.engine.copy_mode(statement) {
                // A COPY runs to its end whatever the row limit.
                let tag = copy_start(
                    mode,
                    &mut self.engine,
                    statement,
                    params,
                    &mut self.out,
                    &mut self.stream,
                    &self.cancel,
                )
                .await?;
                match tag {
                    Some(tag) => {
                        portal.state = PortalState::Done { tag: tag.clone() };
                        put(&mut self.out, B::CommandComplete(CommandComplete::new(tag)));
                    }
                    None => {
                        portal.state = PortalState::Done { tag: "COPY 0".to_owned() };
                        self.copy_in = Some(CopyIn { extended: true });
                    }
                }
                return Ok(());
            }
            if limit.is_none() {
                let mut sink = RowSink::streaming(
                    &mut self.out,
                    Some(&mut self.stream),
                    &portal.result_formats,
                    portal.column_count,
                    &self.cancel,
                );
                let tag = self.engine.execute(statement, params, &mut sink).await?;
                let tag = tag.as_str().to_owned();
                portal.state = PortalState::Done { tag: tag.clone() };
                put(&mut self.out, B::CommandComplete(CommandComplete::new(tag)));
                return Ok(());
            }
            let mut rows = BytesMut::new();
            let mut ends = Vec::new();
            let mut sink = RowSink::capturing(
                &mut rows,
                &mut ends,
                &mut self.out,
                &portal.result_formats,
                portal.column_count,
                &self.cancel,
                PG_RESULT_BYTES_MAX.saturating_sub(captured_bytes),
            );
            let tag = self.engine.execute(statement, params, &mut sink).await?;
            portal.state =
                PortalState::Captured { rows, ends, sent: 0, tag: tag.as_str().to_owned() };
        }
        match &mut portal.state {
            PortalState::Captured { rows, ends, sent, tag } => {
                let from = sent.checked_sub(1).and_then(|i| ends.get(i)).copied().unwrap_or(0);
                let take = limit.unwrap_or(usize::MAX).min(ends.len() - *sent);
                *sent += take;
                let to = sent.checked_sub(1).and_then(|i| ends.get(i)).copied().unwrap_or(0);
                self.out.extend_from_slice(rows.get(from..to).unwrap_or_default());
                if *sent < ends.len() {
                    put(&mut self.out, B::PortalSuspended(PortalSuspended::new()));
                } else {
                    let tag = std::mem::take(tag);
                    portal.state = PortalState::Done { tag: tag.clone() };
                    put(&mut self.out, B::CommandComplete(CommandComplete::new(tag)));
                }
            }
            PortalState::Done { tag } => {
                let tag = tag.clone();
                put(&mut self.out, B::CommandComplete(CommandComplete::new(tag)));
            }
            PortalState::Ready => {}
        }
        Ok(())
    }
}

/// Starts a COPY statement (`mode`: what [`Engine::copy_mode`] said of it). `COPY … TO
/// STDOUT`: CopyOutResponse, the rows, CopyDone; returns the tag for CommandComplete. `COPY …
/// FROM STDIN`: the engine readies itself, then CopyInResponse; returns `None` (the data
/// follows).
async fn copy_start<E: Engine>(
    mode: CopyMode,
    engine: &mut E,
    statement: &E::Statement,
    params: Params<'_>,
    out: &mut BytesMut,
    stream: &mut TcpStream,
    cancel: &CancelFlag,
) -> Result<Option<String>, PgError> {
    let text_columns = |columns: usize| -> Result<(i16, Vec<i16>), PgError> {
        let n = i16::try_from(columns).map_err(|_| {
            PgError::new(SqlState::PROGRAM_LIMIT_EXCEEDED, "too many columns for COPY")
        })?;
        Ok((n, vec![0; columns]))
    };
    match mode {
        CopyMode::In { columns } => {
            let (n, formats) = text_columns(columns)?;
            let mut sink = RowSink::streaming(out, None, &[], 0, cancel);
            engine.execute(statement, params, &mut sink).await?;
            put(out, B::CopyInResponse(CopyInResponse::new(0, n, formats)));
            Ok(None)
        }
        CopyMode::Out { columns } => {
            let (n, formats) = text_columns(columns)?;
            put(out, B::CopyOutResponse(CopyOutResponse::new(0, n, formats)));
            let mut sink = RowSink::streaming(out, Some(stream), &[], columns, cancel);
            let tag = engine.execute(statement, params, &mut sink).await?;
            put(out, B::CopyDone(CopyDone::new()));
            Ok(Some(tag.as_str().to_owned()))
        }
    }
}

/// Encodes a backend message into `out`.
fn put(out: &mut BytesMut, message: B) {
    if let Err(e) = message.encode(out) {
        // Our messages are bounded below pgwire's limits; reaching this is a bug. Tell the
        // client rather than dropping the response silently.
        debug!(error = %e, "encoding a backend message failed");
        let err = PgError::new(SqlState::INTERNAL_ERROR, format!("internal error: {e}"));
        let _ = B::ErrorResponse(ErrorResponse::new(err.fields())).encode(out);
    }
}

/// Encodes a NoticeResponse into `out` (used by [`RowSink::notice`]).
pub(crate) fn encode_notice(out: &mut BytesMut, notice: &Notice) {
    let fields = notice.fields().into_iter().map(|(k, v)| (k, truncate(v))).collect();
    // Fields are truncated below pgwire's limit, so this cannot fail; if it did, the notice is
    // informational and dropping it is harmless.
    let _ = B::NoticeResponse(NoticeResponse::new(fields)).encode(out);
}

fn row_description(columns: &[Column], formats: &[Format]) -> B {
    let fields = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let format = Format::for_column(formats, i);
            FieldDescription::new(
                c.name.clone(),
                0,
                0,
                c.type_oid.0,
                c.type_size,
                -1,
                format.code(),
            )
        })
        .collect();
    B::RowDescription(RowDescription::new(fields))
}

/// Applies the Bind format-code rule: none means all text, one applies to all, else one each.
fn resolve_formats(codes: &[i16], count: usize, what: &str) -> Result<Vec<Format>, PgError> {
    let bad = |code: i16| {
        PgError::new(SqlState::PROTOCOL_VIOLATION, format!("unsupported format code: {code}"))
            .with_hint("Use 0 for text or 1 for binary.")
    };
    match codes {
        [] => Ok(vec![Format::Text; count]),
        [one] => Ok(vec![Format::from_code(*one).ok_or_else(|| bad(*one))?; count]),
        many if many.len() == count => {
            many.iter().map(|&c| Format::from_code(c).ok_or_else(|| bad(c))).collect()
        }
        many => Err(PgError::new(
            SqlState::PROTOCOL_VIOLATION,
            format!("bind message has {} {what} formats but {count} {what}s", many.len()),
        )
        .with_hint("Send no format code (all text), one (for all), or one per value.")),
    }
}

fn unknown_statement(name: &str) -> PgError {
    PgError::new(
        SqlState::INVALID_SQL_STATEMENT_NAME,
        format!("prepared statement \"{name}\" does not exist"),
    )
    .with_hint("Send Parse for it first; prepared statements belong to one connection.")
}

fn unknown_portal(name: &str) -> PgError {
    PgError::new(SqlState::INVALID_CURSOR_NAME, format!("portal \"{name}\" does not exist"))
        .with_hint("Send Bind for it first; portals end at Sync outside a transaction block.")
}

fn fatal_protocol(message: impl Into<String>) -> ServeError {
    ServeError::Fatal(PgError::fatal(SqlState::PROTOCOL_VIOLATION, message))
}

/// A framing error that ends the connection.
fn fatal_frame(e: &FrameError) -> ServeError {
    let code = match e {
        FrameError::TooLarge { .. } => SqlState::PROGRAM_LIMIT_EXCEEDED,
        _ => SqlState::PROTOCOL_VIOLATION,
    };
    ServeError::Fatal(
        PgError::fatal(code, e.to_string()).with_hint(
            "The connection cannot be resynchronised; reconnect and send smaller messages.",
        ),
    )
}

/// A per-message error; the session goes on.
fn frame_error(e: &FrameError) -> PgError {
    let code = match e {
        FrameError::NotUtf8 { .. } => SqlState::CHARACTER_NOT_IN_REPERTOIRE,
        _ => SqlState::PROTOCOL_VIOLATION,
    };
    PgError::new(code, e.to_string())
}

fn truncate(mut text: String) -> String {
    if text.len() > ERROR_FIELD_BYTES_MAX {
        let mut cut = ERROR_FIELD_BYTES_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

//! The PostgreSQL v3 wire protocol, server side, on glommio.
//!
//! Independent of SQL: it drives an [`Engine`] (implemented by the node over `query` and
//! `storage`) and owns everything between the socket and that trait.
//!
//! - [`frame`]: cutting frames off the byte stream and decoding frontend messages (our own
//!   bounds-checked decoder; backend messages are encoded with the pgwire codec).
//! - [`conn`]: one connection's state machine: startup, SSLRequest/GSSENCRequest answered 'N',
//!   CancelRequest, authentication (trust or [`scram`]), simple query, extended query with
//!   named and unnamed statements and portals, error recovery until Sync, idle timeout.
//! - [`server`]: [`PgConfig`], the node-wide [`PgRegistry`] (connection limit, cancel keys) and
//!   [`accept_loop`].
//! - [`engine`]: the [`Engine`] trait and its vocabulary ([`Description`], [`RowSink`], ...).
//! - [`sqlstate`]: every SQLSTATE code; [`error`]: [`PgError`] and [`ServeError`].
//! - [`limits`]: every bound, with unit and reason.
//! - [`fuzz`]: the entry point of the `pg_frontend` fuzz target (and its corpus replay test).
//!
//! A connection ends on Terminate, EOF, a FATAL error (bad startup, failed authentication, a
//! frame too large to skip, idle timeout, too many connections) or an I/O error. Anything else
//! that is wrong with one message (an unknown type, a malformed body, bad SQL, an engine error)
//! is an ERROR and the session goes on.

pub mod conn;
pub mod engine;
pub mod error;
pub mod frame;
pub mod fuzz;
pub mod limits;
pub mod scram;
pub mod server;
pub mod sqlstate;

pub use conn::serve_connection;
pub use engine::{
    CancelFlag, Column, CommandTag, ConnectionEffect, CopyMode, Description, Engine, Format, Oid,
    Param, Params, RowSink, RowWriter, SessionInfo, TransactionStatus,
};
pub use error::{Notice, PgError, ServeError, Severity};
pub use scram::ScramCredentials;
pub use server::{PeerDataHook, PgAuth, PgConfig, PgRegistry, SocketSlot, accept_loop};
pub use sqlstate::SqlState;

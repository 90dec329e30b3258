//! Node-wide state of the wire layer and the accept loop.
//!
//! [`PgRegistry`] is shared by every executor of a node (it is `Send + Sync`, behind an `Arc`):
//! it counts sessions against the limit given to [`PgRegistry::new`] and maps each session's
//! (pid, secret) to its cancel flag, because a CancelRequest arrives on a *new* connection,
//! possibly accepted by another executor. It sits outside the data path: touched once at
//! session start and end and by cancel requests.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use glommio::net::TcpListener;
use tracing::{Instrument, debug, debug_span, warn};

use crate::pg::conn::serve_connection;
use crate::pg::engine::{CancelFlag, Engine};
use crate::pg::error::PgError;
use crate::pg::limits::{
    PG_ACCEPT_BACKOFF, PG_CONNECTIONS_MAX, PG_CONNECTIONS_STARTING_MAX, PG_IDLE_TIMEOUT_DEFAULT,
    PG_STARTUP_TIMEOUT,
};
use crate::pg::scram::{ScramCredentials, constant_time_eq};
use crate::pg::sqlstate::SqlState;

/// How clients authenticate.
#[derive(Debug, Clone)]
pub enum PgAuth {
    /// Anyone who connects is let in (the default, for a node on a private network).
    Trust,
    /// SCRAM-SHA-256 against one configured password, for every user name.
    Scram(ScramCredentials),
}

/// Configuration of the wire layer of one node.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// Authentication method.
    pub auth: PgAuth,
    /// A session idle this long is closed with FATAL 57P05.
    pub idle_timeout: Duration,
    /// Time allowed from connect to the end of authentication.
    pub startup_timeout: Duration,
    /// The `server_version` reported to clients (psql and drivers parse it).
    pub server_version: String,
    /// Who serves a cluster data connection (`PEER_DATA_CODE`); `None`: refused (single node).
    pub peer_data: Option<PeerDataHook>,
}

/// Takes over a connection that opened with `PEER_DATA_CODE`, with the bytes read after it.
pub type PeerDataHook = fn(
    glommio::net::TcpStream,
    bytes::BytesMut,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

impl Default for PgConfig {
    fn default() -> PgConfig {
        PgConfig {
            auth: PgAuth::Trust,
            idle_timeout: PG_IDLE_TIMEOUT_DEFAULT,
            startup_timeout: PG_STARTUP_TIMEOUT,
            server_version: query::SERVER_VERSION.to_owned(),
            peer_data: None,
        }
    }
}

struct Session {
    secret: Bytes,
    cancel: CancelFlag,
}

/// Connection counts and cancel keys of one node, shared by all its executors.
pub struct PgRegistry {
    connections_max: usize,
    sessions: Mutex<HashMap<i32, Session>>,
    session_count: AtomicUsize,
    socket_count: AtomicUsize,
    next_pid: AtomicI32,
}

impl std::fmt::Debug for PgRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgRegistry")
            .field("connections_max", &self.connections_max)
            .field("sessions", &self.session_count.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for PgRegistry {
    fn default() -> PgRegistry {
        PgRegistry::new(PG_CONNECTIONS_MAX)
    }
}

impl PgRegistry {
    /// A registry admitting at most `connections_max` sessions (capped at
    /// [`PG_CONNECTIONS_MAX`]).
    pub fn new(connections_max: usize) -> PgRegistry {
        PgRegistry {
            connections_max: connections_max.min(PG_CONNECTIONS_MAX),
            sessions: Mutex::new(HashMap::new()),
            session_count: AtomicUsize::new(0),
            socket_count: AtomicUsize::new(0),
            next_pid: AtomicI32::new(1),
        }
    }

    /// Number of sessions currently registered.
    pub fn session_count(&self) -> usize {
        self.session_count.load(Ordering::Acquire)
    }

    /// Reserves a socket slot for a new connection; `None` when even the allowance for clients
    /// still in startup is used up (the socket should then be closed at once).
    pub fn admit_socket(self: &Arc<Self>) -> Option<SocketSlot> {
        let max = self.connections_max + PG_CONNECTIONS_STARTING_MAX;
        let prev = self.socket_count.fetch_add(1, Ordering::AcqRel);
        if prev >= max {
            self.socket_count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(SocketSlot { registry: Arc::clone(self) })
    }

    /// Registers an authenticated session: gives it a (pid, secret) for BackendKeyData, or
    /// FATAL 53300 when the node is full.
    pub(crate) fn register(self: &Arc<Self>, cancel: CancelFlag) -> Result<SessionSlot, PgError> {
        let prev = self.session_count.fetch_add(1, Ordering::AcqRel);
        if prev >= self.connections_max {
            self.session_count.fetch_sub(1, Ordering::AcqRel);
            return Err(PgError::fatal(
                SqlState::TOO_MANY_CONNECTIONS,
                "sorry, too many clients already",
            )
            .with_detail(format!("This node accepts at most {} connections.", self.connections_max))
            .with_hint("Close idle connections or use a connection pool."));
        }
        let mut secret = [0u8; 4];
        if getrandom::fill(&mut secret).is_err() {
            // No OS randomness: the session still works, but cannot be cancelled by key.
            warn!("no random source for the cancel key; this session cannot be cancelled");
            secret = [0; 4];
        }
        let pid = loop {
            let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
            if pid > 0 {
                break pid;
            }
            // Wrapped after 2^31 sessions: start again from 1.
            self.next_pid.store(1, Ordering::Relaxed);
        };
        let secret = Bytes::copy_from_slice(&secret);
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(pid, Session { secret: secret.clone(), cancel });
        }
        Ok(SessionSlot { registry: Arc::clone(self), pid, secret })
    }

    /// Handles a CancelRequest: sets the cancel flag of the session with this key. Returns
    /// whether a session matched. Wrong keys are ignored silently, as in PostgreSQL.
    pub fn cancel(&self, pid: i32, secret: &[u8]) -> bool {
        let Ok(sessions) = self.sessions.lock() else { return false };
        match sessions.get(&pid) {
            Some(session) if constant_time_eq(&session.secret, secret) => {
                session.cancel.cancel();
                true
            }
            _ => false,
        }
    }
}

/// A socket counted against the node's limit until dropped.
#[derive(Debug)]
pub struct SocketSlot {
    registry: Arc<PgRegistry>,
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        self.registry.socket_count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A registered session; dropping it frees the connection slot and the cancel key.
pub(crate) struct SessionSlot {
    registry: Arc<PgRegistry>,
    pid: i32,
    secret: Bytes,
}

impl SessionSlot {
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    pub(crate) fn secret(&self) -> &Bytes {
        &self.secret
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if let Ok(mut sessions) = self.registry.sessions.lock() {
            sessions.remove(&self.pid);
        }
        self.registry.session_count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts connections on `listener` until `stop` completes, serving each in its own task on
/// the current executor with an engine from `make_engine`. Call it on every executor with a
/// listener bound to the same address: glommio's `TcpListener::bind` sets SO_REUSEPORT, so the
/// kernel spreads connections across executors. Connections already accepted keep running
/// after `stop` (their tasks are detached); pass `std::future::pending()` to run forever.
pub async fn accept_loop<E, F>(
    listener: TcpListener,
    config: Rc<PgConfig>,
    registry: Arc<PgRegistry>,
    mut make_engine: F,
    stop: impl Future<Output = ()>,
) where
    E: Engine + 'static,
    F: FnMut() -> E,
{
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            stop.as_mut().await;
            None
        })
        .await;
        let stream = match accepted {
            None => {
                debug!("accept loop stopped");
                return;
            }
            Some(Ok(stream)) => stream,
            Some(Err(e)) => {
                // Out of file descriptors and the like: log, back off, go on.
                warn!(error = %e, "accept failed");
                glommio::timer::sleep(PG_ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Some(slot) = registry.admit_socket() else {
            debug!("socket limit reached; closing a new connection");
            drop(stream);
            continue;
        };
        let engine = make_engine();
        let config = Rc::clone(&config);
        let registry = Arc::clone(&registry);
        let span = match stream.peer_addr() {
            Ok(peer) => debug_span!("conn", %peer),
            Err(_) => debug_span!("conn"),
        };
        glommio::spawn_local(
            async move {
                let _slot = slot;
                match serve_connection(stream, engine, &config, &registry).await {
                    Ok(()) => debug!("connection closed"),
                    Err(e) => debug!(error = %e, "connection ended"),
                }
            }
            .instrument(span),
        )
        .detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the registry: sessions past the limit get 53300, a dropped session frees its slot
    // and its key, and a cancel needs both the pid and the exact secret.
    #[test]
    fn unit_registry_limit_and_cancel_keys() {
        let registry = Arc::new(PgRegistry::new(2));
        let flag_a = CancelFlag::default();
        let a = registry.register(flag_a.clone()).unwrap();
        let b = registry.register(CancelFlag::default()).unwrap();
        let err = registry.register(CancelFlag::default()).err().unwrap();
        assert_eq!(err.code(), SqlState::TOO_MANY_CONNECTIONS);
        assert_ne!(a.pid(), b.pid());

        let mut wrong = a.secret().to_vec();
        wrong[0] ^= 1;
        assert!(!registry.cancel(a.pid(), &wrong));
        assert!(!registry.cancel(a.pid(), &a.secret()[..3]));
        assert!(!flag_a.is_cancelled());
        assert!(registry.cancel(a.pid(), a.secret()));
        assert!(flag_a.is_cancelled());

        let (pid, secret) = (a.pid(), a.secret().clone());
        drop(a);
        assert_eq!(registry.session_count(), 1);
        assert!(!registry.cancel(pid, &secret));
        let _c = registry.register(CancelFlag::default()).unwrap();
        drop(b);
    }

    // Checks socket admission: the allowance is the session limit plus the startup allowance,
    // and dropping a slot gives it back.
    #[test]
    fn unit_registry_socket_slots() {
        let registry = Arc::new(PgRegistry::new(1));
        let slots: Vec<SocketSlot> = (0..1 + PG_CONNECTIONS_STARTING_MAX)
            .map(|_| registry.admit_socket().unwrap())
            .collect();
        assert!(registry.admit_socket().is_none());
        drop(slots);
        assert!(registry.admit_socket().is_some());
    }
}

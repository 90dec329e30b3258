//! Peer connections on tokio (control-plane thread only): reading and writing frames, the
//! handshake, and one request / one answer.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cluster::auth::{self, ClusterSecret, Side};
use crate::cluster::limits::{
    PEER_CONNECT_TIMEOUT_MS, PEER_FRAME_HEADER_BYTES, PEER_REQUEST_TIMEOUT_MS,
};
use crate::cluster::wire::{
    self, HandshakeError, Hello, Message, WireError, check_hello, decode_body, decode_header,
};

/// Why talking to a peer failed. The connection is dropped after any of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The socket failed.
    #[error("peer {addr}: {source}")]
    Io {
        /// The peer's address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The peer did not answer in time.
    #[error("peer {addr} did not answer within {ms} ms")]
    Timeout {
        /// The peer's address.
        addr: String,
        /// The bound.
        ms: u64,
    },
    /// The peer sent bytes that are not a message.
    #[error("peer {addr}: {source}")]
    Wire {
        /// The peer's address.
        addr: String,
        /// What was wrong.
        source: WireError,
    },
    /// The handshake failed.
    #[error("peer {addr}: {source}")]
    Handshake {
        /// The peer's address.
        addr: String,
        /// Why.
        source: HandshakeError,
    },
    /// The peer closed the connection.
    #[error("peer {addr} closed the connection")]
    Closed {
        /// The peer's address.
        addr: String,
    },
    /// The peer answered with a message that does not answer the request.
    #[error("peer {addr} answered {got} to {sent}")]
    Unexpected {
        /// The peer's address.
        addr: String,
        /// What we sent.
        sent: &'static str,
        /// What came back.
        got: &'static str,
    },
}

impl PeerError {
    /// Whether the peer could not be reached at all (as opposed to failing mid-conversation).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, PeerError::Io { .. } | PeerError::Timeout { .. } | PeerError::Closed { .. })
    }
}

/// Reads one message; `Ok(None)` on a clean end of stream before a frame starts.
pub async fn read_message(
    stream: &mut TcpStream,
    addr: &str,
) -> Result<Option<Message>, PeerError> {
    let mut head = [0u8; PEER_FRAME_HEADER_BYTES];
    match stream.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(source) => return Err(PeerError::Io { addr: addr.to_owned(), source }),
    }
    let wire = |source| PeerError::Wire { addr: addr.to_owned(), source };
    let header = decode_header(head).map_err(wire)?;
    // The header's length is at most PEER_FRAME_BYTES_MAX (checked by decode_header).
    let mut body = vec![0u8; header.len as usize];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|source| PeerError::Io { addr: addr.to_owned(), source })?;
    decode_body(header, &body).map(Some).map_err(wire)
}

/// Writes one message.
pub async fn write_message(
    stream: &mut TcpStream,
    addr: &str,
    message: &Message,
) -> Result<(), PeerError> {
    let frame = wire::encode_frame(message)
        .map_err(|source| PeerError::Wire { addr: addr.to_owned(), source })?;
    stream.write_all(&frame).await.map_err(|source| PeerError::Io { addr: addr.to_owned(), source })
}

/// Why the listener did not admit a dialer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialerRefusal {
    /// The dialer failed authentication, refused the challenge or answered something else:
    /// the operator needs to know (WARN), and the dialer is told why.
    Refused(String),
    /// The dialer hung up before answering: it gave up (its own timeout, shutdown) and logs
    /// its own reason, so this side has nothing to warn about or tell.
    Abandoned(String),
}

impl std::fmt::Display for DialerRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialerRefusal::Refused(reason) | DialerRefusal::Abandoned(reason) => {
                f.write_str(reason)
            }
        }
    }
}

/// What a dialer without a cluster secret answers a challenge with before it hangs up.
const NO_SECRET_ANSWER: &str = "this node has no --cluster-secret-file";

/// The listener's side of authentication, after the dialer's `Hello` passed its checks:
/// challenge, check the dialer's proof, prove back. On `Refused` the caller logs the reason,
/// sends it in `Refused` and closes the connection; on `Abandoned` it only closes it.
pub async fn authenticate_dialer(
    stream: &mut TcpStream,
    addr: &str,
    secret: &ClusterSecret,
    cluster: &str,
    dialer: u64,
) -> Result<(), DialerRefusal> {
    let refused = |e: String| DialerRefusal::Refused(e);
    let listener_nonce = auth::nonce().map_err(refused)?;
    let exchange = async {
        write_message(stream, addr, &Message::Challenge { nonce: listener_nonce.clone() }).await?;
        read_message(stream, addr).await
    };
    let answer = bounded(addr, PEER_REQUEST_TIMEOUT_MS, exchange)
        .await
        .map_err(|e| refused(e.to_string()))?;
    let (dialer_nonce, proof) = match answer {
        Some(Message::Proof { nonce, proof }) => (nonce, proof),
        Some(Message::Refused { reason }) => {
            return Err(refused(format!(
                "peer node {dialer} did not answer the authentication challenge: {reason}"
            )));
        }
        Some(other) => {
            return Err(refused(format!(
                "peer node {dialer} did not answer the authentication challenge (it sent {})",
                other.kind()
            )));
        }
        None => {
            return Err(DialerRefusal::Abandoned(format!(
                "peer node {dialer} closed the connection before answering the authentication \
                 challenge"
            )));
        }
    };
    if !auth::verify(secret, Side::Dialer, cluster, &listener_nonce, &dialer_nonce, &proof) {
        return Err(refused(format!(
            "peer node {dialer} failed authentication: it does not know the cluster secret"
        )));
    }
    let ours = auth::prove(secret, Side::Listener, cluster, &listener_nonce, &dialer_nonce);
    write_message(stream, addr, &Message::Proof { nonce: listener_nonce, proof: ours })
        .await
        .map_err(|e| refused(e.to_string()))
}

async fn bounded<T>(
    addr: &str,
    ms: u64,
    work: impl Future<Output = Result<T, PeerError>>,
) -> Result<T, PeerError> {
    tokio::time::timeout(Duration::from_millis(ms), work)
        .await
        .map_err(|_| PeerError::Timeout { addr: addr.to_owned(), ms })?
}

/// A connection to a peer after a successful handshake.
#[derive(Debug)]
pub struct PeerConn {
    addr: String,
    stream: TcpStream,
    /// The peer's handshake.
    pub hello: Hello,
}

impl PeerConn {
    /// Connects to `addr`, sends `ours` and checks the peer's `Hello` (`cluster`, `me`),
    /// authenticating both ways with the process's cluster secret if one is installed
    /// (`auth::install`).
    pub async fn dial(addr: &str, ours: &Hello) -> Result<PeerConn, PeerError> {
        PeerConn::dial_with(addr, ours, auth::installed()).await
    }

    /// `dial` with an explicit secret (`None`: no authentication).
    pub async fn dial_with(
        addr: &str,
        ours: &Hello,
        secret: Option<&ClusterSecret>,
    ) -> Result<PeerConn, PeerError> {
        let mut stream = bounded(addr, PEER_CONNECT_TIMEOUT_MS, async {
            TcpStream::connect(addr)
                .await
                .map_err(|source| PeerError::Io { addr: addr.to_owned(), source })
        })
        .await?;
        let _ = stream.set_nodelay(true);
        bounded(addr, PEER_REQUEST_TIMEOUT_MS, async {
            write_message(&mut stream, addr, &Message::Hello(ours.clone())).await?;
            let handshake = |source| PeerError::Handshake { addr: addr.to_owned(), source };
            let auth_failed =
                |reason: &str| handshake(HandshakeError::Auth { reason: reason.to_owned() });
            let mut first = read_message(&mut stream, addr).await?;
            match (secret, &first) {
                (Some(secret), Some(Message::Challenge { nonce: listener_nonce })) => {
                    let listener_nonce = listener_nonce.clone();
                    let ours_nonce = auth::nonce().map_err(|r| auth_failed(&r))?;
                    let proof =
                        auth::prove(secret, Side::Dialer, &ours.cluster, &listener_nonce, &ours_nonce);
                    write_message(&mut stream, addr, &Message::Proof { nonce: ours_nonce.clone(), proof })
                        .await?;
                    match read_message(&mut stream, addr).await? {
                        Some(Message::Proof { nonce, proof })
                            if nonce == listener_nonce
                                && auth::verify(
                                    secret,
                                    Side::Listener,
                                    &ours.cluster,
                                    &listener_nonce,
                                    &ours_nonce,
                                    &proof,
                                ) => {}
                        Some(Message::Refused { reason }) => {
                            return Err(handshake(HandshakeError::Refused { reason }));
                        }
                        Some(Message::Proof { .. }) => {
                            return Err(auth_failed(
                                "the peer could not prove it knows the cluster secret",
                            ));
                        }
                        Some(other) => {
                            return Err(handshake(HandshakeError::NotHello { kind: other.kind() }));
                        }
                        None => return Err(PeerError::Closed { addr: addr.to_owned() }),
                    }
                    first = read_message(&mut stream, addr).await?;
                }
                (Some(_), Some(Message::Hello(_))) => {
                    return Err(auth_failed(
                        "the peer did not authenticate (it runs without --cluster-secret-file)",
                    ));
                }
                (None, Some(Message::Challenge { .. })) => {
                    // Best effort: tell the listener why, so it does not take this for a
                    // dialer that gave up.
                    let reason = NO_SECRET_ANSWER.to_owned();
                    let _ = write_message(&mut stream, addr, &Message::Refused { reason }).await;
                    return Err(auth_failed(
                        "the peer requires a cluster secret; this node has no --cluster-secret-file",
                    ));
                }
                _ => {}
            }
            match first {
                Some(Message::Hello(hello)) => {
                    check_hello(&hello, &ours.cluster, ours.peer.node).map_err(handshake)?;
                    Ok(PeerConn { addr: addr.to_owned(), stream, hello })
                }
                Some(Message::Refused { reason }) => {
                    Err(handshake(HandshakeError::Refused { reason }))
                }
                Some(other) => Err(handshake(HandshakeError::NotHello { kind: other.kind() })),
                None => Err(PeerError::Closed { addr: addr.to_owned() }),
            }
        })
        .await
    }

    /// Sends `request` and waits (bounded) for the one answer.
    pub async fn request(&mut self, request: &Message) -> Result<Message, PeerError> {
        self.request_within(request, PEER_REQUEST_TIMEOUT_MS).await
    }

    /// Sends `request` and waits at most `ms` milliseconds for the one answer.
    pub async fn request_within(
        &mut self,
        request: &Message,
        ms: u64,
    ) -> Result<Message, PeerError> {
        let addr = self.addr.clone();
        let stream = &mut self.stream;
        bounded(&addr, ms, async {
            write_message(stream, &addr, request).await?;
            read_message(stream, &addr).await?.ok_or(PeerError::Closed { addr: addr.clone() })
        })
        .await
    }

    /// The address dialled.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::wire::{PROTOCOL_VERSION, Peer, Role};
    use tokio::net::TcpListener;

    fn hello(cluster: &str, node: u64) -> Hello {
        Hello {
            cluster: cluster.into(),
            version: PROTOCOL_VERSION,
            peer: Peer {
                node,
                role: Role::Data,
                peer_addr: "127.0.0.1:1".into(),
                pg_addr: "127.0.0.1:2".into(),
                executors: 1,
            },
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
    }

    /// A one-connection fake peer: reads the dialer's hello, answers `first`, then answers
    /// every request with `Pong`.
    async fn fake_peer(first: Message) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let shown = addr.clone();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let _ = read_message(&mut s, &addr).await;
            write_message(&mut s, &addr, &first).await.expect("answer");
            while let Ok(Some(_)) = read_message(&mut s, &addr).await {
                let pong = Message::Pong { leader: Some(1), epoch: 5, catalog: 0 };
                write_message(&mut s, &addr, &pong).await.expect("pong");
            }
        });
        shown
    }

    // Checks a good handshake and one request/answer over a real socket.
    #[test]
    fn dial_and_request() {
        rt().block_on(async {
            let addr = fake_peer(Message::Hello(hello("c", 2))).await;
            let mut conn = PeerConn::dial(&addr, &hello("c", 1)).await.expect("dial");
            assert_eq!(conn.hello.peer.node, 2);
            let answer = conn.request(&Message::Ping).await.expect("pong");
            assert_eq!(answer, Message::Pong { leader: Some(1), epoch: 5, catalog: 0 });
        });
    }

    // Checks the dialer refuses a peer of another cluster and reports a peer's refusal with
    // its reason, and that an unreachable address is "unreachable".
    #[test]
    fn dial_refusals() {
        rt().block_on(async {
            let addr = fake_peer(Message::Hello(hello("other", 2))).await;
            let e = PeerConn::dial(&addr, &hello("c", 1)).await.expect_err("wrong cluster");
            assert!(
                matches!(
                    e,
                    PeerError::Handshake { source: HandshakeError::WrongCluster { .. }, .. }
                ),
                "{e}"
            );
            let addr = fake_peer(Message::Refused { reason: "go away".into() }).await;
            let e = PeerConn::dial(&addr, &hello("c", 1)).await.expect_err("refused");
            assert!(e.to_string().contains("go away"), "{e}");
            assert!(!e.is_unreachable());
            let addr = fake_peer(Message::Ping).await;
            let e = PeerConn::dial(&addr, &hello("c", 1)).await.expect_err("not a hello");
            assert!(e.to_string().contains("ping"), "{e}");
            let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = closed.local_addr().expect("addr").to_string();
            drop(closed);
            let e = PeerConn::dial(&addr, &hello("c", 1)).await.expect_err("nobody there");
            assert!(e.is_unreachable(), "{e}");
        });
    }

    /// A one-connection listener that authenticates with `secret` (if any) like the control
    /// plane, then answers its `Hello` and every request with `Pong`; returns its address and
    /// what it concluded (`Ok` or the refusal reason).
    async fn auth_listener(
        secret: Option<ClusterSecret>,
    ) -> (String, tokio::sync::oneshot::Receiver<Result<(), DialerRefusal>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let shown = addr.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let _ = read_message(&mut s, &addr).await;
            if let Some(secret) = &secret
                && let Err(refusal) = authenticate_dialer(&mut s, &addr, secret, "c", 1).await
            {
                let reason = refusal.to_string();
                let _ = write_message(&mut s, &addr, &Message::Refused { reason }).await;
                let _ = tx.send(Err(refusal));
                return;
            }
            let _ = tx.send(Ok(()));
            write_message(&mut s, &addr, &Message::Hello(hello("c", 2))).await.expect("hello");
            while let Ok(Some(_)) = read_message(&mut s, &addr).await {
                let pong = Message::Pong { leader: Some(1), epoch: 5, catalog: 0 };
                write_message(&mut s, &addr, &pong).await.expect("pong");
            }
        });
        (shown, rx)
    }

    fn secret(s: &str) -> ClusterSecret {
        ClusterSecret::from_bytes(s.as_bytes()).expect("valid secret")
    }

    // Checks peer authentication over real sockets: the right secret connects and serves
    // requests; a wrong one is refused by the listener with its reason; a secret on one side
    // only is refused by the dialer, whichever side has it.
    #[test]
    fn auth_right_secret_joins_wrong_or_missing_refused() {
        rt().block_on(async {
            let good = secret("the-cluster-secret-0123");
            let (addr, seen) = auth_listener(Some(good.clone())).await;
            let mut conn =
                PeerConn::dial_with(&addr, &hello("c", 1), Some(&good)).await.expect("dial");
            assert_eq!(conn.request(&Message::Ping).await.expect("pong").kind(), "pong");
            assert_eq!(seen.await.expect("listener"), Ok(()));

            let (addr, seen) = auth_listener(Some(good.clone())).await;
            let wrong = secret("another-secret-456789");
            let e =
                PeerConn::dial_with(&addr, &hello("c", 1), Some(&wrong)).await.expect_err("wrong");
            assert!(e.to_string().contains("does not know the cluster secret"), "{e}");
            assert!(seen.await.expect("listener").is_err());

            let (addr, _) = auth_listener(None).await;
            let e =
                PeerConn::dial_with(&addr, &hello("c", 1), Some(&good)).await.expect_err("no auth");
            assert!(
                matches!(e, PeerError::Handshake { source: HandshakeError::Auth { .. }, .. }),
                "{e}"
            );
            assert!(e.to_string().contains("did not authenticate"), "{e}");

            let (addr, seen) = auth_listener(Some(good)).await;
            let e = PeerConn::dial_with(&addr, &hello("c", 1), None).await.expect_err("no secret");
            assert!(e.to_string().contains("requires a cluster secret"), "{e}");
            let refusal = seen.await.expect("listener").expect_err("refused");
            assert!(matches!(&refusal, DialerRefusal::Refused(_)), "{refusal:?}");
            assert!(refusal.to_string().contains(NO_SECRET_ANSWER), "{refusal}");
        });
    }

    // Checks bad input in the exchange: a listener whose proof is wrong, or that repeats
    // another nonce, is refused by the dialer; a dialer that answers the challenge with
    // anything but a proof is refused by the listener.
    #[test]
    fn auth_bad_input() {
        rt().block_on(async {
            let good = secret("the-cluster-secret-0123");
            for bad in [
                Message::Proof { nonce: vec![9; 32], proof: vec![0; 32] },
                Message::Proof { nonce: vec![], proof: vec![] },
            ] {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let addr = listener.local_addr().expect("addr").to_string();
                let a = addr.clone();
                tokio::spawn(async move {
                    let (mut s, _) = listener.accept().await.expect("accept");
                    let _ = read_message(&mut s, &a).await;
                    let challenge = Message::Challenge { nonce: vec![9; 32] };
                    write_message(&mut s, &a, &challenge).await.expect("challenge");
                    let _ = read_message(&mut s, &a).await;
                    write_message(&mut s, &a, &bad).await.expect("bad proof");
                });
                let e =
                    PeerConn::dial_with(&addr, &hello("c", 1), Some(&good)).await.expect_err("bad");
                assert!(e.to_string().contains("could not prove"), "{e}");
            }
            let (addr, seen) = auth_listener(Some(good)).await;
            let mut s = TcpStream::connect(&addr).await.expect("connect");
            write_message(&mut s, &addr, &Message::Hello(hello("c", 1))).await.expect("hello");
            let challenge = read_message(&mut s, &addr).await.expect("read").expect("challenge");
            assert_eq!(challenge.kind(), "challenge");
            write_message(&mut s, &addr, &Message::Ping).await.expect("ping");
            let refusal = seen.await.expect("listener").expect_err("refused");
            assert!(matches!(&refusal, DialerRefusal::Refused(_)), "{refusal:?}");
            assert!(
                refusal.to_string().contains("did not answer the authentication challenge"),
                "{refusal}"
            );

            // A dialer that hangs up after the challenge (it gave up) is abandoned, not refused.
            let (addr, seen) = auth_listener(Some(secret("the-cluster-secret-0123"))).await;
            let mut s = TcpStream::connect(&addr).await.expect("connect");
            write_message(&mut s, &addr, &Message::Hello(hello("c", 1))).await.expect("hello");
            let challenge = read_message(&mut s, &addr).await.expect("read").expect("challenge");
            assert_eq!(challenge.kind(), "challenge");
            drop(s);
            let refusal = seen.await.expect("listener").expect_err("abandoned");
            assert!(matches!(&refusal, DialerRefusal::Abandoned(_)), "{refusal:?}");
        });
    }

    // Checks a frame header announcing more than the limit fails the read without the body
    // being read or allocated.
    #[test]
    fn bad_input_oversized_frame() {
        rt().block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("addr").to_string();
            let mut client = TcpStream::connect(&addr).await.expect("connect");
            let (mut server, _) = listener.accept().await.expect("accept");
            client.write_all(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).await.expect("write");
            let e = read_message(&mut server, &addr).await.expect_err("too long");
            assert!(matches!(e, PeerError::Wire { source: WireError::TooLong { .. }, .. }), "{e}");
            drop(client);
            let mut client = TcpStream::connect(&addr).await.expect("connect");
            let (mut server, _) = listener.accept().await.expect("accept");
            client.shutdown().await.expect("close");
            assert!(read_message(&mut server, &addr).await.expect("clean eof").is_none());
        });
    }
}

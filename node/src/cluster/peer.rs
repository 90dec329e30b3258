//! Peer connections on tokio (control-plane thread only): reading and writing frames, the
//! handshake, and one request / one answer.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    /// Connects to `addr`, sends `ours` and checks the peer's `Hello` (`cluster`, `me`).
    pub async fn dial(addr: &str, ours: &Hello) -> Result<PeerConn, PeerError> {
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
            match read_message(&mut stream, addr).await? {
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
                let pong = Message::Pong { leader: Some(1), epoch: 5 };
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
            assert_eq!(answer, Message::Pong { leader: Some(1), epoch: 5 });
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

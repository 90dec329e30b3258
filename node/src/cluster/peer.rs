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

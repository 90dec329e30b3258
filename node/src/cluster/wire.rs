//! The peer protocol: the messages nodes of one cluster exchange over TCP, and their framing.
//!
//! ```text
//! frame = u32 LE body length | u32 LE crc32(body) | body
//! body  = u16 LE protocol version | rkyv archive of `Message`
//! ```
//!
//! The length is checked against `PEER_FRAME_BYTES_MAX` before the body is read, the crc
//! before anything in the body is looked at, the version before the archive is validated,
//! and the archive with checked `rkyv::from_bytes` (bytecheck), never unchecked. Every failure
//! is a `WireError`; a bad frame ends that connection, never the node.
//!
//! The first frame each way is a `Hello`: `check_hello` refuses another cluster's name or
//! another protocol version. openraft's RPCs are carried as opaque bytes (`RaftRpc` /
//! `RaftReply`, serde_json of openraft's own serde types).

use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;

use crate::cluster::limits::{
    CLUSTER_NAME_BYTES_MAX, PEER_ADDR_BYTES_MAX, PEER_FRAME_BYTES_MAX, PEER_FRAME_HEADER_BYTES,
};

/// The protocol version this build speaks. Bumped by any change to `Message`'s layout or to
/// a forwarded data frame's (`forward`): nodes of two versions refuse each other at `Hello`
/// rather than misread each other's frames. 2: a forwarded request carries its catalog
/// version, a transaction's reads carry its scanned ranges (`forward::WireReads`).
pub const PROTOCOL_VERSION: u16 = 2;

/// Bytes of the version prefix at the start of a body.
const VERSION_BYTES: usize = 2;

/// What a node does in the cluster.
#[derive(
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
)]
pub enum Role {
    /// Hosts fragments and may be the coordinator (a raft voter).
    Data,
    /// Routes only: hosts nothing, never votes (a raft learner; Akka's proxy-only mode).
    Proxy,
}

impl Role {
    /// The word used in flags and `SHOW CLUSTER`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Data => "data",
            Role::Proxy => "proxy",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node as it introduces itself: in the handshake and when asking to join.
#[derive(
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
    Clone,
    Debug,
    PartialEq,
    Eq,
)]
pub struct Peer {
    /// Its `--node-id`.
    pub node: u64,
    /// Its role.
    pub role: Role,
    /// Where it accepts peer connections.
    pub peer_addr: String,
    /// Where it accepts PostgreSQL clients.
    pub pg_addr: String,
    /// How many executors it runs (fragments are spread over them).
    pub executors: u32,
}

/// The live bytes of one fragment a node holds (`Message::LoadAnswer`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentBytes {
    /// The fragment.
    pub fragment: u32,
    /// Its live bytes on the answering node.
    pub bytes: u64,
}

/// The first message on a connection, both ways.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The sender's `--cluster-name`.
    pub cluster: String,
    /// The protocol version the sender speaks (the frame's version says how it is encoded).
    pub version: u16,
    /// Who is speaking.
    pub peer: Peer,
}

/// Everything that travels between peers.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Handshake, both ways.
    Hello(Hello),
    /// The handshake was refused; the connection closes after this.
    Refused {
        /// Why, for the operator.
        reason: String,
    },
    /// Are you there? Answered with `Pong`.
    Ping,
    /// I am, and this is what I know.
    Pong {
        /// The raft leader the answering node knows of.
        leader: Option<u64>,
        /// The shard-map epoch it has applied (0: no map yet).
        epoch: u64,
        /// The collection catalog version its executors have installed (0: none yet).
        catalog: u64,
    },
    /// Add me to the cluster.
    Join(Peer),
    /// You are a member (or already were).
    Joined,
    /// I am not the coordinator; ask this address (if known).
    NotLeader {
        /// The leader's peer address.
        leader_addr: Option<String>,
    },
    /// The join could not be done now; try again later.
    JoinFailed {
        /// Why, for the operator.
        reason: String,
    },
    /// An openraft RPC (serde_json of `RaftRequest`).
    RaftRpc(Vec<u8>),
    /// The answer to a `RaftRpc` (serde_json of the openraft result).
    RaftReply(Vec<u8>),
    /// Coordinator -> source: hand `fragment` off to `to` (handoff `handoff`, begun at
    /// `epoch`). Answered with `HandoffDone` once the destination holds it durably, or
    /// `HandoffFailed`. Boxed so the archived `Message` keeps its size (and every older
    /// message its encoding: `PROTOCOL_VERSION` stays).
    HandoffStart(Box<HandoffStart>),
    /// Source -> coordinator: every document is durable on the destination.
    HandoffDone {
        /// The handoff id.
        handoff: u64,
        /// Documents sent.
        docs: u64,
        /// Export-stream bytes sent.
        bytes: u64,
    },
    /// Source -> coordinator: the handoff cannot complete (the coordinator aborts it).
    HandoffFailed {
        /// The handoff id.
        handoff: u64,
        /// Why, for the operator.
        reason: String,
    },
    /// Source -> destination: create an empty copy of `fragment` (discarding any partial one)
    /// to receive handoff `handoff`'s chunks. Answered with `ImportAck { seq: 0 }`.
    ImportBegin {
        /// The handoff id.
        handoff: u64,
        /// The fragment.
        fragment: u32,
        /// First shard of its range.
        start: u32,
        /// One past its last shard.
        end: u32,
        /// The destination executor the map will name.
        executor: u32,
    },
    /// Source -> destination: chunk `seq` (from 1) of the export stream, starting at stream
    /// byte `offset`. Answered with `ImportAck` once durable, or `ImportRefused`.
    ImportChunk {
        /// The handoff id.
        handoff: u64,
        /// The fragment.
        fragment: u32,
        /// The chunk's number, from 1, contiguous.
        seq: u64,
        /// Stream bytes before this chunk.
        offset: u64,
        /// The chunk (`storage::Export` frames).
        bytes: Vec<u8>,
    },
    /// Source -> destination: the stream ended after `chunks` chunks of `bytes` in all.
    /// Answered with `ImportAck { seq: chunks }` if that is what arrived.
    ImportEnd {
        /// The handoff id.
        handoff: u64,
        /// The fragment.
        fragment: u32,
        /// Chunks sent.
        chunks: u64,
        /// Bytes sent.
        bytes: u64,
    },
    /// Destination -> source: everything up to chunk `seq` is durable here.
    ImportAck {
        /// The handoff id.
        handoff: u64,
        /// The last chunk durable (0 after `ImportBegin`).
        seq: u64,
        /// Documents imported so far.
        docs: u64,
    },
    /// Destination -> source: the request was refused; the handoff fails.
    ImportRefused {
        /// The handoff id.
        handoff: u64,
        /// Why, naming the stream offset for a damaged or out-of-order chunk.
        reason: String,
    },
    /// Node -> coordinator: this data node is shutting down gracefully; move its fragments
    /// away. Answered with `Leaving`, `NotLeader` or `JoinFailed` (the reason).
    Leave {
        /// The node.
        node: u64,
    },
    /// The coordinator recorded the node as leaving.
    Leaving,
    /// Plan moving a fragment (an operator's `ALTER FRAGMENT`), sent to the coordinator.
    PlanMove {
        /// The fragment.
        fragment: u32,
        /// The destination node.
        to: u32,
    },
    /// The coordinator's answer to `PlanMove`: the epoch it was planned at, or why not.
    MoveAnswer(Result<u64, crate::cluster::ops::MoveError>),
    /// The listener's authentication challenge (instead of its `Hello`, when it has a cluster
    /// secret): its nonce. See `cluster::auth`.
    Challenge {
        /// `auth::NONCE_BYTES` random bytes.
        nonce: Vec<u8>,
    },
    /// A side's proof that it knows the cluster secret, with its own nonce.
    Proof {
        /// The sender's nonce (the dialer's fresh one; the listener repeats its challenge).
        nonce: Vec<u8>,
        /// `auth::prove` over both nonces.
        proof: Vec<u8>,
    },
    /// What are your fragments' sizes? (the coordinator, for `--rebalance-load bytes`)
    Load,
    /// The fragments this node holds and their live bytes.
    LoadAnswer(Vec<FragmentBytes>),
    /// Begin splitting `fragment` (`at`: the first shard of its upper part, `None`: the
    /// middle) or, with `merge_with`, merging it with that upper neighbour (an operator's
    /// `ALTER FRAGMENT`), sent to the coordinator; answered with `MoveAnswer`.
    PlanReshape {
        /// The fragment (the lower one of a merge).
        fragment: u32,
        /// The split point.
        at: Option<u32>,
        /// The upper neighbour to merge with (then `at` is ignored).
        merge_with: Option<u32>,
    },
    /// Change a collection's configuration in the replicated catalog (an operator's `CREATE
    /// TABLE … WITH`, `ALTER TABLE … SET`, `DROP TABLE`), sent to the coordinator; answered
    /// with `MoveAnswer` (the catalog version of the change).
    SetCollection {
        /// The collection.
        name: String,
        /// The catalog version the change was decided against.
        expected: u64,
        /// The configuration's JSON text (`None`: remove it).
        sharding: Option<String>,
    },
    /// Coordinator -> owner: build the new fragments of split or merge `reshape` (in the
    /// owner's applied state). Answered with `ReshapeDone` once they are durable, or
    /// `ReshapeFailed`.
    ReshapeStart {
        /// The reshape id.
        reshape: u64,
    },
    /// Owner -> coordinator: every new fragment of `reshape` is durable.
    ReshapeDone {
        /// The reshape id.
        reshape: u64,
        /// Documents copied.
        docs: u64,
    },
    /// Owner -> coordinator: the build failed (the coordinator aborts the reshape).
    ReshapeFailed {
        /// The reshape id.
        reshape: u64,
        /// Why, for the operator.
        reason: String,
    },
    /// Remove a stopped member that owns no fragments (an operator's `ALTER CLUSTER REMOVE
    /// NODE`), sent to the coordinator; answered with `MoveAnswer`. Last of the variants, so
    /// every other message encodes as before: a coordinator of an older build cannot decode
    /// it and the asking node reports that, nothing else changes.
    RemoveNode {
        /// The member.
        node: u32,
    },
}

/// The coordinator's order to a fragment's owner to hand it off.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct HandoffStart {
    /// The handoff id (`ClusterState::handoffs`).
    pub handoff: u64,
    /// The fragment.
    pub fragment: u32,
    /// First shard of its range.
    pub start: u32,
    /// One past its last shard.
    pub end: u32,
    /// The destination node.
    pub to: u64,
    /// The destination's peer address.
    pub to_addr: String,
    /// The executor on the destination that will own it.
    pub to_executor: u32,
    /// The epoch at which the handoff began (the source waits to have applied it).
    pub epoch: u64,
}

impl Message {
    /// A short name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello(_) => "hello",
            Message::Refused { .. } => "refused",
            Message::Ping => "ping",
            Message::Pong { .. } => "pong",
            Message::SetCollection { .. } => "set-collection",
            Message::Join(_) => "join",
            Message::Joined => "joined",
            Message::NotLeader { .. } => "not-leader",
            Message::JoinFailed { .. } => "join-failed",
            Message::RaftRpc(_) => "raft-rpc",
            Message::RaftReply(_) => "raft-reply",
            Message::HandoffStart(_) => "handoff-start",
            Message::HandoffDone { .. } => "handoff-done",
            Message::HandoffFailed { .. } => "handoff-failed",
            Message::ImportBegin { .. } => "import-begin",
            Message::ImportChunk { .. } => "import-chunk",
            Message::ImportEnd { .. } => "import-end",
            Message::ImportAck { .. } => "import-ack",
            Message::ImportRefused { .. } => "import-refused",
            Message::Leave { .. } => "leave",
            Message::Leaving => "leaving",
            Message::PlanMove { .. } => "plan-move",
            Message::MoveAnswer(_) => "move-answer",
            Message::Challenge { .. } => "challenge",
            Message::Proof { .. } => "proof",
            Message::Load => "load",
            Message::LoadAnswer(_) => "load-answer",
            Message::PlanReshape { .. } => "plan-reshape",
            Message::ReshapeStart { .. } => "reshape-start",
            Message::ReshapeDone { .. } => "reshape-done",
            Message::ReshapeFailed { .. } => "reshape-failed",
            Message::RemoveNode { .. } => "remove-node",
        }
    }
}

/// Why bytes from a peer are not a message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The header announces a body over the limit; nothing was allocated for it.
    #[error("peer frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLong {
        /// The announced length.
        len: u32,
        /// `PEER_FRAME_BYTES_MAX`.
        max: u32,
    },
    /// The body is shorter than its version prefix.
    #[error("peer frame of {len} bytes is too short to hold a protocol version")]
    TooShort {
        /// The body length.
        len: usize,
    },
    /// The body does not match its checksum.
    #[error("peer frame checksum mismatch: header says {expected:#010x}, body has {actual:#010x}")]
    Checksum {
        /// The crc32 in the header.
        expected: u32,
        /// The crc32 of the body received.
        actual: u32,
    },
    /// The frame is encoded with a protocol version this build does not speak.
    #[error("peer speaks protocol version {got}, this node speaks {ours}")]
    Version {
        /// The frame's version.
        got: u16,
        /// `PROTOCOL_VERSION`.
        ours: u16,
    },
    /// The body passed its checksum but is not a valid message archive.
    #[error("peer frame of {len} bytes is not a valid message")]
    Archive {
        /// The archive's length.
        len: usize,
    },
    /// A run of data-connection pieces (`forward::DataMessage::Piece`) broken off, grown past
    /// `DATA_MESSAGE_BYTES_MAX`, or joined into another piece.
    #[error("bad run of message pieces: {reason}")]
    Pieces {
        /// What was wrong.
        reason: &'static str,
    },
    /// A message could not be encoded (only a bug or a message over the limit gets here).
    #[error("message {kind} cannot be encoded: {len} bytes exceed the limit")]
    Encode {
        /// The message kind.
        kind: &'static str,
        /// Its encoded length (0 if encoding itself failed).
        len: usize,
    },
}

/// Why a handshake was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The peer belongs to another cluster.
    #[error("peer node {node} belongs to cluster {theirs:?}, this node to {ours:?}")]
    WrongCluster {
        /// Our cluster name.
        ours: String,
        /// Theirs.
        theirs: String,
        /// The peer's node id.
        node: u64,
    },
    /// The peer speaks another protocol version.
    #[error("peer node {node} speaks protocol version {theirs}, this node speaks {ours}")]
    WrongVersion {
        /// `PROTOCOL_VERSION`.
        ours: u16,
        /// Theirs.
        theirs: u16,
        /// The peer's node id.
        node: u64,
    },
    /// The peer claims our own node id.
    #[error("peer at {addr} claims node id {node}, which is this node's id")]
    SameNodeId {
        /// The id.
        node: u64,
        /// The peer's address as it gave it.
        addr: String,
    },
    /// A field is over its limit.
    #[error("peer handshake field {field} is {len} bytes, over the limit of {max}")]
    FieldTooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The first message was not a `Hello`.
    #[error("peer sent {kind} before the handshake")]
    NotHello {
        /// What it sent.
        kind: &'static str,
    },
    /// Peer authentication failed (wrong or missing cluster secret on one side).
    #[error("peer authentication failed: {reason}")]
    Auth {
        /// Why.
        reason: String,
    },
    /// The peer refused us.
    #[error("peer refused the handshake: {reason}")]
    Refused {
        /// Its reason.
        reason: String,
    },
}

/// Encodes `message` as one frame (header and body).
pub fn encode_frame(message: &Message) -> Result<Vec<u8>, WireError> {
    let archive = rkyv::to_bytes::<RkyvError>(message)
        .map_err(|_| WireError::Encode { kind: message.kind(), len: 0 })?;
    let body_len = VERSION_BYTES + archive.len();
    let len = u32::try_from(body_len)
        .ok()
        .filter(|l| *l <= PEER_FRAME_BYTES_MAX)
        .ok_or(WireError::Encode { kind: message.kind(), len: body_len })?;
    let mut frame = Vec::with_capacity(PEER_FRAME_HEADER_BYTES + body_len);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    frame.extend_from_slice(&archive);
    let crc = crc32fast::hash(frame.get(PEER_FRAME_HEADER_BYTES..).unwrap_or(&[]));
    if let Some(slot) = frame.get_mut(4..PEER_FRAME_HEADER_BYTES) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
    Ok(frame)
}

/// A checked frame header: how many body bytes follow and their crc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Body length, at most `PEER_FRAME_BYTES_MAX`.
    pub len: u32,
    /// crc32 of the body.
    pub crc: u32,
}

/// Reads a frame header, refusing a length over the limit before any body is read.
pub fn decode_header(bytes: [u8; PEER_FRAME_HEADER_BYTES]) -> Result<Header, WireError> {
    let [l0, l1, l2, l3, c0, c1, c2, c3] = bytes;
    let len = u32::from_le_bytes([l0, l1, l2, l3]);
    let crc = u32::from_le_bytes([c0, c1, c2, c3]);
    if len > PEER_FRAME_BYTES_MAX {
        return Err(WireError::TooLong { len, max: PEER_FRAME_BYTES_MAX });
    }
    Ok(Header { len, crc })
}

/// Decodes a body whose header said `header`: crc, then version, then the checked archive.
pub fn decode_body(header: Header, body: &[u8]) -> Result<Message, WireError> {
    let actual = crc32fast::hash(body);
    if actual != header.crc {
        return Err(WireError::Checksum { expected: header.crc, actual });
    }
    let (Some(version), Some(archive)) = (body.get(..VERSION_BYTES), body.get(VERSION_BYTES..))
    else {
        return Err(WireError::TooShort { len: body.len() });
    };
    let got = u16::from_le_bytes([
        version.first().copied().unwrap_or(0),
        version.get(1).copied().unwrap_or(0),
    ]);
    if got != PROTOCOL_VERSION {
        return Err(WireError::Version { got, ours: PROTOCOL_VERSION });
    }
    // The archive is read from a buffer with rkyv's alignment; network bytes have none.
    let mut aligned = AlignedVec::<16>::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    rkyv::from_bytes::<Message, RkyvError>(&aligned)
        .map_err(|_| WireError::Archive { len: archive.len() })
}

/// Splits one frame off the front of `buf`: `Ok(None)` while it is incomplete, the message
/// and the bytes it used otherwise.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
    let Some(head) = buf.get(..PEER_FRAME_HEADER_BYTES) else {
        return Ok(None);
    };
    let mut bytes = [0u8; PEER_FRAME_HEADER_BYTES];
    bytes.copy_from_slice(head);
    let header = decode_header(bytes)?;
    // len <= PEER_FRAME_BYTES_MAX, so this cannot overflow.
    let end = PEER_FRAME_HEADER_BYTES + header.len as usize;
    let Some(body) = buf.get(PEER_FRAME_HEADER_BYTES..end) else {
        return Ok(None);
    };
    Ok(Some((decode_body(header, body)?, end)))
}

/// Checks a `Hello` received from a peer against our cluster name and node id.
pub fn check_hello(hello: &Hello, cluster: &str, ours: u64) -> Result<(), HandshakeError> {
    check_peer(&hello.peer)?;
    if hello.cluster.len() > CLUSTER_NAME_BYTES_MAX {
        return Err(HandshakeError::FieldTooLong {
            field: "cluster",
            len: hello.cluster.len(),
            max: CLUSTER_NAME_BYTES_MAX,
        });
    }
    if hello.cluster != cluster {
        return Err(HandshakeError::WrongCluster {
            ours: cluster.to_owned(),
            theirs: hello.cluster.clone(),
            node: hello.peer.node,
        });
    }
    if hello.version != PROTOCOL_VERSION {
        return Err(HandshakeError::WrongVersion {
            ours: PROTOCOL_VERSION,
            theirs: hello.version,
            node: hello.peer.node,
        });
    }
    if hello.peer.node == ours {
        return Err(HandshakeError::SameNodeId { node: ours, addr: hello.peer.peer_addr.clone() });
    }
    Ok(())
}

/// Checks the size of a peer's self-description (handshake or join).
pub fn check_peer(peer: &Peer) -> Result<(), HandshakeError> {
    for (field, text) in [("peer_addr", &peer.peer_addr), ("pg_addr", &peer.pg_addr)] {
        if text.len() > PEER_ADDR_BYTES_MAX {
            return Err(HandshakeError::FieldTooLong {
                field,
                len: text.len(),
                max: PEER_ADDR_BYTES_MAX,
            });
        }
    }
    Ok(())
}

/// The fuzz target's body: decodes every frame in `data` until the bytes run out or one is
/// bad, and checks each decoded `Hello`. Returns how many frames decoded.
pub fn fuzz_frames(data: &[u8]) -> usize {
    let mut rest = data;
    let mut decoded = 0;
    while let Ok(Some((message, used))) = decode_frame(rest) {
        decoded += 1;
        if let Message::Hello(hello) = &message {
            let _ = check_hello(hello, "fuzz", 0);
        }
        rest = rest.get(used..).unwrap_or(&[]);
    }
    decoded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(node: u64) -> Peer {
        Peer {
            node,
            role: Role::Data,
            peer_addr: "127.0.0.1:7001".into(),
            pg_addr: "127.0.0.1:5433".into(),
            executors: 2,
        }
    }

    fn hello(cluster: &str, version: u16, node: u64) -> Hello {
        Hello { cluster: cluster.into(), version, peer: peer(node) }
    }

    fn every_message() -> Vec<Message> {
        vec![
            Message::Hello(hello("c1", PROTOCOL_VERSION, 1)),
            Message::Refused { reason: "no".into() },
            Message::Ping,
            Message::Pong { leader: Some(3), epoch: 9, catalog: 4 },
            Message::Pong { leader: None, epoch: 0, catalog: 0 },
            Message::SetCollection {
                name: "orders".into(),
                expected: 3,
                sharding: Some(r#"{"Fields":["Customer"]}"#.into()),
            },
            Message::SetCollection { name: "gone".into(), expected: 0, sharding: None },
            Message::MoveAnswer(Err(crate::cluster::ops::MoveError::CatalogChanged { version: 7 })),
            Message::Join(Peer { role: Role::Proxy, ..peer(4) }),
            Message::Joined,
            Message::NotLeader { leader_addr: Some("127.0.0.1:9".into()) },
            Message::NotLeader { leader_addr: None },
            Message::JoinFailed { reason: "later".into() },
            Message::RaftRpc(b"{\"vote\":1}".to_vec()),
            Message::RaftReply(vec![]),
            Message::HandoffStart(Box::new(HandoffStart {
                handoff: 3,
                fragment: 2,
                start: 10,
                end: 20,
                to: 2,
                to_addr: "127.0.0.1:7002".into(),
                to_executor: 1,
                epoch: 4,
            })),
            Message::HandoffDone { handoff: 3, docs: 10, bytes: 4096 },
            Message::HandoffFailed { handoff: 3, reason: "gone".into() },
            Message::ImportBegin { handoff: 3, fragment: 2, start: 10, end: 20, executor: 1 },
            Message::ImportChunk { handoff: 3, fragment: 2, seq: 1, offset: 0, bytes: vec![7; 9] },
            Message::ImportEnd { handoff: 3, fragment: 2, chunks: 1, bytes: 9 },
            Message::ImportAck { handoff: 3, seq: 1, docs: 1 },
            Message::ImportRefused { handoff: 3, reason: "damaged at offset 8".into() },
            Message::Leave { node: 2 },
            Message::Leaving,
            Message::PlanMove { fragment: 3, to: 2 },
            Message::Challenge { nonce: vec![7; 32] },
            Message::Proof { nonce: vec![1; 32], proof: vec![2; 32] },
            Message::Load,
            Message::LoadAnswer(vec![FragmentBytes { fragment: 1, bytes: u64::MAX }]),
            Message::MoveAnswer(Ok(4)),
            Message::PlanReshape { fragment: 3, at: Some(7), merge_with: None },
            Message::PlanReshape { fragment: 3, at: None, merge_with: Some(4) },
            Message::RemoveNode { node: 3 },
            Message::ReshapeStart { reshape: 2 },
            Message::ReshapeDone { reshape: 2, docs: 9 },
            Message::ReshapeFailed { reshape: 2, reason: "disk full".into() },
            Message::MoveAnswer(Err(crate::cluster::ops::MoveError::Refused {
                reason: "not adjacent".into(),
            })),
            Message::MoveAnswer(Err(crate::cluster::ops::MoveError::AlreadyMoving { fragment: 3 })),
            Message::MoveAnswer(Err(crate::cluster::ops::MoveError::NoCoordinator {
                reason: "later".into(),
            })),
        ]
    }

    // Checks every message kind survives encode -> decode unchanged, one frame at a time and
    // several back to back, and that a cut-short buffer is "incomplete", not an error.
    #[test]
    fn roundtrip_every_message() {
        let mut stream = Vec::new();
        for m in every_message() {
            let frame = encode_frame(&m).expect("encodes");
            let (back, used) = decode_frame(&frame).expect("decodes").expect("complete");
            assert_eq!(back, m);
            assert_eq!(used, frame.len());
            for cut in 0..frame.len() {
                assert_eq!(decode_frame(&frame[..cut]), Ok(None), "prefix of {cut} bytes");
            }
            stream.extend_from_slice(&frame);
        }
        assert_eq!(fuzz_frames(&stream), every_message().len());
    }

    // Checks the archived `Message` keeps its session-2 size: a larger variant would move the
    // archive's root and change every older message's encoding (box large payloads instead,
    // or bump `PROTOCOL_VERSION`).
    #[test]
    fn compat_archived_message_size() {
        assert_eq!(std::mem::size_of::<rkyv::Archived<Message>>(), 56);
    }

    // Checks a header announcing more than the limit is refused from the header alone.
    #[test]
    fn bad_input_too_long() {
        let mut head = [0u8; PEER_FRAME_HEADER_BYTES];
        head[..4].copy_from_slice(&(PEER_FRAME_BYTES_MAX + 1).to_le_bytes());
        assert_eq!(
            decode_header(head),
            Err(WireError::TooLong { len: PEER_FRAME_BYTES_MAX + 1, max: PEER_FRAME_BYTES_MAX })
        );
        assert!(matches!(decode_frame(&head), Err(WireError::TooLong { .. })));
    }

    // Checks every single-bit flip of a frame's body is caught by the checksum, and a flip in
    // the stored crc too.
    #[test]
    fn bad_input_bit_flips() {
        let frame = encode_frame(&Message::Pong { leader: Some(1), epoch: 2, catalog: 0 })
            .expect("encodes");
        for byte in 4..frame.len() {
            for bit in 0..8 {
                let mut bad = frame.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    matches!(decode_frame(&bad), Err(WireError::Checksum { .. })),
                    "flip at byte {byte} bit {bit}"
                );
            }
        }
    }

    // Checks another protocol version, a body without a version and a garbage archive with a
    // correct crc each give their own error.
    #[test]
    fn bad_input_version_short_and_garbage() {
        let with_body = |body: &[u8]| {
            let mut f = Vec::new();
            f.extend_from_slice(&u32::try_from(body.len()).expect("small").to_le_bytes());
            f.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
            f.extend_from_slice(body);
            f
        };
        let mut body = (PROTOCOL_VERSION + 1).to_le_bytes().to_vec();
        body.extend_from_slice(&[0; 16]);
        assert_eq!(
            decode_frame(&with_body(&body)),
            Err(WireError::Version { got: PROTOCOL_VERSION + 1, ours: PROTOCOL_VERSION })
        );
        assert_eq!(decode_frame(&with_body(&[1])), Err(WireError::TooShort { len: 1 }));
        let mut body = PROTOCOL_VERSION.to_le_bytes().to_vec();
        body.extend_from_slice(&[0xff; 24]);
        assert_eq!(decode_frame(&with_body(&body)), Err(WireError::Archive { len: 24 }));
    }

    // Checks the handshake refuses another cluster, another version, our own id and an
    // oversized field, each with a message naming both sides.
    #[test]
    fn handshake_refusals() {
        assert_eq!(check_hello(&hello("c1", PROTOCOL_VERSION, 2), "c1", 1), Ok(()));
        let e = check_hello(&hello("other", PROTOCOL_VERSION, 2), "c1", 1).expect_err("cluster");
        assert!(e.to_string().contains("\"other\""), "{e}");
        assert!(e.to_string().contains("\"c1\""), "{e}");
        let e = check_hello(&hello("c1", 7, 2), "c1", 1).expect_err("version");
        assert!(matches!(e, HandshakeError::WrongVersion { theirs: 7, .. }), "{e}");
        let e = check_hello(&hello("c1", PROTOCOL_VERSION, 1), "c1", 1).expect_err("same id");
        assert!(matches!(e, HandshakeError::SameNodeId { node: 1, .. }), "{e}");
        let mut long = hello("c1", PROTOCOL_VERSION, 2);
        long.peer.peer_addr = "x".repeat(PEER_ADDR_BYTES_MAX + 1);
        let e = check_hello(&long, "c1", 1).expect_err("long address");
        assert!(matches!(e, HandshakeError::FieldTooLong { field: "peer_addr", .. }), "{e}");
        let long = hello(&"c".repeat(CLUSTER_NAME_BYTES_MAX + 1), PROTOCOL_VERSION, 2);
        let e = check_hello(&long, "c1", 1).expect_err("long name");
        assert!(matches!(e, HandshakeError::FieldTooLong { field: "cluster", .. }), "{e}");
    }

    proptest::proptest! {
        // Checks arbitrary bytes never panic the decoder, and that whatever decodes re-encodes
        // to a frame that decodes to the same message.
        #[test]
        fn prop_decoder_total(data in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            if let Ok(Some((m, _))) = decode_frame(&data) {
                let again = encode_frame(&m).expect("a decoded message encodes");
                let back = decode_frame(&again).expect("decodes").expect("complete").0;
                proptest::prop_assert_eq!(back, m);
            }
            let _ = fuzz_frames(&data);
        }
    }
}

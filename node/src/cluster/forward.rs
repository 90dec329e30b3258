//! Region forwarding: the data connection between cluster nodes and the shares forwarded on it.
//!
//! **Transport.** A node forwards a remote node's share of a statement over a *data
//! connection*: a TCP connection to the owner's PostgreSQL address whose first packet is a
//! startup packet with the internal code `pg::frame::PEER_DATA_CODE` (like SSLRequest's),
//! recognized by the owner's PostgreSQL listener on whichever executor accepted it, so the
//! whole path stays on glommio executors (no hop through the control plane's tokio thread).
//! Then a handshake (`Hello` each way, checked by `wire::check_hello`: cluster name, protocol
//! version, node id) and requests answered in order, one in flight per connection. Each
//! executor keeps a pool of idle connections per remote node (`DATA_POOL_IDLE_MAX`).
//!
//! **Frames** are those of `cluster::wire` (`u32 len | u32 crc32 | u16 version | rkyv`), with
//! their own message type `DataMessage`, decoded with checked rkyv only; a bad frame closes
//! that connection. Fuzzed by `fuzz/fuzz_targets/data_frame.rs` (`fuzz_data_frames`).
//!
//! **Requests** carry the map epoch the region routed by, the statement's SQL text, its index in
//! that text and its bound parameters (the owner parses and binds again: `query::bind` depends
//! only on the statement and the values), and what to run: a SELECT share on named fragments
//! and ranges (answered with partial results, merged where the client is), an autocommit write
//! whose fragments are all the owner's (answered with the count and RETURNING rows), or the
//! owner's SHOW FRAGMENTS rows. An owner whose map is newer answers `StaleEpoch`, one that does
//! not hold a named fragment `NotMine`; the region then refreshes and retries.
//!
//! **Cross-node transactions** use the same connections: a block's statements (`TxnSelect`,
//! `TxnWriteAs`, with the block's buffered writes of each fragment; also an autocommit
//! write's shares over several nodes), its commit on one fragment
//! (`TxnApply`), the two phases of a two-phase commit (`TxnPrepare`, `TxnFinish`) and a
//! participant's question to the coordinating node (`TxnDecide`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use query::exec::{AggState, GroupPartial, PartialBody, PartialRow};
use query::{Datum, DocVersion, WriteIntent};
use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;

use crate::cluster::limits::{
    DATA_CONN_IDLE_MS, DATA_MESSAGE_BYTES_MAX, DATA_PIECE_BYTES, DATA_POOL_IDLE_MAX,
    FORWARD_TIMEOUT_MS, PEER_CONNECT_TIMEOUT_MS, PEER_FRAME_BYTES_MAX, PEER_FRAME_HEADER_BYTES,
};
use crate::cluster::region::RegionError;
use crate::cluster::wire::{self, Hello, PROTOCOL_VERSION, Peer, WireError};
use crate::engine::{Buffered, Core, FragmentWrites, ReadRecord, Reads, ScanRecord, Session};
use crate::runtime::ExecutorContext;

/// Bytes of the version prefix of a body.
const VERSION_BYTES: usize = 2;

/// A value of a parameter, row or aggregate state.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum WireDatum {
    /// NULL.
    Null,
    /// bool.
    Bool(bool),
    /// int8.
    Int8(i64),
    /// float8.
    Float8(f64),
    /// text.
    Text(String),
    /// json, as its text.
    Json(String),
}

/// A half-open shard range.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireRange {
    /// First shard.
    pub start: u32,
    /// One past the last.
    pub end: u32,
}

/// A fragment and the ranges of it to read.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WireTarget {
    /// The fragment id.
    pub fragment: u32,
    /// Ranges inside it.
    pub ranges: Vec<WireRange>,
}

/// One row of a plain SELECT's partial result.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct WireRow {
    /// Document id.
    pub id: String,
    /// Output values.
    pub values: Vec<WireDatum>,
    /// Sort keys.
    pub keys: Vec<WireDatum>,
}

/// A mergeable aggregate state.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum WireAgg {
    /// count
    Count(i64),
    /// sum of int8
    SumInt(Option<i64>),
    /// sum of other numbers
    SumFloat(Option<f64>),
    /// min
    Min(Option<WireDatum>),
    /// max
    Max(Option<WireDatum>),
    /// avg
    Avg {
        /// Sum.
        sum: f64,
        /// Count.
        count: i64,
    },
    /// count, sum or avg of DISTINCT …: the distinct values seen, in order (the plan says
    /// which aggregate). Added last, so every older state keeps its encoding.
    CountDistinct(Vec<WireDatum>),
    /// jsonb_agg, jsonb_object_agg, string_agg: every value kept (`query::Collected`).
    Collect(Vec<WireCollected>),
}

/// One value a collecting aggregate keeps (`query::Collected`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct WireCollected {
    /// ORDER BY keys.
    pub keys: Vec<WireDatum>,
    /// The value.
    pub value: WireDatum,
    /// The key or delimiter.
    pub extra: WireDatum,
}

/// One group of an aggregate's partial result.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct WireGroup {
    /// GROUP BY values.
    pub key: Vec<WireDatum>,
    /// One state per aggregate.
    pub states: Vec<WireAgg>,
}

/// One fragment's partial result.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct WirePartial {
    /// Documents read.
    pub rows_scanned: u64,
    /// Rows, or groups when `grouped`.
    pub rows: Vec<WireRow>,
    /// Aggregate groups.
    pub groups: Vec<WireGroup>,
    /// Whether the body is groups.
    pub grouped: bool,
}

/// One collection's documents on the answering node, for SHOW COLLECTIONS.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WireCollection {
    /// The collection.
    pub name: String,
    /// Its live documents on that node.
    pub documents: u64,
}

/// One fragment as SHOW FRAGMENTS shows it.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WireFragment {
    /// Fragment id.
    pub fragment: u32,
    /// Range start.
    pub start: u32,
    /// Range end.
    pub end: u32,
    /// Executor on the owner.
    pub executor: u32,
    /// Live documents.
    pub documents: u64,
    /// Live bytes.
    pub bytes: u64,
}

/// A storage version a statement read in a transaction (`engine::txn::ReadRecord`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WireRead {
    /// Collection.
    pub collection: String,
    /// Lower-cased id.
    pub key: String,
    /// Id as read.
    pub id: String,
    /// Shard.
    pub shard: u32,
    /// Version seen (0: absent).
    pub version: u64,
}

/// A range a statement scanned to its end in a transaction (`engine::txn::ScanRecord`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WireScan {
    /// Collection.
    pub collection: String,
    /// First shard.
    pub start: u32,
    /// One past the last shard.
    pub end: u32,
    /// Stored documents it held.
    pub docs: u64,
}

/// What a statement read on one fragment (`engine::txn::Reads`).
#[derive(
    rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, Default, PartialEq, Eq,
)]
pub struct WireReads {
    /// Versions read.
    pub docs: Vec<WireRead>,
    /// Ranges scanned to the end.
    pub scans: Vec<WireScan>,
}

/// One buffered write of a transaction (`engine::txn::Buffered`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WireBuffered {
    /// Collection.
    pub collection: String,
    /// Lower-cased id.
    pub key: String,
    /// Id as written.
    pub id: String,
    /// Shard.
    pub shard: u32,
    /// Storage version when first touched (0: absent).
    pub base: u64,
    /// The new document as JSON text, or `None` for a delete.
    pub doc: Option<String>,
}

/// A transaction's state on one fragment, as it travels to the fragment's owner: the
/// buffered writes (the overlay a statement reads through) and, at commit, the reads to check.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WireTxnTarget {
    /// The fragment.
    pub fragment: u32,
    /// Ranges to read (SELECT, UPDATE, DELETE; empty for an INSERT, placed by the owner).
    pub ranges: Vec<WireRange>,
    /// The transaction's buffered writes there.
    pub writes: Vec<WireBuffered>,
    /// Versions read and ranges scanned there (commit only).
    pub reads: WireReads,
}

/// A write a statement of a transaction would make (`query::WriteIntent`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum WireIntent {
    /// Store a document.
    Put {
        /// Id.
        id: String,
        /// Shard.
        shard: u32,
        /// Version replaced, `None` for a new document.
        version_read: Option<u64>,
        /// The document as JSON text.
        doc: String,
    },
    /// Delete a document.
    Delete {
        /// Id.
        id: String,
        /// Shard.
        shard: u32,
        /// Version deleted.
        version_read: u64,
    },
}

/// What one statement of a transaction read and would write on one remote fragment.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct WireTxnShare {
    /// The fragment.
    pub fragment: u32,
    /// Writes to buffer (empty for a SELECT).
    pub intents: Vec<WireIntent>,
    /// Versions read and ranges scanned.
    pub reads: WireReads,
    /// RETURNING rows.
    pub returning: Vec<Vec<WireDatum>>,
    /// Documents read.
    pub rows_scanned: u64,
}

/// What a forwarded request asks the owner to run.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Share {
    /// A SELECT on these fragments and ranges; answered with `Partials`.
    Select {
        /// The targets.
        targets: Vec<WireTarget>,
    },
    /// An autocommit write whose fragments are all the owner's; answered with `Written`.
    Write,
    /// The owner's fragments; answered with `Fragments`.
    Fragments,
    /// A SELECT inside a transaction block, through the block's buffered writes; answered
    /// with `TxnRead`.
    TxnSelect {
        /// The targets with their overlays.
        targets: Vec<WireTxnTarget>,
    },
    /// A write inside a transaction (block or autocommit), evaluated through the buffered
    /// writes, writing nothing; answered with `TxnShares`.
    TxnWrite {
        /// The targets with their overlays.
        targets: Vec<WireTxnTarget>,
    },
    /// Commit of a transaction whose only writes are on this one fragment, or checks of
    /// reads only (storage batch applied at once, one fdatasync); answered with `Applied`.
    TxnApply {
        /// The fragment's writes and reads.
        target: WireTxnTarget,
    },
    /// Phase one of a cross-node two-phase commit coordinated by the sending node (whose id
    /// is in `txid`): durable PREPARE of these fragments' batches; answered with `Applied`.
    TxnPrepare {
        /// The transaction id.
        txid: u64,
        /// The fragments' writes and reads.
        targets: Vec<WireTxnTarget>,
    },
    /// Phase two: commit or abort `txid` on these fragments; answered with `Applied` once
    /// the records are durable.
    TxnFinish {
        /// The transaction id.
        txid: u64,
        /// The fragments.
        fragments: Vec<u32>,
        /// The decision.
        commit: bool,
    },
    /// A participant holding `txid` prepared asks its coordinator node for the decision
    /// (ABORT is recorded first when there is none); answered with `Decided`.
    TxnDecide {
        /// The transaction id.
        txid: u64,
    },
    /// The owner's documents per collection; answered with `Collections`. Added last, so
    /// every older share keeps its encoding.
    Collections,
    /// The ids of the owner's documents of `collection` that violate its content
    /// configuration (`verify_sharding`); answered with `Violations`.
    Verify {
        /// The collection.
        collection: String,
    },
    /// One page of a streamed SELECT on one fragment (`query::execute_select_page`), after
    /// `after` (from its start when absent); answered with `Page`. Added last, so every older
    /// share keeps its encoding.
    SelectPage {
        /// The fragment and its ranges.
        target: WireTarget,
        /// Where the previous page ended.
        after: Option<WirePos>,
    },
    /// `TxnWrite` saying which statement sent it, so the owner reads as the sender's own
    /// executors would (`engine::ShareRead`); what nodes of this build send. Added last, so
    /// every older share keeps its encoding; a node of an older build refuses it as a bad
    /// frame (the statement fails; `TxnWrite` is still served, read in one go).
    TxnWriteAs {
        /// The targets with their overlays.
        targets: Vec<WireTxnTarget>,
        /// How to read them.
        read: WireShareRead,
    },
    /// An autocommit UPDATE's or DELETE's attempt after a conflict, which prepares as it
    /// reads: the owner reads each fragment at one instant and prepares what the statement
    /// writes there for `txid` before that instant ends (`Core::txn_write_prepared`); answered
    /// with `Written` (a fragment prepared exactly when it wrote), after which the sender, the
    /// coordinator, finishes `txid` with `TxnFinish`. Added last, so every older share keeps
    /// its encoding; a node of an older build refuses it as a bad frame (the statement fails).
    TxnWritePrepared {
        /// The targets (no overlays: an autocommit statement has none).
        targets: Vec<WireTxnTarget>,
        /// The transaction, coordinated by the sender.
        txid: u64,
    },
}

/// How the owner reads a `TxnWriteAs` share (`engine::ShareRead`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireShareRead {
    /// A block's statement: in slices, each at its own instant, the versions read kept.
    Block,
    /// An autocommit statement's first attempt: in slices at one instant under a pause of
    /// the writes of what it reads, no versions kept.
    AutocommitPaused,
    /// Its later attempts: in one go, no versions kept.
    AutocommitOneGo,
}

/// Where a page of a scan ended (`query::ScanPos`).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WirePos {
    /// The last document's shard.
    pub shard: u32,
    /// Its lower-cased id.
    pub key: String,
}

/// One document `verify_sharding` lists.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct WireViolation {
    /// Its id.
    pub id: String,
    /// Why it violates the configuration.
    pub reason: String,
}

/// A forwarded share.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct Request {
    /// The map epoch the region routed by.
    pub epoch: u64,
    /// The collection catalog version the statement was planned with: the owner waits until
    /// it has installed at least that one, so it never validates a write by an older
    /// configuration than the one it was placed by (0: any).
    pub catalog: u64,
    /// The SQL text the statement came from.
    pub sql: String,
    /// The statement's position in that text.
    pub index: u32,
    /// Bound parameter values.
    pub params: Vec<WireDatum>,
    /// What to run.
    pub share: Share,
}

/// The owner's answer.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum Reply {
    /// A SELECT share's partial results.
    Partials(Vec<WirePartial>),
    /// A write's outcome.
    Written {
        /// Documents written or deleted.
        affected: u64,
        /// RETURNING rows.
        returning: Vec<Vec<WireDatum>>,
    },
    /// The owner's fragments.
    Fragments(Vec<WireFragment>),
    /// The owner's map is newer than the request's.
    StaleEpoch {
        /// The owner's epoch.
        current: u64,
    },
    /// The owner does not hold this fragment.
    NotMine {
        /// The fragment.
        fragment: u32,
    },
    /// The share failed on the owner with this SQLSTATE and message.
    Failed {
        /// SQLSTATE.
        code: String,
        /// Message.
        message: String,
    },
    /// A transactional SELECT share: partial results and versions read per fragment.
    TxnRead {
        /// Partial results.
        partials: Vec<WirePartial>,
        /// Versions read (one share per fragment, no intents).
        reads: Vec<WireTxnShare>,
    },
    /// A transactional write share.
    TxnShares(Vec<WireTxnShare>),
    /// A transaction's batch is applied, prepared or finished (durable).
    Applied,
    /// The coordinator's decision on a transaction.
    Decided {
        /// COMMIT (else ABORT).
        commit: bool,
    },
    /// The owner's documents per collection (collections it holds none of are absent).
    Collections(Vec<WireCollection>),
    /// The owner's documents that violate a collection's content configuration.
    Violations(Vec<WireViolation>),
    /// The owner's collection catalog is newer than the one the statement was planned with and
    /// places its documents elsewhere: plan again once this node has at least `current`.
    StaleCatalog {
        /// The owner's catalog version.
        current: u64,
    },
    /// A `SelectPage` share's rows and where the next page starts (`None`: the fragment is
    /// done).
    Page {
        /// The page's rows.
        partial: WirePartial,
        /// Where it ended.
        next: Option<WirePos>,
    },
}

/// Everything on a data connection.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum DataMessage {
    /// Handshake, both ways.
    Hello(Hello),
    /// The handshake was refused; the connection closes.
    Refused {
        /// Why.
        reason: String,
    },
    /// A forwarded share.
    Request(Request),
    /// Its answer.
    Reply(Reply),
    /// A part of a message too large for one frame: consecutive bytes of that message's
    /// archive, the last one with `last` (see [`encode_data_message`] and [`Assembler`]).
    /// Last of the variants, so frames of every other kind decode as before it existed.
    Piece {
        /// The bytes.
        bytes: Vec<u8>,
        /// Whether this piece ends the message.
        last: bool,
    },
}

impl DataMessage {
    fn kind(&self) -> &'static str {
        match self {
            DataMessage::Hello(_) => "hello",
            DataMessage::Refused { .. } => "refused",
            DataMessage::Request(_) => "request",
            DataMessage::Reply(_) => "reply",
            DataMessage::Piece { .. } => "piece",
        }
    }
}

/// Encodes `message` as one frame.
pub fn encode_data_frame(message: &DataMessage) -> Result<Vec<u8>, WireError> {
    let archive = rkyv::to_bytes::<RkyvError>(message)
        .map_err(|_| WireError::Encode { kind: message.kind(), len: 0 })?;
    frame_of_archive(message.kind(), &archive)
}

fn frame_of_archive(kind: &'static str, archive: &[u8]) -> Result<Vec<u8>, WireError> {
    let body_len = VERSION_BYTES + archive.len();
    let len = u32::try_from(body_len)
        .ok()
        .filter(|l| *l <= PEER_FRAME_BYTES_MAX)
        .ok_or(WireError::Encode { kind, len: body_len })?;
    let mut frame = Vec::with_capacity(PEER_FRAME_HEADER_BYTES + body_len);
    frame.extend_from_slice(&len.to_le_bytes());
    let mut body = Vec::with_capacity(body_len);
    body.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    body.extend_from_slice(archive);
    frame.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Encodes `message` for the wire: one frame, or, when its archive is larger than a frame
/// may carry, a run of [`DataMessage::Piece`] frames of [`DATA_PIECE_BYTES`] of it each.
/// Refuses a message whose archive passes [`DATA_MESSAGE_BYTES_MAX`] (`WireError::Encode`
/// with its length).
pub fn encode_data_message(message: &DataMessage) -> Result<Vec<u8>, WireError> {
    encode_data_message_in(message, DATA_MESSAGE_BYTES_MAX)
}

fn encode_data_message_in(message: &DataMessage, max: usize) -> Result<Vec<u8>, WireError> {
    let archive = rkyv::to_bytes::<RkyvError>(message)
        .map_err(|_| WireError::Encode { kind: message.kind(), len: 0 })?;
    if VERSION_BYTES + archive.len() <= PEER_FRAME_BYTES_MAX as usize {
        return frame_of_archive(message.kind(), &archive);
    }
    if archive.len() > max || matches!(message, DataMessage::Piece { .. }) {
        return Err(WireError::Encode { kind: message.kind(), len: archive.len() });
    }
    let mut frames = Vec::with_capacity(archive.len() + archive.len() / DATA_PIECE_BYTES * 64 + 64);
    let mut pieces = archive.chunks(DATA_PIECE_BYTES).peekable();
    while let Some(bytes) = pieces.next() {
        let piece = DataMessage::Piece { bytes: bytes.to_vec(), last: pieces.peek().is_none() };
        frames.extend_from_slice(&encode_data_frame(&piece)?);
    }
    Ok(frames)
}

/// Joins the pieces of a message sent as several frames. Every decoded frame's message goes
/// through [`Assembler::push`]: a whole message comes back at once; pieces are kept until
/// the last, then the message they make comes back. A run that passes
/// [`DATA_MESSAGE_BYTES_MAX`], a whole message inside a run, or pieces that make another
/// piece or no valid archive are errors (the connection is closed).
#[derive(Default)]
pub struct Assembler {
    archive: AlignedVec<16>,
    open: bool,
}

impl Assembler {
    /// Takes the next frame's message.
    pub fn push(&mut self, message: DataMessage) -> Result<Option<DataMessage>, WireError> {
        self.push_in(message, DATA_MESSAGE_BYTES_MAX)
    }

    fn push_in(
        &mut self,
        message: DataMessage,
        max: usize,
    ) -> Result<Option<DataMessage>, WireError> {
        let DataMessage::Piece { bytes, last } = message else {
            if self.open {
                return Err(WireError::Pieces { reason: "a message came inside a run of pieces" });
            }
            return Ok(Some(message));
        };
        if self.archive.len().saturating_add(bytes.len()) > max {
            return Err(WireError::Pieces { reason: "the pieces pass the message limit" });
        }
        self.open = true;
        self.archive.extend_from_slice(&bytes);
        if !last {
            return Ok(None);
        }
        self.open = false;
        let archive = std::mem::take(&mut self.archive);
        match rkyv::from_bytes::<DataMessage, RkyvError>(&archive) {
            Ok(DataMessage::Piece { .. }) => {
                Err(WireError::Pieces { reason: "the pieces make another piece" })
            }
            Ok(whole) => Ok(Some(whole)),
            Err(_) => Err(WireError::Archive { len: archive.len() }),
        }
    }
}

/// Decodes a body whose header said `header`: crc, version, checked archive.
pub fn decode_data_body(header: wire::Header, body: &[u8]) -> Result<DataMessage, WireError> {
    let actual = crc32fast::hash(body);
    if actual != header.crc {
        return Err(WireError::Checksum { expected: header.crc, actual });
    }
    let (Some(&[v0, v1]), Some(archive)) = (body.first_chunk::<2>(), body.get(VERSION_BYTES..))
    else {
        return Err(WireError::TooShort { len: body.len() });
    };
    let got = u16::from_le_bytes([v0, v1]);
    if got != PROTOCOL_VERSION {
        return Err(WireError::Version { got, ours: PROTOCOL_VERSION });
    }
    let mut aligned = AlignedVec::<16>::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    rkyv::from_bytes::<DataMessage, RkyvError>(&aligned)
        .map_err(|_| WireError::Archive { len: archive.len() })
}

/// Splits one frame off `buf`: `Ok(None)` while incomplete.
pub fn decode_data_frame(buf: &[u8]) -> Result<Option<(DataMessage, usize)>, WireError> {
    let Some(head) = buf.first_chunk::<PEER_FRAME_HEADER_BYTES>() else { return Ok(None) };
    let header = wire::decode_header(*head)?;
    let end = PEER_FRAME_HEADER_BYTES + header.len as usize;
    let Some(body) = buf.get(PEER_FRAME_HEADER_BYTES..end) else { return Ok(None) };
    Ok(Some((decode_data_body(header, body)?, end)))
}

/// The fuzz target's body: decodes frames until one is bad or the bytes run out, joining
/// pieces as a connection does and converting every reply's values back. Returns how many
/// frames decoded.
pub fn fuzz_data_frames(data: &[u8]) -> usize {
    let mut rest = data;
    let mut decoded = 0;
    let mut pieces = Assembler::default();
    while let Ok(Some((frame, used))) = decode_data_frame(rest) {
        decoded += 1;
        rest = rest.get(used..).unwrap_or(&[]);
        let message = match pieces.push(frame) {
            Ok(Some(message)) => message,
            Ok(None) => continue,
            Err(_) => {
                pieces = Assembler::default();
                continue;
            }
        };
        match &message {
            DataMessage::Hello(hello) => {
                let _ = wire::check_hello(hello, "fuzz", 0);
            }
            DataMessage::Reply(Reply::Partials(p)) => {
                let _ = partials_from_wire(p.clone());
            }
            DataMessage::Request(r) => {
                let _ = datums_from_wire(r.params.clone());
            }
            _ => {}
        }
    }
    decoded
}

// ---- conversions ---------------------------------------------------------------------------

/// A datum for the wire.
pub fn datum_to_wire(d: &Datum) -> WireDatum {
    match d {
        Datum::Null => WireDatum::Null,
        Datum::Bool(b) => WireDatum::Bool(*b),
        Datum::Int8(i) => WireDatum::Int8(*i),
        Datum::Float8(f) => WireDatum::Float8(*f),
        Datum::Text(t) => WireDatum::Text(t.clone()),
        Datum::Json(v) => WireDatum::Json(v.to_string()),
    }
}

/// A datum from the wire; bad JSON is an error naming it.
pub fn datum_from_wire(d: WireDatum) -> Result<Datum, String> {
    Ok(match d {
        WireDatum::Null => Datum::Null,
        WireDatum::Bool(b) => Datum::Bool(b),
        WireDatum::Int8(i) => Datum::Int8(i),
        WireDatum::Float8(f) => Datum::Float8(f),
        WireDatum::Text(t) => Datum::Text(t),
        WireDatum::Json(j) => {
            Datum::Json(serde_json::from_str(&j).map_err(|e| format!("bad json datum: {e}"))?)
        }
    })
}

/// Datums for the wire.
pub fn datums_to_wire(ds: &[Datum]) -> Vec<WireDatum> {
    ds.iter().map(datum_to_wire).collect()
}

/// Datums from the wire.
pub fn datums_from_wire(ds: Vec<WireDatum>) -> Result<Vec<Datum>, String> {
    ds.into_iter().map(datum_from_wire).collect()
}

/// A scan position for the wire.
pub fn pos_to_wire(pos: &query::ScanPos) -> WirePos {
    WirePos { shard: pos.shard.get(), key: pos.key.clone() }
}

/// A scan position from the wire (its shard checked).
pub fn pos_from_wire(pos: WirePos) -> Result<query::ScanPos, String> {
    Ok(query::ScanPos { shard: shard_from_wire(pos.shard)?, key: pos.key })
}

fn shard_from_wire(shard: u32) -> Result<router::ShardId, String> {
    router::ShardId::new(shard).ok_or_else(|| format!("shard {shard} out of range"))
}

/// Versions read and ranges scanned, for the wire (from a statement's `Reads`, or straight
/// from a transaction's per-fragment maps without collecting them first).
pub fn reads_to_wire<'a>(
    docs: impl IntoIterator<Item = &'a ReadRecord>,
    scans: impl IntoIterator<Item = &'a ScanRecord>,
) -> WireReads {
    WireReads {
        docs: docs
            .into_iter()
            .map(|r| WireRead {
                collection: r.collection.clone(),
                key: r.key.clone(),
                id: r.id.clone(),
                shard: r.shard.get(),
                version: r.version.get(),
            })
            .collect(),
        scans: scans
            .into_iter()
            .map(|s| WireScan {
                collection: s.collection.clone(),
                start: s.range.start(),
                end: s.range.end(),
                docs: s.docs,
            })
            .collect(),
    }
}

/// Versions read and ranges scanned, from the wire.
pub fn reads_from_wire(reads: WireReads) -> Result<Reads, String> {
    let docs = reads
        .docs
        .into_iter()
        .map(|r| {
            Ok(ReadRecord {
                collection: r.collection,
                key: r.key,
                id: r.id,
                shard: shard_from_wire(r.shard)?,
                version: storage::Version::new(r.version),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let scans = reads
        .scans
        .into_iter()
        .map(|s| {
            let range = router::ShardRange::new(s.start, s.end)
                .ok_or_else(|| format!("scanned range {}..{} out of range", s.start, s.end))?;
            Ok(ScanRecord { collection: s.collection, range, docs: s.docs })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Reads { docs, scans })
}

/// A fragment's buffered writes, for the wire.
pub fn writes_to_wire(writes: Option<&FragmentWrites>) -> Vec<WireBuffered> {
    let Some(writes) = writes else { return Vec::new() };
    writes
        .docs
        .iter()
        .map(|((collection, key), b)| WireBuffered {
            collection: collection.clone(),
            key: key.clone(),
            id: b.id.clone(),
            shard: b.shard.get(),
            base: b.base.get(),
            doc: b.doc.as_ref().map(|d| d.to_string()),
        })
        .collect()
}

/// A fragment's buffered writes, from the wire.
pub fn writes_from_wire(writes: Vec<WireBuffered>) -> Result<FragmentWrites, String> {
    let mut out = FragmentWrites::default();
    for w in writes {
        let doc = match w.doc {
            Some(text) => Some(
                serde_json::from_str(&text).map_err(|e| format!("bad buffered document: {e}"))?,
            ),
            None => None,
        };
        out.docs.insert(
            (w.collection, w.key),
            Buffered {
                id: w.id,
                shard: shard_from_wire(w.shard)?,
                base: storage::Version::new(w.base),
                doc,
            },
        );
    }
    Ok(out)
}

/// Write intents, for the wire.
pub fn intents_to_wire(intents: &[WriteIntent]) -> Vec<WireIntent> {
    intents
        .iter()
        .map(|i| match i {
            WriteIntent::Put { id, shard, version_read, doc } => WireIntent::Put {
                id: id.clone(),
                shard: shard.get(),
                version_read: version_read.map(|v| v.get()),
                doc: doc.to_string(),
            },
            WriteIntent::Delete { id, shard, version_read } => WireIntent::Delete {
                id: id.clone(),
                shard: shard.get(),
                version_read: version_read.get(),
            },
        })
        .collect()
}

/// Write intents, from the wire.
pub fn intents_from_wire(intents: Vec<WireIntent>) -> Result<Vec<WriteIntent>, String> {
    intents
        .into_iter()
        .map(|i| {
            Ok(match i {
                WireIntent::Put { id, shard, version_read, doc } => WriteIntent::Put {
                    id,
                    shard: shard_from_wire(shard)?,
                    version_read: version_read.map(DocVersion::new),
                    doc: serde_json::from_str(&doc).map_err(|e| format!("bad intent: {e}"))?,
                },
                WireIntent::Delete { id, shard, version_read } => WriteIntent::Delete {
                    id,
                    shard: shard_from_wire(shard)?,
                    version_read: DocVersion::new(version_read),
                },
            })
        })
        .collect()
}

fn agg_to_wire(a: &AggState) -> WireAgg {
    match a {
        AggState::Count(n) => WireAgg::Count(*n),
        AggState::SumInt(v) => WireAgg::SumInt(*v),
        AggState::SumFloat(v) => WireAgg::SumFloat(*v),
        AggState::Min(d) => WireAgg::Min(d.as_ref().map(datum_to_wire)),
        AggState::Max(d) => WireAgg::Max(d.as_ref().map(datum_to_wire)),
        AggState::Avg { sum, count } => WireAgg::Avg { sum: *sum, count: *count },
        AggState::Distinct(seen) => {
            WireAgg::CountDistinct(seen.iter().map(|v| datum_to_wire(&v.0)).collect())
        }
        AggState::Collect(items) => WireAgg::Collect(
            items
                .iter()
                .map(|c| WireCollected {
                    keys: c.keys.iter().map(datum_to_wire).collect(),
                    value: datum_to_wire(&c.value),
                    extra: datum_to_wire(&c.extra),
                })
                .collect(),
        ),
    }
}

fn agg_from_wire(a: WireAgg) -> Result<AggState, String> {
    Ok(match a {
        WireAgg::Count(n) => AggState::Count(n),
        WireAgg::SumInt(v) => AggState::SumInt(v),
        WireAgg::SumFloat(v) => AggState::SumFloat(v),
        WireAgg::Min(d) => AggState::Min(d.map(datum_from_wire).transpose()?),
        WireAgg::Max(d) => AggState::Max(d.map(datum_from_wire).transpose()?),
        WireAgg::Avg { sum, count } => AggState::Avg { sum, count },
        WireAgg::CountDistinct(values) => {
            if values.len() > query::limits::DISTINCT_VALUES_MAX {
                return Err(format!(
                    "{} distinct values in one count(DISTINCT …), over the limit of {}",
                    values.len(),
                    query::limits::DISTINCT_VALUES_MAX
                ));
            }
            let seen = values
                .into_iter()
                .map(|d| datum_from_wire(d).map(query::types::OrdDatum))
                .collect::<Result<_, _>>()?;
            AggState::Distinct(seen)
        }
        WireAgg::Collect(items) => AggState::Collect(
            items
                .into_iter()
                .map(|c| {
                    Ok(query::Collected {
                        keys: c.keys.into_iter().map(datum_from_wire).collect::<Result<_, _>>()?,
                        value: datum_from_wire(c.value)?,
                        extra: datum_from_wire(c.extra)?,
                    })
                })
                .collect::<Result<_, String>>()?,
        ),
    })
}

/// Partial results for the wire.
pub fn partials_to_wire(partials: &[query::Partial]) -> Vec<WirePartial> {
    partials
        .iter()
        .map(|p| match &p.body {
            PartialBody::Rows(rows) => WirePartial {
                rows_scanned: p.rows_scanned,
                rows: rows
                    .iter()
                    .map(|r| WireRow {
                        id: r.id.clone(),
                        values: datums_to_wire(&r.values),
                        keys: datums_to_wire(&r.keys),
                    })
                    .collect(),
                groups: Vec::new(),
                grouped: false,
            },
            PartialBody::Groups(groups) => WirePartial {
                rows_scanned: p.rows_scanned,
                rows: Vec::new(),
                groups: groups
                    .iter()
                    .map(|g| WireGroup {
                        key: datums_to_wire(&g.key),
                        states: g.states.iter().map(agg_to_wire).collect(),
                    })
                    .collect(),
                grouped: true,
            },
        })
        .collect()
}

/// Partial results from the wire.
pub fn partials_from_wire(partials: Vec<WirePartial>) -> Result<Vec<query::Partial>, String> {
    partials
        .into_iter()
        .map(|p| {
            let body = if p.grouped {
                PartialBody::Groups(
                    p.groups
                        .into_iter()
                        .map(|g| {
                            Ok(GroupPartial {
                                key: datums_from_wire(g.key)?,
                                states: g
                                    .states
                                    .into_iter()
                                    .map(agg_from_wire)
                                    .collect::<Result<_, String>>()?,
                            })
                        })
                        .collect::<Result<_, String>>()?,
                )
            } else {
                PartialBody::Rows(
                    p.rows
                        .into_iter()
                        .map(|r| {
                            Ok(PartialRow {
                                id: r.id,
                                values: datums_from_wire(r.values)?,
                                keys: datums_from_wire(r.keys)?,
                            })
                        })
                        .collect::<Result<_, String>>()?,
                )
            };
            Ok(query::Partial { rows_scanned: p.rows_scanned, body })
        })
        .collect()
}

// ---- the connection --------------------------------------------------------------------------

/// A data connection after its handshake.
struct DataConn {
    stream: TcpStream,
    last_used: Instant,
    /// Bytes received and not decoded yet (a frame's header is checked as soon as it is here).
    pending: Vec<u8>,
}

impl DataConn {
    async fn send(&mut self, message: &DataMessage) -> Result<(), String> {
        let frames = encode_data_message(message).map_err(|e| e.to_string())?;
        self.send_frames(&frames).await
    }

    /// Sends encoded frames ([`encode_data_message`]'s output).
    async fn send_frames(&mut self, frames: &[u8]) -> Result<(), String> {
        self.stream.write_all(frames).await.map_err(|e| format!("send: {e}"))
    }

    /// Reads one message, joining its pieces: each frame header's length is checked before
    /// its body is waited for.
    async fn receive(&mut self) -> Result<DataMessage, String> {
        let mut chunk = [0u8; DATA_READ_CHUNK_BYTES];
        let mut pieces = Assembler::default();
        loop {
            match decode_data_frame(&self.pending) {
                Ok(Some((frame, used))) => {
                    self.pending.drain(..used);
                    if let Some(message) = pieces.push(frame).map_err(|e| e.to_string())? {
                        return Ok(message);
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
            let n = self.stream.read(&mut chunk).await.map_err(|e| format!("receive: {e}"))?;
            if n == 0 {
                return Err("receive: the other side closed the connection".into());
            }
            self.pending.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    }
}

/// Bytes of one socket read on a data connection.
const DATA_READ_CHUNK_BYTES: usize = 16 * 1024;

/// The startup packet that opens a data connection (length 8, the internal code).
fn startup_packet() -> [u8; 8] {
    let mut p = [0u8; 8];
    p[..4].copy_from_slice(&8i32.to_be_bytes());
    p[4..].copy_from_slice(&crate::pg::frame::PEER_DATA_CODE.to_be_bytes());
    p
}

/// This node's `Hello`, from the published view.
fn hello() -> Option<Hello> {
    let view = crate::cluster::view()?;
    let me = view.members.iter().find(|m| m.this)?;
    Some(Hello {
        cluster: view.cluster.clone(),
        version: PROTOCOL_VERSION,
        peer: Peer {
            node: u64::from(view.me),
            role: me.role,
            peer_addr: me.peer_addr.clone(),
            pg_addr: me.pg_addr.clone(),
            executors: 0,
        },
    })
}

thread_local! {
    /// Idle data connections of this executor, per remote node.
    static POOL: RefCell<HashMap<u32, Vec<DataConn>>> = RefCell::new(HashMap::new());
    /// This executor's core and context, for data connections it accepts.
    static EXECUTOR: RefCell<Option<(Rc<Core>, ExecutorContext<Core>)>> = const { RefCell::new(None) };
}

/// Makes this executor serve data connections (called once per executor of a cluster node).
pub fn install(core: &Rc<Core>, ctx: &ExecutorContext<Core>) {
    EXECUTOR.with(|e| *e.borrow_mut() = Some((Rc::clone(core), ctx.clone())));
}

async fn dial(node: u32) -> Result<DataConn, RegionError> {
    let fail = |reason: String| RegionError::Forward { node, reason };
    let view = crate::cluster::view().ok_or_else(|| fail("not a cluster node".into()))?;
    let member =
        view.members.iter().find(|m| m.node == node).ok_or(RegionError::UnknownNode { node })?;
    let addr: SocketAddr = member.pg_addr.parse().map_err(|_| RegionError::UnknownNode { node })?;
    let mut stream =
        TcpStream::connect_timeout(addr, Duration::from_millis(PEER_CONNECT_TIMEOUT_MS))
            .await
            .map_err(|e| fail(format!("connect to {addr}: {e}")))?;
    stream.set_nodelay(true).map_err(|e| fail(e.to_string()))?;
    let timeout = Some(Duration::from_millis(FORWARD_TIMEOUT_MS));
    stream.set_read_timeout(timeout).map_err(|e| fail(e.to_string()))?;
    stream.set_write_timeout(timeout).map_err(|e| fail(e.to_string()))?;
    stream.write_all(&startup_packet()).await.map_err(|e| fail(format!("send: {e}")))?;
    let mut conn = DataConn { stream, last_used: Instant::now(), pending: Vec::new() };
    let ours = hello().ok_or_else(|| fail("this node is not in its own view yet".into()))?;
    let cluster = ours.cluster.clone();
    conn.send(&DataMessage::Hello(ours)).await.map_err(fail)?;
    match conn.receive().await.map_err(fail)? {
        DataMessage::Hello(theirs) => {
            wire::check_hello(&theirs, &cluster, u64::from(view.me))
                .map_err(|e| fail(e.to_string()))?;
            if theirs.peer.node != u64::from(node) {
                return Err(fail(format!("{addr} is node {}", theirs.peer.node)));
            }
            Ok(conn)
        }
        DataMessage::Refused { reason } => Err(fail(format!("refused: {reason}"))),
        other => Err(fail(format!("sent {} before the handshake", other.kind()))),
    }
}

/// Sends `request` to `node` and returns its answer. A pooled connection that fails before
/// anything was received is replaced by a new one once for a read (`retry_safe`); a write is
/// never sent twice. A request larger than one frame goes in pieces; one past
/// [`DATA_MESSAGE_BYTES_MAX`] is refused before any connection is used
/// (`RegionError::RequestTooLarge`).
pub async fn call(node: u32, request: Request, retry_safe: bool) -> Result<Reply, RegionError> {
    let message = encode_data_message(&DataMessage::Request(request))
        .map_err(|e| request_error(node, e, DATA_MESSAGE_BYTES_MAX))?;
    let pooled = POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.entry(node).or_default();
        while let Some(c) = list.pop() {
            if c.last_used.elapsed() < Duration::from_millis(DATA_CONN_IDLE_MS / 2)
                && quiet(&c.stream)
            {
                return Some(c);
            }
            cov_mark::hit!(forward_pool_drops_closed_connection);
        }
        None
    });
    let (mut conn, fresh) = match pooled {
        Some(c) => (c, false),
        None => (dial(node).await?, true),
    };
    let reply = match exchange(&mut conn, &message).await {
        Ok(r) => r,
        Err(_) if !fresh && retry_safe => {
            conn = dial(node).await?;
            exchange(&mut conn, &message)
                .await
                .map_err(|reason| RegionError::Forward { node, reason })?
        }
        Err(reason) => return Err(RegionError::Forward { node, reason }),
    };
    conn.last_used = Instant::now();
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.entry(node).or_default();
        if list.len() < DATA_POOL_IDLE_MAX {
            list.push(conn);
        }
    });
    Ok(reply)
}

/// What a request that cannot be encoded is to the statement: past `max` a limit (54000).
fn request_error(node: u32, e: WireError, max: usize) -> RegionError {
    match e {
        WireError::Encode { len, .. } if len > max => {
            RegionError::RequestTooLarge { node, bytes: len, max }
        }
        other => RegionError::Forward { node, reason: other.to_string() },
    }
}

/// Whether an idle connection has nothing to read: an owner that closed it (restart, idle
/// timeout) makes it readable (EOF), and a write sent on it would be lost with an unknown
/// outcome; such a connection is dropped instead of reused.
fn quiet(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut fd =
        libc::pollfd { fd: stream.as_raw_fd(), events: libc::POLLIN | libc::POLLRDHUP, revents: 0 };
    // SAFETY: `fd` is one valid pollfd for the call; the stream keeps the descriptor open.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready == 0
}

async fn exchange(conn: &mut DataConn, frames: &[u8]) -> Result<Reply, String> {
    conn.send_frames(frames).await?;
    match conn.receive().await? {
        DataMessage::Reply(r) => Ok(r),
        other => Err(format!("owner answered {} to a request", other.kind())),
    }
}

/// Serves one accepted data connection (the PostgreSQL listener's hook for `PEER_DATA_CODE`):
/// handshake, then each request runs like a local share on a session of this executor. Any
/// bad frame or refused handshake closes this connection only.
pub fn serve_data_connection(
    stream: TcpStream,
    buffered: bytes::BytesMut,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        if let Err(e) = serve(stream, buffered).await {
            tracing::debug!(error = %e, "data connection closed");
        }
    })
}

async fn serve(stream: TcpStream, buffered: bytes::BytesMut) -> Result<(), String> {
    let idle = Some(Duration::from_millis(DATA_CONN_IDLE_MS));
    stream.set_read_timeout(idle).map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(Duration::from_millis(FORWARD_TIMEOUT_MS)))
        .map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let Some((core, ctx)) = EXECUTOR.with(|e| e.borrow().clone()) else {
        return Err("this executor serves no data connections".into());
    };
    let mut conn = DataConn { stream, last_used: Instant::now(), pending: buffered.to_vec() };
    let first = conn.receive().await?;
    let ours = hello().ok_or("this node is not in its own view yet")?;
    let DataMessage::Hello(theirs) = first else {
        let reason = format!("sent {} before the handshake", first.kind());
        let _ = conn.send(&DataMessage::Refused { reason: reason.clone() }).await;
        return Err(reason);
    };
    if let Err(e) = wire::check_hello(&theirs, &ours.cluster, ours.peer.node) {
        let _ = conn.send(&DataMessage::Refused { reason: e.to_string() }).await;
        return Err(e.to_string());
    }
    let me = ours.peer.node;
    conn.send(&DataMessage::Hello(ours)).await?;
    let mut session = Session::new(core, ctx);
    loop {
        let request = match conn.receive().await {
            Ok(DataMessage::Request(r)) => r,
            Ok(other) => return Err(format!("peer sent {} instead of a request", other.kind())),
            Err(e) => return Err(e),
        };
        let reply = session.serve_forwarded(request).await;
        conn.send_frames(&encode_reply(reply, me)?).await?;
    }
}

/// Encodes an answer; one past [`DATA_MESSAGE_BYTES_MAX`] becomes a 54000 failure naming
/// its size, so the statement fails with a limit instead of a closed connection.
fn encode_reply(reply: Reply, me: u64) -> Result<Vec<u8>, String> {
    encode_reply_in(reply, me, DATA_MESSAGE_BYTES_MAX)
}

fn encode_reply_in(reply: Reply, me: u64, max: usize) -> Result<Vec<u8>, String> {
    match encode_data_message_in(&DataMessage::Reply(reply), max) {
        Ok(frames) => Ok(frames),
        Err(WireError::Encode { len, .. }) if len > max => {
            let failed = Reply::Failed {
                code: "54000".into(),
                message: format!(
                    "the answer of node {me} is {len} bytes, more than one forwarded answer may \
                     carry ({max}); narrow the statement (a WHERE, a LIMIT, fewer columns)"
                ),
            };
            encode_data_message(&DataMessage::Reply(failed)).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn sample_for_seeds() -> Vec<DataMessage> {
        sample()
    }

    // Checks the archived `Share` and `DataMessage` keep their sizes: a larger variant would
    // move the archive's root and change every older message's encoding (box large payloads
    // instead, or bump `PROTOCOL_VERSION`).
    #[test]
    fn compat_archived_share_size() {
        assert_eq!(std::mem::size_of::<rkyv::Archived<Share>>(), 40);
        assert_eq!(std::mem::size_of::<rkyv::Archived<DataMessage>>(), 88);
    }

    fn sample() -> Vec<DataMessage> {
        let datums = vec![
            WireDatum::Null,
            WireDatum::Bool(true),
            WireDatum::Int8(-3),
            WireDatum::Float8(2.5),
            WireDatum::Text("é".into()),
            WireDatum::Json("{\"a\":[1,2]}".into()),
        ];
        vec![
            DataMessage::Request(Request {
                epoch: 7,
                catalog: 2,
                sql: "SELECT * FROM c WHERE id() = $1".into(),
                index: 0,
                params: datums.clone(),
                share: Share::Select {
                    targets: vec![WireTarget {
                        fragment: 3,
                        ranges: vec![WireRange { start: 0, end: 9 }],
                    }],
                },
            }),
            DataMessage::Reply(Reply::Partials(vec![WirePartial {
                rows_scanned: 4,
                rows: vec![WireRow { id: "x".into(), values: datums.clone(), keys: vec![] }],
                groups: vec![WireGroup {
                    key: vec![WireDatum::Text("k".into())],
                    states: vec![
                        WireAgg::Count(2),
                        WireAgg::Avg { sum: 1.0, count: 2 },
                        WireAgg::Min(None),
                        WireAgg::Collect(vec![WireCollected {
                            keys: vec![WireDatum::Int8(1)],
                            value: WireDatum::Text("v".into()),
                            extra: WireDatum::Text(", ".into()),
                        }]),
                    ],
                }],
                grouped: false,
            }])),
            DataMessage::Request(Request {
                epoch: 7,
                catalog: 0,
                sql: "COMMIT".into(),
                index: 0,
                params: Vec::new(),
                share: Share::TxnApply {
                    target: WireTxnTarget {
                        fragment: 1,
                        ranges: Vec::new(),
                        writes: Vec::new(),
                        reads: WireReads {
                            docs: vec![WireRead {
                                collection: "c".into(),
                                key: "k".into(),
                                id: "K".into(),
                                shard: 5,
                                version: 3,
                            }],
                            scans: vec![WireScan {
                                collection: "c".into(),
                                start: 0,
                                end: 9,
                                docs: 1,
                            }],
                        },
                    },
                },
            }),
            DataMessage::Reply(Reply::StaleEpoch { current: 9 }),
            DataMessage::Reply(Reply::Failed { code: "53400".into(), message: "full".into() }),
            DataMessage::Refused { reason: "no".into() },
            DataMessage::Request(Request {
                epoch: 7,
                catalog: 1,
                sql: "SELECT * FROM c".into(),
                index: 0,
                params: Vec::new(),
                share: Share::SelectPage {
                    target: WireTarget {
                        fragment: 2,
                        ranges: vec![WireRange { start: 4, end: 8 }],
                    },
                    after: Some(WirePos { shard: 5, key: "k/1".into() }),
                },
            }),
            DataMessage::Reply(Reply::Page {
                partial: WirePartial {
                    rows_scanned: 3,
                    rows: vec![WireRow { id: "K/2".into(), values: datums.clone(), keys: vec![] }],
                    groups: Vec::new(),
                    grouped: false,
                },
                next: Some(WirePos { shard: 6, key: "k/2".into() }),
            }),
            // A run of one piece: a whole reply's archive.
            DataMessage::Piece {
                bytes: rkyv::to_bytes::<RkyvError>(&DataMessage::Reply(Reply::Written {
                    affected: 1,
                    returning: vec![datums],
                }))
                .unwrap()
                .to_vec(),
                last: true,
            },
            DataMessage::Request(Request {
                epoch: 9,
                catalog: 3,
                sql: "UPDATE c SET n = 1".into(),
                index: 0,
                params: Vec::new(),
                share: Share::TxnWriteAs {
                    targets: vec![WireTxnTarget {
                        fragment: 1,
                        ranges: vec![WireRange { start: 0, end: 3 }],
                        writes: Vec::new(),
                        reads: WireReads::default(),
                    }],
                    read: WireShareRead::AutocommitPaused,
                },
            }),
            DataMessage::Request(Request {
                epoch: 9,
                catalog: 3,
                sql: "UPDATE c SET n = 2".into(),
                index: 0,
                params: Vec::new(),
                share: Share::TxnWritePrepared {
                    targets: vec![WireTxnTarget {
                        fragment: 2,
                        ranges: vec![WireRange { start: 3, end: 6 }],
                        writes: Vec::new(),
                        reads: WireReads::default(),
                    }],
                    txid: 1 << 52,
                },
            }),
        ]
    }

    // Checks every message kind round-trips through a frame, and two frames back to back.
    #[test]
    fn unit_data_frames_round_trip() {
        let mut stream = Vec::new();
        for m in sample() {
            let frame = encode_data_frame(&m).unwrap();
            let (back, used) = decode_data_frame(&frame).unwrap().unwrap();
            assert_eq!(back, m);
            assert_eq!(used, frame.len());
            stream.extend_from_slice(&frame);
        }
        assert_eq!(fuzz_data_frames(&stream), sample().len());
    }

    // Checks bad input: every single-bit flip of a frame is an error or an incomplete frame
    // (never a different message), a truncated frame is incomplete, an oversize header is refused
    // before any body, garbage is an error, bad JSON in a datum and a page position's shard
    // out of range are errors.
    #[test]
    fn unit_data_frames_refuse_bad_input() {
        let m = sample().remove(0);
        let frame = encode_data_frame(&m).unwrap();
        for bit in 0..frame.len() * 8 {
            let mut bad = frame.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            if let Ok(Some((back, _))) = decode_data_frame(&bad) {
                assert_eq!(back, m, "bit {bit} changed the message");
            }
        }
        assert!(matches!(decode_data_frame(&frame[..frame.len() - 1]), Ok(None)));
        let mut huge = frame.clone();
        huge[..4].copy_from_slice(&(PEER_FRAME_BYTES_MAX + 1).to_le_bytes());
        assert!(matches!(decode_data_frame(&huge), Err(WireError::TooLong { .. })));
        let garbage = [8u8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        assert!(decode_data_frame(&garbage).is_err());
        assert!(datum_from_wire(WireDatum::Json("{".into())).is_err());
        let pos = WirePos { shard: 9, key: "k".into() };
        assert_eq!(pos_to_wire(&pos_from_wire(pos.clone()).unwrap()), pos);
        assert!(pos_from_wire(WirePos { shard: u32::MAX, key: "k".into() }).is_err());
    }

    proptest::proptest! {
        // Checks the archive validator itself (past the checksum): a valid frame with random
        // bytes overwritten and its crc recomputed decodes to an error or to a message that
        // round-trips, never a panic; arbitrary bytes likewise.
        #[test]
        fn prop_data_decoder_total_past_crc(
            which in 0usize..5,
            edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..8),
            noise in proptest::collection::vec(proptest::num::u8::ANY, 0..128),
        ) {
            let message = sample().swap_remove(which);
            let mut frame = encode_data_frame(&message).unwrap();
            let body_start = PEER_FRAME_HEADER_BYTES + VERSION_BYTES;
            let body_len = frame.len() - body_start;
            for (at, byte) in edits {
                frame[body_start + at % body_len] = byte;
            }
            let crc = crc32fast::hash(&frame[PEER_FRAME_HEADER_BYTES..]);
            frame[4..8].copy_from_slice(&crc.to_le_bytes());
            if let Ok(Some((m, _))) = decode_data_frame(&frame) {
                // Compared as bytes: an edit may have made a float NaN, never equal to itself.
                let again = encode_data_frame(&m).unwrap();
                let back = decode_data_frame(&again).unwrap().unwrap().0;
                proptest::prop_assert_eq!(encode_data_frame(&back).unwrap(), again);
            }
            let _ = fuzz_data_frames(&frame);
            let _ = fuzz_data_frames(&noise);
        }
    }

    // Checks the pool's liveness test: an idle connection is quiet until its other side closes
    // it, and then it is not reused.
    #[test]
    fn unit_pool_drops_closed_connections() {
        storage::park::run_watched(
            "forward-test",
            glommio::LocalExecutorBuilder::default,
            || async {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let stream = TcpStream::connect(addr).await.unwrap();
                let (other, _) = listener.accept().unwrap();
                assert!(quiet(&stream));
                drop(other);
                // The FIN arrives asynchronously: look until it has (bounded).
                let mut closed = false;
                for _ in 0..10_000 {
                    if !quiet(&stream) {
                        closed = true;
                        break;
                    }
                    glommio::yield_if_needed().await;
                    std::thread::yield_now();
                }
                assert!(closed, "a closed connection must not look quiet");
            },
        )
        .unwrap();
    }

    /// Decodes every frame of `stream` through one assembler, as a connection does.
    fn receive_all(stream: &[u8], max: usize) -> Result<Vec<DataMessage>, WireError> {
        let mut rest = stream;
        let mut pieces = Assembler::default();
        let mut out = Vec::new();
        while let Some((frame, used)) = decode_data_frame(rest)? {
            rest = &rest[used..];
            out.extend(pieces.push_in(frame, max)?);
        }
        assert!(rest.is_empty(), "{} bytes left undecoded", rest.len());
        Ok(out)
    }

    fn big_request(bytes: usize) -> DataMessage {
        DataMessage::Request(Request {
            epoch: 1,
            catalog: 0,
            sql: "x".repeat(bytes),
            index: 0,
            params: vec![WireDatum::Text("é".repeat(3))],
            share: Share::Select { targets: Vec::new() },
        })
    }

    // Checks a message larger than one frame travels as pieces of at most a frame each and
    // comes back whole, between whole messages on the same connection; a small one is still
    // one frame.
    #[test]
    fn unit_large_messages_travel_in_pieces() {
        let big = big_request(PEER_FRAME_BYTES_MAX as usize + 10);
        let frames = encode_data_message(&big).unwrap();
        let small = sample().remove(3);
        let one = encode_data_message(&small).unwrap();
        assert_eq!(one, encode_data_frame(&small).unwrap());
        let mut stream = one.clone();
        stream.extend_from_slice(&frames);
        stream.extend_from_slice(&one);
        let received = receive_all(&stream, DATA_MESSAGE_BYTES_MAX).unwrap();
        assert_eq!(received, vec![small.clone(), big, small]);
        // The big one took three frames (two full pieces and the rest), each under the limit.
        assert_eq!(fuzz_data_frames(&frames), 3);
        let mut rest = &frames[..];
        while let Some((frame, used)) = decode_data_frame(rest).unwrap() {
            assert!(used <= PEER_FRAME_HEADER_BYTES + PEER_FRAME_BYTES_MAX as usize);
            assert!(matches!(frame, DataMessage::Piece { .. }), "{}", frame.kind());
            rest = &rest[used..];
        }
    }

    // Checks the limits and bad runs: a message past the limit is not encoded and is a
    // request error of 54000's kind (before any connection); an answer past it becomes a
    // 54000 failure; a run of pieces past the limit, a whole message inside a run, pieces
    // joining into another piece or into garbage are errors.
    #[test]
    fn unit_piece_limits_and_bad_runs() {
        let max = PEER_FRAME_BYTES_MAX as usize + 1024;
        let big = big_request(max);
        let Err(e) = encode_data_message_in(&big, max) else { panic!("encoded past the limit") };
        match request_error(4094, e, max) {
            RegionError::RequestTooLarge { node: 4094, bytes, max: m } => {
                assert!(bytes > max, "{bytes}");
                assert_eq!(m, max);
            }
            other => panic!("expected RequestTooLarge, got {other:?}"),
        }
        let reply = Reply::Failed { code: "XX000".into(), message: "y".repeat(max) };
        let frames = encode_reply_in(reply, 2, max).unwrap();
        match receive_all(&frames, max).unwrap().as_slice() {
            [DataMessage::Reply(Reply::Failed { code, message })] => {
                assert_eq!(code, "54000");
                assert!(message.contains("the answer of node 2 is"), "{message}");
            }
            other => panic!("{other:?}"),
        }

        let frames = encode_data_message(&big).unwrap();
        let err = receive_all(&frames, PEER_FRAME_BYTES_MAX as usize).unwrap_err();
        assert!(matches!(err, WireError::Pieces { .. }), "{err}");

        let piece = |bytes: &[u8], last| {
            encode_data_frame(&DataMessage::Piece { bytes: bytes.to_vec(), last }).unwrap()
        };
        let whole = encode_data_frame(&sample().remove(3)).unwrap();
        let interrupted = [piece(b"abc", false), whole.clone()].concat();
        let err = receive_all(&interrupted, max).unwrap_err();
        assert!(matches!(err, WireError::Pieces { .. }), "{err}");

        let inner =
            rkyv::to_bytes::<RkyvError>(&DataMessage::Piece { bytes: vec![1, 2, 3], last: true })
                .unwrap();
        let (a, b) = inner.split_at(inner.len() / 2);
        let nested = [piece(a, false), piece(b, true)].concat();
        let err = receive_all(&nested, max).unwrap_err();
        assert!(matches!(err, WireError::Pieces { .. }), "{err}");

        let garbage = [piece(&[7; 40], false), piece(&[9; 3], true)].concat();
        let err = receive_all(&garbage, max).unwrap_err();
        assert!(matches!(err, WireError::Archive { .. }), "{err}");
        assert_eq!(fuzz_data_frames(&[garbage, whole].concat()), 3);
    }

    // Checks a transaction's state survives the wire exactly: buffered writes (a put, a
    // delete), read versions and write intents; a shard out of range is an error.
    #[test]
    fn unit_txn_state_round_trips() {
        let shard = router::ShardId::new(7).unwrap();
        let mut writes = FragmentWrites::default();
        writes.docs.insert(
            ("c".into(), "a".into()),
            Buffered {
                id: "A".into(),
                shard,
                base: storage::Version::new(3),
                doc: Some(serde_json::json!({"b": 1})),
            },
        );
        writes.docs.insert(
            ("c".into(), "d".into()),
            Buffered { id: "d".into(), shard, base: storage::Version::ABSENT, doc: None },
        );
        let back = writes_from_wire(writes_to_wire(Some(&writes))).unwrap();
        assert_eq!(back.docs, writes.docs);
        let reads = Reads {
            docs: vec![ReadRecord {
                collection: "c".into(),
                key: "x".into(),
                id: "X".into(),
                shard,
                version: storage::Version::new(9),
            }],
            scans: vec![ScanRecord {
                collection: "c".into(),
                range: router::ShardRange::new(10, 20).unwrap(),
                docs: 3,
            }],
        };
        let back = reads_from_wire(reads_to_wire(&reads.docs, &reads.scans)).unwrap();
        assert_eq!(format!("{back:?}"), format!("{reads:?}"));
        let intents = vec![
            WriteIntent::Put {
                id: "a".into(),
                shard,
                version_read: Some(DocVersion::new(2)),
                doc: serde_json::json!({"z": [1]}),
            },
            WriteIntent::Put {
                id: "n".into(),
                shard,
                version_read: None,
                doc: serde_json::json!({}),
            },
            WriteIntent::Delete { id: "d".into(), shard, version_read: DocVersion::new(4) },
        ];
        assert_eq!(intents_from_wire(intents_to_wire(&intents)).unwrap(), intents);
        let mut bad = reads_to_wire(&reads.docs, &reads.scans);
        bad.docs[0].shard = u32::MAX;
        assert!(reads_from_wire(bad).is_err());
        let mut bad = reads_to_wire(&reads.docs, &reads.scans);
        bad.scans[0].end = u32::MAX;
        assert!(reads_from_wire(bad).is_err(), "a scanned range past the last shard");
    }

    // Checks partials survive the wire exactly (rows with keys, groups with every state).
    #[test]
    fn unit_partials_round_trip() {
        let partials = vec![
            query::Partial {
                rows_scanned: 5,
                body: PartialBody::Rows(vec![PartialRow {
                    id: "a".into(),
                    values: vec![Datum::Int8(1), Datum::Json(serde_json::json!({"x": [1, "y"]}))],
                    keys: vec![Datum::Float8(0.5)],
                }]),
            },
            query::Partial {
                rows_scanned: 2,
                body: PartialBody::Groups(vec![GroupPartial {
                    key: vec![Datum::Null],
                    states: vec![
                        AggState::Count(3),
                        AggState::SumInt(Some(7)),
                        AggState::SumFloat(None),
                        AggState::Min(Some(Datum::Text("m".into()))),
                        AggState::Max(None),
                        AggState::Avg { sum: 3.5, count: 2 },
                        AggState::Distinct(
                            [
                                Datum::Int8(1),
                                Datum::Text("b".into()),
                                Datum::Json(serde_json::json!([2])),
                            ]
                            .into_iter()
                            .map(query::types::OrdDatum)
                            .collect(),
                        ),
                        AggState::Collect(vec![
                            query::Collected {
                                keys: vec![Datum::Int8(2), Datum::Null],
                                value: Datum::Json(serde_json::json!({"k": [null]})),
                                extra: Datum::Text("key".into()),
                            },
                            query::Collected {
                                keys: vec![Datum::Text("z".into())],
                                value: Datum::Text("v".into()),
                                extra: Datum::Null,
                            },
                        ]),
                    ],
                }]),
            },
        ];
        assert_eq!(partials_from_wire(partials_to_wire(&partials)).unwrap(), partials);
    }
}
#[cfg(test)]
mod seeds {
    use std::path::Path;

    // Checks the checked-in good `data_frame` fuzz seeds are the current encoding of the
    // round-trip sample (seed-0 … seed-9 one message each, seed-stream all of them), so the
    // corpus keeps exercising every message after a layout change. After an intended change,
    // `TESSERA_WRITE_DATA_SEEDS=1 cargo test -p node --lib data_frame_seeds` rewrites them.
    #[test]
    fn data_frame_seeds_are_current() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/data_frame");
        let write = std::env::var_os("TESSERA_WRITE_DATA_SEEDS").is_some();
        let mut stream = Vec::new();
        let mut files = Vec::new();
        for (i, m) in super::tests::sample_for_seeds().iter().enumerate() {
            let frame = super::encode_data_frame(m).expect("encodes");
            stream.extend_from_slice(&frame);
            files.push((format!("seed-{i}"), frame));
        }
        files.push(("seed-stream".to_owned(), stream));
        for (name, bytes) in files {
            let path = dir.join(&name);
            if write {
                std::fs::write(&path, &bytes).expect("writes the seed");
            }
            let on_disk = std::fs::read(&path).expect("reads the seed");
            assert!(on_disk == bytes, "{name} is not the current encoding: regenerate the seeds");
        }
    }
}

//! Fragment handoff over the peer protocol (issue #7 item 5).
//!
//! ```text
//! coordinator                 source A (owner)                 destination B
//!   BeginHandoff (raft, epoch+1: regions buffer the fragment)
//!   HandoffStart ───────────▶ fence (in-flight writes durable)
//!                             ImportBegin ───────────────────▶ create an empty copy
//!                             ImportChunk seq 1.. ───────────▶ import, durable, ImportAck
//!                             ImportEnd ─────────────────────▶ counts match, ImportAck
//!   ◀──────────── HandoffDone
//!   CommitHandoff (raft, epoch+1: B owns it; A deletes its copy once it applied this)
//!   any failure before: AbortHandoff (A unfences, B deletes its partial copy)
//! ```
//!
//! The executor work (fence, export, import, delete) is behind [`FragmentHost`], which the
//! engine implements over its executors through a bounded channel bridge: the control plane
//! (tokio) awaits only the `Send` futures the host returns, never a glommio one. What a node
//! does when the map changes is decided by the pure [`reconcile`]: a fenced copy whose
//! handoff ended is unfenced (abort: still mine) or deleted (commit: not mine), a partial copy
//! whose handoff ended is deleted unless it became mine; a copy of a fragment being handed off
//! from this node is fenced (a source restarted mid-handoff learns it from the map).
//!
//! **Invariant:** the source never unfences or deletes on its own: only the applied map
//! (commit or abort) decides, so at every applied state exactly one node may accept writes.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::cluster::limits::{HANDOFF_CHUNK_ACK_MS, HANDOFFS_INCOMING_MAX};
use crate::cluster::peer::{PeerConn, PeerError};
use crate::cluster::state::ClusterState;
use crate::cluster::wire::{HandoffStart, Hello, Message};

/// A future the control plane awaits for executor work.
pub type HostFuture<T> = Pin<Box<dyn Future<Output = Result<T, HostError>> + Send>>;

/// Why the executors could not do a handoff step.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The fragment is not open on this node.
    #[error("fragment ${fragment} is not open on this node")]
    NotHere {
        /// The fragment.
        fragment: u32,
    },
    /// A chunk does not decode (damaged): nothing of it was written.
    #[error("chunk of fragment ${fragment} is damaged at chunk byte {offset}: {what}")]
    Damaged {
        /// The fragment.
        fragment: u32,
        /// Offset in the chunk of the bad frame.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The step must wait (the data path has not installed the deciding map yet); retried.
    #[error("fragment ${fragment}: {reason}")]
    NotYet {
        /// The fragment.
        fragment: u32,
        /// What it waits for.
        reason: String,
    },
    /// The executors stopped (the node is shutting down).
    #[error("the executors stopped answering handoff requests")]
    Stopped,
    /// Storage failed (I/O, a full disk) or the executors did not answer.
    #[error("fragment ${fragment}: {reason}")]
    Failed {
        /// The fragment.
        fragment: u32,
        /// Why.
        reason: String,
    },
}

/// What handoff needs from the node's executors.
pub trait FragmentHost: Send + Sync {
    /// Stops accepting writes to `fragment` (new ones get "not mine"), then waits until every
    /// write accepted before is durable. Idempotent.
    fn fence(&self, fragment: u32) -> HostFuture<()>;
    /// Accepts writes to `fragment` again (the handoff was aborted). Idempotent.
    fn unfence(&self, fragment: u32) -> HostFuture<()>;
    /// The next chunk of the export stream (`storage::Export::next_chunk`) of `fragment`'s
    /// documents: its whole range (a handoff), or only shards `[start, end)` of it when
    /// `within` is `Some((start, end))` (a split or merge copies sub-ranges). The first call
    /// starts the stream, `None` ends it.
    fn export_next(&self, fragment: u32, within: Option<(u32, u32)>)
    -> HostFuture<Option<Vec<u8>>>;
    /// Creates an empty copy of `fragment` for `[start, end)` on `executor`, deleting any
    /// partial copy first. It serves nothing until the map gives it to this node.
    fn create_empty(&self, fragment: u32, start: u32, end: u32, executor: u32) -> HostFuture<()>;
    /// Imports one export chunk into the copy; durable on `Ok`, which says how many documents.
    fn import(&self, fragment: u32, chunk: Vec<u8>) -> HostFuture<u64>;
    /// Closes and deletes this node's copy of `fragment` (open or only on disk), once the
    /// data path has installed the map of `after_epoch` (so no statement routes to it any
    /// more); before, it fails and the caller retries. Idempotent.
    fn delete(&self, fragment: u32, after_epoch: u64) -> HostFuture<()>;
    /// The fragments this node has a copy of (open or partial).
    fn local(&self) -> HostFuture<Vec<u32>>;
}

static HOST: OnceLock<Arc<dyn FragmentHost>> = OnceLock::new();

/// Installs the node's fragment host (once, by the engine when the data path follows the
/// map). Until then the coordinator begins no handoff and planned moves wait.
pub fn install_host(host: Arc<dyn FragmentHost>) -> bool {
    HOST.set(host).is_ok()
}

/// The installed host, if any.
pub fn host() -> Option<Arc<dyn FragmentHost>> {
    HOST.get().cloned()
}

/// Fragments the data path fenced when it opened them (see `fence_at_open`), not yet known
/// to the control plane's `reconcile`.
static FENCED_AT_OPEN: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Whether the data path must fence `fragment` as it opens it on node `me`: the published map
/// shows a handoff of it from this node, or a split or merge of it on this node, in flight (a source restarted mid-handoff must not
/// take writes before the handoff's commit or abort is applied). Records it for `reconcile`,
/// which unfences it after an abort. Called by `cluster::region` on the executors.
pub fn fence_at_open(fragment: u32, me: u32) -> bool {
    let Some(view) = crate::cluster::view() else { return false };
    let reshaping = view
        .reshapes
        .iter()
        .any(|r| r.sources.contains(&fragment) && r.targets.first().is_some_and(|t| t.node == me));
    match view.fragment_state(fragment) {
        _ if reshaping => {
            FENCED_AT_OPEN.lock().unwrap_or_else(PoisonError::into_inner).insert(fragment);
            true
        }
        crate::cluster::state::FragmentState::HandingOff { from, .. } if from == me => {
            FENCED_AT_OPEN.lock().unwrap_or_else(PoisonError::into_inner).insert(fragment);
            true
        }
        _ => false,
    }
}

/// The fragments fenced at open since the last call.
pub fn take_fenced_at_open() -> BTreeSet<u32> {
    std::mem::take(&mut *FENCED_AT_OPEN.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Why a handoff failed (the coordinator aborts it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandoffError {
    /// The executors failed a step.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The destination could not be reached or the conversation broke.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// The destination refused a step.
    #[error("destination refused handoff {handoff}: {reason}")]
    Refused {
        /// The handoff id.
        handoff: u64,
        /// Its reason.
        reason: String,
    },
    /// The destination answered something else than the acknowledgement expected.
    #[error("destination answered {got} where import-ack of chunk {seq} was expected")]
    Unexpected {
        /// The chunk acknowledged.
        seq: u64,
        /// What came.
        got: String,
    },
    /// This node's applied map does not have this handoff in flight (stale or not yet seen).
    #[error("handoff {handoff} of fragment ${fragment} is not in flight here: {why}")]
    NotInFlight {
        /// The handoff id.
        handoff: u64,
        /// The fragment.
        fragment: u32,
        /// What the map says.
        why: String,
    },
}

/// Test-only crash points of a handoff, armed by `TESSERA_HANDOFF_FAULT` (in the style of
/// `engine::coordinator::fault`): the process aborts at the named step, like a power cut.
pub mod fault {
    use std::sync::OnceLock;

    /// The crash points.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Fault {
        /// The source, after the destination acknowledged chunk `k` (`source-after-chunk:k`).
        SourceAfterChunk(u64),
        /// The destination, after chunk `k` is durable, before acknowledging it
        /// (`destination-after-chunk:k`).
        DestinationAfterChunk(u64),
        /// The coordinator, on `HandoffDone`, before proposing the commit
        /// (`coordinator-after-done`).
        CoordinatorAfterDone,
        /// The source, after applying the commit, before deleting its copy
        /// (`source-before-delete`).
        SourceBeforeDelete,
        /// The owner of a split or merge, once every new fragment is durable, before telling
        /// the coordinator (`reshape-after-build`).
        ReshapeAfterBuild,
    }

    static ARMED: OnceLock<Option<Fault>> = OnceLock::new();

    /// The armed fault, read once.
    pub fn armed() -> Option<Fault> {
        *ARMED.get_or_init(|| {
            let v = std::env::var("TESSERA_HANDOFF_FAULT").ok()?;
            let chunk = |prefix: &str| v.strip_prefix(prefix).and_then(|k| k.parse().ok());
            let fault = match v.as_str() {
                "coordinator-after-done" => Some(Fault::CoordinatorAfterDone),
                "source-before-delete" => Some(Fault::SourceBeforeDelete),
                "reshape-after-build" => Some(Fault::ReshapeAfterBuild),
                _ => chunk("source-after-chunk:").map(Fault::SourceAfterChunk).or_else(|| {
                    chunk("destination-after-chunk:").map(Fault::DestinationAfterChunk)
                }),
            };
            if fault.is_none() {
                tracing::warn!(value = %v, "TESSERA_HANDOFF_FAULT not understood; no fault armed");
            }
            fault
        })
    }

    /// Aborts the process if `point` is the armed fault.
    pub fn hit(point: Fault) {
        if armed() == Some(point) {
            tracing::warn!(
                ?point,
                "TESSERA_HANDOFF_FAULT: aborting the process (test-only fault hook)"
            );
            std::process::abort();
        }
    }
}

/// What the source sent, once the destination acknowledged all of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Chunks.
    pub chunks: u64,
    /// Stream bytes.
    pub bytes: u64,
    /// Documents the destination imported.
    pub docs: u64,
}

/// Checks `state` has handoff `handoff` of `fragment` in flight with this node on the
/// `side` it claims (`from` for the source, `to` for the destination).
pub fn check_in_flight(
    state: &ClusterState,
    handoff: u64,
    fragment: u32,
    me: u32,
    source: bool,
) -> Result<(), HandoffError> {
    let not = |why: String| HandoffError::NotInFlight { handoff, fragment, why };
    let Some(h) = state.handoff_of(fragment) else {
        return Err(not(format!("no handoff of it at epoch {}", state.epoch)));
    };
    if h.id != handoff {
        return Err(not(format!("handoff {} is in flight instead", h.id)));
    }
    let side = if source { h.from } else { h.to };
    if side != me {
        let role = if source { "source" } else { "destination" };
        return Err(not(format!("its {role} is node {side}, not node {me}")));
    }
    Ok(())
}

/// The source's side: fences the fragment, streams its export to the destination chunk by
/// chunk (each acknowledged durable before the next is sent) and returns what was sent.
/// On failure the fragment stays fenced: the coordinator's abort, once applied, unfences it.
/// `fenced` records the fragments this node fenced (for `reconcile`).
pub async fn run_source(
    host: &dyn FragmentHost,
    hello: &Hello,
    start: &HandoffStart,
    fenced: &Mutex<BTreeSet<u32>>,
) -> Result<Sent, HandoffError> {
    let fragment = start.fragment;
    let handoff = start.handoff;
    fenced.lock().unwrap_or_else(PoisonError::into_inner).insert(fragment);
    host.fence(fragment).await?;
    let mut conn = PeerConn::dial(&start.to_addr, hello).await?;
    let begin = Message::ImportBegin {
        handoff,
        fragment,
        start: start.start,
        end: start.end,
        executor: start.to_executor,
    };
    let mut sent = Sent::default();
    expect_ack(conn.request_within(&begin, HANDOFF_CHUNK_ACK_MS).await?, handoff, 0)?;
    while let Some(bytes) = host.export_next(fragment, None).await? {
        let len = bytes.len() as u64;
        let seq = sent.chunks + 1;
        let chunk = Message::ImportChunk { handoff, fragment, seq, offset: sent.bytes, bytes };
        sent.docs =
            expect_ack(conn.request_within(&chunk, HANDOFF_CHUNK_ACK_MS).await?, handoff, seq)?;
        sent.chunks = seq;
        sent.bytes += len;
        fault::hit(fault::Fault::SourceAfterChunk(seq));
    }
    let end = Message::ImportEnd { handoff, fragment, chunks: sent.chunks, bytes: sent.bytes };
    sent.docs =
        expect_ack(conn.request_within(&end, HANDOFF_CHUNK_ACK_MS).await?, handoff, sent.chunks)?;
    Ok(sent)
}

/// The owner's side of a split or merge (all on this node): fences the sources (in-flight
/// writes durable), creates each target empty (discarding a partial copy of an earlier
/// attempt) and imports into it the export of every source's documents in the target's
/// shards; returns the documents copied, every one durable. On failure the sources stay
/// fenced: the coordinator's abort, once applied, unfences them and `reconcile` deletes the
/// partial targets. `fenced` records what this node fenced (sources and targets, for
/// `reconcile`, which unfences the targets once the commit gives them to this node).
pub async fn run_reshape(
    host: &dyn FragmentHost,
    reshape: &crate::cluster::state::Reshape,
    sources: &[crate::cluster::state::FragmentEntry],
    fenced: &Mutex<BTreeSet<u32>>,
) -> Result<u64, HostError> {
    for source in sources {
        fenced.lock().unwrap_or_else(PoisonError::into_inner).insert(source.id);
        host.fence(source.id).await?;
    }
    let mut docs = 0;
    for target in &reshape.targets {
        fenced.lock().unwrap_or_else(PoisonError::into_inner).insert(target.id);
        host.create_empty(target.id, target.start, target.end, target.executor).await?;
        for source in sources {
            let (start, end) = (source.start.max(target.start), source.end.min(target.end));
            if start >= end {
                continue;
            }
            while let Some(chunk) = host.export_next(source.id, Some((start, end))).await? {
                docs += host.import(target.id, chunk).await?;
            }
        }
    }
    fault::hit(fault::Fault::ReshapeAfterBuild);
    Ok(docs)
}

fn expect_ack(answer: Message, handoff: u64, seq: u64) -> Result<u64, HandoffError> {
    match answer {
        Message::ImportAck { handoff: h, seq: s, docs } if h == handoff && s == seq => Ok(docs),
        Message::ImportRefused { reason, .. } => Err(HandoffError::Refused { handoff, reason }),
        other => Err(HandoffError::Unexpected {
            seq,
            got: format!("{other:?}").chars().take(120).collect(),
        }),
    }
}

/// A copy being received: where its stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// The handoff id.
    pub handoff: u64,
    /// The next chunk expected.
    pub next_seq: u64,
    /// Stream bytes received and durable.
    pub offset: u64,
    /// Documents imported.
    pub docs: u64,
}

/// Why the destination refuses a chunk (the pure checks of `Incoming`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkRefusal {
    /// No `ImportBegin` of this handoff came (or the node restarted since).
    #[error("no import of handoff {handoff} for fragment ${fragment} is open here")]
    NotOpen {
        /// The handoff.
        handoff: u64,
        /// The fragment.
        fragment: u32,
    },
    /// The chunk is not the next one.
    #[error(
        "chunk {got} of handoff {handoff} is out of order: chunk {expected} at stream offset {offset} expected"
    )]
    OutOfOrder {
        /// The handoff.
        handoff: u64,
        /// The chunk expected.
        expected: u64,
        /// The chunk received.
        got: u64,
        /// The stream offset expected.
        offset: u64,
    },
    /// The chunk does not start where the stream is.
    #[error("chunk {seq} of handoff {handoff} starts at stream offset {got}, {expected} expected")]
    Offset {
        /// The handoff.
        handoff: u64,
        /// The chunk.
        seq: u64,
        /// The offset expected.
        expected: u64,
        /// The offset received.
        got: u64,
    },
    /// The end does not match what arrived.
    #[error(
        "handoff {handoff} ended after {chunks} chunks of {bytes} bytes, {got_chunks} chunks of {got_bytes} bytes arrived"
    )]
    Incomplete {
        /// The handoff.
        handoff: u64,
        /// Chunks announced.
        chunks: u64,
        /// Bytes announced.
        bytes: u64,
        /// Chunks received.
        got_chunks: u64,
        /// Bytes received.
        got_bytes: u64,
    },
    /// Too many imports at once.
    #[error("{max} imports are open on this node, the most allowed")]
    Busy {
        /// `HANDOFFS_INCOMING_MAX`.
        max: usize,
    },
}

impl Incoming {
    /// A fresh stream of `handoff`.
    pub fn new(handoff: u64) -> Incoming {
        Incoming { handoff, next_seq: 1, offset: 0, docs: 0 }
    }

    /// Checks chunk `seq` at `offset` is the next one.
    pub fn check_chunk(
        &self,
        fragment: u32,
        handoff: u64,
        seq: u64,
        offset: u64,
    ) -> Result<(), ChunkRefusal> {
        if handoff != self.handoff {
            return Err(ChunkRefusal::NotOpen { handoff, fragment });
        }
        if seq != self.next_seq {
            return Err(ChunkRefusal::OutOfOrder {
                handoff,
                expected: self.next_seq,
                got: seq,
                offset: self.offset,
            });
        }
        if offset != self.offset {
            return Err(ChunkRefusal::Offset { handoff, seq, expected: self.offset, got: offset });
        }
        Ok(())
    }

    /// Records a chunk of `len` bytes and `docs` documents as durable.
    pub fn accepted(&mut self, len: u64, docs: u64) {
        self.next_seq += 1;
        self.offset += len;
        self.docs += docs;
    }

    /// Checks the announced end matches what arrived.
    pub fn check_end(&self, chunks: u64, bytes: u64) -> Result<(), ChunkRefusal> {
        let got_chunks = self.next_seq - 1;
        if chunks != got_chunks || bytes != self.offset {
            return Err(ChunkRefusal::Incomplete {
                handoff: self.handoff,
                chunks,
                bytes,
                got_chunks,
                got_bytes: self.offset,
            });
        }
        Ok(())
    }
}

/// The destination's bookkeeping: imports open, by fragment.
#[derive(Debug, Default)]
pub struct Receiver {
    open: Mutex<BTreeMap<u32, Incoming>>,
}

impl Receiver {
    /// The imports open now (fragment, handoff).
    pub fn open(&self) -> BTreeMap<u32, u64> {
        self.lock().iter().map(|(f, i)| (*f, i.handoff)).collect()
    }

    /// Forgets the import of `fragment` (its handoff ended).
    pub fn forget(&self, fragment: u32) {
        self.lock().remove(&fragment);
    }

    /// Forgets every import whose handoff is no longer in flight in `state`.
    pub fn forget_ended(&self, state: &ClusterState) {
        self.lock().retain(|f, i| state.handoff_of(*f).is_some_and(|h| h.id == i.handoff));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Incoming>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers one import request (`ImportBegin`, `ImportChunk`, `ImportEnd`) given this
    /// node's applied state: the handoff must be in flight to this node. One source talks to
    /// one import over one connection, so requests of one import never overlap.
    pub async fn serve(
        &self,
        host: &dyn FragmentHost,
        state: &ClusterState,
        me: u32,
        request: Message,
    ) -> Message {
        let (handoff, result) = match request {
            Message::ImportBegin { handoff, fragment, start, end, executor } => (
                handoff,
                self.begin(host, state, me, handoff, fragment, start, end, executor).await,
            ),
            Message::ImportChunk { handoff, fragment, seq, offset, bytes } => {
                (handoff, self.chunk(host, state, me, handoff, fragment, seq, offset, bytes).await)
            }
            Message::ImportEnd { handoff, fragment, chunks, bytes } => {
                let r = self
                    .lock()
                    .get(&fragment)
                    .copied()
                    .ok_or_else(|| ChunkRefusal::NotOpen { handoff, fragment }.to_string())
                    .and_then(|i| {
                        i.check_end(chunks, bytes).map_err(|e| e.to_string())?;
                        Ok((chunks, i.docs))
                    });
                (handoff, r)
            }
            other => (0, Err(format!("{} is not an import request", other.kind()))),
        };
        match result {
            Ok((seq, docs)) => Message::ImportAck { handoff, seq, docs },
            Err(reason) => Message::ImportRefused { handoff, reason },
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn begin(
        &self,
        host: &dyn FragmentHost,
        state: &ClusterState,
        me: u32,
        handoff: u64,
        fragment: u32,
        start: u32,
        end: u32,
        executor: u32,
    ) -> Result<(u64, u64), String> {
        check_in_flight(state, handoff, fragment, me, false).map_err(|e| e.to_string())?;
        {
            let mut open = self.lock();
            if !open.contains_key(&fragment) && open.len() >= HANDOFFS_INCOMING_MAX {
                return Err(ChunkRefusal::Busy { max: HANDOFFS_INCOMING_MAX }.to_string());
            }
            // A retried begin of the same handoff starts over: the copy is recreated empty.
            open.insert(fragment, Incoming::new(handoff));
        }
        if let Err(e) = host.create_empty(fragment, start, end, executor).await {
            self.forget(fragment);
            return Err(e.to_string());
        }
        Ok((0, 0))
    }

    #[allow(clippy::too_many_arguments)]
    async fn chunk(
        &self,
        host: &dyn FragmentHost,
        state: &ClusterState,
        me: u32,
        handoff: u64,
        fragment: u32,
        seq: u64,
        offset: u64,
        bytes: Vec<u8>,
    ) -> Result<(u64, u64), String> {
        check_in_flight(state, handoff, fragment, me, false).map_err(|e| e.to_string())?;
        let incoming = self.lock().get(&fragment).copied();
        let incoming =
            incoming.ok_or_else(|| ChunkRefusal::NotOpen { handoff, fragment }.to_string())?;
        incoming.check_chunk(fragment, handoff, seq, offset).map_err(|e| e.to_string())?;
        let len = bytes.len() as u64;
        let docs = host.import(fragment, bytes).await.map_err(|e| match e {
            HostError::Damaged { offset: at, what, .. } => format!(
                "chunk {seq} of handoff {handoff} is damaged at stream offset {}: {what}",
                offset + at
            ),
            other => other.to_string(),
        })?;
        let mut open = self.lock();
        let Some(i) = open.get_mut(&fragment).filter(|i| i.handoff == handoff) else {
            return Err(ChunkRefusal::NotOpen { handoff, fragment }.to_string());
        };
        i.accepted(len, docs);
        fault::hit(fault::Fault::DestinationAfterChunk(seq));
        Ok((seq, i.docs))
    }
}

/// What a node must do to its local copies after applying a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Fence it: a handoff from this node is in flight (a restarted source learns it here).
    Fence(u32),
    /// Unfence it: it is this node's and nothing moves or reshapes it any more (a handoff or
    /// reshape from it was aborted, or a handoff to it committed: the new copy stays fenced
    /// until then).
    Unfence(u32),
    /// Delete this node's copy: the map gives it to another node and no handoff to this node
    /// is in flight (the source after a commit, a destination after an abort, a leftover
    /// partial copy after a restart).
    Delete(u32),
}

/// The pure decision of what to do with local copies: `local` is every fragment this node
/// has a copy of, `fenced` those it fenced for a handoff. Deterministic, in fragment order.
///
/// Splits and merges (`ClusterState::reshapes`) follow the same rules: a source of a reshape
/// in flight is fenced; a target being built on this node is kept; after the commit the
/// sources are no longer in the map (deleted) and the targets are this node's; after an abort
/// the targets are in no map and no reshape (deleted) and the sources are unfenced.
pub fn reconcile(
    state: &ClusterState,
    me: u32,
    local: &BTreeSet<u32>,
    fenced: &BTreeSet<u32>,
) -> Vec<Action> {
    let mut actions = Vec::new();
    if !state.allocated() {
        return actions;
    }
    for &fragment in local {
        let owner = state.fragments.iter().find(|f| f.id == fragment).map(|f| f.node);
        let handoff = state.handoff_of(fragment);
        // A target of a split or merge in flight on this node: being built, not in the map yet.
        let building = state
            .reshapes
            .iter()
            .any(|r| r.targets.iter().any(|t| t.id == fragment && t.node == me));
        let incoming = handoff.is_some_and(|h| h.to == me) || building;
        if owner != Some(me) {
            if !incoming {
                actions.push(Action::Delete(fragment));
            }
            continue;
        }
        match handoff {
            _ if state.reshape_of(fragment).is_some() => {
                if !fenced.contains(&fragment) {
                    actions.push(Action::Fence(fragment));
                }
            }
            Some(h) if h.from == me => {
                if !fenced.contains(&fragment) {
                    actions.push(Action::Fence(fragment));
                }
            }
            _ => {
                if fenced.contains(&fragment) {
                    actions.push(Action::Unfence(fragment));
                }
            }
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::state::{Command, Member};
    use crate::cluster::wire::Role;

    fn state() -> ClusterState {
        let mut s = ClusterState::default();
        for node in [1, 2] {
            let member = Member {
                role: Role::Data,
                peer_addr: format!("127.0.0.1:{node}"),
                pg_addr: "127.0.0.1:9".into(),
                executors: 2,
            };
            s.apply(&Command::AddMember { node, member }).expect("added");
        }
        s.apply(&Command::Allocate { owners: vec![1, 1, 2], min_members: 2 }).expect("allocated");
        s
    }

    // Checks chunk sequencing: the next chunk at the right offset is accepted; a repeat, a
    // gap, a wrong offset or another handoff is refused naming the expected offset; the end
    // must match what arrived.
    #[test]
    fn incoming_refuses_out_of_order_chunks() {
        let mut i = Incoming::new(5);
        assert_eq!(i.check_chunk(0, 5, 1, 0), Ok(()));
        i.accepted(100, 3);
        assert_eq!(
            i.check_chunk(0, 5, 1, 0),
            Err(ChunkRefusal::OutOfOrder { handoff: 5, expected: 2, got: 1, offset: 100 })
        );
        assert!(i.check_chunk(0, 5, 3, 100).expect_err("gap").to_string().contains("offset 100"));
        assert_eq!(
            i.check_chunk(0, 5, 2, 90),
            Err(ChunkRefusal::Offset { handoff: 5, seq: 2, expected: 100, got: 90 })
        );
        assert_eq!(
            i.check_chunk(0, 6, 2, 100),
            Err(ChunkRefusal::NotOpen { handoff: 6, fragment: 0 })
        );
        assert_eq!(i.check_end(1, 100), Ok(()));
        assert!(matches!(i.check_end(2, 100), Err(ChunkRefusal::Incomplete { got_chunks: 1, .. })));
        assert!(matches!(
            i.check_end(1, 101),
            Err(ChunkRefusal::Incomplete { got_bytes: 100, .. })
        ));
    }

    // Checks `check_in_flight` accepts only the handoff in flight, on the right side.
    #[test]
    fn in_flight_checks_id_and_side() {
        let mut s = state();
        assert!(check_in_flight(&s, 1, 0, 1, true).is_err(), "nothing in flight");
        s.apply(&Command::BeginHandoff { fragment: 0, to: 2, max_in_flight: 1 }).expect("begun");
        assert!(check_in_flight(&s, 1, 0, 1, true).is_ok());
        assert!(check_in_flight(&s, 1, 0, 2, false).is_ok());
        assert!(check_in_flight(&s, 1, 0, 2, true).is_err(), "2 is not the source");
        assert!(check_in_flight(&s, 2, 0, 1, true).is_err(), "another id");
    }

    // Checks what the owner does with its copies through a split's begin, commit and abort,
    // and after a restart at each step: the source is fenced while the split is in flight and
    // partial targets are kept; after the commit the source is deleted and the targets stay
    // (unfenced); after an abort the targets are deleted and the source is unfenced. Another
    // node deletes nothing it does not have and keeps its own.
    #[test]
    fn reconcile_follows_split_commit_and_abort() {
        let none = BTreeSet::new();
        let mut s = state();
        s.apply(&Command::BeginSplit { fragment: 1, at: None }).expect("begun");
        let r = s.reshape_of(1).expect("in flight").clone();
        let (low, high) = (r.targets[0].id, r.targets[1].id);
        // Begun, nothing built yet, or restarted mid-build with a partial target.
        assert_eq!(reconcile(&s, 1, &BTreeSet::from([0, 1]), &none), [Action::Fence(1)]);
        let building = BTreeSet::from([0, 1, low]);
        assert_eq!(reconcile(&s, 1, &building, &none), [Action::Fence(1)]);
        let fenced = BTreeSet::from([1]);
        assert_eq!(reconcile(&s, 1, &building, &fenced), []);
        assert_eq!(reconcile(&s, 2, &BTreeSet::from([2]), &none), []);
        // Committed: the source goes, both targets are this node's.
        let mut committed = s.clone();
        committed.apply(&Command::CommitReshape { reshape: r.id }).expect("committed");
        let built = BTreeSet::from([0, 1, low, high]);
        assert_eq!(reconcile(&committed, 1, &built, &fenced), [Action::Delete(1)]);
        assert_eq!(reconcile(&committed, 1, &BTreeSet::from([0, low, high]), &none), []);
        // Aborted: partial targets go, the source is writable again.
        let mut aborted = s.clone();
        aborted.apply(&Command::AbortReshape { reshape: r.id }).expect("aborted");
        assert_eq!(
            reconcile(&aborted, 1, &built, &fenced),
            [Action::Unfence(1), Action::Delete(low), Action::Delete(high)]
        );
        assert_eq!(
            reconcile(&aborted, 1, &built, &none),
            [Action::Delete(low), Action::Delete(high)]
        );
    }

    // Checks a merge: both sources fenced in flight, both deleted after the commit, the
    // target kept; a merge on another node changes nothing here.
    #[test]
    fn reconcile_follows_merge_commit() {
        let none = BTreeSet::new();
        let mut s = state();
        s.apply(&Command::BeginMerge { left: 0, right: 1 }).expect("begun");
        let r = s.reshape_of(0).expect("in flight").clone();
        let target = r.targets[0].id;
        let local = BTreeSet::from([0, 1, target]);
        assert_eq!(reconcile(&s, 1, &local, &none), [Action::Fence(0), Action::Fence(1)]);
        assert_eq!(reconcile(&s, 2, &BTreeSet::from([2]), &none), []);
        s.apply(&Command::CommitReshape { reshape: r.id }).expect("committed");
        let fenced = BTreeSet::from([0, 1]);
        assert_eq!(reconcile(&s, 1, &local, &fenced), [Action::Delete(0), Action::Delete(1)]);
        assert_eq!(s.fragments.iter().map(|f| f.id).collect::<Vec<_>>(), [target, 2]);
    }

    // Checks what each side does as the map moves through begin, commit and abort, and after
    // a restart (fenced set empty, a leftover partial copy).
    #[test]
    fn reconcile_follows_commit_and_abort() {
        let none = BTreeSet::new();
        let mut s = state();
        let a_local = BTreeSet::from([0, 1]);
        assert_eq!(reconcile(&s, 1, &a_local, &none), []);
        s.apply(&Command::BeginHandoff { fragment: 0, to: 2, max_in_flight: 1 }).expect("begun");
        // A restarted source fences again; a fenced one does nothing.
        assert_eq!(reconcile(&s, 1, &a_local, &none), [Action::Fence(0)]);
        let fenced = BTreeSet::from([0]);
        assert_eq!(reconcile(&s, 1, &a_local, &fenced), []);
        // The destination keeps its partial copy while the handoff is in flight.
        let b_local = BTreeSet::from([0, 2]);
        assert_eq!(reconcile(&s, 2, &b_local, &none), []);
        let mut aborted = s.clone();
        aborted.apply(&Command::AbortHandoff { fragment: 0, handoff: 1 }).expect("aborted");
        assert_eq!(reconcile(&aborted, 1, &a_local, &fenced), [Action::Unfence(0)]);
        assert_eq!(reconcile(&aborted, 2, &b_local, &none), [Action::Delete(0)]);
        let mut committed = s;
        committed.apply(&Command::CommitHandoff { fragment: 0, handoff: 1 }).expect("committed");
        assert_eq!(reconcile(&committed, 1, &a_local, &fenced), [Action::Delete(0)]);
        assert_eq!(reconcile(&committed, 2, &b_local, &none), []);
        // Nothing is decided before the map exists.
        assert_eq!(reconcile(&ClusterState::default(), 1, &a_local, &fenced), []);
    }

    /// An export stream: fragment, and the sub-range `[start, end)` if not the whole.
    type ExportKey = (u32, Option<(u32, u32)>);

    /// An in-memory host: each fragment is a list of documents (one per chunk byte string);
    /// an export yields them in chunks, an import appends. `damage_at` makes an import of a
    /// chunk starting with that byte fail as damaged at chunk byte 8.
    #[derive(Default)]
    struct MemHost {
        docs: Mutex<BTreeMap<u32, Vec<Vec<u8>>>>,
        exporting: Mutex<BTreeMap<ExportKey, Vec<Vec<u8>>>>,
        fenced: Mutex<BTreeSet<u32>>,
        damage_at: Option<u8>,
    }

    impl MemHost {
        fn with(fragment: u32, chunks: usize) -> MemHost {
            let docs = (0..chunks).map(|i| vec![u8::try_from(i).unwrap_or(0); 16]).collect();
            MemHost { docs: Mutex::new(BTreeMap::from([(fragment, docs)])), ..MemHost::default() }
        }
        fn copy(&self, fragment: u32) -> Option<Vec<Vec<u8>>> {
            self.docs.lock().expect("lock").get(&fragment).cloned()
        }
    }

    fn ready<T: Send + 'static>(r: Result<T, HostError>) -> HostFuture<T> {
        Box::pin(std::future::ready(r))
    }

    impl FragmentHost for MemHost {
        fn fence(&self, fragment: u32) -> HostFuture<()> {
            self.fenced.lock().expect("lock").insert(fragment);
            ready(Ok(()))
        }
        fn unfence(&self, fragment: u32) -> HostFuture<()> {
            self.fenced.lock().expect("lock").remove(&fragment);
            ready(Ok(()))
        }
        fn export_next(
            &self,
            fragment: u32,
            within: Option<(u32, u32)>,
        ) -> HostFuture<Option<Vec<u8>>> {
            // A document's shard is its first byte; one stream per (fragment, range).
            let key = (fragment, within);
            let mut exporting = self.exporting.lock().expect("lock");
            if let std::collections::btree_map::Entry::Vacant(slot) = exporting.entry(key) {
                let Some(docs) = self.copy(fragment) else {
                    return ready(Err(HostError::NotHere { fragment }));
                };
                let inside = |d: &Vec<u8>| {
                    within.is_none_or(|(start, end)| {
                        d.first().is_some_and(|b| (start..end).contains(&u32::from(*b)))
                    })
                };
                let mut docs: Vec<Vec<u8>> = docs.into_iter().filter(inside).collect();
                docs.reverse();
                slot.insert(docs);
            }
            let next = exporting.get_mut(&key).and_then(Vec::pop);
            if next.is_none() {
                exporting.remove(&key);
            }
            ready(Ok(next))
        }
        fn create_empty(&self, fragment: u32, _: u32, _: u32, _: u32) -> HostFuture<()> {
            self.docs.lock().expect("lock").insert(fragment, Vec::new());
            ready(Ok(()))
        }
        fn import(&self, fragment: u32, chunk: Vec<u8>) -> HostFuture<u64> {
            if self.damage_at.is_some() && chunk.first().copied() == self.damage_at {
                let what = "checksum mismatch".to_owned();
                return ready(Err(HostError::Damaged { fragment, offset: 8, what }));
            }
            match self.docs.lock().expect("lock").get_mut(&fragment) {
                Some(docs) => {
                    docs.push(chunk);
                    ready(Ok(1))
                }
                None => ready(Err(HostError::NotHere { fragment })),
            }
        }
        fn delete(&self, fragment: u32, _: u64) -> HostFuture<()> {
            self.docs.lock().expect("lock").remove(&fragment);
            ready(Ok(()))
        }
        fn local(&self) -> HostFuture<Vec<u32>> {
            ready(Ok(self.docs.lock().expect("lock").keys().copied().collect()))
        }
    }

    // Checks a split's build on the owner: the source is fenced, each target receives exactly
    // the source's documents in its shards (none lost, none twice), a second attempt starts the
    // targets over; a merge's target receives both sources' documents in shard order.
    #[test]
    fn run_reshape_copies_sub_ranges() {
        use crate::cluster::state::{FragmentEntry, Reshape};
        let host = MemHost::with(1, 6);
        let entry = |id, start, end| FragmentEntry { id, start, end, node: 1, executor: 0 };
        let split = Reshape {
            id: 1,
            sources: vec![1],
            targets: vec![entry(4, 0, 2), entry(5, 2, 6)],
            begun_at: 2,
        };
        let fenced = Mutex::new(BTreeSet::new());
        let source = [entry(1, 0, 6)];
        let run = || run_reshape(&host, &split, &source, &fenced);
        assert_eq!(futures_lite::future::block_on(run()), Ok(6));
        assert!(host.fenced.lock().expect("lock").contains(&1), "the source is fenced");
        let first = |f| host.copy(f).expect("copy").iter().map(|d| d[0]).collect::<Vec<_>>();
        assert_eq!((first(4), first(5)), (vec![0, 1], vec![2, 3, 4, 5]));
        assert_eq!(futures_lite::future::block_on(run()), Ok(6), "a retry starts over");
        assert_eq!((first(4), first(5)), (vec![0, 1], vec![2, 3, 4, 5]));
        assert_eq!(*fenced.lock().expect("lock"), BTreeSet::from([1, 4, 5]));
        let merge =
            Reshape { id: 2, sources: vec![4, 5], targets: vec![entry(6, 0, 6)], begun_at: 4 };
        let sources = [entry(4, 0, 2), entry(5, 2, 6)];
        let merged = futures_lite::future::block_on(run_reshape(&host, &merge, &sources, &fenced));
        assert_eq!(merged, Ok(6));
        assert_eq!(first(6), [0, 1, 2, 3, 4, 5]);
    }

    fn hello(node: u64) -> Hello {
        Hello {
            cluster: "c".into(),
            version: crate::cluster::wire::PROTOCOL_VERSION,
            peer: crate::cluster::wire::Peer {
                node,
                role: Role::Data,
                peer_addr: "127.0.0.1:1".into(),
                pg_addr: "127.0.0.1:2".into(),
                executors: 2,
            },
        }
    }

    /// A destination listening on loopback: handshake, then every request through `Receiver`.
    async fn destination(host: Arc<MemHost>, state: ClusterState) -> String {
        use crate::cluster::peer::{read_message, write_message};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let shown = addr.clone();
        tokio::spawn(async move {
            let receiver = Receiver::default();
            let (mut s, _) = listener.accept().await.expect("accept");
            let _ = read_message(&mut s, &addr).await;
            write_message(&mut s, &addr, &Message::Hello(hello(2))).await.expect("hello");
            while let Ok(Some(m)) = read_message(&mut s, &addr).await {
                let answer = receiver.serve(host.as_ref(), &state, 2, m).await;
                write_message(&mut s, &addr, &answer).await.expect("answer");
            }
        });
        shown
    }

    fn start(to_addr: String) -> HandoffStart {
        HandoffStart {
            handoff: 1,
            fragment: 0,
            start: 0,
            end: 10,
            to: 2,
            to_addr,
            to_executor: 0,
            epoch: 2,
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
    }

    // Checks a whole transfer over a real socket: the source fences, every chunk arrives in
    // order and is acknowledged, the counts match, and the destination holds the same data.
    #[test]
    fn transfer_over_loopback() {
        rt().block_on(async {
            let mut s = state();
            s.apply(&Command::BeginHandoff { fragment: 0, to: 2, max_in_flight: 1 })
                .expect("begun");
            let a = MemHost::with(0, 5);
            let b = Arc::new(MemHost::default());
            let addr = destination(Arc::clone(&b), s).await;
            let fenced = Mutex::new(BTreeSet::new());
            let sent = run_source(&a, &hello(1), &start(addr), &fenced).await.expect("sent");
            assert_eq!(sent, Sent { chunks: 5, bytes: 80, docs: 5 });
            assert!(a.fenced.lock().expect("lock").contains(&0));
            assert!(fenced.lock().expect("lock").contains(&0));
            assert_eq!(b.copy(0), a.copy(0));
        });
    }

    // Checks an empty fragment hands off as zero chunks, and that a destination whose map does
    // not have the handoff (stale) refuses it at the begin.
    #[test]
    fn empty_transfer_and_stale_refusal() {
        rt().block_on(async {
            let mut s = state();
            s.apply(&Command::BeginHandoff { fragment: 0, to: 2, max_in_flight: 1 })
                .expect("begun");
            let a = MemHost::with(0, 0);
            let b = Arc::new(MemHost::default());
            let addr = destination(Arc::clone(&b), s).await;
            let fenced = Mutex::new(BTreeSet::new());
            let sent = run_source(&a, &hello(1), &start(addr), &fenced).await.expect("sent");
            assert_eq!(sent, Sent::default());
            assert_eq!(b.copy(0), Some(vec![]));
            let b = Arc::new(MemHost::default());
            let addr = destination(Arc::clone(&b), state()).await;
            let e = run_source(&a, &hello(1), &start(addr), &fenced).await.expect_err("stale");
            assert!(e.to_string().contains("not in flight"), "{e}");
            assert_eq!(b.copy(0), None, "nothing was created");
        });
    }

    // Checks a damaged chunk is refused naming its stream offset and fails the transfer, and
    // that the source stays fenced (only the abort, applied, unfences it).
    #[test]
    fn damaged_chunk_fails_with_its_offset() {
        rt().block_on(async {
            let mut s = state();
            s.apply(&Command::BeginHandoff { fragment: 0, to: 2, max_in_flight: 1 })
                .expect("begun");
            let a = MemHost::with(0, 4);
            let b = Arc::new(MemHost { damage_at: Some(2), ..MemHost::default() });
            let addr = destination(Arc::clone(&b), s).await;
            let fenced = Mutex::new(BTreeSet::new());
            let e = run_source(&a, &hello(1), &start(addr), &fenced).await.expect_err("damaged");
            let text = e.to_string();
            assert!(text.contains("chunk 3") && text.contains("stream offset 40"), "{text}");
            assert!(a.fenced.lock().expect("lock").contains(&0));
            assert_eq!(b.copy(0).map(|d| d.len()), Some(2), "a partial copy, deleted on abort");
        });
    }

    // Checks out-of-order and mismatched requests against the receiver directly.
    #[test]
    fn receiver_refuses_bad_sequences() {
        rt().block_on(async {
            let mut s = state();
            s.apply(&Command::BeginHandoff { fragment: 0, to: 2, max_in_flight: 1 })
                .expect("begun");
            let b = MemHost::default();
            let r = Receiver::default();
            let chunk = |seq, offset| Message::ImportChunk {
                handoff: 1,
                fragment: 0,
                seq,
                offset,
                bytes: vec![9; 8],
            };
            let refused = |m: &Message| matches!(m, Message::ImportRefused { .. });
            assert!(refused(&r.serve(&b, &s, 2, chunk(1, 0)).await), "chunk before begin");
            let begin =
                Message::ImportBegin { handoff: 1, fragment: 0, start: 0, end: 10, executor: 0 };
            assert_eq!(
                r.serve(&b, &s, 2, begin.clone()).await,
                Message::ImportAck { handoff: 1, seq: 0, docs: 0 }
            );
            assert!(refused(&r.serve(&b, &s, 1, begin).await), "node 1 is not the destination");
            assert_eq!(
                r.serve(&b, &s, 2, chunk(1, 0)).await,
                Message::ImportAck { handoff: 1, seq: 1, docs: 1 }
            );
            let Message::ImportRefused { reason, .. } = r.serve(&b, &s, 2, chunk(1, 0)).await
            else {
                panic!("a repeated chunk must be refused");
            };
            assert!(reason.contains("offset 8"), "{reason}");
            let end = |chunks, bytes| Message::ImportEnd { handoff: 1, fragment: 0, chunks, bytes };
            assert!(refused(&r.serve(&b, &s, 2, end(2, 16)).await));
            assert_eq!(
                r.serve(&b, &s, 2, end(1, 8)).await,
                Message::ImportAck { handoff: 1, seq: 1, docs: 1 }
            );
            assert_eq!(r.open(), BTreeMap::from([(0, 1)]));
            s.apply(&Command::AbortHandoff { fragment: 0, handoff: 1 }).expect("aborted");
            r.forget_ended(&s);
            assert!(r.open().is_empty());
            assert!(refused(&r.serve(&b, &s, 2, chunk(2, 8)).await), "after the abort");
        });
    }
}

#[cfg(test)]
mod model {
    //! A model of handoff across nodes whose applied states lag the raft log and which crash
    //! (losing their in-memory fences, keeping their copies and applied state): the coordinator
    //! begins, commits (only after an uninterrupted stream from the fenced source) and aborts;
    //! every node applies the log at its own pace and runs `reconcile`.
    use super::*;
    use crate::cluster::state::{Command, Member};
    use crate::cluster::wire::Role;
    use proptest::prelude::*;

    const NODES: [u32; 3] = [1, 2, 3];
    const FRAGMENTS: u32 = 3;

    #[derive(Clone, Debug, Default)]
    struct Node {
        applied: usize,
        state: ClusterState,
        local: BTreeSet<u32>,
        fenced: BTreeSet<u32>,
    }

    #[derive(Clone, Debug)]
    enum Step {
        Begin { fragment: u32, to: u32 },
        Stream { fragment: u32 },
        Finish { fragment: u32, commit: bool },
        Apply { node: usize },
        Crash { node: usize },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..FRAGMENTS, 1u32..4).prop_map(|(fragment, to)| Step::Begin { fragment, to }),
            (0..FRAGMENTS).prop_map(|fragment| Step::Stream { fragment }),
            (0..FRAGMENTS, any::<bool>())
                .prop_map(|(fragment, commit)| Step::Finish { fragment, commit }),
            (0usize..3).prop_map(|node| Step::Apply { node }),
            (0usize..3).prop_map(|node| Step::Crash { node }),
        ]
    }

    /// Whether `n` accepts writes for `f`: its data path routes by its applied map, which must
    /// say it owns `f` and no handoff of `f` is in flight (regions buffer those), and its copy
    /// must be open and not fenced.
    fn writable(n: &Node, me: u32, f: u32) -> bool {
        n.state.writer_of(f) == Some(me) && n.local.contains(&f) && !n.fenced.contains(&f)
    }

    proptest! {
        // Checks, after every step, that at most one node accepts writes for each fragment
        // and that the owner in the log's state always holds a copy (nothing acknowledged is
        // ever only on a deleted copy); and that after every node applied everything, each
        // fragment is on its owner alone, unfenced.
        #[test]
        fn model_one_writer_and_no_lost_copy(steps in proptest::collection::vec(step(), 0..80)) {
            let mut log: Vec<Command> = Vec::new();
            let mut leader = ClusterState::default();
            let boot = |c: Command, log: &mut Vec<Command>, leader: &mut ClusterState| {
                leader.apply(&c).expect("boot command");
                log.push(c);
            };
            for node in NODES {
                let member = Member { role: Role::Data, peer_addr: String::new(), pg_addr: String::new(), executors: 1 };
                boot(Command::AddMember { node, member }, &mut log, &mut leader);
            }
            boot(Command::Allocate { owners: vec![1, 2, 3], min_members: 3 }, &mut log, &mut leader);
            let mut nodes: Vec<Node> = NODES.iter().map(|n| {
                let mut node = Node::default();
                for c in &log { let _ = node.state.apply(c); }
                node.applied = log.len();
                node.local = node.state.fragments.iter().filter(|f| f.node == *n).map(|f| f.id).collect();
                node
            }).collect();
            // Handoff id -> the stream finished from a source fenced throughout.
            let mut streamed: BTreeMap<u64, bool> = BTreeMap::new();
            for s in &steps {
                match s {
                    Step::Begin { fragment, to } => {
                        let c = Command::BeginHandoff { fragment: *fragment, to: *to, max_in_flight: 2 };
                        if leader.apply(&c).is_ok() { log.push(c); }
                    }
                    Step::Stream { fragment } => {
                        // The source fences (if its applied state has the handoff), the
                        // destination creates its copy fenced; the stream completes.
                        let Some(h) = leader.handoff_of(*fragment).copied() else { continue };
                        let (a, b) = ((h.from - 1) as usize, (h.to - 1) as usize);
                        let a_ok = check_in_flight(&nodes[a].state, h.id, *fragment, h.from, true).is_ok();
                        let b_ok = check_in_flight(&nodes[b].state, h.id, *fragment, h.to, false).is_ok();
                        if a_ok && b_ok && nodes[a].local.contains(fragment) {
                            nodes[a].fenced.insert(*fragment);
                            nodes[b].local.insert(*fragment);
                            nodes[b].fenced.insert(*fragment);
                            streamed.insert(h.id, true);
                        }
                    }
                    Step::Finish { fragment, commit } => {
                        let Some(h) = leader.handoff_of(*fragment).copied() else { continue };
                        let done = streamed.get(&h.id).copied().unwrap_or(false);
                        let c = if *commit && done {
                            Command::CommitHandoff { fragment: *fragment, handoff: h.id }
                        } else {
                            Command::AbortHandoff { fragment: *fragment, handoff: h.id }
                        };
                        leader.apply(&c).expect("the leader's own decision applies");
                        log.push(c);
                    }
                    Step::Apply { node } => {
                        let n = &mut nodes[*node];
                        if let Some(c) = log.get(n.applied) {
                            let _ = n.state.apply(c);
                            n.applied += 1;
                        }
                        let me = NODES[*node];
                        for action in reconcile(&n.state, me, &n.local.clone(), &n.fenced.clone()) {
                            match action {
                                Action::Fence(f) => { n.fenced.insert(f); }
                                Action::Unfence(f) => { n.fenced.remove(&f); }
                                Action::Delete(f) => { n.local.remove(&f); n.fenced.remove(&f); }
                            }
                        }
                    }
                    Step::Crash { node } => {
                        // Fences are in memory; a stream from this node (source) dies with it.
                        let me = NODES[*node];
                        nodes[*node].fenced.clear();
                        for h in leader.handoffs.iter().filter(|h| h.from == me || h.to == me) {
                            streamed.insert(h.id, false);
                        }
                    }
                }
                for f in 0..FRAGMENTS {
                    let writers = NODES.iter().zip(&nodes).filter(|(me, n)| writable(n, **me, f)).count();
                    prop_assert!(writers <= 1, "fragment {f} writable on {writers} nodes: {nodes:?}");
                    let owner = leader.fragments.iter().find(|e| e.id == f).map(|e| e.node).unwrap_or(0);
                    prop_assert!(nodes[(owner - 1) as usize].local.contains(&f), "owner {owner} lost fragment {f}: {nodes:?}");
                }
            }
            // Drain: abort what is in flight, every node applies all and reconciles.
            for h in leader.handoffs.clone() {
                let c = Command::AbortHandoff { fragment: h.fragment, handoff: h.id };
                leader.apply(&c).expect("abort");
                log.push(c);
            }
            for (i, n) in nodes.iter_mut().enumerate() {
                while let Some(c) = log.get(n.applied) { let _ = n.state.apply(c); n.applied += 1; }
                for action in reconcile(&n.state, NODES[i], &n.local.clone(), &n.fenced.clone()) {
                    match action {
                        Action::Fence(f) => { n.fenced.insert(f); }
                        Action::Unfence(f) => { n.fenced.remove(&f); }
                        Action::Delete(f) => { n.local.remove(&f); n.fenced.remove(&f); }
                    }
                }
            }
            for f in 0..FRAGMENTS {
                let owner = leader.fragments.iter().find(|e| e.id == f).map(|e| e.node).unwrap_or(0);
                for (me, n) in NODES.iter().zip(&nodes) {
                    prop_assert_eq!(n.local.contains(&f), *me == owner, "fragment {} on node {}", f, me);
                    prop_assert!(!n.fenced.contains(&f));
                }
                prop_assert!(writable(&nodes[(owner - 1) as usize], owner, f));
            }
        }
    }
}

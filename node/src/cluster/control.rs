//! The control plane: one OS thread (`tessera-cluster`) with a current-thread tokio runtime
//! running the peer listener, openraft, the join loop, reachability pings and, on the raft
//! leader, the coordinator's decisions. It publishes a `ClusterView` for the executors.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use openraft::{BasicNode, ChangeMembers, Raft, ServerState};
use router::NodeId;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot, watch};

use crate::cluster::allocation::{
    AllocationStrategy, LeastShardAllocation, LoadUnit, Loads, ManualAllocation, allocate_all,
};
use crate::cluster::handoff::{self, Action, FragmentHost, Receiver};
use crate::cluster::limits::{
    CLUSTER_MEMBERS_MAX, CONTROL_TICK_MS, DRAIN_PROGRESS_MS, DRAIN_STALL_MS, DRAIN_TIMEOUT_MS,
    HANDOFF_RETRY_MS, HANDOFF_STATE_WAIT_MS, HANDOFF_TIMEOUT_MS, JOIN_WAIT_MS,
    PEER_CONNECTIONS_MAX, PEER_IDLE_TIMEOUT_MS, PEER_REACHABLE_WITHIN_MS, PEER_REQUEST_TIMEOUT_MS,
    RAFT_APPEND_ENTRIES_MAX, RAFT_SNAPSHOT_CHUNK_BYTES, REFUSALS_LOGGED_MAX,
    RESHAPE_SOURCE_OPEN_WAIT_MS, RESHAPE_SOURCE_POLL_MS,
};
use crate::cluster::ops::{MoveError, MoveRequest, MoveResult, Op};
use crate::cluster::peer::{DialerRefusal, PeerConn, PeerError, read_message, write_message};
use crate::cluster::prior::{PriorDecision, PriorMap};
use crate::cluster::raft_net::{RaftNet, serve_rpc};
use crate::cluster::state::{ClusterState, Command, Handoff, Member};
use crate::cluster::store::{AppliedState, LogStore, OpenError, StateMachine, TypeConfig};
use crate::cluster::wire::{
    self, FragmentBytes, HandoffStart, Hello, Message, PROTOCOL_VERSION, Peer, Role,
};
use crate::cluster::{ClusterView, MemberView, publish};
use crate::config::{Allocation, ClusterConfig};

/// Why the control plane did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The raft state could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The peer address is taken or unusable.
    #[error("cannot listen for peers on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The map kept by a coordinator wipe (`prior-map.json`) cannot be read.
    #[error("cannot start the cluster control plane: {reason}")]
    Prior {
        /// Why.
        reason: String,
    },
    /// The thread, runtime or raft could not be started.
    #[error("cannot start the cluster control plane: {reason}")]
    Runtime {
        /// Why.
        reason: String,
    },
}

/// The running control plane; `stop` ends it and waits for its thread.
#[derive(Debug)]
pub struct ClusterHandle {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ClusterHandle {
    /// Stops raft and the peer listener, and joins the thread.
    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the cluster control plane thread panicked");
        }
    }
}

/// What every task of the control plane shares.
struct Ctx {
    config: ClusterConfig,
    me: Peer,
    hello: Hello,
    raft: Raft<TypeConfig>,
    state: watch::Receiver<AppliedState>,
    fragments: u32,
    strategy: Box<dyn AllocationStrategy>,
    /// Each member's last load report (`--rebalance-load bytes`).
    reports: Mutex<HashMap<u32, Vec<FragmentBytes>>>,
    /// Last successful ping per member.
    pongs: Mutex<HashMap<u32, Instant>>,
    /// The collection catalog version each member last reported installed (its `Pong`).
    catalogs: Mutex<BTreeMap<u32, u64>>,
    /// The map before a coordinator wipe, adopted by the first allocation (`cluster::prior`).
    prior: Option<PriorMap>,
    /// The holders the coordinator last said it waits for (logged when it changes).
    prior_missing_logged: Mutex<Vec<u32>>,
    /// Refusal messages already logged at WARN (a refused peer retries every tick; the
    /// operator needs the reason once). Bounded by `REFUSALS_LOGGED_MAX`.
    refusals_logged: Mutex<BTreeSet<String>>,
    /// Fragments this node fenced as a handoff's source (ended by the applied map only).
    fenced: Mutex<BTreeSet<u32>>,
    /// Imports this node receives as a handoff's destination.
    receiver: Receiver,
    /// On the coordinator: fragments whose handoff a task of this node drives (any other
    /// handoff in flight is an orphan of a previous coordinator and is aborted).
    driving: Mutex<BTreeSet<u32>>,
    /// On the coordinator: splits and merges a task of this node drives (any other one in
    /// flight, a previous coordinator's, is driven again: the owner's build starts over).
    reshaping: Mutex<BTreeSet<u64>>,
    /// On an owner: held while it builds a split or merge, so two builds never overlap (a new
    /// coordinator may ask again while a previous one's request still runs).
    building: tokio::sync::Mutex<()>,
    /// Set while this node drains for a graceful shutdown (its `leaving` mark is not stale).
    draining: std::sync::atomic::AtomicBool,
    /// On the coordinator: when each fragment's last handoff was aborted (a new one waits
    /// `HANDOFF_RETRY_MS`, so a lasting failure is not retried every tick).
    aborted_at: Mutex<HashMap<u32, Instant>>,
    /// When this node's control plane started: a member that has not answered a ping since
    /// is counted silent from then (`Ctx::silent_for`).
    started: Instant,
}

impl Ctx {
    /// Logs a refused handshake at WARN the first time this reason is seen, at DEBUG after.
    fn log_refusal(&self, addr: &str, reason: &str) {
        let mut seen = self.refusals_logged.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() < REFUSALS_LOGGED_MAX && seen.insert(reason.to_owned()) {
            tracing::warn!(%addr, "refused a peer: {reason}");
        } else {
            tracing::debug!(%addr, "refused a peer: {reason}");
        }
    }
}

impl Ctx {
    fn state(&self) -> ClusterState {
        self.state.borrow().state.clone()
    }

    /// Waits (at most `HANDOFF_STATE_WAIT_MS`) until the applied state satisfies `ready`, and
    /// returns the state then (satisfying it or not).
    async fn state_when(&self, ready: impl Fn(&ClusterState) -> bool) -> ClusterState {
        let mut rx = self.state.clone();
        let wait = async {
            while !ready(&rx.borrow_and_update().state) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(HANDOFF_STATE_WAIT_MS), wait).await;
        self.state()
    }

    /// Whether `node` is this node or answered a ping recently (one that never answered is
    /// not, however recently this node started).
    fn reachable(&self, node: u32) -> bool {
        node == self.config.node_id
            || self
                .pongs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&node)
                .is_some_and(|t| t.elapsed() < Duration::from_millis(PEER_REACHABLE_WITHIN_MS))
    }

    /// How long `node` has not answered a ping: since its last answer, or since this node's
    /// control plane started if it never answered; zero for this node.
    fn silent_for(&self, node: u32) -> Duration {
        if node == self.config.node_id {
            return Duration::ZERO;
        }
        let pongs = self.pongs.lock().unwrap_or_else(PoisonError::into_inner);
        pongs.get(&node).unwrap_or(&self.started).elapsed()
    }
}

/// Starts the control plane for a node of `config`, its raft state under `dir`. `pg_addr` and
/// `executors` describe this node to its peers; `fragments` is how many fragments the
/// coordinator allocates when it creates the map.
pub fn start(
    config: &ClusterConfig,
    dir: &Path,
    pg_addr: std::net::SocketAddr,
    executors: u32,
    fragments: u32,
) -> Result<ClusterHandle, StartError> {
    let log = LogStore::open(dir)?;
    let sm = StateMachine::open(dir)?;
    let prior = crate::cluster::prior::read(dir).map_err(|reason| StartError::Prior { reason })?;
    let listener = std::net::TcpListener::bind(config.peer_listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| StartError::Listen { addr: config.peer_listen, source })?;
    let me = Peer {
        node: u64::from(config.node_id),
        role: config.role,
        peer_addr: config.peer_listen.to_string(),
        pg_addr: pg_addr.to_string(),
        executors,
    };
    crate::cluster::auth::install(config.secret.clone());
    let config = config.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), String>>(1);
    let (stop_tx, stop_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("tessera-cluster".to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("tokio runtime: {e}")));
                    return;
                }
            };
            runtime
                .block_on(run(config, me, log, sm, listener, fragments, prior, ready_tx, stop_rx));
        })
        .map_err(|e| StartError::Runtime { reason: format!("thread: {e}") })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(ClusterHandle { stop: Some(stop_tx), thread: Some(thread) }),
        Ok(Err(reason)) => {
            let _ = thread.join();
            Err(StartError::Runtime { reason })
        }
        Err(_) => {
            let _ = thread.join();
            Err(StartError::Runtime { reason: "the control plane thread ended".to_owned() })
        }
    }
}

fn raft_config(name: &str) -> Result<Arc<openraft::Config>, String> {
    let config = openraft::Config {
        cluster_name: name.to_owned(),
        // Loopback and LAN round trips are sub-millisecond, but the executors and compaction
        // share the cores: generous timeouts keep a busy node from losing leadership.
        heartbeat_interval: 250,
        election_timeout_min: 1_500,
        election_timeout_max: 3_000,
        max_payload_entries: RAFT_APPEND_ENTRIES_MAX,
        snapshot_max_chunk_size: RAFT_SNAPSHOT_CHUNK_BYTES,
        ..openraft::Config::default()
    };
    config.validate().map(Arc::new).map_err(|e| format!("raft config: {e}"))
}

#[allow(clippy::too_many_arguments)]
async fn run(
    config: ClusterConfig,
    me: Peer,
    log: LogStore,
    sm: StateMachine,
    listener: std::net::TcpListener,
    fragments: u32,
    prior: Option<PriorMap>,
    ready: std::sync::mpsc::SyncSender<Result<(), String>>,
    stop: oneshot::Receiver<()>,
) {
    let started = async {
        let listener =
            TcpListener::from_std(listener).map_err(|e| format!("peer listener: {e}"))?;
        let raft_config = raft_config(&config.name)?;
        let hello =
            Hello { cluster: config.name.clone(), version: PROTOCOL_VERSION, peer: me.clone() };
        let state = sm.subscribe();
        let raft = Raft::new(me.node, raft_config, RaftNet { hello: hello.clone() }, log, sm)
            .await
            .map_err(|e| format!("raft: {e}"))?;
        if config.join.is_empty() {
            let initialized = raft.is_initialized().await.map_err(|e| format!("raft: {e}"))?;
            if !initialized {
                let members = BTreeMap::from([(me.node, BasicNode::new(&me.peer_addr))]);
                raft.initialize(members).await.map_err(|e| format!("raft initialize: {e}"))?;
                tracing::info!(cluster = %config.name, "formed a new cluster as its seed");
            }
        }
        let strategy: Box<dyn AllocationStrategy> = match config.allocation {
            Allocation::LeastShard => Box::new(LeastShardAllocation {
                rebalance_threshold: config.rebalance_threshold,
                max_simultaneous_rebalance: config.max_simultaneous_rebalance as usize,
                unit: config.rebalance_load,
            }),
            Allocation::Manual => Box::new(ManualAllocation),
        };
        let ctx = Arc::new(Ctx {
            config: config.clone(),
            me: me.clone(),
            hello,
            raft,
            state,
            fragments,
            strategy,
            pongs: Mutex::new(HashMap::new()),
            catalogs: Mutex::new(BTreeMap::new()),
            reports: Mutex::new(HashMap::new()),
            prior,
            prior_missing_logged: Mutex::new(Vec::new()),
            refusals_logged: Mutex::new(BTreeSet::new()),
            fenced: Mutex::new(BTreeSet::new()),
            receiver: Receiver::default(),
            driving: Mutex::new(BTreeSet::new()),
            reshaping: Mutex::new(BTreeSet::new()),
            building: tokio::sync::Mutex::new(()),
            draining: std::sync::atomic::AtomicBool::new(false),
            aborted_at: Mutex::new(HashMap::new()),
            started: Instant::now(),
        });
        Ok::<_, String>((listener, ctx))
    }
    .await;
    let (listener, ctx) = match started {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    tracing::info!(
        cluster = %config.name,
        node = config.node_id,
        role = %config.role,
        peer_listen = %config.peer_listen,
        "cluster control plane started"
    );
    match (&config.secret, config.peer_listen.ip().is_loopback()) {
        (Some(_), _) => {
            tracing::info!("peer connections are authenticated with the cluster secret")
        }
        // On loopback only this machine's processes can connect: said, not warned.
        (None, true) => tracing::info!(
            "peer connections are not authenticated (no --cluster-secret-file; loopback only)"
        ),
        (None, false) => tracing::warn!(
            peer_listen = %config.peer_listen,
            "peer connections are not authenticated: any host that reaches the peer address \
             and knows the cluster name can join; give --cluster-secret-file"
        ),
    }
    publish_view(&ctx, &mut BTreeMap::new());
    let _ = ready.send(Ok(()));

    let accept = tokio::spawn(accept_loop(listener, Arc::clone(&ctx)));
    let join = tokio::spawn(join_loop(Arc::clone(&ctx)));
    let tick = tokio::spawn(tick_loop(Arc::clone(&ctx)));
    let (drain_tx, drain_rx) = tokio::sync::mpsc::channel(1);
    let _ = DRAIN.set(drain_tx);
    let drains = tokio::spawn(drain_loop(Arc::clone(&ctx), drain_rx));
    let ops = crate::cluster::ops::install().map(|rx| tokio::spawn(ops_loop(Arc::clone(&ctx), rx)));
    let _ = stop.await;
    if let Some(ops) = ops {
        ops.abort();
    }
    accept.abort();
    tick.abort();
    join.abort();
    drains.abort();
    if let Err(e) = ctx.raft.shutdown().await {
        tracing::error!("raft did not shut down cleanly: {e}");
    }
    tracing::info!("cluster control plane stopped");
}

async fn accept_loop(listener: TcpListener, ctx: Arc<Ctx>) {
    let slots = Arc::new(Semaphore::new(PEER_CONNECTIONS_MAX));
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!("peer accept failed: {e}");
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(%addr, "refused a peer connection: {PEER_CONNECTIONS_MAX} are open");
            continue;
        };
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            let addr = addr.to_string();
            if let Err(e) = serve_peer(stream, &addr, &ctx).await {
                tracing::debug!("peer connection ended: {e}");
            }
            drop(permit);
        });
    }
}

/// One incoming peer connection: the handshake, then requests answered in order.
async fn serve_peer(mut stream: TcpStream, addr: &str, ctx: &Ctx) -> Result<(), PeerError> {
    let _ = stream.set_nodelay(true);
    let first = tokio::time::timeout(
        Duration::from_millis(PEER_REQUEST_TIMEOUT_MS),
        read_message(&mut stream, addr),
    )
    .await
    .map_err(|_| PeerError::Timeout { addr: addr.to_owned(), ms: PEER_REQUEST_TIMEOUT_MS })??;
    let Some(first) = first else { return Ok(()) };
    let Message::Hello(hello) = first else {
        let e = wire::HandshakeError::NotHello { kind: first.kind() };
        ctx.log_refusal(addr, &e.to_string());
        let _ = write_message(&mut stream, addr, &Message::Refused { reason: e.to_string() }).await;
        return Ok(());
    };
    if let Err(e) = wire::check_hello(&hello, &ctx.config.name, ctx.me.node) {
        ctx.log_refusal(addr, &e.to_string());
        let _ = write_message(&mut stream, addr, &Message::Refused { reason: e.to_string() }).await;
        return Ok(());
    }
    if let Some(secret) = &ctx.config.secret {
        let dialer = hello.peer.node;
        let proved = crate::cluster::peer::authenticate_dialer(
            &mut stream,
            addr,
            secret,
            &ctx.config.name,
            dialer,
        )
        .await;
        match proved {
            Ok(()) => {}
            Err(DialerRefusal::Refused(reason)) => {
                ctx.log_refusal(addr, &reason);
                let _ = write_message(&mut stream, addr, &Message::Refused { reason }).await;
                return Ok(());
            }
            Err(DialerRefusal::Abandoned(reason)) => {
                tracing::debug!(%addr, "{reason}");
                return Ok(());
            }
        }
    }
    write_message(&mut stream, addr, &Message::Hello(ctx.hello.clone())).await?;
    let idle = Duration::from_millis(PEER_IDLE_TIMEOUT_MS);
    loop {
        // Members ping every tick and raft heartbeats more often, so a connection idle this
        // long is abandoned: close it and free its slot.
        let Ok(next) = tokio::time::timeout(idle, read_message(&mut stream, addr)).await else {
            tracing::debug!(%addr, "closing an idle peer connection");
            return Ok(());
        };
        let Some(message) = next? else { return Ok(()) };
        let answer = match message {
            Message::Ping => Message::Pong {
                leader: ctx.raft.metrics().borrow().current_leader,
                epoch: ctx.state.borrow().state.epoch,
                catalog: crate::cluster::region::installed_catalog(),
            },
            Message::Join(peer) => {
                // Bounded like the joiner's wait, so a join that cannot commit (no quorum)
                // does not hold this connection's slot forever.
                let bound = Duration::from_millis(JOIN_WAIT_MS);
                match tokio::time::timeout(bound, handle_join(ctx, peer)).await {
                    Ok(answer) => answer,
                    Err(_) => Message::JoinFailed {
                        reason: format!("the join did not commit within {bound:?}"),
                    },
                }
            }
            Message::HandoffStart(start) => source_side(ctx, &start).await,
            Message::ReshapeStart { reshape } => owner_side(ctx, reshape).await,
            Message::PlanReshape { fragment, at, merge_with } => {
                answer_if_leading(ctx, plan_reshape_here(ctx, fragment, at, merge_with)).await
            }
            m @ (Message::ImportBegin { .. }
            | Message::ImportChunk { .. }
            | Message::ImportEnd { .. }) => destination_side(ctx, m).await,
            Message::Leave { node } => handle_leave(ctx, node).await,
            Message::Load => Message::LoadAnswer(crate::cluster::load::local()),
            Message::PlanMove { fragment, to } => {
                answer_if_leading(ctx, plan_move_here(ctx, fragment, to)).await
            }
            Message::SetCollection { name, expected, sharding } => {
                answer_if_leading(ctx, set_collection_here(ctx, name, expected, sharding)).await
            }
            Message::RemoveNode { node } => {
                answer_if_leading(ctx, remove_member_here(ctx, node)).await
            }
            Message::RaftRpc(body) => match serve_rpc(&ctx.raft, &body).await {
                Ok(reply) => Message::RaftReply(reply),
                Err(e) => {
                    tracing::warn!(%addr, "peer sent a raft request that does not parse: {e}");
                    return Ok(());
                }
            },
            other => {
                tracing::warn!(%addr, "peer sent {} where a request was expected", other.kind());
                return Ok(());
            }
        };
        write_message(&mut stream, addr, &answer).await?;
    }
}

/// The leader's side of a join: learner, member record, then voter for a data node.
/// Idempotent, so a restarted member joins again harmlessly.
async fn handle_join(ctx: &Ctx, peer: Peer) -> Message {
    if let Err(e) = wire::check_peer(&peer) {
        return Message::JoinFailed { reason: e.to_string() };
    }
    let metrics = ctx.raft.metrics().borrow().clone();
    if metrics.current_leader != Some(ctx.me.node) {
        let leader_addr = metrics.current_leader.and_then(|l| {
            metrics.membership_config.membership().get_node(&l).map(|n| n.addr.clone())
        });
        return Message::NotLeader { leader_addr };
    }
    let Ok(node) = u32::try_from(peer.node) else {
        return Message::JoinFailed { reason: format!("node id {} is too large", peer.node) };
    };
    let membership = metrics.membership_config.membership().clone();
    match membership.get_node(&peer.node) {
        Some(known) if known.addr != peer.peer_addr => {
            return Message::JoinFailed {
                reason: format!(
                    "node id {} is already a member at {}; ids must be unique",
                    peer.node, known.addr
                ),
            };
        }
        Some(_) => {}
        None => {
            if ctx.state().members.len() >= CLUSTER_MEMBERS_MAX {
                return Message::JoinFailed {
                    reason: format!(
                        "the cluster has {CLUSTER_MEMBERS_MAX} members, the most it accepts"
                    ),
                };
            }
            if let Err(e) =
                ctx.raft.add_learner(peer.node, BasicNode::new(&peer.peer_addr), true).await
            {
                return Message::JoinFailed { reason: format!("adding the learner: {e}") };
            }
        }
    }
    let member = Member::of_peer(&peer);
    // A member that left gracefully and starts again is back: fragments may move to it.
    if ctx.state().leaving.contains(&node) {
        let _ = propose(ctx, Command::SetLeaving { node, leaving: false }).await;
    }
    if ctx.state().members.get(&node) != Some(&member) {
        match ctx.raft.client_write(Command::AddMember { node, member }).await {
            Ok(r) if r.data.is_ok() => {}
            Ok(r) => {
                return Message::JoinFailed {
                    reason: format!("recording the member: {:?}", r.data),
                };
            }
            Err(e) => return Message::JoinFailed { reason: format!("recording the member: {e}") },
        }
    }
    let voter = membership.voter_ids().any(|v| v == peer.node);
    if peer.role == Role::Data && !voter {
        let change = ChangeMembers::AddVoterIds(BTreeSet::from([peer.node]));
        if let Err(e) = ctx.raft.change_membership(change, false).await {
            return Message::JoinFailed { reason: format!("making it a voter: {e}") };
        }
    }
    tracing::info!(node = peer.node, role = %peer.role, addr = %peer.peer_addr, "member joined");
    Message::Joined
}

/// Asks the `--join` addresses (and the leaders they name) to add this node, until one does.
/// A node started without `--join` (the seed) asks the other members it knows, so a restart
/// on new addresses updates its member record; a fresh seed knows no one and is done.
async fn join_loop(ctx: Arc<Ctx>) {
    let mut interval = tokio::time::interval(Duration::from_millis(CONTROL_TICK_MS));
    // A refused handshake is an operator's mistake (wrong name, version or id): said once per
    // address at ERROR, then retried quietly in case the other side is fixed.
    let mut refused_by: BTreeSet<String> = BTreeSet::new();
    loop {
        let mut targets: Vec<String> = if ctx.config.join.is_empty() {
            let me = ctx.config.node_id;
            let state = ctx.state();
            let others: Vec<String> = state
                .members
                .iter()
                .filter(|(n, _)| **n != me)
                .map(|(_, m)| m.peer_addr.clone())
                .collect();
            if others.is_empty() {
                return;
            }
            others
        } else {
            ctx.config.join.clone()
        };
        let budget = 2 * targets.len() + 2;
        let mut tried = 0;
        while let Some(addr) = targets.pop() {
            tried += 1;
            if tried > budget {
                break;
            }
            match join_once(&ctx, &addr).await {
                Ok(Message::Joined) => {
                    tracing::info!(cluster = %ctx.config.name, through = %addr, "joined the cluster");
                    return;
                }
                Ok(Message::NotLeader { leader_addr: Some(leader) })
                    if leader == ctx.me.peer_addr =>
                {
                    // This node leads: `coordinate` keeps its own member record current.
                    return;
                }
                Ok(Message::NotLeader { leader_addr: Some(leader) }) if leader != addr => {
                    targets.push(leader);
                }
                Ok(Message::JoinFailed { reason }) => {
                    tracing::debug!(%addr, "join not done yet: {reason}");
                }
                Ok(other) => tracing::debug!(%addr, "join answered {}", other.kind()),
                Err(PeerError::Handshake { addr, source }) => {
                    if refused_by.len() < REFUSALS_LOGGED_MAX && refused_by.insert(addr.clone()) {
                        tracing::error!(%addr, "cannot join: {source}");
                    } else {
                        tracing::debug!(%addr, "cannot join: {source}");
                    }
                }
                Err(e) => tracing::debug!("join attempt failed: {e}"),
            }
        }
        interval.tick().await;
    }
}

async fn join_once(ctx: &Ctx, addr: &str) -> Result<Message, PeerError> {
    let mut conn = PeerConn::dial(addr, &ctx.hello).await?;
    // Joining a data node waits for it to catch up as a learner and for two membership
    // changes to commit: allow it the time of several requests.
    conn.request_within(&Message::Join(ctx.me.clone()), JOIN_WAIT_MS + PEER_REQUEST_TIMEOUT_MS)
        .await
}

/// Every tick: ping members, decide (on the leader), publish the view.
async fn tick_loop(ctx: Arc<Ctx>) {
    let mut interval = tokio::time::interval(Duration::from_millis(CONTROL_TICK_MS));
    let mut pingers: HashMap<u32, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut reachable: BTreeMap<u32, bool> = BTreeMap::new();
    let mut reconciled: Option<u64> = None;
    loop {
        interval.tick().await;
        if let Some(host) = handoff::host() {
            reconcile_local(&ctx, host.as_ref(), &mut reconciled).await;
        }
        let state = ctx.state();
        let me = ctx.config.node_id;
        for node in state.members.keys().copied().filter(|n| *n != me) {
            pingers.entry(node).or_insert_with(|| tokio::spawn(ping_loop(Arc::clone(&ctx), node)));
        }
        // Publish first: a proposal may wait (bounded) for a quorum that is gone, and the
        // view must stay current meanwhile.
        publish_view(&ctx, &mut reachable);
        if ctx.raft.metrics().borrow().state == ServerState::Leader {
            coordinate(&ctx, &state).await;
        }
    }
}

/// Keeps one connection to `node` and pings it every tick, recording each answer.
async fn ping_loop(ctx: Arc<Ctx>, node: u32) {
    let mut interval = tokio::time::interval(Duration::from_millis(CONTROL_TICK_MS));
    let mut conn: Option<PeerConn> = None;
    loop {
        interval.tick().await;
        let Some(addr) = ctx.state().members.get(&node).map(|m| m.peer_addr.clone()) else {
            continue;
        };
        if conn.as_ref().is_some_and(|c| c.addr() != addr) {
            conn = None;
        }
        let mut c = match conn.take() {
            Some(c) => c,
            None => match PeerConn::dial(&addr, &ctx.hello).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(node, "ping: {e}");
                    continue;
                }
            },
        };
        match c.request(&Message::Ping).await {
            Ok(Message::Pong { catalog, .. }) => {
                ctx.pongs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(node, Instant::now());
                ctx.catalogs.lock().unwrap_or_else(PoisonError::into_inner).insert(node, catalog);
                // The coordinator counting bytes asks for the member's sizes on the same
                // connection (a leader learns them within a tick of taking over).
                let leads = ctx.raft.metrics().borrow().state == ServerState::Leader;
                let sizes_needed = ctx.config.rebalance_load == LoadUnit::Bytes
                    || ctx.config.split_fragment_bytes > 0;
                if leads && sizes_needed {
                    match c.request(&Message::Load).await {
                        Ok(Message::LoadAnswer(sizes)) => {
                            ctx.reports
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .insert(node, sizes);
                        }
                        Ok(other) => {
                            tracing::debug!(node, "load answered {}", other.kind());
                            continue;
                        }
                        Err(e) => {
                            tracing::debug!(node, "load: {e}");
                            continue;
                        }
                    }
                }
                conn = Some(c);
            }
            Ok(other) => tracing::debug!(node, "ping answered {}", other.kind()),
            Err(e) => tracing::debug!(node, "ping: {e}"),
        }
    }
}

/// The coordinator's decisions, run on the raft leader each tick: record itself as a member,
/// allocate the map once `min-members` data nodes are members, plan rebalancing moves and the
/// moves of leaving nodes, and drive planned moves as handoffs.
async fn coordinate(ctx: &Arc<Ctx>, state: &ClusterState) {
    let me = ctx.config.node_id;
    let mine = Member::of_peer(&ctx.me);
    if state.members.get(&me) != Some(&mine) {
        propose(ctx, Command::AddMember { node: me, member: mine }).await;
        return;
    }
    if state.leaving.contains(&me) && !ctx.draining.load(std::sync::atomic::Ordering::Relaxed) {
        // This node left gracefully and runs again (a restarted seed that leads).
        propose(ctx, Command::SetLeaving { node: me, leaving: false }).await;
        return;
    }
    activate_collections(ctx, state).await;
    let mut reports = ctx.reports.lock().unwrap_or_else(PoisonError::into_inner).clone();
    reports.insert(me, crate::cluster::load::local());
    if !state.allocated() {
        // Every data member, each of which has just asked to join (one may not have answered
        // a ping yet): the first map is spread over all of them.
        let loads = crate::cluster::load::loads_of(state, &reports, |_| true);
        let have = u32::try_from(state.data_members().count()).unwrap_or(u32::MAX);
        if have < ctx.config.min_members {
            return;
        }
        if let Some(prior) = &ctx.prior {
            adopt_prior(ctx, prior, state).await;
            return;
        }
        let owners: Vec<u32> = allocate_all(ctx.strategy.as_ref(), &loads, ctx.fragments, 0)
            .into_iter()
            .map(|n| n.0)
            .collect();
        if propose(ctx, Command::Allocate { owners, min_members: ctx.config.min_members }).await {
            tracing::info!(
                fragments = ctx.fragments,
                data_members = have,
                strategy = ctx.strategy.name(),
                "coordinator allocated the shard map"
            );
        }
        return;
    }
    // Leaving nodes and nodes that do not answer are no rebalance target (`load::loads_of`
    // leaves them out); leaving nodes' fragments move below.
    let loads = crate::cluster::load::loads_of(state, &reports, |n| ctx.reachable(n));
    let in_flight: Vec<_> = state
        .moves
        .iter()
        .filter(|m| !state.leaving.contains(&m.from))
        .map(|m| crate::cluster::allocation::Move {
            fragment: router::FragmentId::new(m.fragment),
            from: NodeId(m.from),
            to: NodeId(m.to),
        })
        .collect();
    let executes = handoff::host().is_some();
    for m in ctx.strategy.rebalance(&loads, &in_flight) {
        let command = Command::PlanMove { fragment: m.fragment.get(), to: m.to.0 };
        if propose(ctx, command).await {
            let note = if executes { "" } else { " (this build's data path cannot hand off yet)" };
            tracing::info!(
                fragment = m.fragment.get(),
                from = m.from.0,
                to = m.to.0,
                "coordinator planned a move{note}"
            );
        }
    }
    drop_silent_then_plan_leaving_moves(ctx, state, loads).await;
    drive_handoffs(ctx, state).await;
    if let Some(fragment) = state.oversized(&reports, ctx.config.split_fragment_bytes) {
        if propose(ctx, Command::BeginSplit { fragment, at: None }).await {
            tracing::info!(
                fragment,
                threshold = ctx.config.split_fragment_bytes,
                "coordinator began splitting an oversized fragment"
            );
        }
        return;
    }
    drive_reshapes(ctx, state);
}

/// Plans a move for every fragment of a leaving node that has none, each to the node the
/// strategy would allocate a new fragment to. First drops the planned moves (whose handoff
/// has not begun) to a destination that is no target any more (it stopped answering: a node
/// stopped or killed since): off a leaving node at once, so the drain is not held until that
/// node returns; off any other node once the destination has been silent for
/// `--move-target-silent-ms`, so an operator's move or a rebalance move to a dead node does
/// not wait for it forever, holding a rebalance slot. The next ticks plan again where a move
/// is still needed, to nodes that answer.
async fn drop_silent_then_plan_leaving_moves(ctx: &Ctx, state: &ClusterState, mut loads: Loads) {
    let silent_max = ctx.config.move_target_silent_ms;
    for m in &state.moves {
        let to = NodeId(m.to);
        if loads.contains(to) {
            loads.hold(to, router::FragmentId::new(m.fragment), 0);
            continue;
        }
        let leaving = state.leaving.contains(&m.from);
        let silent = ctx.silent_for(m.to);
        let expired = silent_max > 0 && silent >= Duration::from_millis(silent_max);
        if !(leaving || expired)
            || state.handoff_of(m.fragment).is_some()
            || !propose(ctx, Command::DropMove { fragment: m.fragment, to: m.to }).await
        {
            continue;
        }
        if leaving {
            tracing::info!(
                fragment = m.fragment,
                from = m.from,
                to = m.to,
                "coordinator dropped a move off a leaving node: its destination does not answer"
            );
        } else {
            tracing::warn!(
                fragment = m.fragment,
                from = m.from,
                to = m.to,
                silent_ms = silent.as_millis(),
                "coordinator dropped a planned move: its destination has not answered for \
                 --move-target-silent-ms; ask for the move again once the node is back"
            );
        }
    }
    for f in state.fragments.iter().filter(|f| state.leaving.contains(&f.node)) {
        if state.moves.iter().any(|m| m.fragment == f.id) {
            continue;
        }
        let Some(to) = ctx.strategy.allocate(&loads) else { return };
        if propose(ctx, Command::PlanMove { fragment: f.id, to: to.0 }).await {
            loads.hold(to, router::FragmentId::new(f.id), 0);
            tracing::info!(
                fragment = f.id,
                from = f.node,
                to = to.0,
                "coordinator planned a move off a leaving node"
            );
        }
    }
}

/// Aborts handoffs no task of this coordinator drives (a previous coordinator's), then begins
/// planned moves as handoffs, at most `--max-simultaneous-rebalance` at a time, each between
/// two reachable nodes, each driven by its own task.
async fn drive_handoffs(ctx: &Arc<Ctx>, state: &ClusterState) {
    let driving = ctx.driving.lock().unwrap_or_else(PoisonError::into_inner).clone();
    for h in state.handoffs.iter().filter(|h| !driving.contains(&h.fragment)) {
        let command = Command::AbortHandoff { fragment: h.fragment, handoff: h.id };
        if propose(ctx, command).await {
            tracing::warn!(
                handoff = h.id,
                fragment = h.fragment,
                from = h.from,
                to = h.to,
                "coordinator aborted a handoff no coordinator task drives (begun by a previous coordinator)"
            );
        }
    }
    if handoff::host().is_none() {
        return;
    }
    let max = ctx.config.max_simultaneous_rebalance.max(1);
    let mut running = state.handoffs.len();
    for m in &state.moves {
        if running >= max as usize {
            return;
        }
        let owner = state.fragments.iter().find(|f| f.id == m.fragment).map(|f| f.node);
        let busy = ctx.driving.lock().unwrap_or_else(PoisonError::into_inner).contains(&m.fragment);
        let backoff = ctx
            .aborted_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&m.fragment)
            .is_some_and(|t| t.elapsed() < Duration::from_millis(HANDOFF_RETRY_MS));
        if busy || backoff || state.handoff_of(m.fragment).is_some() {
            continue;
        }
        // A source that does not answer may hold the only copy: its fragment waits for it.
        let Some(from) = owner.filter(|n| ctx.reachable(*n)) else { continue };
        if !ctx.reachable(m.to) {
            continue;
        }
        ctx.driving.lock().unwrap_or_else(PoisonError::into_inner).insert(m.fragment);
        let begin = Command::BeginHandoff { fragment: m.fragment, to: m.to, max_in_flight: max };
        let handoff = if propose(ctx, begin).await {
            ctx.state().handoff_of(m.fragment).copied().filter(|h| h.from == from && h.to == m.to)
        } else {
            None
        };
        match handoff {
            Some(h) => {
                running += 1;
                tokio::spawn(drive_one(Arc::clone(ctx), h));
            }
            None => {
                ctx.driving.lock().unwrap_or_else(PoisonError::into_inner).remove(&m.fragment);
            }
        }
    }
}

/// Drives one handoff: tells the source to stream, then commits on its `HandoffDone` or
/// aborts on anything else (failure, no answer in time).
async fn drive_one(ctx: Arc<Ctx>, h: Handoff) {
    let began = Instant::now();
    let state = ctx.state();
    let entry = state.fragments.iter().find(|f| f.id == h.fragment).copied();
    let to_addr = state.members.get(&h.to).map(|m| m.peer_addr.clone());
    let outcome = match (entry, to_addr) {
        (Some(entry), Some(to_addr)) => {
            tracing::info!(
                handoff = h.id,
                fragment = h.fragment,
                from = h.from,
                to = h.to,
                "handoff begun"
            );
            let start = HandoffStart {
                handoff: h.id,
                fragment: h.fragment,
                start: entry.start,
                end: entry.end,
                to: u64::from(h.to),
                to_addr,
                to_executor: h.to_executor,
                epoch: h.begun_at,
            };
            if h.from == ctx.config.node_id {
                source_side(&ctx, &start).await
            } else {
                ask_source(&ctx, &state, h.from, start).await
            }
        }
        _ => Message::HandoffFailed {
            handoff: h.id,
            reason: "the map lost the fragment or its destination".to_owned(),
        },
    };
    let (command, done) = match outcome {
        Message::HandoffDone { docs, bytes, .. } => {
            handoff::fault::hit(handoff::fault::Fault::CoordinatorAfterDone);
            (Command::CommitHandoff { fragment: h.fragment, handoff: h.id }, Some((docs, bytes)))
        }
        Message::HandoffFailed { reason, .. } => {
            tracing::warn!(
                handoff = h.id,
                fragment = h.fragment,
                "handoff failed, aborting it: {reason}"
            );
            (Command::AbortHandoff { fragment: h.fragment, handoff: h.id }, None)
        }
        other => {
            tracing::warn!(
                handoff = h.id,
                fragment = h.fragment,
                "handoff source answered {}, aborting it",
                other.kind()
            );
            (Command::AbortHandoff { fragment: h.fragment, handoff: h.id }, None)
        }
    };
    let aborting = matches!(command, Command::AbortHandoff { .. });
    let decided = propose_outcome(&ctx, command).await;
    if aborting {
        ctx.aborted_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(h.fragment, Instant::now());
    }
    match (done, decided) {
        (Some((docs, bytes)), Proposal::Committed) => tracing::info!(
            handoff = h.id,
            fragment = h.fragment,
            from = h.from,
            to = h.to,
            docs,
            bytes,
            ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
            "handoff committed: node {} owns fragment ${} now",
            h.to,
            h.fragment
        ),
        (None, Proposal::Committed) => tracing::info!(
            handoff = h.id,
            fragment = h.fragment,
            "handoff aborted: node {} keeps fragment ${}",
            h.from,
            h.fragment
        ),
        (_, Proposal::Refused(why)) => tracing::warn!(
            handoff = h.id,
            fragment = h.fragment,
            "handoff decision refused by the coordinator's state ({why}); the next coordinator tick \
             aborts the handoff if it is still in flight"
        ),
        (_, Proposal::Unconfirmed(why)) => tracing::warn!(
            handoff = h.id,
            fragment = h.fragment,
            "handoff decision not confirmed ({why}); it may still commit, and the next coordinator \
             tick aborts the handoff only if it is still in flight"
        ),
    }
    ctx.driving.lock().unwrap_or_else(PoisonError::into_inner).remove(&h.fragment);
}

/// Sends `HandoffStart` to the source node and waits (bounded) for its outcome.
async fn ask_source(ctx: &Ctx, state: &ClusterState, from: u32, start: HandoffStart) -> Message {
    let handoff = start.handoff;
    let failed = |reason: String| Message::HandoffFailed { handoff, reason };
    let Some(addr) = state.members.get(&from).map(|m| m.peer_addr.clone()) else {
        return failed(format!("source node {from} is not a member"));
    };
    let mut conn = match PeerConn::dial(&addr, &ctx.hello).await {
        Ok(c) => c,
        Err(e) => return failed(e.to_string()),
    };
    let bound = HANDOFF_TIMEOUT_MS + PEER_REQUEST_TIMEOUT_MS;
    match conn.request_within(&Message::HandoffStart(Box::new(start)), bound).await {
        Ok(answer) => answer,
        Err(e) => failed(e.to_string()),
    }
}

/// The source's side of `HandoffStart`: checks its applied map has the handoff in flight
/// from this node, then streams (bounded by `HANDOFF_TIMEOUT_MS`).
async fn source_side(ctx: &Ctx, start: &HandoffStart) -> Message {
    let handoff = start.handoff;
    let failed = |reason: String| Message::HandoffFailed { handoff, reason };
    let Some(host) = handoff::host() else {
        return failed("the source's data path cannot hand off (no fragment host)".to_owned());
    };
    let state = ctx.state_when(|s| s.last_handoff >= handoff).await;
    if let Err(e) =
        handoff::check_in_flight(&state, handoff, start.fragment, ctx.config.node_id, true)
    {
        return failed(e.to_string());
    }
    let bound = Duration::from_millis(HANDOFF_TIMEOUT_MS);
    let run = handoff::run_source(host.as_ref(), &ctx.hello, start, &ctx.fenced);
    match tokio::time::timeout(bound, run).await {
        Ok(Ok(sent)) => {
            tracing::info!(
                handoff,
                fragment = start.fragment,
                to = start.to,
                chunks = sent.chunks,
                bytes = sent.bytes,
                docs = sent.docs,
                "handoff stream acknowledged by the destination"
            );
            Message::HandoffDone { handoff, docs: sent.docs, bytes: sent.bytes }
        }
        Ok(Err(e)) => failed(e.to_string()),
        Err(_) => failed(format!("the stream did not finish within {bound:?}")),
    }
}

/// The destination's side of the import requests.
async fn destination_side(ctx: &Ctx, request: Message) -> Message {
    let handoff = match &request {
        Message::ImportBegin { handoff, .. }
        | Message::ImportChunk { handoff, .. }
        | Message::ImportEnd { handoff, .. } => *handoff,
        _ => 0,
    };
    let Some(host) = handoff::host() else {
        return Message::ImportRefused {
            handoff,
            reason: "the destination's data path cannot hand off (no fragment host)".to_owned(),
        };
    };
    let state = ctx.state_when(|s| s.last_handoff >= handoff).await;
    let begun = match &request {
        Message::ImportBegin { fragment, .. } => Some(*fragment),
        _ => None,
    };
    let answer = ctx.receiver.serve(host.as_ref(), &state, ctx.config.node_id, request).await;
    if let (Some(fragment), Message::ImportAck { .. }) = (begun, &answer) {
        // The new copy is fenced until the commit; `reconcile` unfences it when the map gives
        // it to this node, or deletes it after an abort.
        ctx.fenced.lock().unwrap_or_else(PoisonError::into_inner).insert(fragment);
    }
    answer
}

/// The coordinator's side of `Leave`: records the node as leaving.
async fn handle_leave(ctx: &Ctx, node: u64) -> Message {
    let metrics = ctx.raft.metrics().borrow().clone();
    if metrics.current_leader != Some(ctx.me.node) {
        let leader_addr = metrics.current_leader.and_then(|l| {
            metrics.membership_config.membership().get_node(&l).map(|n| n.addr.clone())
        });
        return Message::NotLeader { leader_addr };
    }
    let Ok(node) = u32::try_from(node) else {
        return Message::JoinFailed { reason: format!("node id {node} is too large") };
    };
    if ctx.state().leaving.contains(&node) {
        return Message::Leaving;
    }
    let bound = Duration::from_millis(PEER_REQUEST_TIMEOUT_MS);
    match tokio::time::timeout(
        bound,
        ctx.raft.client_write(Command::SetLeaving { node, leaving: true }),
    )
    .await
    {
        Ok(Ok(r)) => match r.data {
            Ok(_) => Message::Leaving,
            Err(e) => Message::JoinFailed { reason: e.to_string() },
        },
        Ok(Err(e)) => Message::JoinFailed { reason: e.to_string() },
        Err(_) => Message::JoinFailed { reason: format!("not committed within {bound:?}") },
    }
}

/// Applies `handoff::reconcile` to this node's copies when the applied epoch changed (or the
/// last attempt failed): fences a source's copy, unfences after an abort, deletes a copy the
/// map gave away (after a commit, or a destination's partial copy after an abort).
async fn reconcile_local(ctx: &Ctx, host: &dyn FragmentHost, reconciled: &mut Option<u64>) {
    let at_open = handoff::take_fenced_at_open();
    if !at_open.is_empty() {
        ctx.fenced.lock().unwrap_or_else(PoisonError::into_inner).extend(at_open);
        *reconciled = None;
    }
    let state = ctx.state();
    if *reconciled == Some(state.epoch) || !state.allocated() {
        return;
    }
    ctx.receiver.forget_ended(&state);
    let local: BTreeSet<u32> = match host.local().await {
        Ok(l) => l.into_iter().collect(),
        // Shutting down: the executors stop before the control plane does, and a tick between
        // the two finds them gone (seen on a proxy stopped right after joining). Nothing to
        // reconcile any more; not a fault.
        Err(e @ handoff::HostError::Stopped) => {
            tracing::debug!("handoff reconcile stops: {e}");
            return;
        }
        Err(e) => {
            tracing::warn!("cannot list this node's fragments for handoff: {e}");
            return;
        }
    };
    let fenced = ctx.fenced.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let me = ctx.config.node_id;
    let mut ok = true;
    for action in handoff::reconcile(&state, me, &local, &fenced) {
        let (fragment, result) = match action {
            Action::Fence(f) => (f, host.fence(f).await),
            Action::Unfence(f) => (f, host.unfence(f).await),
            Action::Delete(f) => {
                handoff::fault::hit(handoff::fault::Fault::SourceBeforeDelete);
                (f, host.delete(f, state.epoch).await)
            }
        };
        match result {
            Ok(()) => {
                let mut fenced = ctx.fenced.lock().unwrap_or_else(PoisonError::into_inner);
                match action {
                    Action::Fence(_) => {
                        fenced.insert(fragment);
                        tracing::info!(
                            fragment,
                            epoch = state.epoch,
                            "fenced fragment ${fragment}: a handoff from this node is in flight"
                        );
                    }
                    Action::Unfence(_) => {
                        fenced.remove(&fragment);
                        tracing::info!(
                            fragment,
                            epoch = state.epoch,
                            "unfenced fragment ${fragment}: this node owns it and nothing moves or reshapes it (a handoff to it committed, or one from it was aborted)"
                        );
                    }
                    Action::Delete(_) => {
                        fenced.remove(&fragment);
                        tracing::info!(
                            fragment,
                            epoch = state.epoch,
                            "deleted this node's copy of fragment ${fragment}: the map gives it to another node"
                        );
                    }
                }
            }
            Err(e @ (handoff::HostError::NotYet { .. } | handoff::HostError::Stopped)) => {
                ok = false;
                tracing::debug!(fragment, "handoff reconcile step {action:?} waits: {e}");
            }
            Err(e) => {
                ok = false;
                tracing::warn!(fragment, "handoff reconcile step {action:?} failed (retried): {e}");
            }
        }
    }
    if ok {
        *reconciled = Some(state.epoch);
    }
}

/// Where `drain_before_exit` asks the control plane to drain (set once it runs).
static DRAIN: std::sync::OnceLock<tokio::sync::mpsc::Sender<std::sync::mpsc::SyncSender<()>>> =
    std::sync::OnceLock::new();

/// Graceful shutdown of a cluster data node: asks the coordinator to move every fragment of
/// this node to the others and waits until none is left (bounded by `DRAIN_TIMEOUT_MS`,
/// progress logged). Returns at once without a running control plane, on a proxy, on the
/// last data node and when this build cannot hand off. Blocking: call it from a plain thread
/// (the signal thread), never from an executor or the control plane.
pub fn drain_before_exit() {
    let Some(tx) = DRAIN.get() else { return };
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
    if tx.try_send(done_tx).is_err() {
        return;
    }
    let bound = Duration::from_millis(DRAIN_TIMEOUT_MS + PEER_REQUEST_TIMEOUT_MS);
    let _ = done_rx.recv_timeout(bound);
}

async fn drain_loop(
    ctx: Arc<Ctx>,
    mut requests: tokio::sync::mpsc::Receiver<std::sync::mpsc::SyncSender<()>>,
) {
    while let Some(done) = requests.recv().await {
        drain(&ctx).await;
        let _ = done.send(());
    }
}

async fn drain(ctx: &Ctx) {
    let me = ctx.config.node_id;
    let state = ctx.state();
    let mine = |s: &ClusterState| {
        s.fragments_of(me) + s.handoffs.iter().filter(|h| h.to == me || h.from == me).count()
    };
    if ctx.config.role != Role::Data {
        return;
    }
    if mine(&state) == 0 {
        announce_leaving(ctx).await;
        return;
    }
    if !ctx.config.handoff_on_shutdown {
        tracing::info!(
            "leaving with this node's fragments (--handoff-on-shutdown false): unavailable until it returns"
        );
        return;
    }
    if !state.data_members().any(|n| n != me && !state.leaving.contains(&n)) {
        tracing::info!("this is the cluster's last data node: leaving with its fragments");
        return;
    }
    if handoff::host().is_none() {
        tracing::warn!(
            "this build cannot hand fragments off: leaving with them (unavailable until this node returns)"
        );
        return;
    }
    ctx.draining.store(true, std::sync::atomic::Ordering::Relaxed);
    let began = Instant::now();
    let deadline = began + Duration::from_millis(DRAIN_TIMEOUT_MS);
    tracing::info!(
        fragments = state.fragments_of(me),
        "handing off every fragment of this node before leaving"
    );
    let mut told = false;
    let mut last_report = began;
    let mut last_change = (began, mine(&state));
    let stall = Duration::from_millis(DRAIN_STALL_MS);
    let mut interval = tokio::time::interval(Duration::from_millis(CONTROL_TICK_MS));
    while Instant::now() < deadline {
        interval.tick().await;
        let state = ctx.state();
        if !told {
            told = match ask_leave(ctx).await {
                Ok(told) => told,
                Err(reason) => {
                    tracing::info!("leaving with this node's fragments: {reason}");
                    return;
                }
            };
        }
        let left = mine(&state);
        // Done once the map gives this node nothing and its old copies are deleted.
        let copies = ctx.fenced.lock().unwrap_or_else(PoisonError::into_inner).len();
        if told && left == 0 && copies == 0 {
            tracing::info!(
                ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
                "handed off every fragment; leaving the cluster"
            );
            return;
        }
        let moving = state.handoffs.iter().any(|h| h.from == me);
        if left != last_change.1 || moving {
            last_change = (Instant::now(), left);
        } else if last_change.0.elapsed() >= stall {
            tracing::warn!(
                fragments_left = left,
                "graceful shutdown: no handoff progress for {stall:?} (no coordinator, or no node to take them); leaving with the rest (unavailable until this node returns)"
            );
            return;
        }
        if last_report.elapsed() >= Duration::from_millis(DRAIN_PROGRESS_MS) {
            last_report = Instant::now();
            tracing::info!(
                fragments_left = left,
                handoffs = state.handoffs.len(),
                "handing off before leaving"
            );
        }
    }
    tracing::warn!(
        fragments_left = mine(&ctx.state()),
        "graceful shutdown: fragments not handed off within {DRAIN_TIMEOUT_MS} ms stay on this node (unavailable until it returns)"
    );
}

/// A data node with no fragment stopping: nothing to hand off, but the coordinator must
/// not plan moves to it (a stopped node would hold them, and a leaving node's drain, until it
/// returns), so it asks to be recorded as leaving, for at most `PEER_REQUEST_TIMEOUT_MS`.
/// Starting again clears the mark (`handle_join`).
async fn announce_leaving(ctx: &Ctx) {
    // Leading, this node would otherwise take the mark back as a restarted leaver would.
    ctx.draining.store(true, std::sync::atomic::Ordering::Relaxed);
    let bound = Duration::from_millis(PEER_REQUEST_TIMEOUT_MS);
    let ask = async {
        let mut interval = tokio::time::interval(Duration::from_millis(CONTROL_TICK_MS));
        loop {
            interval.tick().await;
            match ask_leave(ctx).await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(reason) => return Err(reason),
            }
        }
    };
    match tokio::time::timeout(bound, ask).await {
        Ok(Ok(())) => tracing::info!("no fragments to hand off; recorded as leaving"),
        Ok(Err(reason)) => {
            tracing::info!("no fragments to hand off; not recorded as leaving: {reason}")
        }
        Err(_) => tracing::info!(
            "no fragments to hand off; no coordinator recorded this node as leaving within {bound:?} (it may be planned moves until it returns or is removed)"
        ),
    }
}

/// Asks the coordinator to record this node as leaving: true once it did (or the applied
/// state already records it), false to ask again, an error when it refused for good (the last
/// data node staying).
async fn ask_leave(ctx: &Ctx) -> Result<bool, String> {
    let me = ctx.config.node_id;
    let state = ctx.state();
    if state.leaving.contains(&me) {
        return Ok(true);
    }
    if !state.data_members().any(|n| n != me && !state.leaving.contains(&n)) {
        return Err("every other data node is leaving too".to_owned());
    }
    let metrics = ctx.raft.metrics().borrow().clone();
    let Some(leader) = metrics.current_leader else { return Ok(false) };
    if leader == ctx.me.node {
        return Ok(propose(ctx, Command::SetLeaving { node: me, leaving: true }).await);
    }
    let Some(addr) =
        metrics.membership_config.membership().get_node(&leader).map(|n| n.addr.clone())
    else {
        return Ok(false);
    };
    let answer = match PeerConn::dial(&addr, &ctx.hello).await {
        Ok(mut c) => c.request(&Message::Leave { node: u64::from(me) }).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(Message::Leaving) => Ok(true),
        Ok(Message::JoinFailed { reason }) if reason.contains("last data member") => Err(reason),
        Ok(other) => {
            tracing::debug!("leave answered {}", other.kind());
            Ok(false)
        }
        Err(e) => {
            tracing::debug!("leave: {e}");
            Ok(false)
        }
    }
}

/// Answers the executors' operator requests, each in its own task (bounded inside).
async fn ops_loop(ctx: Arc<Ctx>, requests: flume::Receiver<MoveRequest>) {
    while let Ok(request) = requests.recv_async().await {
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            let (ctx, fragment) = (&*ctx, request.fragment);
            let answer = match request.op {
                Op::Move { to } => {
                    let ask = Message::PlanMove { fragment, to };
                    on_coordinator(ctx, ask, plan_move_here(ctx, fragment, to)).await
                }
                Op::Split { at } => {
                    let ask = Message::PlanReshape { fragment, at, merge_with: None };
                    on_coordinator(ctx, ask, plan_reshape_here(ctx, fragment, at, None)).await
                }
                Op::Merge { with } => {
                    let ask = Message::PlanReshape { fragment, at: None, merge_with: Some(with) };
                    let here = plan_reshape_here(ctx, fragment, None, Some(with));
                    on_coordinator(ctx, ask, here).await
                }
                Op::RemoveNode { node } => {
                    let ask = Message::RemoveNode { node };
                    on_coordinator(ctx, ask, remove_member_here(ctx, node)).await
                }
                Op::Collection { name, expected, sharding } => {
                    let ask = Message::SetCollection {
                        name: name.clone(),
                        expected,
                        sharding: sharding.clone(),
                    };
                    on_coordinator(ctx, ask, set_collection_here(ctx, name, expected, sharding))
                        .await
                }
            };
            let _ = request.reply.send(answer);
        });
    }
}

/// Runs an operator's request on the coordinator: `here` if this node leads, else sends
/// `ask` to the leader and returns its `MoveAnswer` (`here` is then never polled).
async fn on_coordinator(
    ctx: &Ctx,
    ask: Message,
    here: impl std::future::Future<Output = MoveResult>,
) -> MoveResult {
    let metrics = ctx.raft.metrics().borrow().clone();
    let Some(leader) = metrics.current_leader else {
        return Err(MoveError::NoCoordinator {
            reason: "no coordinator is known (an election may be under way); try again".to_owned(),
        });
    };
    if leader == ctx.me.node {
        return here.await;
    }
    let Some(addr) =
        metrics.membership_config.membership().get_node(&leader).map(|n| n.addr.clone())
    else {
        return Err(MoveError::NoCoordinator {
            reason: format!("the coordinator, node {leader}, has no known address"),
        });
    };
    let unreachable = |e: PeerError| MoveError::NoCoordinator {
        reason: format!("coordinator node {leader}: {e}"),
    };
    let mut conn = PeerConn::dial(&addr, &ctx.hello).await.map_err(unreachable)?;
    match conn.request(&ask).await.map_err(unreachable)? {
        Message::MoveAnswer(answer) => answer,
        other => Err(MoveError::NoCoordinator {
            reason: format!("coordinator node {leader} answered {}", other.kind()),
        }),
    }
}

/// Runs an operator's request that only the coordinator serves: a node that lost the lead
/// answers so, and the asking node reports it (no forwarding chains).
async fn answer_if_leading(
    ctx: &Ctx,
    here: impl std::future::Future<Output = MoveResult>,
) -> Message {
    Message::MoveAnswer(if ctx.raft.metrics().borrow().current_leader == Some(ctx.me.node) {
        here.await
    } else {
        Err(MoveError::NoCoordinator {
            reason: format!("node {} is no longer the coordinator", ctx.me.node),
        })
    })
}

/// Proposes an operator's command on this node, the coordinator, waiting at most the peer
/// request timeout for it to commit (`what` names it in the error): what the state machine
/// made of it.
async fn write_bounded(
    ctx: &Ctx,
    command: Command,
    what: &str,
) -> Result<crate::cluster::state::Applied, MoveError> {
    let bound = Duration::from_millis(PEER_REQUEST_TIMEOUT_MS);
    let written = tokio::time::timeout(bound, ctx.raft.client_write(command))
        .await
        .map_err(|_| MoveError::NoCoordinator {
            reason: format!("{what} was not committed within {bound:?} (no quorum?)"),
        })?
        .map_err(|e| MoveError::NoCoordinator { reason: e.to_string() })?;
    Ok(written.data)
}

/// Plans a move on this node, the coordinator: checks the destination, then proposes
/// `PlanMove` (bounded) and maps the state machine's refusal.
async fn plan_move_here(ctx: &Ctx, fragment: u32, to: u32) -> MoveResult {
    use crate::cluster::state::CommandError as C;
    match ctx.state().members.get(&to) {
        None => return Err(MoveError::UnknownNode { node: to }),
        Some(m) if m.role == Role::Proxy => return Err(MoveError::ProxyNode { node: to }),
        Some(_) => {}
    }
    match write_bounded(ctx, Command::PlanMove { fragment, to }, "the move").await? {
        Ok(epoch) => {
            tracing::info!(fragment, to, "coordinator planned an operator's move");
            Ok(epoch)
        }
        Err(C::NoMap) => Err(MoveError::NoMap),
        Err(C::UnknownFragment { fragment }) => Err(MoveError::UnknownFragment { fragment }),
        Err(C::AlreadyOwner { fragment, node }) => Err(MoveError::AlreadyOwner { fragment, node }),
        Err(C::AlreadyMoving { fragment }) => Err(MoveError::AlreadyMoving { fragment }),
        Err(C::NotDataMember { node }) => Err(MoveError::ProxyNode { node }),
        Err(other) => Err(MoveError::NoCoordinator { reason: other.to_string() }),
    }
}

/// Removes member `node` on this node, the coordinator: refused while the node runs (it
/// answered a ping lately, or answers one now) or holds fragments; else `RemoveMember` in the
/// state machine (bounded), then the raft membership change that drops it as a voter (or
/// learner). Each step is skipped when already done, so a retry after a failure between them
/// finishes the removal.
async fn remove_member_here(ctx: &Ctx, node: u32) -> MoveResult {
    use crate::cluster::state::CommandError as C;
    let raft_id = u64::from(node);
    let membership = ctx.raft.metrics().borrow().membership_config.membership().clone();
    let in_raft = membership.get_node(&raft_id).is_some();
    // One copy of the replicated state (`Ctx::state` clones it): the member and the epoch.
    let (address, mut epoch) = {
        let state = ctx.state();
        (state.members.get(&node).map(|m| m.peer_addr.clone()), state.epoch)
    };
    let in_state = address.is_some();
    if !in_state && !in_raft {
        return Err(MoveError::UnknownNode { node });
    }
    let running = |why: &str| MoveError::Refused {
        reason: format!(
            "node {node} is running ({why}); stop it first (SIGTERM hands its fragments to the \
             others), then remove it"
        ),
    };
    if node == ctx.config.node_id {
        return Err(running("it is the coordinator"));
    }
    if ctx.reachable(node) {
        return Err(running("it answered a ping lately"));
    }
    let probe = address.or_else(|| membership.get_node(&raft_id).map(|n| n.addr.clone()));
    if let Some(addr) = probe {
        match PeerConn::dial(&addr, &ctx.hello).await {
            Ok(mut conn) => {
                if conn.request(&Message::Ping).await.is_ok() {
                    return Err(running(&format!("it answers at {addr}")));
                }
            }
            // Something answered the handshake there, only not as a member of ours.
            Err(e @ (PeerError::Handshake { .. } | PeerError::Wire { .. })) => {
                return Err(running(&format!("{e}")));
            }
            Err(_) => {}
        }
    }
    if in_state {
        match write_bounded(ctx, Command::RemoveMember { node }, "the member's removal").await? {
            Ok(e) => epoch = e,
            Err(C::UnknownMember { .. }) => {}
            Err(other) => return Err(MoveError::Refused { reason: other.to_string() }),
        }
    }
    if in_raft {
        let ids = BTreeSet::from([raft_id]);
        let change = if membership.voter_ids().any(|v| v == raft_id) {
            ChangeMembers::RemoveVoters(ids)
        } else {
            ChangeMembers::RemoveNodes(ids)
        };
        let bound = Duration::from_millis(PEER_REQUEST_TIMEOUT_MS);
        tokio::time::timeout(bound, ctx.raft.change_membership(change, false))
            .await
            .map_err(|_| MoveError::NoCoordinator {
                reason: format!("the membership change was not committed within {bound:?}"),
            })?
            .map_err(|e| MoveError::NoCoordinator { reason: format!("membership change: {e}") })?;
    }
    tracing::info!(node, "coordinator removed a member");
    Ok(epoch)
}

/// Proposes `SetCollection` on this node, the coordinator (bounded), and maps the state
/// machine's refusal.
async fn set_collection_here(
    ctx: &Ctx,
    name: String,
    expected: u64,
    sharding: Option<String>,
) -> MoveResult {
    use crate::cluster::state::CommandError as C;
    let command = Command::SetCollection { name: name.clone(), expected, sharding };
    match write_bounded(ctx, command, "the catalog change").await? {
        Ok(version) => {
            tracing::info!(collection = %name, version, "coordinator recorded a collection configuration change");
            Ok(version)
        }
        Err(C::CatalogChanged { version }) => Err(MoveError::CatalogChanged { version }),
        Err(other) => Err(MoveError::Refused { reason: other.to_string() }),
    }
}

/// Begins a split or merge on this node, the coordinator: proposes `BeginSplit` /
/// `BeginMerge` (bounded) and maps the state machine's refusal. The next tick drives it.
async fn plan_reshape_here(
    ctx: &Ctx,
    fragment: u32,
    at: Option<u32>,
    merge_with: Option<u32>,
) -> MoveResult {
    use crate::cluster::state::CommandError as C;
    let command = match merge_with {
        Some(right) => Command::BeginMerge { left: fragment, right },
        None => Command::BeginSplit { fragment, at },
    };
    match write_bounded(ctx, command, "the split or merge").await? {
        Ok(epoch) => {
            tracing::info!(
                fragment,
                ?at,
                ?merge_with,
                epoch,
                "coordinator began an operator's split or merge"
            );
            Ok(epoch)
        }
        Err(C::NoMap) => Err(MoveError::NoMap),
        Err(C::UnknownFragment { fragment }) => Err(MoveError::UnknownFragment { fragment }),
        Err(other) => Err(MoveError::Refused { reason: other.to_string() }),
    }
}

/// Drives every split or merge in flight that no task of this coordinator drives yet (an
/// operator's, just begun, or a previous coordinator's), while its owner answers: a node that
/// does not may hold the only copy, so its sources wait for it.
fn drive_reshapes(ctx: &Arc<Ctx>, state: &ClusterState) {
    if handoff::host().is_none() {
        return;
    }
    for r in &state.reshapes {
        let Some(owner) = r.targets.first().map(|t| t.node) else { continue };
        if !ctx.reachable(owner) {
            continue;
        }
        if ctx.reshaping.lock().unwrap_or_else(PoisonError::into_inner).insert(r.id) {
            tokio::spawn(drive_reshape(Arc::clone(ctx), r.clone()));
        }
    }
}

/// Drives one split or merge: the owner builds the new fragments, then the coordinator
/// commits them on `ReshapeDone` or aborts on anything else.
async fn drive_reshape(ctx: Arc<Ctx>, r: crate::cluster::state::Reshape) {
    let began = Instant::now();
    let owner = r.targets.first().map_or(0, |t| t.node);
    tracing::info!(reshape = r.id, sources = ?r.sources, owner, "split or merge begun");
    let outcome = if owner == ctx.config.node_id {
        owner_side(&ctx, r.id).await
    } else {
        let failed = |reason: String| Message::ReshapeFailed { reshape: r.id, reason };
        match ctx.state().members.get(&owner).map(|m| m.peer_addr.clone()) {
            None => failed(format!("owner node {owner} is not a member")),
            Some(addr) => match PeerConn::dial(&addr, &ctx.hello).await {
                Err(e) => failed(e.to_string()),
                Ok(mut conn) => {
                    let bound = HANDOFF_TIMEOUT_MS + PEER_REQUEST_TIMEOUT_MS;
                    let start = Message::ReshapeStart { reshape: r.id };
                    conn.request_within(&start, bound)
                        .await
                        .unwrap_or_else(|e| failed(e.to_string()))
                }
            },
        }
    };
    let (command, docs) = match outcome {
        Message::ReshapeDone { reshape, docs } if reshape == r.id => {
            (Command::CommitReshape { reshape: r.id }, Some(docs))
        }
        other => {
            let why = match other {
                Message::ReshapeFailed { reason, .. } => reason,
                other => format!("the owner answered {}", other.kind()),
            };
            tracing::warn!(reshape = r.id, "split or merge failed, aborting it: {why}");
            (Command::AbortReshape { reshape: r.id }, None)
        }
    };
    let decided = propose_outcome(&ctx, command).await;
    match (docs, decided) {
        (Some(docs), Proposal::Committed) => tracing::info!(
            reshape = r.id,
            sources = ?r.sources,
            targets = ?r.targets.iter().map(|t| t.id).collect::<Vec<_>>(),
            docs,
            ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
            "split or merge committed"
        ),
        (None, Proposal::Committed) => {
            tracing::info!(reshape = r.id, "split or merge aborted: the sources stay")
        }
        (_, Proposal::Refused(why)) => tracing::warn!(
            reshape = r.id,
            "split or merge decision refused by the coordinator's state ({why}); the next \
             coordinator tick drives it again"
        ),
        (_, Proposal::Unconfirmed(why)) => tracing::warn!(
            reshape = r.id,
            "split or merge decision not confirmed ({why}); it may still commit, and the next \
             coordinator tick drives it again if not"
        ),
    }
    ctx.reshaping.lock().unwrap_or_else(PoisonError::into_inner).remove(&r.id);
}

/// The owner's side of `ReshapeStart`: checks its applied state has the reshape in flight on
/// this node, then builds the new fragments (bounded by `HANDOFF_TIMEOUT_MS`).
async fn owner_side(ctx: &Ctx, reshape: u64) -> Message {
    let failed = |reason: String| Message::ReshapeFailed { reshape, reason };
    let Some(host) = handoff::host() else {
        return failed("the owner's data path cannot split or merge (no fragment host)".to_owned());
    };
    let state = ctx.state_when(|s| s.last_reshape >= reshape).await;
    let Some(r) = state.reshapes.iter().find(|r| r.id == reshape) else {
        return failed(format!("no split or merge {reshape} is in flight here"));
    };
    if r.targets.iter().any(|t| t.node != ctx.config.node_id) {
        return failed(format!("split or merge {reshape} is not on node {}", ctx.config.node_id));
    }
    let sources: Option<Vec<_>> =
        r.sources.iter().map(|id| state.fragments.iter().find(|f| f.id == *id).copied()).collect();
    let Some(sources) = sources else {
        return failed(format!("a source of split or merge {reshape} left the map"));
    };
    let bound = Duration::from_millis(HANDOFF_TIMEOUT_MS);
    let build = async {
        let _one_at_a_time = ctx.building.lock().await;
        // Still in flight once the previous build ended (not committed or aborted meanwhile).
        if !ctx.state().reshapes.iter().any(|q| q.id == reshape) {
            return Err(format!("split or merge {reshape} ended while waiting to build"));
        }
        let since = Instant::now();
        loop {
            match handoff::run_reshape(host.as_ref(), r, &sources, &ctx.fenced).await {
                // A restarted owner's control plane can get here before its data path has
                // opened the sources again: wait for them (bounded) instead of aborting. A
                // build that failed on a source's fence or export did nothing a retry repeats
                // wrongly (fences are idempotent, `create_empty` drops a partial copy).
                Err(handoff::HostError::NotHere { fragment })
                    if r.sources.contains(&fragment)
                        && since.elapsed() < Duration::from_millis(RESHAPE_SOURCE_OPEN_WAIT_MS) =>
                {
                    tokio::time::sleep(Duration::from_millis(RESHAPE_SOURCE_POLL_MS)).await;
                }
                other => return other.map_err(|e| e.to_string()),
            }
        }
    };
    match tokio::time::timeout(bound, build).await {
        Ok(Ok(docs)) => Message::ReshapeDone { reshape, docs },
        Ok(Err(e)) => failed(e),
        Err(_) => failed(format!("the build did not finish within {bound:?}")),
    }
}

/// After a coordinator wipe: allocates the map the nodes held before (`cluster::prior`), once
/// every node that held fragments is a data member again.
async fn adopt_prior(ctx: &Ctx, prior: &PriorMap, state: &ClusterState) {
    match crate::cluster::prior::decide(prior, state) {
        PriorDecision::Wait { missing } => {
            let mut logged =
                ctx.prior_missing_logged.lock().unwrap_or_else(PoisonError::into_inner);
            if *logged != missing {
                tracing::info!(
                    ?missing,
                    "coordinator waits for the nodes that held fragments before the coordinator \
                     state was wiped (to allocate afresh instead, stop the cluster and remove \
                     cluster/prior-map.json from every data directory)"
                );
                logged.clone_from(&missing);
            }
        }
        PriorDecision::Allocate(owners) => {
            let count = owners.len();
            let command = Command::Allocate { owners, min_members: ctx.config.min_members };
            if propose(ctx, command).await {
                tracing::info!(
                    fragments = count,
                    prior_epoch = prior.epoch,
                    "coordinator adopted the fragments where the nodes held them before the \
                     coordinator state was wiped"
                );
            }
        }
    }
}

/// Proposes a command; true if it was committed and applied without a refusal. Bounded: a
/// leader that lost its quorum does not know it yet, and its proposal would wait forever.
async fn propose(ctx: &Ctx, command: Command) -> bool {
    matches!(propose_outcome(ctx, command).await, Proposal::Committed)
}

/// What became of a proposed coordinator command.
#[derive(Debug)]
enum Proposal {
    /// Committed and applied.
    Committed,
    /// Committed, and the state machine refused it (the state had moved on).
    Refused(String),
    /// Not confirmed: the proposal timed out or failed (no leader, leader changed). It may
    /// still commit later.
    Unconfirmed(String),
}

/// Proposes `command` and says what became of it, bounded by the peer request timeout.
async fn propose_outcome(ctx: &Ctx, command: Command) -> Proposal {
    let bound = Duration::from_millis(PEER_REQUEST_TIMEOUT_MS);
    let Ok(written) = tokio::time::timeout(bound, ctx.raft.client_write(command)).await else {
        tracing::debug!("coordinator proposal not committed within {bound:?}");
        return Proposal::Unconfirmed(format!("not confirmed within {bound:?}"));
    };
    match written {
        Ok(r) => match r.data {
            Ok(_) => Proposal::Committed,
            Err(e) => {
                tracing::debug!("coordinator command refused: {e}");
                Proposal::Refused(e.to_string())
            }
        },
        Err(e) => {
            tracing::debug!("coordinator proposal failed: {e}");
            Proposal::Unconfirmed(e.to_string())
        }
    }
}

/// Activates every pending collection configuration change that every member reports
/// installed (`ClusterState::activatable`): from then on nodes route by it.
async fn activate_collections(ctx: &Ctx, state: &ClusterState) {
    let mut installed = ctx.catalogs.lock().unwrap_or_else(PoisonError::into_inner).clone();
    installed.insert(ctx.config.node_id, crate::cluster::region::installed_catalog());
    for (name, version) in state.activatable(&installed) {
        if propose(ctx, Command::ActivateCollection { name: name.clone(), version }).await {
            tracing::info!(collection = %name, version, "collection configuration in force on every member");
        }
    }
}

/// Builds and publishes the view; logs reachability changes (WARN when a member stops
/// answering, INFO when it answers again).
fn publish_view(ctx: &Ctx, reachable: &mut BTreeMap<u32, bool>) {
    let metrics = ctx.raft.metrics().borrow().clone();
    let state = ctx.state();
    let me = ctx.config.node_id;
    let catalogs = ctx.catalogs.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let voters: BTreeSet<u32> = metrics
        .membership_config
        .membership()
        .voter_ids()
        .filter_map(|v| u32::try_from(v).ok())
        .collect();
    let leader = metrics.current_leader.and_then(|l| u32::try_from(l).ok());
    let mut members = Vec::new();
    let mut ids: BTreeSet<u32> = state.members.keys().copied().collect();
    ids.insert(me);
    for node in ids {
        let up = ctx.reachable(node);
        // A member never reached yet is not news; a change after that is.
        match (reachable.get(&node).copied(), up) {
            (None, true) => {
                reachable.insert(node, true);
            }
            (Some(true), false) => {
                tracing::warn!(node, "peer node {node} is unreachable");
                reachable.insert(node, false);
            }
            (Some(false), true) => {
                tracing::info!(node, "peer node {node} is reachable again");
                reachable.insert(node, true);
            }
            _ => {}
        }
        let (role, peer_addr, pg_addr) = match state.members.get(&node) {
            Some(m) => (m.role, m.peer_addr.clone(), m.pg_addr.clone()),
            None => (ctx.me.role, ctx.me.peer_addr.clone(), ctx.me.pg_addr.clone()),
        };
        members.push(MemberView {
            node,
            role,
            peer_addr,
            pg_addr,
            reachable: up,
            voter: voters.contains(&node),
            leader: leader == Some(node),
            fragments: state.fragments_of(node),
            this: node == me,
            leaving: state.leaving.contains(&node),
            catalog: if node == me {
                crate::cluster::region::installed_catalog()
            } else {
                catalogs.get(&node).copied().unwrap_or(0)
            },
        });
    }
    publish(ClusterView {
        cluster: ctx.config.name.clone(),
        me,
        leader,
        term: metrics.current_term,
        epoch: state.epoch,
        members,
        map: state.shard_map(),
        moves_planned: state.moves.len(),
        strategy: ctx.strategy.name(),
        handoffs: state.handoffs.clone(),
        reshapes: state.reshapes.clone(),
        catalog_version: state.catalog_version,
        collections: state.collections.clone(),
    });
}

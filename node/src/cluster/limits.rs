//! Every bound of the cluster layer, with its unit and reason.

/// Largest peer frame body, in bytes. Raft append-entries batches and snapshot chunks are cut
/// well below it (`RAFT_SNAPSHOT_CHUNK_BYTES`, `RAFT_APPEND_ENTRIES_MAX`); a length above it is
/// refused before anything is allocated.
pub const PEER_FRAME_BYTES_MAX: u32 = 8 << 20;

/// Bytes of a frame header: body length (u32 LE) and crc32 of the body (u32 LE).
pub const PEER_FRAME_HEADER_BYTES: usize = 8;

/// Longest cluster name, in bytes: a label, not a document.
pub const CLUSTER_NAME_BYTES_MAX: usize = 64;

/// Longest address text carried in a handshake or join, in bytes.
pub const PEER_ADDR_BYTES_MAX: usize = 256;

/// Snapshot chunk size openraft sends per install-snapshot RPC, in bytes; under the frame
/// limit with room for the envelope and JSON escaping.
pub const RAFT_SNAPSHOT_CHUNK_BYTES: u64 = 1 << 20;

/// Entries per append-entries RPC; shard-map commands are small, so this keeps frames far
/// below `PEER_FRAME_BYTES_MAX`.
pub const RAFT_APPEND_ENTRIES_MAX: u64 = 64;

/// Most members a cluster accepts; membership and `SHOW CLUSTER` are linear in it.
pub const CLUSTER_MEMBERS_MAX: usize = 64;

/// Addresses in `--join`.
pub const JOIN_ADDRS_MAX: usize = CLUSTER_MEMBERS_MAX;

/// Milliseconds to wait for a TCP connect to a peer before trying the next one.
pub const PEER_CONNECT_TIMEOUT_MS: u64 = 1_000;

/// Milliseconds a peer has to answer one request before the connection is dropped.
pub const PEER_REQUEST_TIMEOUT_MS: u64 = 3_000;

/// Milliseconds the leader spends on one join (learner catch-up and two membership commits)
/// before answering `JoinFailed`; the joiner waits `PEER_REQUEST_TIMEOUT_MS` longer for that
/// answer. Bounds how long a join without a quorum holds a peer connection.
pub const JOIN_WAIT_MS: u64 = 3 * PEER_REQUEST_TIMEOUT_MS;

/// Distinct handshake refusals logged at WARN/ERROR (a refused peer retries every tick; the
/// operator needs each reason once); later ones go to DEBUG.
pub const REFUSALS_LOGGED_MAX: usize = CLUSTER_MEMBERS_MAX;

/// Period of the control plane's loop (join retries, reachability pings, coordinator
/// decisions), in milliseconds. Bounds how stale `SHOW CLUSTER` can be.
pub const CONTROL_TICK_MS: u64 = 200;

/// A member is shown as reachable when it answered a ping within this many milliseconds.
pub const PEER_REACHABLE_WITHIN_MS: u64 = 1_500;

/// Milliseconds an accepted peer connection may stay silent before it is closed. Members ping
/// every `CONTROL_TICK_MS` and raft sends heartbeats more often, so only an abandoned
/// connection gets here; closing it frees its `PEER_CONNECTIONS_MAX` slot.
pub const PEER_IDLE_TIMEOUT_MS: u64 = 30_000;

/// Peer connections a node serves at once; each costs a task and a buffer.
pub const PEER_CONNECTIONS_MAX: usize = 4 * CLUSTER_MEMBERS_MAX;

/// Period at which each executor publishes its fragments' live bytes for the coordinator's
/// `--rebalance-load bytes`, in milliseconds.
pub const LOAD_REPORT_MS: u64 = 1_000;

/// Operator requests (`ALTER FRAGMENT`) queued from the executors to the control plane; more
/// are refused at once (the operator retries) instead of waiting.
pub const OPS_QUEUE_MAX: usize = 16;

/// Bytes of one raft log record on disk (an entry is one command, small); a larger length
/// read back is corruption.
pub const RAFT_RECORD_BYTES_MAX: u32 = PEER_FRAME_BYTES_MAX;

/// Milliseconds the source waits for the destination to acknowledge one handoff chunk
/// (import plus fdatasync of about `storage::limits::EXPORT_CHUNK_BYTES`) before the
/// handoff fails and is aborted.
pub const HANDOFF_CHUNK_ACK_MS: u64 = 30_000;

/// Default of `--move-target-silent-ms`: a planned move whose destination has not answered a
/// ping for this long is dropped (as Akka Cluster Sharding's `handoff-timeout` aborts a
/// rebalance that does not complete). Long against `PEER_REACHABLE_WITHIN_MS`, so a node
/// restarting or briefly cut off keeps the moves planned to it.
pub const MOVE_TARGET_SILENT_MS_DEFAULT: u64 = 60_000;

/// Milliseconds the coordinator waits for a whole handoff (`HandoffDone`) before aborting it;
/// bounds how long a fragment is unavailable for writes (1 GiB at ~4 MiB/s fits).
pub const HANDOFF_TIMEOUT_MS: u64 = 600_000;

/// Milliseconds a node waits for its applied state to reach a handoff's epoch before it
/// refuses the handoff request as stale or early.
pub const HANDOFF_STATE_WAIT_MS: u64 = 5_000;

/// Milliseconds a data node's graceful shutdown waits for its fragments to be handed off
/// before it leaves with the rest (they stay unavailable until it returns).
pub const DRAIN_TIMEOUT_MS: u64 = 120_000;

/// Milliseconds a draining node waits without progress (not yet recorded as leaving, or no
/// handoff of its fragments in flight and none finished) before it leaves with the rest: a
/// cluster stopping whole, or without a coordinator, must not wait `DRAIN_TIMEOUT_MS`.
pub const DRAIN_STALL_MS: u64 = 10_000;

/// Milliseconds between progress lines while a node drains.
pub const DRAIN_PROGRESS_MS: u64 = 1_000;

/// Handoff requests queued from the control plane to the executors (the bridge channel);
/// a full queue makes the control plane wait.
pub const HOST_REQUESTS_MAX: usize = 64;

/// Milliseconds a fence waits for transactions prepared on the fragment before it to commit
/// or abort (the engine's sweeper resolves one within its 10 s prepared timeout); past it the
/// handoff fails and is aborted.
pub const HANDOFF_FENCE_PREPARED_WAIT_MS: u64 = 30_000;

/// Milliseconds between two looks at a fenced fragment's prepared transactions.
pub const HANDOFF_FENCE_POLL_MS: u64 = 5;

/// Milliseconds a split or merge's owner waits for its sources to be open (a restarted owner's
/// control plane can drive the build before its data path has opened them again); past it the
/// build fails and the split or merge is aborted.
pub const RESHAPE_SOURCE_OPEN_WAIT_MS: u64 = 30_000;

/// Milliseconds between two tries of a build whose source is not open yet.
pub const RESHAPE_SOURCE_POLL_MS: u64 = 50;

/// Milliseconds the coordinator waits after aborting a fragment's handoff before it begins
/// another of that fragment (a lasting failure is retried at this pace, not every tick).
pub const HANDOFF_RETRY_MS: u64 = 3_000;

/// Imports a node receives at once (one per fragment arriving).
pub const HANDOFFS_INCOMING_MAX: usize = 16;

/// Executors of a member a handoff's destination executor is chosen among: a member reports
/// its own count, and placing is linear in it.
pub const MEMBER_EXECUTORS_PLACED_MAX: u32 = 1_024;

const _: () = assert!(RAFT_SNAPSHOT_CHUNK_BYTES * 4 < PEER_FRAME_BYTES_MAX as u64);
const _: () = assert!(JOIN_ADDRS_MAX <= CLUSTER_MEMBERS_MAX);
const _: () = assert!(PEER_IDLE_TIMEOUT_MS > 10 * CONTROL_TICK_MS);

/// How often each executor of a cluster node looks at the control plane's published view for a
/// newer shard map, and how often a buffered statement looks whether its fragment has a
/// location now, in milliseconds. Bounds the delay between a committed map and the data path.
pub const REGION_POLL_MS: u64 = 5;

/// Statements one fragment's region buffer holds at once (waiting for the fragment to be
/// allocated or handed off); one more is refused with SQLSTATE 53400.
pub const REGION_BUFFER_PER_FRAGMENT: usize = 64;

/// Statements all region buffers of a node hold at once. Before the map is allocated every
/// statement waits in one buffer bounded by this; past it, SQLSTATE 53400.
pub const REGION_BUFFER_TOTAL: usize = 256;

/// Longest a buffered statement waits for its fragment's location before it fails, in ms.
pub const REGION_BUFFER_WAIT_MS: u64 = 30_000;

/// Times a statement is routed again after an owner answered that the region's map is stale
/// (`StaleEpoch`) or that it does not hold a fragment (`NotMine`).
pub const REGION_RETRIES_MAX: u32 = 8;

const _: () = assert!(REGION_BUFFER_PER_FRAGMENT <= REGION_BUFFER_TOTAL);

/// Idle data connections each executor keeps per remote node (`cluster::forward`); more are
/// closed after their request.
pub const DATA_POOL_IDLE_MAX: usize = 16;

/// Milliseconds an accepted data connection may stay silent before it is closed; a pooled one
/// idle for half of this is not reused (the owner may be closing it).
pub const DATA_CONN_IDLE_MS: u64 = 30_000;

/// Longest a forwarded share may take on its owner (read and write timeout of a data
/// connection), in milliseconds. Above a buffered statement's wait, which may run there.
pub const FORWARD_TIMEOUT_MS: u64 = REGION_BUFFER_WAIT_MS + 10_000;

/// Largest message on a data connection (a forwarded request or its answer), as its archive's
/// bytes. One larger than a frame (`PEER_FRAME_BYTES_MAX`) travels as a run of
/// `forward::DataMessage::Piece` frames of `DATA_PIECE_BYTES` each, which the receiver
/// joins, refusing a run that grows past this. It bounds what one owner's share of a SELECT
/// (up to `query::limits::RESULT_ROWS_MAX` rows of a fragment) or one transaction's writes
/// for one node (at most `TXN_WRITE_BYTES_MAX`, 256 MiB in memory) may be; an answer past
/// it is 54000 on the owner, a request past it 54000 before it is sent.
pub const DATA_MESSAGE_BYTES_MAX: usize = 1 << 30;

/// Bytes of a message's archive carried by one `Piece` frame: half a frame, leaving room for
/// the piece's own envelope.
pub const DATA_PIECE_BYTES: usize = PEER_FRAME_BYTES_MAX as usize / 2;

/// Collections with a content sharding configuration the replicated catalog holds (each
/// travels in every raft snapshot and every published view).
pub const CLUSTER_COLLECTIONS_MAX: usize = 1_024;

/// Longest `CREATE TABLE … WITH` / `ALTER TABLE … SET` / `DROP TABLE` waits on a cluster for
/// its change to be installed on every member, activated, and the activation installed on
/// every member, in ms (one bound for all); past it the statement
/// succeeds with a warning (the change stays pending and is activated once every member has
/// it).
pub const CATALOG_ACTIVATION_WAIT_MS: u64 = 10_000;

/// Times a cluster catalog change is decided again after another change won the race.
pub const CATALOG_CHANGE_ATTEMPTS: u32 = 4;

//! Node configuration: defaults, a TOML file, environment variables and flags.
//!
//! Precedence, highest first: command-line flag, environment variable (`TESSERA_*`, read by
//! clap as the flag's fallback), the TOML file named by `--config`, the embedded default. Every
//! setting has an embedded default, so `tessera serve` alone starts a usable node.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Default data directory, relative to the working directory.
pub const DATA_DIR_DEFAULT: &str = "./tessera-data";
/// Default client address: loopback only, so a node on defaults is not reachable from outside.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:5433";
/// Default fragments per executor of a single node when `--fragments` is not given. One: each
/// fragment group-commits on its own, so an executor's writes share one fdatasync only when it
/// owns one fragment (at 32 pgbench clients, 4 per executor took 0.63 fdatasyncs per insert and
/// 1 took 0.26, for 1.47x the inserts/s: BENCHMARKS.md "session 4").
pub const FRAGMENTS_PER_EXECUTOR_DEFAULT: u32 = 1;
/// Default fragments per executor of the node that forms a cluster: moves, rebalancing and
/// allocation to new nodes work in whole fragments, so a cluster starts with smaller pieces.
pub const CLUSTER_FRAGMENTS_PER_EXECUTOR_DEFAULT: u32 = 4;
/// Most executors a node runs: one per core, and we do not plan for machines past this.
pub const EXECUTORS_MAX: u32 = 256;
/// Most fragments a node holds; each has its own log files and index.
pub const FRAGMENTS_MAX: u32 = 4096;
/// Default address of the Prometheus metrics endpoint (loopback only).
pub const METRICS_LISTEN_DEFAULT: &str = "127.0.0.1:9187";
/// Default `--max-syncs-per-executor` where an executor holds several fragments (a cluster
/// node's): group commits (chunk write + fdatasync) in flight at once across the fragments
/// of one executor; 0 is no gate. 2 cut fdatasyncs per insert from 0.61 to 0.32 and node CPU
/// per insert by up to 19 %, with more tps than no gate in 7 of 10 paired runs at 32
/// clients; 1 serialized too much over four fragments per executor (BENCHMARKS.md, "node:
/// fdatasyncs per durable write across fragments").
pub const SYNCS_PER_EXECUTOR_DEFAULT: u32 = 2;
/// Default `--max-syncs-per-executor` where every executor holds at most one fragment (a
/// single node's default layout): the gate's second permit only let that fragment start a
/// second chunk beside the one syncing; without it the records wait and go in one bigger
/// chunk. Cross-fragment transfers at 32 clients gained in 11 of 14 pairs (sessions 29 and
/// 30, median about +5%, 0.76 → 0.62 fdatasyncs per transfer), the other transaction
/// workloads within the noise either way (BENCHMARKS.md, "Session 30").
pub const SYNCS_PER_EXECUTOR_ONE_FRAGMENT_DEFAULT: u32 = 1;

/// The default gate for a node whose busiest executor holds `fragments_per_executor`
/// fragments (0: not known yet, as on a cluster node before its shard map arrives).
pub fn default_max_syncs(fragments_per_executor: usize, clustered: bool) -> usize {
    let n = if !clustered && fragments_per_executor <= 1 {
        SYNCS_PER_EXECUTOR_ONE_FRAGMENT_DEFAULT
    } else {
        SYNCS_PER_EXECUTOR_DEFAULT
    };
    n as usize
}
/// A given `--max-syncs-per-executor`: `None` for 0 (no gate), else the gate's limit.
fn sync_gate_limit(syncs: u32) -> Result<Option<usize>, ConfigError> {
    let max = storage::limits::SYNC_GATE_LIMIT_MAX;
    match usize::try_from(syncs) {
        Ok(0) => Ok(None),
        Ok(n) if n <= max => Ok(Some(n)),
        _ => Err(ConfigError::Invalid {
            setting: "max-syncs-per-executor",
            value: syncs.to_string(),
            reason: format!("must be 0 (no limit) or between 1 and {max}"),
        }),
    }
}

/// Default slow-statement threshold, milliseconds. As PostgreSQL's
/// `log_min_duration_statement`: 0 logs every statement, -1 turns the log off.
pub const SLOW_STATEMENT_MS_DEFAULT: i64 = 1000;

/// Settings as given on the command line (and by environment variables through clap). `None`
/// means "not given here": the file or the default decides.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// Directory holding the fragments' logs and the node's metadata.
    #[arg(long, env = "TESSERA_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address for PostgreSQL clients, `host:port`.
    #[arg(long, env = "TESSERA_LISTEN")]
    pub listen: Option<String>,
    /// Executors (one per core). Default: the number of available cores.
    #[arg(long, env = "TESSERA_EXECUTORS")]
    pub executors: Option<u32>,
    /// Fragments to create when the data directory is new. Default: 1 per executor on a single
    /// node, 4 per executor when forming a cluster.
    #[arg(long, env = "TESSERA_FRAGMENTS")]
    pub fragments: Option<u32>,
    /// A TOML file with any of these settings (keys as the flags, with `_` for `-`).
    #[arg(long, env = "TESSERA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log filter, e.g. `info` or `tessera=debug` (tracing-subscriber syntax).
    #[arg(long, env = "TESSERA_LOG")]
    pub log: Option<String>,
    /// Password clients must give (SCRAM-SHA-256). Unset: trust authentication.
    #[arg(long, env = "TESSERA_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Size of each log segment, preallocated and zero-filled when created (writes that
    /// overwrite preallocated blocks sync much faster than appends). Default 64 MiB; smaller
    /// segments start faster and use less disk on small nodes.
    #[arg(long, env = "TESSERA_SEGMENT_BYTES")]
    pub segment_bytes: Option<u64>,
    /// Group commits (one chunk write and its fdatasync) in flight at once across all the
    /// fragments of one executor. A fragment that finds them all busy keeps queueing writes
    /// and commits them in one bigger group when its turn comes; a lone writer never waits.
    /// 0 lets every fragment sync on its own. Default: 1 where no executor holds more than
    /// one fragment (a single node's default layout), else 2.
    #[arg(long, env = "TESSERA_MAX_SYNCS_PER_EXECUTOR")]
    pub max_syncs_per_executor: Option<u32>,
    /// Commit a transaction over several fragments of this node in one fdatasync round: each
    /// participant's PREPARE carries a marker naming the others, and the transaction is
    /// committed once every PREPARE is durable, with no coordinator record. Default `true`;
    /// `false` (or `0`) records the coordinator journal's decision, a second fdatasync round.
    /// Cluster transactions always use the journal.
    #[arg(long, env = "TESSERA_ONE_ROUND_COMMITS", value_parser = clap::builder::BoolishValueParser::new())]
    pub one_round_commits: Option<bool>,
    /// Join or form the cluster of this name. Unset: a single node, no peer protocol.
    #[arg(long, env = "TESSERA_CLUSTER_NAME")]
    pub cluster_name: Option<String>,
    /// This node's id in the cluster (1 or more, unique in the cluster).
    #[arg(long, env = "TESSERA_NODE_ID")]
    pub node_id: Option<u32>,
    /// Address for peer (node-to-node) connections, `host:port`.
    #[arg(long, env = "TESSERA_PEER_LISTEN")]
    pub peer_listen: Option<String>,
    /// Peer addresses of members to join through, comma-separated. Unset: this node is the
    /// seed and forms the cluster (if its cluster state is empty).
    #[arg(long, env = "TESSERA_JOIN")]
    pub join: Option<String>,
    /// `data` (hosts fragments, may coordinate) or `proxy` (routes only). Default `data`.
    #[arg(long, env = "TESSERA_ROLE")]
    pub role: Option<String>,
    /// Data nodes that must have joined before any fragment is allocated. Default 1.
    #[arg(long, env = "TESSERA_MIN_MEMBERS")]
    pub min_members: Option<u32>,
    /// Rebalance when the most and least loaded data nodes differ by more than this many
    /// fragments. Default 1.
    #[arg(long, env = "TESSERA_REBALANCE_THRESHOLD")]
    pub rebalance_threshold: Option<u64>,
    /// Most fragment moves in flight at once. Default 3.
    #[arg(long, env = "TESSERA_MAX_SIMULTANEOUS_REBALANCE")]
    pub max_simultaneous_rebalance: Option<u32>,
    /// Allocation strategy: `least-shard` (default: fewest fragments first, rebalances) or
    /// `manual` (allocates the same way, never rebalances on its own).
    #[arg(long, env = "TESSERA_ALLOCATION")]
    pub allocation: Option<String>,
    /// On SIGTERM/SIGINT, hand every fragment of this data node to the other data nodes
    /// before stopping (`true`, the default), or stop with them (`false`: they are
    /// unavailable until the node returns; for stopping a whole cluster).
    #[arg(long, env = "TESSERA_HANDOFF_ON_SHUTDOWN")]
    pub handoff_on_shutdown: Option<bool>,
    /// What the coordinator counts a node's load in: `fragments` (default) or `bytes` (the
    /// live bytes nodes report for the fragments they own). With `bytes`,
    /// `--rebalance-threshold` counts bytes (default 64 MiB).
    #[arg(long, env = "TESSERA_REBALANCE_LOAD")]
    pub rebalance_load: Option<String>,
    /// Split a fragment whose live bytes (as its node reports them) exceed this many, at the
    /// middle of its range, one split at a time (the "obese shard" problem). 0, the default,
    /// turns automatic splitting off.
    #[arg(long, env = "TESSERA_SPLIT_FRAGMENT_BYTES")]
    pub split_fragment_bytes: Option<u64>,
    /// A planned fragment move whose destination has not answered for this many milliseconds
    /// (a node killed or cut off) is dropped, so it neither waits for that node forever nor
    /// holds one of `--max-simultaneous-rebalance`; the coordinator plans again where it
    /// still needs a move. 0 never drops one. Default 60000.
    #[arg(long, env = "TESSERA_MOVE_TARGET_SILENT_MS")]
    pub move_target_silent_ms: Option<u64>,
    /// A file holding the cluster secret (16 to 4096 bytes, not readable by other users):
    /// peers prove they know it (HMAC-SHA-256 challenge-response) or are refused. Unset: peer
    /// connections are not authenticated.
    #[arg(long, env = "TESSERA_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    // Operability (issue #8).
    /// Address of the Prometheus metrics endpoint (`GET /metrics`), `host:port`; empty turns
    /// it off. Default 127.0.0.1:9187.
    #[arg(long, env = "TESSERA_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Log every statement that takes at least this many milliseconds, with its routing
    /// (as PostgreSQL's log_min_duration_statement: 0 logs every statement, -1 turns the log
    /// off). Default 1000.
    #[arg(long, env = "TESSERA_SLOW_STATEMENT_MS", allow_negative_numbers = true)]
    pub slow_statement_ms: Option<i64>,
}

/// The same settings read from a TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    listen: Option<String>,
    executors: Option<u32>,
    fragments: Option<u32>,
    log: Option<String>,
    password: Option<String>,
    segment_bytes: Option<u64>,
    max_syncs_per_executor: Option<u32>,
    one_round_commits: Option<bool>,
    cluster_name: Option<String>,
    node_id: Option<u32>,
    peer_listen: Option<String>,
    join: Option<String>,
    role: Option<String>,
    min_members: Option<u32>,
    rebalance_threshold: Option<u64>,
    max_simultaneous_rebalance: Option<u32>,
    allocation: Option<String>,
    handoff_on_shutdown: Option<bool>,
    rebalance_load: Option<String>,
    split_fragment_bytes: Option<u64>,
    move_target_silent_ms: Option<u64>,
    cluster_secret_file: Option<PathBuf>,
    metrics_listen: Option<String>,
    slow_statement_ms: Option<i64>,
}

/// The resolved configuration of one node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Where the data lives.
    pub data_dir: PathBuf,
    /// Where PostgreSQL clients connect.
    pub listen: SocketAddr,
    /// How many executors (threads, one per core) to run.
    pub executors: u32,
    /// Fragments to create in a new data directory (an existing one keeps its layout).
    pub fragments: u32,
    /// Log filter.
    pub log: String,
    /// The password for SCRAM-SHA-256, or `None` for trust.
    pub password: Option<String>,
    /// How long a connection may sit idle before the node closes it.
    pub idle_timeout: Duration,
    /// Preallocated size of each log segment.
    pub segment_bytes: u64,
    /// Group commits in flight at once per executor (`SyncGate` limit), as given: `None` not
    /// given (the node picks [`default_max_syncs`] for its fragment layout), `Some(None)` no
    /// gate (0), `Some(Some(n))` a gate of n.
    pub max_syncs_per_executor: Option<Option<usize>>,
    /// One-round commits for transactions of this node alone (`--one-round-commits`).
    pub one_round_commits: bool,
    /// Where the metrics endpoint listens, or `None` when it is off.
    pub metrics_listen: Option<SocketAddr>,
    /// Statements at least this long are logged; `None` when the log is off.
    pub slow_statement: Option<Duration>,
    /// The cluster settings, or `None` for a single node.
    pub cluster: Option<ClusterConfig>,
}

/// The cluster settings of a node started with `--cluster-name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The cluster's name; peers with another name are refused.
    pub name: String,
    /// This node's id (1 or more).
    pub node_id: u32,
    /// Where peers connect.
    pub peer_listen: SocketAddr,
    /// Peer addresses to join through (empty: this node is the seed).
    pub join: Vec<String>,
    /// Data or proxy.
    pub role: crate::cluster::wire::Role,
    /// Data nodes required before fragments are allocated.
    pub min_members: u32,
    /// Rebalance threshold, in fragments.
    pub rebalance_threshold: u64,
    /// Most moves in flight.
    pub max_simultaneous_rebalance: u32,
    /// The allocation strategy.
    pub allocation: Allocation,
    /// Hand fragments off before a graceful shutdown.
    pub handoff_on_shutdown: bool,
    /// What load is counted in (`--rebalance-load`).
    pub rebalance_load: crate::cluster::allocation::LoadUnit,
    /// Split fragments over this many live bytes (`--split-fragment-bytes`; 0: never).
    pub split_fragment_bytes: u64,
    /// Drop a planned move whose destination has been silent this long
    /// (`--move-target-silent-ms`; 0: never).
    pub move_target_silent_ms: u64,
    /// The cluster secret (`--cluster-secret-file`), or `None`: peers are not authenticated.
    pub secret: Option<crate::cluster::auth::ClusterSecret>,
}

/// Which allocation strategy the coordinator uses (`cluster::allocation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocation {
    /// `LeastShardAllocation`.
    LeastShard,
    /// `ManualAllocation`.
    Manual,
}

/// A configuration that cannot be used, with the setting and the reason.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TOML file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML file is not valid or has unknown keys.
    #[error("config file {path} is invalid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (line and key).
        message: String,
    },
    /// A setting has a value outside what the node accepts.
    #[error("setting `{setting}` = {value:?} is invalid: {reason}")]
    Invalid {
        /// The setting's name, as the flag spells it.
        setting: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        reason: String,
    },
}

impl NodeConfig {
    /// Resolves flags, environment, file and defaults into one validated configuration.
    /// `cores` is the number of available cores, used for the executor default.
    pub fn resolve(args: &ServeArgs, cores: usize) -> Result<NodeConfig, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let cluster = resolve_cluster(args, &file)?;
        let data_dir = args
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from(DATA_DIR_DEFAULT));
        let listen_text =
            args.listen.clone().or(file.listen).unwrap_or_else(|| LISTEN_DEFAULT.to_owned());
        let listen = parse_listen(&listen_text)?;
        let cores = u32::try_from(cores.max(1)).unwrap_or(EXECUTORS_MAX).min(EXECUTORS_MAX);
        let executors = args.executors.or(file.executors).unwrap_or(cores);
        if executors == 0 || executors > EXECUTORS_MAX {
            return Err(ConfigError::Invalid {
                setting: "executors",
                value: executors.to_string(),
                reason: format!("must be between 1 and {EXECUTORS_MAX}"),
            });
        }
        let fragments = args.fragments.or(file.fragments).unwrap_or(executors.saturating_mul(
            if cluster.is_some() {
                CLUSTER_FRAGMENTS_PER_EXECUTOR_DEFAULT
            } else {
                FRAGMENTS_PER_EXECUTOR_DEFAULT
            },
        ));
        if fragments == 0 || fragments > FRAGMENTS_MAX {
            return Err(ConfigError::Invalid {
                setting: "fragments",
                value: fragments.to_string(),
                reason: format!("must be between 1 and {FRAGMENTS_MAX}"),
            });
        }
        let log = args.log.clone().or(file.log).unwrap_or_else(|| "info".to_owned());
        let password = args.password.clone().or(file.password).filter(|p| !p.is_empty());
        let segment_bytes = args
            .segment_bytes
            .or(file.segment_bytes)
            .unwrap_or(storage::limits::SEGMENT_BYTES_DEFAULT);
        let segments = storage::limits::SEGMENT_BYTES_MIN..=storage::limits::SEGMENT_BYTES_MAX;
        if !segments.contains(&segment_bytes)
            || !segment_bytes.is_multiple_of(storage::limits::BLOCK_BYTES)
        {
            return Err(ConfigError::Invalid {
                setting: "segment-bytes",
                value: segment_bytes.to_string(),
                reason: format!(
                    "must be a multiple of {} between {} and {}",
                    storage::limits::BLOCK_BYTES,
                    segments.start(),
                    segments.end()
                ),
            });
        }
        let max_syncs_per_executor = args
            .max_syncs_per_executor
            .or(file.max_syncs_per_executor)
            .map(sync_gate_limit)
            .transpose()?;
        let metrics_text = args
            .metrics_listen
            .clone()
            .or(file.metrics_listen)
            .unwrap_or_else(|| METRICS_LISTEN_DEFAULT.to_owned());
        let metrics_listen = if metrics_text.trim().is_empty() {
            None
        } else {
            Some(parse_addr("metrics-listen", &metrics_text)?)
        };
        let slow_ms =
            args.slow_statement_ms.or(file.slow_statement_ms).unwrap_or(SLOW_STATEMENT_MS_DEFAULT);
        let slow_statement = match u64::try_from(slow_ms) {
            Ok(ms) => Some(Duration::from_millis(ms)),
            Err(_) if slow_ms == -1 => None,
            Err(_) => {
                return Err(ConfigError::Invalid {
                    setting: "slow-statement-ms",
                    value: slow_ms.to_string(),
                    reason: "must be -1 (off), 0 (every statement) or a positive number".to_owned(),
                });
            }
        };
        Ok(NodeConfig {
            data_dir,
            listen,
            executors,
            fragments,
            log,
            password,
            idle_timeout: Duration::from_secs(IDLE_TIMEOUT_SECS_DEFAULT),
            segment_bytes,
            max_syncs_per_executor,
            one_round_commits: args.one_round_commits.or(file.one_round_commits).unwrap_or(true),
            cluster,
            metrics_listen,
            slow_statement,
        })
    }
}

/// The cluster settings: all absent without a cluster name (any other cluster setting alone is
/// an error, so a typo in the name's flag does not silently start a single node).
fn resolve_cluster(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<Option<ClusterConfig>, ConfigError> {
    use crate::cluster::limits::{CLUSTER_MEMBERS_MAX, CLUSTER_NAME_BYTES_MAX, JOIN_ADDRS_MAX};
    use crate::cluster::wire::Role;
    let invalid = |setting: &'static str, value: String, reason: String| ConfigError::Invalid {
        setting,
        value,
        reason,
    };
    let name = args.cluster_name.clone().or_else(|| file.cluster_name.clone());
    let node_id = args.node_id.or(file.node_id);
    let peer_listen = args.peer_listen.clone().or_else(|| file.peer_listen.clone());
    let join = args.join.clone().or_else(|| file.join.clone());
    let role = args.role.clone().or_else(|| file.role.clone());
    let min_members = args.min_members.or(file.min_members);
    let threshold = args.rebalance_threshold.or(file.rebalance_threshold);
    let max_moves = args.max_simultaneous_rebalance.or(file.max_simultaneous_rebalance);
    let allocation = args.allocation.clone().or_else(|| file.allocation.clone());
    let handoff_on_shutdown = args.handoff_on_shutdown.or(file.handoff_on_shutdown);
    let rebalance_load = args.rebalance_load.clone().or_else(|| file.rebalance_load.clone());
    let split_fragment_bytes = args.split_fragment_bytes.or(file.split_fragment_bytes);
    let move_target_silent_ms = args.move_target_silent_ms.or(file.move_target_silent_ms);
    let secret_file = args.cluster_secret_file.clone().or_else(|| file.cluster_secret_file.clone());
    let Some(name) = name else {
        let given = [
            ("node-id", node_id.is_some()),
            ("peer-listen", peer_listen.is_some()),
            ("join", join.is_some()),
            ("role", role.is_some()),
            ("min-members", min_members.is_some()),
            ("rebalance-threshold", threshold.is_some()),
            ("max-simultaneous-rebalance", max_moves.is_some()),
            ("allocation", allocation.is_some()),
            ("handoff-on-shutdown", handoff_on_shutdown.is_some()),
            ("rebalance-load", rebalance_load.is_some()),
            ("split-fragment-bytes", split_fragment_bytes.is_some()),
            ("move-target-silent-ms", move_target_silent_ms.is_some()),
            ("cluster-secret-file", secret_file.is_some()),
        ];
        if let Some((setting, _)) = given.iter().find(|(_, g)| *g) {
            return Err(invalid(setting, String::new(), "needs --cluster-name".to_owned()));
        }
        return Ok(None);
    };
    let name_ok = !name.is_empty()
        && name.len() <= CLUSTER_NAME_BYTES_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !name_ok {
        return Err(invalid(
            "cluster-name",
            name,
            format!("must be 1 to {CLUSTER_NAME_BYTES_MAX} of A-Z, a-z, 0-9, '-', '_'"),
        ));
    }
    let node_id = match node_id {
        Some(id) if id >= 1 => id,
        other => {
            return Err(invalid(
                "node-id",
                other.map(|i| i.to_string()).unwrap_or_default(),
                "a cluster node needs an id of 1 or more, unique in the cluster".to_owned(),
            ));
        }
    };
    let Some(peer_text) = peer_listen else {
        return Err(invalid("peer-listen", String::new(), "a cluster node needs it".to_owned()));
    };
    let peer_listen = parse_listen(&peer_text).map_err(|e| match e {
        ConfigError::Invalid { value, reason, .. } => invalid("peer-listen", value, reason),
        other => other,
    })?;
    let join: Vec<String> = join
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    if join.len() > JOIN_ADDRS_MAX {
        return Err(invalid("join", join.join(","), format!("at most {JOIN_ADDRS_MAX} addresses")));
    }
    if let Some(bad) = join.iter().find(|a| a.to_socket_addrs().is_err()) {
        return Err(invalid("join", bad.clone(), "expected host:port".to_owned()));
    }
    let role = match role.as_deref().unwrap_or("data") {
        "data" => Role::Data,
        "proxy" => Role::Proxy,
        other => return Err(invalid("role", other.to_owned(), "data or proxy".to_owned())),
    };
    if role == Role::Proxy && join.is_empty() {
        return Err(invalid(
            "role",
            "proxy".to_owned(),
            "a proxy cannot form a cluster: give --join".to_owned(),
        ));
    }
    let min_members = min_members.unwrap_or(1);
    let members_max = u32::try_from(CLUSTER_MEMBERS_MAX).unwrap_or(u32::MAX);
    if min_members == 0 || min_members > members_max {
        return Err(invalid(
            "min-members",
            min_members.to_string(),
            format!("must be between 1 and {members_max}"),
        ));
    }
    let max_moves = max_moves.unwrap_or_else(|| {
        u32::try_from(crate::cluster::allocation::MAX_SIMULTANEOUS_REBALANCE_DEFAULT)
            .unwrap_or(u32::MAX)
    });
    if max_moves > members_max {
        return Err(invalid(
            "max-simultaneous-rebalance",
            max_moves.to_string(),
            format!("must be at most {members_max}"),
        ));
    }
    let allocation = match allocation.as_deref().unwrap_or("least-shard") {
        "least-shard" => Allocation::LeastShard,
        "manual" => Allocation::Manual,
        other => {
            return Err(invalid(
                "allocation",
                other.to_owned(),
                "least-shard or manual".to_owned(),
            ));
        }
    };
    let rebalance_load = match rebalance_load.as_deref().unwrap_or("fragments") {
        "fragments" => crate::cluster::allocation::LoadUnit::Fragments,
        "bytes" => crate::cluster::allocation::LoadUnit::Bytes,
        other => {
            return Err(invalid(
                "rebalance-load",
                other.to_owned(),
                "fragments or bytes".to_owned(),
            ));
        }
    };
    let secret = match &secret_file {
        None => None,
        Some(path) => Some(crate::cluster::auth::ClusterSecret::read(path).map_err(|e| {
            invalid("cluster-secret-file", path.display().to_string(), e.to_string())
        })?),
    };
    let threshold_default = match rebalance_load {
        crate::cluster::allocation::LoadUnit::Fragments => {
            crate::cluster::allocation::REBALANCE_THRESHOLD_DEFAULT
        }
        crate::cluster::allocation::LoadUnit::Bytes => {
            crate::cluster::allocation::REBALANCE_THRESHOLD_BYTES_DEFAULT
        }
    };
    Ok(Some(ClusterConfig {
        name,
        node_id,
        peer_listen,
        join,
        role,
        min_members,
        rebalance_threshold: threshold.unwrap_or(threshold_default),
        max_simultaneous_rebalance: max_moves,
        allocation,
        handoff_on_shutdown: handoff_on_shutdown.unwrap_or(true),
        rebalance_load,
        split_fragment_bytes: split_fragment_bytes.unwrap_or(0),
        move_target_silent_ms: move_target_silent_ms
            .unwrap_or(crate::cluster::limits::MOVE_TARGET_SILENT_MS_DEFAULT),
        secret,
    }))
}

/// Default idle timeout for client connections: generous, like PostgreSQL's (which has none by
/// default), but finite so abandoned connections do not hold a slot forever.
pub const IDLE_TIMEOUT_SECS_DEFAULT: u64 = 3600;

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    toml::from_str(&text)
        .map_err(|e| ConfigError::Parse { path: path.to_owned(), message: e.to_string() })
}

fn parse_listen(text: &str) -> Result<SocketAddr, ConfigError> {
    parse_addr("listen", text)
}

fn parse_addr(setting: &'static str, text: &str) -> Result<SocketAddr, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid { setting, value: text.to_owned(), reason };
    let mut addrs =
        text.to_socket_addrs().map_err(|e| invalid(format!("expected host:port ({e})")))?;
    addrs.next().ok_or_else(|| invalid("the host resolves to no address".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that with nothing given every setting takes its embedded default.
    #[test]
    fn defaults() {
        let c = NodeConfig::resolve(&ServeArgs::default(), 2).expect("defaults are valid");
        assert_eq!(c.data_dir, PathBuf::from(DATA_DIR_DEFAULT));
        assert_eq!(c.listen.to_string(), LISTEN_DEFAULT);
        assert_eq!(c.executors, 2);
        assert_eq!(c.fragments, 2, "one fragment per executor on a single node");
        assert!(c.password.is_none());
        assert_eq!(
            c.metrics_listen.map(|a| a.to_string()).as_deref(),
            Some(METRICS_LISTEN_DEFAULT)
        );
        assert_eq!(c.slow_statement, Some(Duration::from_millis(1000)));
        assert!(c.cluster.is_none(), "no cluster without --cluster-name");
    }

    /// The least a cluster node is given: a name, an id, a peer address.
    fn cluster_node() -> ServeArgs {
        ServeArgs {
            cluster_name: Some("c1".into()),
            node_id: Some(2),
            peer_listen: Some("127.0.0.1:7002".into()),
            ..ServeArgs::default()
        }
    }

    // Checks --move-target-silent-ms: a minute by default, 0 (never) taken, refused without a
    // cluster name.
    #[test]
    fn cluster_move_target_silent_ms() {
        let c = NodeConfig::resolve(&cluster_node(), 2).expect("valid").cluster.expect("cluster");
        assert_eq!(c.move_target_silent_ms, 60_000);
        let never = ServeArgs { move_target_silent_ms: Some(0), ..cluster_node() };
        let c = NodeConfig::resolve(&never, 2).expect("valid").cluster.expect("cluster");
        assert_eq!(c.move_target_silent_ms, 0);
        let alone = ServeArgs { move_target_silent_ms: Some(1), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&alone, 2).expect_err("needs a cluster");
        assert!(e.to_string().contains("move-target-silent-ms"), "{e}");
    }

    // Checks --handoff-on-shutdown: on by default, off when given false, refused without a
    // cluster name.
    #[test]
    fn cluster_handoff_on_shutdown() {
        let base = cluster_node();
        let c = NodeConfig::resolve(&base, 2).expect("valid").cluster.expect("cluster");
        assert!(c.handoff_on_shutdown, "hands off by default");
        let off = ServeArgs { handoff_on_shutdown: Some(false), ..base };
        let c = NodeConfig::resolve(&off, 2).expect("valid").cluster.expect("cluster");
        assert!(!c.handoff_on_shutdown);
        let alone = ServeArgs { handoff_on_shutdown: Some(false), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&alone, 2).expect_err("needs a cluster");
        assert!(e.to_string().contains("handoff-on-shutdown"), "{e}");
    }

    // Checks --split-fragment-bytes: off (0) by default, taken when given, refused without a
    // cluster name.
    #[test]
    fn cluster_split_fragment_bytes() {
        let base = cluster_node();
        let node = NodeConfig::resolve(&base, 2).expect("valid");
        assert_eq!(node.fragments, 8, "a cluster starts with 4 fragments per executor");
        let c = node.cluster.expect("cluster");
        assert_eq!(c.split_fragment_bytes, 0, "off by default");
        let on = ServeArgs { split_fragment_bytes: Some(1 << 30), ..base };
        let c = NodeConfig::resolve(&on, 2).expect("valid").cluster.expect("cluster");
        assert_eq!(c.split_fragment_bytes, 1 << 30);
        let alone = ServeArgs { split_fragment_bytes: Some(1), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&alone, 2).expect_err("needs a cluster");
        assert!(e.to_string().contains("split-fragment-bytes"), "{e}");
    }

    // Checks cluster settings resolve with their defaults, and that each bad one (or one given
    // without a cluster name) is refused with the setting named.
    #[test]
    fn cluster_settings() {
        let base = ServeArgs {
            cluster_name: Some("c1".into()),
            node_id: Some(2),
            peer_listen: Some("127.0.0.1:7002".into()),
            join: Some("127.0.0.1:7001, 127.0.0.1:7003".into()),
            ..ServeArgs::default()
        };
        let c = NodeConfig::resolve(&base, 2).expect("valid").cluster.expect("cluster");
        assert_eq!(c.name, "c1");
        assert_eq!(c.node_id, 2);
        assert_eq!(c.join, ["127.0.0.1:7001", "127.0.0.1:7003"]);
        assert_eq!(c.role, crate::cluster::wire::Role::Data);
        assert_eq!(c.min_members, 1);
        assert_eq!(c.rebalance_threshold, 1);
        assert_eq!(c.max_simultaneous_rebalance, 3);
        assert_eq!(c.allocation, Allocation::LeastShard);
        assert_eq!(c.rebalance_load, crate::cluster::allocation::LoadUnit::Fragments);
        let bytes = ServeArgs { rebalance_load: Some("bytes".into()), ..base.clone() };
        let c = NodeConfig::resolve(&bytes, 2).expect("valid").cluster.expect("cluster");
        assert_eq!(c.rebalance_load, crate::cluster::allocation::LoadUnit::Bytes);
        assert_eq!(
            c.rebalance_threshold,
            crate::cluster::allocation::REBALANCE_THRESHOLD_BYTES_DEFAULT
        );
        let bytes = ServeArgs { rebalance_threshold: Some(4096), ..bytes };
        let c = NodeConfig::resolve(&bytes, 2).expect("valid").cluster.expect("cluster");
        assert_eq!(c.rebalance_threshold, 4096, "a given threshold counts bytes");
        let cases: Vec<(ServeArgs, &str)> = vec![
            (ServeArgs { node_id: Some(1), ..ServeArgs::default() }, "node-id"),
            (ServeArgs { cluster_name: Some("bad name".into()), ..base.clone() }, "cluster-name"),
            (ServeArgs { node_id: Some(0), ..base.clone() }, "node-id"),
            (ServeArgs { node_id: None, ..base.clone() }, "node-id"),
            (ServeArgs { peer_listen: None, ..base.clone() }, "peer-listen"),
            (ServeArgs { join: Some("nowhere".into()), ..base.clone() }, "join"),
            (ServeArgs { role: Some("boss".into()), ..base.clone() }, "role"),
            (ServeArgs { role: Some("proxy".into()), join: None, ..base.clone() }, "role"),
            (ServeArgs { min_members: Some(0), ..base.clone() }, "min-members"),
            (ServeArgs { allocation: Some("random".into()), ..base.clone() }, "allocation"),
            (ServeArgs { rebalance_load: Some("docs".into()), ..base.clone() }, "rebalance-load"),
            (
                ServeArgs {
                    cluster_secret_file: Some("/nonexistent/secret".into()),
                    ..base.clone()
                },
                "cluster-secret-file",
            ),
            (
                ServeArgs { rebalance_load: Some("bytes".into()), ..ServeArgs::default() },
                "rebalance-load",
            ),
        ];
        for (args, setting) in cases {
            let e = NodeConfig::resolve(&args, 2).expect_err(setting);
            assert!(e.to_string().contains(setting), "{setting}: {e}");
        }
        let proxy =
            ServeArgs { role: Some("proxy".into()), allocation: Some("manual".into()), ..base };
        let c = NodeConfig::resolve(&proxy, 2).expect("valid").cluster.expect("cluster");
        assert_eq!(c.role, crate::cluster::wire::Role::Proxy);
        assert_eq!(c.allocation, Allocation::Manual);
    }

    // Checks the operability settings: empty turns metrics off, -1 turns the slow log off and
    // 0 logs everything, the file sets both, bad values are refused naming the setting.
    #[test]
    fn metrics_and_slow_log_settings() {
        let args = ServeArgs {
            metrics_listen: Some(String::new()),
            slow_statement_ms: Some(-1),
            ..ServeArgs::default()
        };
        let c = NodeConfig::resolve(&args, 2).expect("valid");
        assert!(c.metrics_listen.is_none());
        assert!(c.slow_statement.is_none());
        let args = ServeArgs { slow_statement_ms: Some(0), ..ServeArgs::default() };
        let c = NodeConfig::resolve(&args, 2).expect("valid");
        assert_eq!(c.slow_statement, Some(Duration::ZERO));
        let bad = ServeArgs { slow_statement_ms: Some(-2), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&bad, 2).expect_err("-2");
        assert!(e.to_string().contains("slow-statement-ms"), "{e}");
        let dir = std::env::temp_dir().join(format!("tessera-config-ops-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("t.toml");
        std::fs::write(&file, "metrics_listen = \"127.0.0.1:9999\"\nslow_statement_ms = 5\n")
            .expect("write config");
        let c = NodeConfig::resolve(&ServeArgs { config: Some(file), ..ServeArgs::default() }, 2)
            .expect("valid");
        assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9999));
        assert_eq!(c.slow_statement, Some(Duration::from_millis(5)));
        std::fs::remove_dir_all(&dir).expect("cleanup");
        let bad = ServeArgs { metrics_listen: Some("nonsense".into()), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&bad, 2).expect_err("bad address");
        assert!(e.to_string().contains("metrics-listen"), "{e}");
    }

    // Checks --one-round-commits: on unless turned off, off from the flag's value.
    #[test]
    fn one_round_commits_setting() {
        let c = NodeConfig::resolve(&ServeArgs::default(), 2).expect("defaults");
        assert!(c.one_round_commits);
        let off = ServeArgs { one_round_commits: Some(false), ..ServeArgs::default() };
        assert!(!NodeConfig::resolve(&off, 2).expect("off").one_round_commits);
    }

    // Checks --max-syncs-per-executor: the default, 0 turning the gate off, the file setting
    // it, values past the bound refused naming the setting.
    #[test]
    fn max_syncs_per_executor_setting() {
        let c = NodeConfig::resolve(&ServeArgs::default(), 2).expect("valid");
        assert_eq!(c.max_syncs_per_executor, None, "not given: the layout decides");
        assert_eq!(default_max_syncs(1, false), 1, "one fragment per executor");
        assert_eq!(default_max_syncs(4, false), 2, "several fragments per executor");
        assert_eq!(default_max_syncs(0, true), 2, "a cluster node");
        let off = ServeArgs { max_syncs_per_executor: Some(0), ..ServeArgs::default() };
        let c = NodeConfig::resolve(&off, 2).expect("valid");
        assert_eq!(c.max_syncs_per_executor, Some(None));
        let two = ServeArgs { max_syncs_per_executor: Some(2), ..ServeArgs::default() };
        let c = NodeConfig::resolve(&two, 2).expect("valid");
        assert_eq!(c.max_syncs_per_executor, Some(Some(2)));
        let bad = ServeArgs { max_syncs_per_executor: Some(65), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&bad, 2).expect_err("past the bound");
        assert!(e.to_string().contains("max-syncs-per-executor"), "{e}");
        let dir = std::env::temp_dir().join(format!("tessera-config-syncs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("t.toml");
        std::fs::write(&file, "max_syncs_per_executor = 3\n").expect("write config");
        let c = NodeConfig::resolve(&ServeArgs { config: Some(file), ..ServeArgs::default() }, 2)
            .expect("valid");
        assert_eq!(c.max_syncs_per_executor, Some(Some(3)));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    // Checks precedence: a flag beats the file, the file beats the default.
    #[test]
    fn flag_beats_file_beats_default() {
        let dir = std::env::temp_dir().join(format!("tessera-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("t.toml");
        std::fs::write(&file, "executors = 3\nfragments = 12\nlisten = \"127.0.0.1:7000\"\n")
            .expect("write config");
        let args = ServeArgs { config: Some(file), executors: Some(1), ..ServeArgs::default() };
        let c = NodeConfig::resolve(&args, 2).expect("valid");
        assert_eq!(c.executors, 1, "flag wins");
        assert_eq!(c.fragments, 12, "file wins over default");
        assert_eq!(c.listen.port(), 7000);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    // Checks that bad values and unknown file keys are refused with the setting named.
    #[test]
    fn refuses_bad_values() {
        let bad = ServeArgs { executors: Some(0), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&bad, 2).expect_err("zero executors");
        assert!(e.to_string().contains("executors"), "{e}");
        let bad = ServeArgs { segment_bytes: Some(5000), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&bad, 2).expect_err("unaligned segment");
        assert!(e.to_string().contains("segment-bytes"), "{e}");
        let bad = ServeArgs { listen: Some("nonsense".into()), ..ServeArgs::default() };
        let e = NodeConfig::resolve(&bad, 2).expect_err("bad address");
        assert!(e.to_string().contains("listen"), "{e}");
        let dir = std::env::temp_dir().join(format!("tessera-config-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("t.toml");
        std::fs::write(&file, "executor = 3\n").expect("write config");
        let e = NodeConfig::resolve(&ServeArgs { config: Some(file), ..ServeArgs::default() }, 2)
            .expect_err("unknown key");
        assert!(e.to_string().contains("executor"), "{e}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

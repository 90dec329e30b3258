//! The cluster (issue #7, foundations): the peer protocol, membership, the coordinator on
//! openraft and the allocation strategies. See ARCHITECTURE.md, "node::cluster".
//!
//! Nothing here runs without `--cluster-name`: a node without it is the single node.
//!
//! **Invariant:** tokio runs only on the control-plane thread `control::start` spawns;
//! executors read what it publishes through `view()` and never await its futures.

pub mod allocation;
pub mod auth;
pub mod control;
pub mod forward;
pub mod handoff;
pub mod handoff_host;
pub mod limits;
pub mod load;
pub mod ops;
pub mod peer;
pub mod prior;
pub mod raft_net;
pub mod region;
pub mod state;
pub mod store;
pub mod wire;

use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use wire::Role;

/// One member as `SHOW CLUSTER` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// Its node id.
    pub node: u32,
    /// Data or proxy.
    pub role: Role,
    /// Its peer address.
    pub peer_addr: String,
    /// Its PostgreSQL address.
    pub pg_addr: String,
    /// Whether it answered a ping recently (always true for this node).
    pub reachable: bool,
    /// Whether it votes in the coordinator's raft group.
    pub voter: bool,
    /// Whether it is the coordinator (the raft leader) as this node knows.
    pub leader: bool,
    /// Fragments the shard map gives it.
    pub fragments: usize,
    /// Whether it is the node answering.
    pub this: bool,
    /// The catalog version it last reported installed on its executors (its `Pong`; this
    /// node: its own), 0 before any report.
    pub catalog: u64,
    /// Whether the coordinator records it as leaving (stopped gracefully, or stopping):
    /// nothing moves to it until it joins again.
    pub leaving: bool,
}

/// What the control plane publishes for the executors: a snapshot, replaced whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    /// The cluster's name.
    pub cluster: String,
    /// This node's id.
    pub me: u32,
    /// The coordinator (raft leader) this node knows of.
    pub leader: Option<u32>,
    /// The raft term.
    pub term: u64,
    /// The shard map's epoch (0: not allocated yet).
    pub epoch: u64,
    /// Every member, by node id (this node included even before it is recorded).
    pub members: Vec<MemberView>,
    /// The replicated shard map (owners are cluster nodes), once allocated: what region
    /// routing will read.
    pub map: Option<router::ShardMap>,
    /// Moves decided and waiting for handoff.
    pub moves_planned: usize,
    /// The allocation strategy's name.
    pub strategy: &'static str,
    /// Handoffs in flight (at most one per fragment): regions buffer requests for these
    /// fragments until the map's owner changes (commit) or the handoff ends (abort).
    pub handoffs: Vec<state::Handoff>,
    /// Splits and merges in flight: regions buffer requests for their source fragments until
    /// the map replaces them (commit) or the reshape ends (abort).
    pub reshapes: Vec<state::Reshape>,
    /// The replicated collection catalog's version (0: no change yet).
    pub catalog_version: u64,
    /// The replicated collection catalog: content configurations, changes pending or not.
    pub collections: std::collections::BTreeMap<String, state::CollectionEntry>,
}

impl ClusterView {
    /// What `fragment` is doing: `Active` or `HandingOff` (buffer its requests).
    pub fn fragment_state(&self, fragment: u32) -> state::FragmentState {
        match self.handoffs.iter().find(|h| h.fragment == fragment) {
            Some(h) => state::FragmentState::HandingOff { from: h.from, to: h.to, handoff: h.id },
            None => state::FragmentState::Active,
        }
    }
}

/// The process's cluster view. A process runs at most one node, so one slot; it is set only
/// by the control plane, and read by `SHOW CLUSTER` for the time of an `Arc` clone.
static VIEW: OnceLock<RwLock<Arc<ClusterView>>> = OnceLock::new();

/// Replaces the published view.
pub fn publish(view: ClusterView) {
    let slot = VIEW.get_or_init(|| RwLock::new(Arc::new(view.clone())));
    *slot.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(view);
}

/// The published view, or `None` on a single node.
pub fn view() -> Option<Arc<ClusterView>> {
    VIEW.get().map(|slot| Arc::clone(&slot.read().unwrap_or_else(PoisonError::into_inner)))
}

/// The log filter a cluster node runs with: openraft's own messages are off unless the
/// operator's filter names `openraft`. It reports every failed RPC to a down peer at WARN or
/// ERROR, many times a second; the control plane logs reachability changes once instead.
pub fn log_filter(filter: &str) -> String {
    if filter.contains("openraft") { filter.to_owned() } else { format!("{filter},openraft=off") }
}

/// The name `SHOW CLUSTER` plans to (`Statement::Show { name }`).
pub const SHOW_CLUSTER: &str = "cluster";

/// The `SHOW CLUSTER` columns and their types.
pub fn show_cluster_columns() -> Vec<crate::pg::Column> {
    use crate::pg::{Column, Oid};
    vec![
        Column::new("node", Oid::INT8),
        Column::new("role", Oid::TEXT),
        Column::new("peer_addr", Oid::TEXT),
        Column::new("pg_addr", Oid::TEXT),
        Column::new("reachable", Oid::BOOL),
        Column::new("voter", Oid::BOOL),
        Column::new("coordinator", Oid::BOOL),
        Column::new("epoch", Oid::INT8),
        Column::new("fragments", Oid::INT8),
        Column::new("this", Oid::BOOL),
        Column::new("documents", Oid::INT8),
        Column::new("leaving", Oid::BOOL),
    ]
}

/// `SHOW CLUSTER` as rows of datums (see `show_cluster_rows`); `documents` gives a node's
/// documents (the region counts them; NULL when its owner did not answer).
pub fn show_cluster_datums(
    local_epoch: u64,
    local_fragments: usize,
    documents: impl Fn(i64) -> query::Datum,
) -> Vec<Vec<query::Datum>> {
    use query::Datum;
    show_cluster_rows(local_epoch, local_fragments, "")
        .into_iter()
        .map(|r| {
            vec![
                Datum::Int8(r.node),
                Datum::Text(r.role.to_owned()),
                Datum::Text(r.peer_addr),
                Datum::Text(r.pg_addr),
                Datum::Bool(r.reachable),
                Datum::Bool(r.voter),
                Datum::Bool(r.coordinator),
                Datum::Int8(r.epoch),
                Datum::Int8(r.fragments),
                Datum::Bool(r.this),
                documents(r.node),
                Datum::Bool(r.leaving),
            ]
        })
        .collect()
}

/// One `SHOW CLUSTER` row, in the order of `show_cluster_columns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShowClusterRow {
    /// Node id.
    pub node: i64,
    /// `data` or `proxy`.
    pub role: &'static str,
    /// Peer address.
    pub peer_addr: String,
    /// PostgreSQL address.
    pub pg_addr: String,
    /// Answered a ping recently.
    pub reachable: bool,
    /// Votes in the coordinator group.
    pub voter: bool,
    /// Is the coordinator.
    pub coordinator: bool,
    /// Shard-map epoch as this node knows it.
    pub epoch: i64,
    /// Fragments it owns.
    pub fragments: i64,
    /// Is the node answering.
    pub this: bool,
    /// Recorded as leaving: nothing moves to it.
    pub leaving: bool,
}

/// The rows of `SHOW CLUSTER`. On a single node (no cluster) one row describes it: node 0, a
/// data node that is its own coordinator, with the local map's epoch and fragments.
pub fn show_cluster_rows(
    local_epoch: u64,
    local_fragments: usize,
    pg_addr: &str,
) -> Vec<ShowClusterRow> {
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let Some(view) = view() else {
        return vec![ShowClusterRow {
            node: 0,
            role: Role::Data.as_str(),
            peer_addr: String::new(),
            pg_addr: pg_addr.to_owned(),
            reachable: true,
            voter: true,
            coordinator: true,
            epoch: int(local_epoch),
            fragments: int(local_fragments as u64),
            this: true,
            leaving: false,
        }];
    };
    view.members
        .iter()
        .map(|m| ShowClusterRow {
            node: i64::from(m.node),
            role: m.role.as_str(),
            peer_addr: m.peer_addr.clone(),
            pg_addr: m.pg_addr.clone(),
            reachable: m.reachable,
            voter: m.voter,
            coordinator: m.leader,
            epoch: int(view.epoch),
            fragments: int(m.fragments as u64),
            this: m.this,
            leaving: m.leaving,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks openraft is silenced unless the operator's filter names it.
    #[test]
    fn log_filter_silences_openraft_by_default() {
        assert_eq!(log_filter("info"), "info,openraft=off");
        assert_eq!(log_filter("info,openraft=debug"), "info,openraft=debug");
    }

    // Checks the columns and a row have the same width. (The process-wide view is set only by
    // a running control plane, which unit tests never start, so this is the single-node row.)
    #[test]
    fn show_cluster_single_node_row() {
        assert!(view().is_none());
        let rows = show_cluster_datums(3, 8, |_| query::Datum::Null);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].len(), show_cluster_columns().len());
        let row = &show_cluster_rows(3, 8, "127.0.0.1:5433")[0];
        assert_eq!(row.node, 0);
        assert_eq!(row.epoch, 3);
        assert_eq!(row.fragments, 8);
        assert!(row.coordinator);
        assert!(row.this);
        assert!(!row.leaving);
    }
}

//! The coordinator's replicated state: members with their roles, the shard map (fragment
//! ranges, owners, epoch) once allocated, and the planned moves. Pure: `ClusterState::apply`
//! is what every replica runs for each committed command, so it must be deterministic and must
//! validate instead of trusting the proposer (a stale leader's proposal is refused, not
//! applied).
//!
//! A fragment is `Active` (its owner serves it) or `HandingOff` (a `Handoff` is in flight:
//! the owner is still `from`, fenced, streaming to `to`). `BeginHandoff`, `CommitHandoff` and
//! `AbortHandoff` each bump the epoch, so every region sees the change. **Invariant:** at any
//! applied state every fragment has exactly one owner, at most one handoff, and the owner only
//! changes in `CommitHandoff` naming the handoff in flight (a stale or duplicate commit or
//! abort is a typed no-op).
//!
//! Splits and merges (`BeginSplit` / `BeginMerge`, then `CommitReshape` or `AbortReshape`)
//! follow the same shape: the begin fences the source fragment(s) and reserves fresh ids for
//! the new ones (never reused, even after an abort); only the commit replaces the sources with
//! the targets in the map. **Invariant:** the map is always a partition of every shard into
//! fragments with one owner each; a fragment is in at most one handoff or reshape, and nobody
//! writes it meanwhile.

use std::collections::BTreeMap;

use router::{Epoch, ExecutorId, FragmentId, NodeId, Owner, ShardMap};
use serde::{Deserialize, Serialize};

use crate::cluster::limits::{
    CLUSTER_COLLECTIONS_MAX, CLUSTER_MEMBERS_MAX, MEMBER_EXECUTORS_PLACED_MAX,
};
use crate::cluster::wire::{Peer, Role};

/// A member as the coordinator records it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Data or proxy.
    pub role: Role,
    /// Where it accepts peer connections.
    pub peer_addr: String,
    /// Where it accepts PostgreSQL clients.
    pub pg_addr: String,
    /// Its executors (a fragment's executor is chosen among them).
    pub executors: u32,
}

impl Member {
    /// The record of a peer's self-description.
    pub fn of_peer(peer: &Peer) -> Member {
        Member {
            role: peer.role,
            peer_addr: peer.peer_addr.clone(),
            pg_addr: peer.pg_addr.clone(),
            executors: peer.executors,
        }
    }
}

/// One fragment of the replicated map.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentEntry {
    /// Its id.
    pub id: u32,
    /// First shard.
    pub start: u32,
    /// One past its last shard.
    pub end: u32,
    /// The owning node.
    pub node: u32,
    /// The owning executor on that node.
    pub executor: u32,
}

/// A decided move not yet carried out: the coordinator turns it into a `Handoff`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedMove {
    /// The fragment.
    pub fragment: u32,
    /// Its owner when the move was decided.
    pub from: u32,
    /// Its owner after the handoff.
    pub to: u32,
}

/// A change to the replicated state, proposed through raft.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Record (or update the addresses of) a member.
    AddMember {
        /// Its node id.
        node: u32,
        /// What it is.
        member: Member,
    },
    /// Create the shard map: `owners.len()` fragments of equal size, fragment `i` owned by
    /// `owners[i]`. Refused if a map exists or fewer than `min_members` data members exist.
    Allocate {
        /// The owner of each fragment, in shard order (chosen by the allocation strategy).
        owners: Vec<u32>,
        /// The data members required.
        min_members: u32,
    },
    /// Record the decision to move `fragment` to node `to` (the operator's or the strategy's).
    PlanMove {
        /// The fragment.
        fragment: u32,
        /// The destination data member.
        to: u32,
    },
    /// Start handing `fragment` off from its owner to `to`: the fragment becomes
    /// `HandingOff` under a new handoff id (new epoch). Refused while `max_in_flight` handoffs
    /// run, or if this fragment has one already.
    BeginHandoff {
        /// The fragment.
        fragment: u32,
        /// The destination data member.
        to: u32,
        /// Most handoffs in flight at once (`--max-simultaneous-rebalance`).
        max_in_flight: u32,
    },
    /// The destination holds every document durably: it owns the fragment now (new epoch).
    CommitHandoff {
        /// The fragment.
        fragment: u32,
        /// The handoff id `BeginHandoff` gave (a commit of another one is refused).
        handoff: u64,
    },
    /// Mark a data member as leaving (graceful shutdown: the coordinator moves its fragments
    /// away and moves nothing to it) or as back (it rejoined).
    SetLeaving {
        /// The data member.
        node: u32,
        /// Leaving (true) or back (false).
        leaving: bool,
    },
    /// The handoff failed before its commit: the source keeps the fragment (new epoch), the
    /// destination discards its partial copy, the planned move is dropped.
    AbortHandoff {
        /// The fragment.
        fragment: u32,
        /// The handoff id `BeginHandoff` gave (an abort of another one is refused).
        handoff: u64,
    },
    /// Start splitting `fragment` at shard `at` (default: the middle of its range) into two
    /// new fragments with new ids on the same owner: the source is fenced (no writer) under a
    /// new reshape id and epoch until `CommitReshape` or `AbortReshape`.
    BeginSplit {
        /// The fragment.
        fragment: u32,
        /// The first shard of the upper part; `None`: the middle of the range.
        at: Option<u32>,
    },
    /// Start merging two adjacent fragments of one owner node into one new fragment (new id,
    /// on `left`'s executor); both sources are fenced until the commit or abort.
    BeginMerge {
        /// The lower fragment.
        left: u32,
        /// The upper fragment, starting where `left` ends.
        right: u32,
    },
    /// The owner holds the new fragments durably: the map replaces the sources with them
    /// (new epoch); the owner deletes the sources after this is applied.
    CommitReshape {
        /// The reshape id `BeginSplit` / `BeginMerge` gave.
        reshape: u64,
    },
    /// The split or merge failed before its commit: the sources stay (new epoch, writable
    /// again), the owner discards any partial new fragment. Its new ids are never reused.
    AbortReshape {
        /// The reshape id.
        reshape: u64,
    },
    /// Set (or, with `None`, remove) a collection's content sharding configuration: a
    /// compare-and-set on the catalog version the proposer decided against. The change is
    /// `pending` until `ActivateCollection` (see [`CollectionEntry`]).
    SetCollection {
        /// The collection.
        name: String,
        /// `catalog_version` when the proposer read the catalog.
        expected: u64,
        /// The configuration's JSON text (as router parsed and printed it), or `None`.
        sharding: Option<String>,
    },
    /// Every member has installed the catalog holding `name`'s pending change (made at
    /// catalog version `version`): it is in force for routing too.
    ActivateCollection {
        /// The collection.
        name: String,
        /// The catalog version its pending change was made at.
        version: u64,
    },
    /// Forget a member (an operator's `ALTER CLUSTER REMOVE NODE`, once the node stopped):
    /// refused while it owns a fragment or a handoff moves one to it. Nothing waits for it
    /// any more (a pending configuration change, a rebalance). It may join again later.
    RemoveMember {
        /// The member.
        node: u32,
    },
    /// Drop the planned move of `fragment` to `to` before its handoff began (the coordinator's,
    /// when `to` does not answer: at once when the fragment's owner is leaving, after
    /// `--move-target-silent-ms` otherwise; it plans again to nodes that do).
    DropMove {
        /// The fragment.
        fragment: u32,
        /// The destination the plan names.
        to: u32,
    },
}

/// Why a command was not applied. The state is unchanged.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// A map exists already.
    #[error("the shard map is already allocated (epoch {epoch})")]
    AlreadyAllocated {
        /// Its epoch.
        epoch: u64,
    },
    /// Not enough data members yet.
    #[error("{have} data members, {need} needed before fragments are allocated")]
    TooFewMembers {
        /// Data members now.
        have: u32,
        /// `min_members`.
        need: u32,
    },
    /// A named node is not a data member.
    #[error("node {node} is not a data member")]
    NotDataMember {
        /// The node.
        node: u32,
    },
    /// The map does not exist yet.
    #[error("no shard map is allocated yet")]
    NoMap,
    /// The fragment is not in the map.
    #[error("fragment ${fragment} does not exist")]
    UnknownFragment {
        /// The fragment.
        fragment: u32,
    },
    /// The fragment is already owned by the target node.
    #[error("fragment ${fragment} is already owned by node {node}")]
    AlreadyOwner {
        /// The fragment.
        fragment: u32,
        /// The node.
        node: u32,
    },
    /// A move of the fragment is planned already.
    #[error("fragment ${fragment} is already moving")]
    AlreadyMoving {
        /// The fragment.
        fragment: u32,
    },
    /// The map the command describes is not valid (no fragments, too many).
    #[error("invalid shard map: {reason}")]
    InvalidMap {
        /// The router's reason.
        reason: String,
    },
    /// The fragment is being handed off already.
    #[error("fragment ${fragment} is being handed off already (handoff {handoff})")]
    AlreadyHandingOff {
        /// The fragment.
        fragment: u32,
        /// The handoff in flight.
        handoff: u64,
    },
    /// As many handoffs as allowed are in flight.
    #[error("{max} handoffs are in flight, the most allowed")]
    TooManyHandoffs {
        /// The bound.
        max: u32,
    },
    /// A commit or abort names a handoff that is not the one in flight for the fragment
    /// (a duplicate, or a stale coordinator's).
    #[error("fragment ${fragment} has no handoff {handoff} in flight")]
    NoSuchHandoff {
        /// The fragment.
        fragment: u32,
        /// The handoff named.
        handoff: u64,
    },
    /// `DropMove` names a move that is not planned.
    #[error("no move of fragment ${fragment} to node {to} is planned")]
    NoPlannedMove {
        /// The fragment.
        fragment: u32,
        /// The destination named.
        to: u32,
    },
    /// The node is leaving: nothing moves to it.
    #[error("node {node} is leaving the cluster")]
    Leaving {
        /// The node.
        node: u32,
    },
    /// The last data member that is not leaving cannot leave: its fragments have nowhere to go.
    #[error("node {node} is the last data member not leaving; its fragments have nowhere to go")]
    LastDataMember {
        /// The node.
        node: u32,
    },
    /// The split point is not strictly inside the fragment's range.
    #[error("fragment ${fragment} covers shards {start}..{end}: cannot split at {at}")]
    SplitOutside {
        /// The fragment.
        fragment: u32,
        /// Its first shard.
        start: u32,
        /// One past its last shard.
        end: u32,
        /// The split point asked for.
        at: u32,
    },
    /// The two fragments of a merge are not neighbours in shard order (`left` then `right`).
    #[error(
        "fragments ${left} and ${right} are not adjacent (${left} must end where ${right} starts)"
    )]
    NotAdjacent {
        /// The lower fragment.
        left: u32,
        /// The upper fragment.
        right: u32,
    },
    /// The two fragments of a merge live on different nodes.
    #[error(
        "fragments ${left} (node {left_node}) and ${right} (node {right_node}) have different owners"
    )]
    OwnersDiffer {
        /// The lower fragment.
        left: u32,
        /// Its owner.
        left_node: u32,
        /// The upper fragment.
        right: u32,
        /// Its owner.
        right_node: u32,
    },
    /// The fragment is being split or merged already.
    #[error("fragment ${fragment} is being split or merged already (reshape {reshape})")]
    AlreadyReshaping {
        /// The fragment.
        fragment: u32,
        /// The reshape in flight.
        reshape: u64,
    },
    /// A commit or abort names no reshape in flight (a duplicate, or a stale coordinator's).
    #[error("no split or merge {reshape} is in flight")]
    NoSuchReshape {
        /// The reshape named.
        reshape: u64,
    },
    /// The map would hold more fragments than the router allows, or fragment ids ran out.
    #[error("the shard map cannot hold more fragments (at most {max})")]
    TooManyFragments {
        /// `router::limits::FRAGMENTS_MAX`.
        max: u32,
    },
    /// The cluster is full.
    #[error("the cluster has {max} members, the most it accepts")]
    TooManyMembers {
        /// `CLUSTER_MEMBERS_MAX`.
        max: usize,
    },
    /// The catalog changed since the proposer read it: read again and decide again.
    #[error("the collection catalog changed (now version {version}); decide again")]
    CatalogChanged {
        /// The catalog version now.
        version: u64,
    },
    /// The collection's previous change is not in force on every member yet.
    #[error(
        "collection {name:?} has a configuration change pending (not every member has installed it yet)"
    )]
    CollectionPending {
        /// The collection.
        name: String,
    },
    /// An activation that does not name the pending change (a duplicate or stale one).
    #[error("collection {name:?} has no change pending from catalog version {version}")]
    NoPendingChange {
        /// The collection.
        name: String,
        /// The version named.
        version: u64,
    },
    /// The catalog holds as many configured collections as it may.
    #[error("the cluster catalog holds {max} configured collections, the most it accepts")]
    TooManyCollections {
        /// `CLUSTER_COLLECTIONS_MAX`.
        max: usize,
    },
    /// A member to remove still owns fragments (or one is being handed to it): removing it
    /// would lose them.
    #[error(
        "node {node} owns {fragments} fragment(s) or is receiving one; removing it would lose \
         them: start it again and stop it with SIGTERM, which hands its fragments to the others"
    )]
    MemberHoldsFragments {
        /// The member.
        node: u32,
        /// Fragments it owns.
        fragments: usize,
    },
    /// No member has that id.
    #[error("node {node} is not a member of the cluster")]
    UnknownMember {
        /// The node.
        node: u32,
    },
}

/// What a committed command did, returned to its proposer.
pub type Applied = Result<u64, CommandError>;

/// One collection's content sharding configuration in the replicated catalog.
///
/// A change is made in two steps so that no node prunes reads by a configuration some other
/// node does not yet enforce on writes. While `pending` (from `SetCollection` until every
/// member has installed it and the coordinator applies `ActivateCollection`), nodes that
/// have it validate writes against both `sharding` and `previous`, place new `…$` ids by
/// `previous` when that one validates (else by `sharding`), and prune by neither; nodes
/// that do not have it yet still validate and prune by `previous` alone, and every write
/// either side accepts satisfies both. Once active, `sharding` alone is in force: every
/// member validated by it before any member routes by it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct CollectionEntry {
    /// The configuration (JSON text), `None` while its removal is pending.
    pub sharding: Option<String>,
    /// The configuration before the pending change (`None`: there was none).
    pub previous: Option<String>,
    /// The catalog version of the change not yet in force everywhere, if one is pending.
    pub pending: Option<u64>,
}

/// A handoff in flight: `from` (the owner, fenced) streams the fragment to `to`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// Its id, unique in the cluster's history (a retried move gets a new one).
    pub id: u64,
    /// The fragment.
    pub fragment: u32,
    /// The owner, which keeps it until the commit.
    pub from: u32,
    /// The destination data member.
    pub to: u32,
    /// The executor on `to` that will own it (the one with the fewest fragments there).
    pub to_executor: u32,
    /// The epoch `BeginHandoff` produced.
    pub begun_at: u64,
}

/// A split or merge in flight: `sources` (fenced, still in the map) become `targets` at its
/// commit. Every target has a fresh id, so a source and a target never share files on disk.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Reshape {
    /// Its id, unique in the cluster's history.
    pub id: u64,
    /// The fragments replaced, in shard order (one for a split, two for a merge).
    pub sources: Vec<u32>,
    /// The fragments replacing them, in shard order, covering exactly the sources' shards,
    /// all on the sources' node.
    pub targets: Vec<FragmentEntry>,
    /// The epoch the begin produced.
    pub begun_at: u64,
}

/// What a fragment is doing, as regions need it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragmentState {
    /// Its owner serves it.
    Active,
    /// A handoff is in flight: requests for it wait in region buffers.
    HandingOff {
        /// The owner (fenced).
        from: u32,
        /// The destination.
        to: u32,
        /// The handoff id.
        handoff: u64,
    },
}

/// The replicated state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterState {
    /// Members by node id.
    pub members: BTreeMap<u32, Member>,
    /// The map's epoch (0: not allocated).
    pub epoch: u64,
    /// The fragments in shard order (empty: not allocated).
    pub fragments: Vec<FragmentEntry>,
    /// Decided moves waiting for handoff.
    pub moves: Vec<PlannedMove>,
    /// Handoffs in flight (at most one per fragment).
    #[serde(default)]
    pub handoffs: Vec<Handoff>,
    /// The last handoff id given (ids start at 1).
    #[serde(default)]
    pub last_handoff: u64,
    /// Data members shutting down gracefully: their fragments move away, none move to them.
    #[serde(default)]
    pub leaving: std::collections::BTreeSet<u32>,
    /// Splits and merges in flight (a fragment is in at most one, and then in no handoff).
    #[serde(default)]
    pub reshapes: Vec<Reshape>,
    /// The last reshape id given (ids start at 1).
    #[serde(default)]
    pub last_reshape: u64,
    /// The lowest fragment id never given (ids of retired or aborted fragments are not
    /// reused; 0 in a state written before splits: then one past the highest id in use).
    #[serde(default)]
    pub next_fragment: u32,
    /// Bumped by every applied catalog command (0: none yet).
    #[serde(default)]
    pub catalog_version: u64,
    /// Collections with a content sharding configuration (or a change of one pending).
    #[serde(default)]
    pub collections: BTreeMap<String, CollectionEntry>,
}

impl ClusterState {
    /// Data members, by id.
    pub fn data_members(&self) -> impl Iterator<Item = u32> + '_ {
        self.members.iter().filter(|(_, m)| m.role == Role::Data).map(|(id, _)| *id)
    }

    /// Whether the map is allocated.
    pub fn allocated(&self) -> bool {
        !self.fragments.is_empty()
    }

    /// Fragments owned by `node`.
    pub fn fragments_of(&self, node: u32) -> usize {
        self.fragments.iter().filter(|f| f.node == node).count()
    }

    /// The handoff in flight for `fragment`, if any.
    pub fn handoff_of(&self, fragment: u32) -> Option<&Handoff> {
        self.handoffs.iter().find(|h| h.fragment == fragment)
    }

    /// What `fragment` is doing (`Active` for an unknown one: it has no handoff).
    pub fn fragment_state(&self, fragment: u32) -> FragmentState {
        match self.handoff_of(fragment) {
            Some(h) => FragmentState::HandingOff { from: h.from, to: h.to, handoff: h.id },
            None => FragmentState::Active,
        }
    }

    /// The node that may accept writes for `fragment`: its owner while it is `Active`, nobody
    /// while it is handed off (the owner is fenced), `None` for an unknown fragment.
    pub fn writer_of(&self, fragment: u32) -> Option<u32> {
        let entry = self.fragments.iter().find(|f| f.id == fragment)?;
        let fenced = self.handoff_of(fragment).is_some() || self.reshape_of(fragment).is_some();
        (!fenced).then_some(entry.node)
    }

    /// The fragment to split automatically, if any: with `reports` (node -> its fragments'
    /// live bytes), the largest fragment over `threshold` bytes as reported by its owner,
    /// more than one shard wide, not moving, handed off or reshaped; none while any split or
    /// merge is in flight (one at a time) or when `threshold` is 0 (off).
    pub fn oversized(
        &self,
        reports: &std::collections::HashMap<u32, Vec<crate::cluster::wire::FragmentBytes>>,
        threshold: u64,
    ) -> Option<u32> {
        if threshold == 0 || !self.reshapes.is_empty() {
            return None;
        }
        let busy =
            |id: u32| self.handoff_of(id).is_some() || self.moves.iter().any(|m| m.fragment == id);
        self.fragments
            .iter()
            .filter(|f| f.end - f.start > 1 && !busy(f.id))
            .filter_map(|f| {
                let bytes = reports.get(&f.node)?.iter().find(|b| b.fragment == f.id)?.bytes;
                (bytes > threshold).then_some((bytes, std::cmp::Reverse(f.id)))
            })
            .max()
            .map(|(_, std::cmp::Reverse(id))| id)
    }

    /// The split or merge in flight that `fragment` is a source of, if any.
    pub fn reshape_of(&self, fragment: u32) -> Option<&Reshape> {
        self.reshapes.iter().find(|r| r.sources.contains(&fragment))
    }

    /// The map as router's `ShardMap`, if allocated.
    pub fn shard_map(&self) -> Option<ShardMap> {
        if !self.allocated() {
            return None;
        }
        let fragments = self
            .fragments
            .iter()
            .map(|f| {
                let range = router::ShardRange::new(f.start, f.end)?;
                let owner = Owner { node: NodeId(f.node), executor: ExecutorId(f.executor) };
                Some(router::Fragment::new(FragmentId::new(f.id), range, owner))
            })
            .collect::<Option<Vec<_>>>()?;
        ShardMap::new(fragments, Epoch(self.epoch)).ok()
    }

    /// Applies one committed command: the new epoch, or why nothing changed.
    pub fn apply(&mut self, command: &Command) -> Applied {
        match command {
            Command::AddMember { node, member } => {
                if !self.members.contains_key(node) && self.members.len() >= CLUSTER_MEMBERS_MAX {
                    return Err(CommandError::TooManyMembers { max: CLUSTER_MEMBERS_MAX });
                }
                self.members.insert(*node, member.clone());
                Ok(self.epoch)
            }
            Command::Allocate { owners, min_members } => self.allocate(owners, *min_members),
            Command::PlanMove { fragment, to } => self.plan_move(*fragment, *to),
            Command::BeginHandoff { fragment, to, max_in_flight } => {
                self.begin_handoff(*fragment, *to, *max_in_flight)
            }
            Command::CommitHandoff { fragment, handoff } => {
                self.end_handoff(*fragment, *handoff, true)
            }
            Command::AbortHandoff { fragment, handoff } => {
                self.end_handoff(*fragment, *handoff, false)
            }
            Command::SetLeaving { node, leaving } => self.set_leaving(*node, *leaving),
            Command::BeginSplit { fragment, at } => self.begin_split(*fragment, *at),
            Command::BeginMerge { left, right } => self.begin_merge(*left, *right),
            Command::CommitReshape { reshape } => self.end_reshape(*reshape, true),
            Command::AbortReshape { reshape } => self.end_reshape(*reshape, false),
            Command::SetCollection { name, expected, sharding } => {
                self.set_collection(name, *expected, sharding.as_deref())
            }
            Command::ActivateCollection { name, version } => {
                self.activate_collection(name, *version)
            }
            Command::RemoveMember { node } => self.remove_member(*node),
            Command::DropMove { fragment, to } => self.drop_move(*fragment, *to),
        }
    }

    /// `DropMove`: the epoch, unchanged (the map does not change). Refused once the move's
    /// handoff began (an abort ends that) or when no such move is planned.
    fn drop_move(&mut self, fragment: u32, to: u32) -> Applied {
        if let Some(h) = self.handoff_of(fragment) {
            return Err(CommandError::AlreadyHandingOff { fragment, handoff: h.id });
        }
        let before = self.moves.len();
        self.moves.retain(|m| !(m.fragment == fragment && m.to == to));
        if self.moves.len() == before {
            return Err(CommandError::NoPlannedMove { fragment, to });
        }
        Ok(self.epoch)
    }

    /// `RemoveMember`: the epoch, unchanged (the map does not change).
    fn remove_member(&mut self, node: u32) -> Applied {
        if !self.members.contains_key(&node) {
            return Err(CommandError::UnknownMember { node });
        }
        let fragments = self.fragments_of(node);
        let receiving = self.handoffs.iter().any(|h| h.to == node)
            || self.reshapes.iter().any(|r| r.targets.iter().any(|t| t.node == node));
        if fragments > 0 || receiving {
            return Err(CommandError::MemberHoldsFragments { node, fragments });
        }
        self.members.remove(&node);
        self.leaving.remove(&node);
        self.moves.retain(|m| m.to != node);
        Ok(self.epoch)
    }

    /// `SetCollection`: the catalog version after the change.
    fn set_collection(&mut self, name: &str, expected: u64, sharding: Option<&str>) -> Applied {
        if expected != self.catalog_version {
            return Err(CommandError::CatalogChanged { version: self.catalog_version });
        }
        let current = self.collections.get(name);
        if current.is_some_and(|c| c.pending.is_some()) {
            return Err(CommandError::CollectionPending { name: name.to_owned() });
        }
        if current.is_none() && self.collections.len() >= CLUSTER_COLLECTIONS_MAX {
            return Err(CommandError::TooManyCollections { max: CLUSTER_COLLECTIONS_MAX });
        }
        let previous = current.and_then(|c| c.sharding.clone());
        if previous.is_none() && sharding.is_none() {
            // Nothing to remove: the catalog does not change.
            return Ok(self.catalog_version);
        }
        self.catalog_version += 1;
        self.collections.insert(
            name.to_owned(),
            CollectionEntry {
                sharding: sharding.map(str::to_owned),
                previous,
                pending: Some(self.catalog_version),
            },
        );
        Ok(self.catalog_version)
    }

    /// `ActivateCollection`: the catalog version after it.
    fn activate_collection(&mut self, name: &str, version: u64) -> Applied {
        let Some(entry) = self.collections.get_mut(name).filter(|c| c.pending == Some(version))
        else {
            return Err(CommandError::NoPendingChange { name: name.to_owned(), version });
        };
        entry.pending = None;
        entry.previous = None;
        if entry.sharding.is_none() {
            self.collections.remove(name);
        }
        self.catalog_version += 1;
        Ok(self.catalog_version)
    }

    /// Pending catalog changes every member has installed, given the catalog version each
    /// member reports (`installed`): what the coordinator activates. A member that has not
    /// reported holds every change back.
    pub fn activatable(&self, installed: &BTreeMap<u32, u64>) -> Vec<(String, u64)> {
        let floor = self
            .members
            .keys()
            .map(|node| installed.get(node).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        self.collections
            .iter()
            .filter_map(|(name, c)| c.pending.filter(|v| *v <= floor).map(|v| (name.clone(), v)))
            .collect()
    }

    /// The fragment as a source of a new reshape: it exists, is not handed off, split or
    /// merged already, and no move of it is planned.
    fn reshapable(&self, fragment: u32) -> Result<FragmentEntry, CommandError> {
        if !self.allocated() {
            return Err(CommandError::NoMap);
        }
        let Some(entry) = self.fragments.iter().find(|f| f.id == fragment).copied() else {
            return Err(CommandError::UnknownFragment { fragment });
        };
        if let Some(h) = self.handoff_of(fragment) {
            return Err(CommandError::AlreadyHandingOff { fragment, handoff: h.id });
        }
        if let Some(r) = self.reshape_of(fragment) {
            return Err(CommandError::AlreadyReshaping { fragment, reshape: r.id });
        }
        if self.moves.iter().any(|m| m.fragment == fragment) {
            return Err(CommandError::AlreadyMoving { fragment });
        }
        Ok(entry)
    }

    /// `count` fresh fragment ids, or `TooManyFragments` when ids run out.
    fn fresh_ids(&self, count: u32) -> Result<Vec<u32>, CommandError> {
        let too_many = CommandError::TooManyFragments { max: router::limits::FRAGMENTS_MAX };
        let in_use = self.fragments.iter().map(|f| f.id);
        let reserved = self.reshapes.iter().flat_map(|r| r.targets.iter().map(|t| t.id));
        let mut first = self.next_fragment;
        for id in in_use.chain(reserved) {
            first = first.max(id.checked_add(1).ok_or(too_many.clone())?);
        }
        (0..count).map(|i| first.checked_add(i).ok_or(too_many.clone())).collect()
    }

    /// Records a reshape in flight (new id, new epoch).
    fn begin_reshape(&mut self, sources: Vec<u32>, targets: Vec<FragmentEntry>) -> Applied {
        let next = targets.iter().map(|t| t.id).max().and_then(|id| id.checked_add(1));
        let too_many = CommandError::TooManyFragments { max: router::limits::FRAGMENTS_MAX };
        self.next_fragment = next.ok_or(too_many)?;
        self.last_reshape += 1;
        self.epoch += 1;
        self.reshapes.push(Reshape {
            id: self.last_reshape,
            sources,
            targets,
            begun_at: self.epoch,
        });
        Ok(self.epoch)
    }

    fn begin_split(&mut self, fragment: u32, at: Option<u32>) -> Applied {
        let entry = self.reshapable(fragment)?;
        let at = at.unwrap_or(entry.start + (entry.end - entry.start) / 2);
        if at <= entry.start || at >= entry.end {
            let (start, end) = (entry.start, entry.end);
            return Err(CommandError::SplitOutside { fragment, start, end, at });
        }
        // A split grows the map by one; reshapes in flight may grow it too.
        let growing = self.reshapes.iter().filter(|r| r.targets.len() > r.sources.len()).count();
        if self.fragments.len() + growing + 1 > router::limits::FRAGMENTS_MAX as usize {
            return Err(CommandError::TooManyFragments { max: router::limits::FRAGMENTS_MAX });
        }
        let ids = self.fresh_ids(2)?;
        let (Some(&low), Some(&high)) = (ids.first(), ids.get(1)) else {
            return Err(CommandError::TooManyFragments { max: router::limits::FRAGMENTS_MAX });
        };
        let targets = vec![
            FragmentEntry { id: low, end: at, ..entry },
            FragmentEntry { id: high, start: at, ..entry },
        ];
        self.begin_reshape(vec![fragment], targets)
    }

    fn begin_merge(&mut self, left: u32, right: u32) -> Applied {
        let l = self.reshapable(left)?;
        let r = self.reshapable(right)?;
        if left == right || l.end != r.start {
            return Err(CommandError::NotAdjacent { left, right });
        }
        if l.node != r.node {
            let (left_node, right_node) = (l.node, r.node);
            return Err(CommandError::OwnersDiffer { left, left_node, right, right_node });
        }
        let ids = self.fresh_ids(1)?;
        let Some(&id) = ids.first() else {
            return Err(CommandError::TooManyFragments { max: router::limits::FRAGMENTS_MAX });
        };
        self.begin_reshape(vec![left, right], vec![FragmentEntry { id, end: r.end, ..l }])
    }

    fn end_reshape(&mut self, reshape: u64, commit: bool) -> Applied {
        let Some(at) = self.reshapes.iter().position(|r| r.id == reshape) else {
            return Err(CommandError::NoSuchReshape { reshape });
        };
        let r = self.reshapes.remove(at);
        if commit {
            // The sources are contiguous in shard order: the targets take their place.
            let first = self.fragments.iter().position(|f| r.sources.contains(&f.id));
            self.fragments.retain(|f| !r.sources.contains(&f.id));
            let index = first.unwrap_or(self.fragments.len()).min(self.fragments.len());
            self.fragments.splice(index..index, r.targets.iter().copied());
        }
        self.epoch += 1;
        Ok(self.epoch)
    }

    fn set_leaving(&mut self, node: u32, leaving: bool) -> Applied {
        if self.members.get(&node).is_none_or(|m| m.role != Role::Data) {
            return Err(CommandError::NotDataMember { node });
        }
        if !leaving {
            self.leaving.remove(&node);
            return Ok(self.epoch);
        }
        let stays = self.data_members().any(|n| n != node && !self.leaving.contains(&n));
        if !stays {
            return Err(CommandError::LastDataMember { node });
        }
        self.leaving.insert(node);
        // Plans to move fragments to it are void; the coordinator plans new ones.
        self.moves.retain(|m| m.to != node);
        Ok(self.epoch)
    }

    fn begin_handoff(&mut self, fragment: u32, to: u32, max_in_flight: u32) -> Applied {
        if !self.allocated() {
            return Err(CommandError::NoMap);
        }
        let Some(entry) = self.fragments.iter().find(|f| f.id == fragment).copied() else {
            return Err(CommandError::UnknownFragment { fragment });
        };
        let Some(member) = self.members.get(&to).filter(|m| m.role == Role::Data) else {
            return Err(CommandError::NotDataMember { node: to });
        };
        if entry.node == to {
            return Err(CommandError::AlreadyOwner { fragment, node: to });
        }
        if self.leaving.contains(&to) {
            return Err(CommandError::Leaving { node: to });
        }
        if let Some(h) = self.handoff_of(fragment) {
            return Err(CommandError::AlreadyHandingOff { fragment, handoff: h.id });
        }
        if let Some(r) = self.reshape_of(fragment) {
            return Err(CommandError::AlreadyReshaping { fragment, reshape: r.id });
        }
        if self.moves.iter().any(|m| m.fragment == fragment && m.to != to) {
            return Err(CommandError::AlreadyMoving { fragment });
        }
        let max = max_in_flight.max(1);
        if self.handoffs.len() >= max as usize {
            return Err(CommandError::TooManyHandoffs { max });
        }
        // The executor of `to` holding the fewest fragments (ties: the lowest), counting the
        // ones already on their way there.
        let executors = member.executors.clamp(1, MEMBER_EXECUTORS_PLACED_MAX);
        let mut held = vec![0usize; executors as usize];
        let arriving = self.handoffs.iter().filter(|h| h.to == to).map(|h| h.to_executor);
        let there = self.fragments.iter().filter(|f| f.node == to).map(|f| f.executor);
        for e in there.chain(arriving) {
            if let Some(n) = held.get_mut(e as usize) {
                *n += 1;
            }
        }
        let to_executor = (0..executors).min_by_key(|e| (held.get(*e as usize), *e)).unwrap_or(0);
        self.last_handoff += 1;
        self.epoch += 1;
        self.handoffs.push(Handoff {
            id: self.last_handoff,
            fragment,
            from: entry.node,
            to,
            to_executor,
            begun_at: self.epoch,
        });
        Ok(self.epoch)
    }

    fn end_handoff(&mut self, fragment: u32, handoff: u64, commit: bool) -> Applied {
        let Some(at) = self.handoffs.iter().position(|h| h.fragment == fragment && h.id == handoff)
        else {
            return Err(CommandError::NoSuchHandoff { fragment, handoff });
        };
        let h = self.handoffs.remove(at);
        if commit && let Some(entry) = self.fragments.iter_mut().find(|f| f.id == fragment) {
            entry.node = h.to;
            entry.executor = h.to_executor;
        }
        self.moves.retain(|m| m.fragment != fragment);
        self.epoch += 1;
        Ok(self.epoch)
    }

    fn allocate(&mut self, owners: &[u32], min_members: u32) -> Applied {
        if self.allocated() {
            return Err(CommandError::AlreadyAllocated { epoch: self.epoch });
        }
        let have = u32::try_from(self.data_members().count()).unwrap_or(u32::MAX);
        if have < min_members.max(1) {
            return Err(CommandError::TooFewMembers { have, need: min_members.max(1) });
        }
        let mut per_node: BTreeMap<u32, u32> = BTreeMap::new();
        let mut executors = Vec::with_capacity(owners.len());
        for node in owners {
            let member = self.members.get(node).filter(|m| m.role == Role::Data);
            let Some(member) = member else {
                return Err(CommandError::NotDataMember { node: *node });
            };
            let nth = per_node.entry(*node).or_insert(0);
            executors.push(*nth % member.executors.max(1));
            *nth += 1;
        }
        let count = u32::try_from(owners.len()).unwrap_or(u32::MAX);
        let even = ShardMap::even(count, &[Owner::new(0, 0)])
            .map_err(|e| CommandError::InvalidMap { reason: e.to_string() })?;
        self.fragments = even
            .fragments()
            .iter()
            .zip(owners.iter().zip(executors))
            .map(|(f, (node, executor))| FragmentEntry {
                id: f.id().get(),
                start: f.range().start(),
                end: f.range().end(),
                node: *node,
                executor,
            })
            .collect();
        self.epoch = 1;
        Ok(self.epoch)
    }

    fn plan_move(&mut self, fragment: u32, to: u32) -> Applied {
        if !self.allocated() {
            return Err(CommandError::NoMap);
        }
        let Some(entry) = self.fragments.iter().find(|f| f.id == fragment) else {
            return Err(CommandError::UnknownFragment { fragment });
        };
        if self.members.get(&to).is_none_or(|m| m.role != Role::Data) {
            return Err(CommandError::NotDataMember { node: to });
        }
        if entry.node == to {
            return Err(CommandError::AlreadyOwner { fragment, node: to });
        }
        if self.leaving.contains(&to) {
            return Err(CommandError::Leaving { node: to });
        }
        if self.moves.iter().any(|m| m.fragment == fragment) {
            return Err(CommandError::AlreadyMoving { fragment });
        }
        if let Some(r) = self.reshape_of(fragment) {
            return Err(CommandError::AlreadyReshaping { fragment, reshape: r.id });
        }
        self.moves.push(PlannedMove { fragment, from: entry.node, to });
        Ok(self.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::allocation::{AllocationStrategy, LeastShardAllocation, Loads};

    fn member(role: Role) -> Member {
        Member {
            role,
            peer_addr: "127.0.0.1:1".into(),
            pg_addr: "127.0.0.1:2".into(),
            executors: 2,
        }
    }

    fn add(state: &mut ClusterState, node: u32, role: Role) {
        assert_eq!(state.apply(&Command::AddMember { node, member: member(role) }), Ok(0));
    }

    // Checks the replicated catalog: a change is a compare-and-set on the catalog version
    // (a stale proposer is told the version now), it stays pending (no second change of the
    // same collection) until activated once every member, proxies included, reports it
    // installed, an activation of anything but the pending change is a no-op, and a removal
    // leaves no entry once active; an old snapshot without the catalog loads empty.
    #[test]
    fn catalog_changes_are_compare_and_set_then_activated() {
        let mut s = ClusterState::default();
        add(&mut s, 1, Role::Data);
        add(&mut s, 2, Role::Data);
        add(&mut s, 3, Role::Proxy);
        let set = |name: &str, expected, sharding: Option<&str>| Command::SetCollection {
            name: name.to_owned(),
            expected,
            sharding: sharding.map(str::to_owned),
        };
        let a = r#"{"Fields":["Customer"],"Range":1,"Mutable":false}"#;
        let b = r#"{"Fields":["Customer"],"Range":4,"Mutable":false}"#;
        assert_eq!(s.apply(&set("gone", 0, None)), Ok(0), "removing nothing changes nothing");
        assert_eq!(s.apply(&set("inv", 0, Some(a))), Ok(1));
        assert_eq!(
            s.apply(&set("x", 0, Some(a))),
            Err(CommandError::CatalogChanged { version: 1 })
        );
        assert_eq!(
            s.apply(&set("inv", 1, Some(b))),
            Err(CommandError::CollectionPending { name: "inv".into() })
        );
        let entry = CollectionEntry { sharding: Some(a.into()), previous: None, pending: Some(1) };
        assert_eq!(s.collections.get("inv"), Some(&entry));
        let reported = |v: &[(u32, u64)]| v.iter().copied().collect::<BTreeMap<u32, u64>>();
        assert!(
            s.activatable(&reported(&[(1, 1), (2, 1)])).is_empty(),
            "the proxy has not reported"
        );
        assert!(s.activatable(&reported(&[(1, 1), (2, 0), (3, 5)])).is_empty());
        assert_eq!(s.activatable(&reported(&[(1, 1), (2, 1), (3, 1)])), [("inv".to_owned(), 1)]);
        let activate =
            |name: &str, version| Command::ActivateCollection { name: name.into(), version };
        assert_eq!(
            s.apply(&activate("inv", 7)),
            Err(CommandError::NoPendingChange { name: "inv".into(), version: 7 })
        );
        assert_eq!(s.apply(&activate("inv", 1)), Ok(2));
        assert_eq!(
            s.apply(&activate("inv", 1)),
            Err(CommandError::NoPendingChange { name: "inv".into(), version: 1 })
        );
        assert_eq!(s.collections["inv"].pending, None);
        assert_eq!(s.apply(&set("inv", 2, Some(b))), Ok(3));
        assert_eq!(
            s.collections["inv"].previous.as_deref(),
            Some(a),
            "the configuration before it"
        );
        assert_eq!(s.apply(&activate("inv", 3)), Ok(4));
        assert_eq!(
            s.collections["inv"],
            CollectionEntry { sharding: Some(b.into()), previous: None, pending: None }
        );
        assert_eq!(s.apply(&set("inv", 4, None)), Ok(5));
        assert_eq!(s.collections["inv"].previous.as_deref(), Some(b));
        assert_eq!(s.apply(&activate("inv", 5)), Ok(6));
        assert!(s.collections.is_empty(), "a removal in force leaves nothing");
        let mut old: serde_json::Value = serde_json::to_value(&s).expect("serializes");
        let fields = old.as_object_mut().expect("an object");
        fields.remove("catalog_version");
        fields.remove("collections");
        let loaded: ClusterState = serde_json::from_value(old).expect("an old snapshot loads");
        assert_eq!((loaded.catalog_version, loaded.collections.len()), (0, 0));
    }

    // Checks nothing is allocated before min-members data members (proxies do not count), and
    // that the allocated map is a valid shard map with the strategy's owners and executors.
    #[test]
    fn allocate_waits_for_min_members() {
        let mut s = ClusterState::default();
        add(&mut s, 1, Role::Data);
        add(&mut s, 9, Role::Proxy);
        let cmd = Command::Allocate { owners: vec![1, 1], min_members: 2 };
        assert_eq!(s.apply(&cmd), Err(CommandError::TooFewMembers { have: 1, need: 2 }));
        assert!(!s.allocated());
        add(&mut s, 2, Role::Data);
        let mut loads = Loads::new();
        for n in s.data_members() {
            loads.add_node(NodeId(n));
        }
        let owners: Vec<u32> = crate::cluster::allocation::allocate_all(
            &LeastShardAllocation::default(),
            &loads,
            6,
            0,
        )
        .into_iter()
        .map(|n| n.0)
        .collect();
        assert_eq!(owners, [1, 2, 1, 2, 1, 2]);
        assert_eq!(s.apply(&Command::Allocate { owners, min_members: 2 }), Ok(1));
        let map = s.shard_map().expect("allocated");
        assert_eq!(map.len(), 6);
        assert_eq!(map.epoch(), Epoch(1));
        assert_eq!(s.fragments_of(1), 3);
        let execs: Vec<u32> =
            s.fragments.iter().filter(|f| f.node == 2).map(|f| f.executor).collect();
        assert_eq!(execs, [0, 1, 0]);
        let again = Command::Allocate { owners: vec![1], min_members: 1 };
        assert_eq!(s.apply(&again), Err(CommandError::AlreadyAllocated { epoch: 1 }));
    }

    // Checks an allocation naming a proxy or an unknown node is refused whole.
    #[test]
    fn allocate_refuses_non_data_owner() {
        let mut s = ClusterState::default();
        add(&mut s, 1, Role::Data);
        add(&mut s, 2, Role::Proxy);
        let cmd = Command::Allocate { owners: vec![1, 2], min_members: 1 };
        assert_eq!(s.apply(&cmd), Err(CommandError::NotDataMember { node: 2 }));
        let cmd = Command::Allocate { owners: vec![1, 5], min_members: 1 };
        assert_eq!(s.apply(&cmd), Err(CommandError::NotDataMember { node: 5 }));
        assert_eq!(s, {
            let mut t = ClusterState::default();
            add(&mut t, 1, Role::Data);
            add(&mut t, 2, Role::Proxy);
            t
        });
        let cmd = Command::Allocate { owners: vec![], min_members: 1 };
        assert!(matches!(s.apply(&cmd), Err(CommandError::InvalidMap { .. })));
    }

    // Checks the manual move decision path: refused without a map, for an unknown fragment,
    // to a proxy, to the current owner and twice; recorded otherwise, without changing owners.
    #[test]
    fn plan_move_decisions() {
        let mut s = ClusterState::default();
        add(&mut s, 1, Role::Data);
        add(&mut s, 2, Role::Data);
        add(&mut s, 3, Role::Proxy);
        let mv = |fragment, to| Command::PlanMove { fragment, to };
        assert_eq!(s.apply(&mv(0, 2)), Err(CommandError::NoMap));
        assert_eq!(s.apply(&Command::Allocate { owners: vec![1, 1], min_members: 1 }), Ok(1));
        assert_eq!(s.apply(&mv(7, 2)), Err(CommandError::UnknownFragment { fragment: 7 }));
        assert_eq!(s.apply(&mv(0, 3)), Err(CommandError::NotDataMember { node: 3 }));
        assert_eq!(s.apply(&mv(0, 1)), Err(CommandError::AlreadyOwner { fragment: 0, node: 1 }));
        assert_eq!(s.apply(&mv(0, 2)), Ok(1));
        assert_eq!(s.apply(&mv(0, 2)), Err(CommandError::AlreadyMoving { fragment: 0 }));
        assert_eq!(s.moves, [PlannedMove { fragment: 0, from: 1, to: 2 }]);
        assert_eq!(s.fragments_of(1), 2, "a plan moves no data and changes no owner");
    }

    // Checks dropping a planned move: refused for a move not planned (wrong fragment or
    // destination) and once its handoff began; the fragment may be planned anew after it.
    #[test]
    fn drop_move_decisions() {
        let mut s = ClusterState::default();
        add(&mut s, 1, Role::Data);
        add(&mut s, 2, Role::Data);
        add(&mut s, 3, Role::Data);
        let drop = |fragment, to| Command::DropMove { fragment, to };
        assert_eq!(s.apply(&Command::Allocate { owners: vec![1, 1], min_members: 1 }), Ok(1));
        assert_eq!(s.apply(&Command::PlanMove { fragment: 0, to: 2 }), Ok(1));
        assert_eq!(s.apply(&drop(0, 3)), Err(CommandError::NoPlannedMove { fragment: 0, to: 3 }));
        assert_eq!(s.apply(&drop(1, 2)), Err(CommandError::NoPlannedMove { fragment: 1, to: 2 }));
        assert_eq!(s.apply(&drop(0, 2)), Ok(1), "the map does not change");
        assert!(s.moves.is_empty());
        assert_eq!(s.apply(&Command::PlanMove { fragment: 0, to: 3 }), Ok(1));
        let begin = Command::BeginHandoff { fragment: 0, to: 3, max_in_flight: 1 };
        assert_eq!(s.apply(&begin), Ok(2));
        assert_eq!(
            s.apply(&drop(0, 3)),
            Err(CommandError::AlreadyHandingOff { fragment: 0, handoff: 1 })
        );
        assert_eq!(s.moves, [PlannedMove { fragment: 0, from: 1, to: 3 }]);
    }

    // Checks the state survives its serde form unchanged (it is the snapshot and state.json).
    #[test]
    fn state_roundtrips_through_json() {
        let mut s = ClusterState::default();
        add(&mut s, 1, Role::Data);
        assert_eq!(s.apply(&Command::Allocate { owners: vec![1, 1, 1], min_members: 1 }), Ok(1));
        let json = serde_json::to_vec(&s).expect("serializes");
        let back: ClusterState = serde_json::from_slice(&json).expect("parses");
        assert_eq!(back, s);
        let strategy = LeastShardAllocation::default();
        assert_eq!(strategy.name(), "least-shard");
    }
}

#[cfg(test)]
mod handoff_tests {
    use super::*;

    fn member(role: Role) -> Member {
        Member {
            role,
            peer_addr: "127.0.0.1:1".into(),
            pg_addr: "127.0.0.1:2".into(),
            executors: 2,
        }
    }

    /// Nodes 1 and 2 (data), 3 (proxy); four fragments on node 1.
    fn allocated() -> ClusterState {
        let mut s = ClusterState::default();
        for (node, role) in [(1, Role::Data), (2, Role::Data), (3, Role::Proxy)] {
            assert_eq!(s.apply(&Command::AddMember { node, member: member(role) }), Ok(0));
        }
        assert_eq!(s.apply(&Command::Allocate { owners: vec![1, 1, 1, 1], min_members: 1 }), Ok(1));
        s
    }

    fn begin(fragment: u32, to: u32) -> Command {
        Command::BeginHandoff { fragment, to, max_in_flight: 2 }
    }

    // Checks a handoff's whole life: begin marks it HandingOff under id 1 with a new epoch and
    // nobody writable, commit moves the owner (and executor) with another epoch, and a repeat
    // of the commit or a late abort is a typed no-op that changes nothing.
    #[test]
    fn handoff_begin_commit_and_duplicates() {
        let mut s = allocated();
        s.apply(&Command::PlanMove { fragment: 2, to: 2 }).expect("planned");
        assert_eq!(s.writer_of(2), Some(1));
        assert_eq!(s.apply(&begin(2, 2)), Ok(2));
        assert_eq!(s.fragment_state(2), FragmentState::HandingOff { from: 1, to: 2, handoff: 1 });
        assert_eq!(s.writer_of(2), None, "the owner is fenced while handing off");
        assert_eq!(s.writer_of(1), Some(1));
        assert_eq!(s.shard_map().expect("map").epoch(), Epoch(2));
        assert_eq!(
            s.apply(&begin(2, 2)),
            Err(CommandError::AlreadyHandingOff { fragment: 2, handoff: 1 })
        );
        let commit = Command::CommitHandoff { fragment: 2, handoff: 1 };
        assert_eq!(s.apply(&commit), Ok(3));
        assert_eq!(s.writer_of(2), Some(2));
        assert_eq!(s.fragment_state(2), FragmentState::Active);
        assert!(s.moves.is_empty(), "the planned move is done");
        let entry = s.fragments[2];
        assert_eq!((entry.node, entry.executor), (2, 0));
        let before = s.clone();
        assert_eq!(s.apply(&commit), Err(CommandError::NoSuchHandoff { fragment: 2, handoff: 1 }));
        let abort = Command::AbortHandoff { fragment: 2, handoff: 1 };
        assert_eq!(s.apply(&abort), Err(CommandError::NoSuchHandoff { fragment: 2, handoff: 1 }));
        assert_eq!(s, before);
    }

    // Checks an abort keeps the owner, drops the plan, bumps the epoch, and that a commit of
    // the aborted handoff is refused; a retry gets a new id, so a stale commit of the first
    // never commits the second.
    #[test]
    fn handoff_abort_then_retry_gets_a_new_id() {
        let mut s = allocated();
        s.apply(&Command::PlanMove { fragment: 0, to: 2 }).expect("planned");
        assert_eq!(s.apply(&begin(0, 2)), Ok(2));
        assert_eq!(s.apply(&Command::AbortHandoff { fragment: 0, handoff: 1 }), Ok(3));
        assert_eq!(s.writer_of(0), Some(1));
        assert!(s.moves.is_empty());
        assert_eq!(
            s.apply(&Command::CommitHandoff { fragment: 0, handoff: 1 }),
            Err(CommandError::NoSuchHandoff { fragment: 0, handoff: 1 })
        );
        assert_eq!(s.apply(&begin(0, 2)), Ok(4));
        assert_eq!(s.handoff_of(0).map(|h| h.id), Some(2));
        assert_eq!(
            s.apply(&Command::CommitHandoff { fragment: 0, handoff: 1 }),
            Err(CommandError::NoSuchHandoff { fragment: 0, handoff: 1 })
        );
        assert_eq!(s.writer_of(0), None);
        assert_eq!(s.apply(&Command::CommitHandoff { fragment: 0, handoff: 2 }), Ok(5));
        assert_eq!(s.writer_of(0), Some(2));
    }

    // Checks the refusals of BeginHandoff: no map, unknown fragment, proxy or unknown target,
    // the owner itself, a plan to another node, and the in-flight bound.
    #[test]
    fn handoff_begin_refusals() {
        let mut s = ClusterState::default();
        assert_eq!(s.apply(&begin(0, 2)), Err(CommandError::NoMap));
        let mut s2 = allocated();
        assert_eq!(s2.apply(&begin(9, 2)), Err(CommandError::UnknownFragment { fragment: 9 }));
        assert_eq!(s2.apply(&begin(0, 3)), Err(CommandError::NotDataMember { node: 3 }));
        assert_eq!(s2.apply(&begin(0, 7)), Err(CommandError::NotDataMember { node: 7 }));
        assert_eq!(
            s2.apply(&begin(0, 1)),
            Err(CommandError::AlreadyOwner { fragment: 0, node: 1 })
        );
        s2.apply(&Command::AddMember { node: 4, member: member(Role::Data) }).expect("added");
        s2.apply(&Command::PlanMove { fragment: 0, to: 4 }).expect("planned");
        assert_eq!(s2.apply(&begin(0, 2)), Err(CommandError::AlreadyMoving { fragment: 0 }));
        assert_eq!(s2.apply(&begin(1, 2)), Ok(2));
        assert_eq!(s2.apply(&begin(2, 2)), Ok(3));
        assert_eq!(s2.apply(&begin(3, 2)), Err(CommandError::TooManyHandoffs { max: 2 }));
        // Two fragments arriving on node 2 are spread over its two executors.
        let execs: Vec<u32> = s2.handoffs.iter().map(|h| h.to_executor).collect();
        assert_eq!(execs, [0, 1]);
        s.members.clear();
        assert_eq!(s, ClusterState::default());
    }

    // Checks leaving: refused for a proxy, an unknown node and the last staying data member;
    // nothing is planned or handed off to a leaving node; coming back clears it.
    #[test]
    fn leaving_members_receive_nothing() {
        let mut s = allocated();
        let leave = |node, leaving| Command::SetLeaving { node, leaving };
        assert_eq!(s.apply(&leave(3, true)), Err(CommandError::NotDataMember { node: 3 }));
        assert_eq!(s.apply(&leave(8, true)), Err(CommandError::NotDataMember { node: 8 }));
        assert_eq!(s.apply(&leave(2, true)), Ok(1));
        assert_eq!(s.apply(&leave(1, true)), Err(CommandError::LastDataMember { node: 1 }));
        assert_eq!(
            s.apply(&Command::PlanMove { fragment: 0, to: 2 }),
            Err(CommandError::Leaving { node: 2 })
        );
        assert_eq!(s.apply(&begin(0, 2)), Err(CommandError::Leaving { node: 2 }));
        assert_eq!(s.apply(&leave(2, false)), Ok(1));
        assert!(s.leaving.is_empty());
        assert_eq!(s.apply(&begin(0, 2)), Ok(2));
    }

    // Checks removing a member: refused for an unknown node and for one that owns fragments
    // or is receiving one by handoff; a member without fragments (a proxy, a data member
    // whose fragments moved away) goes, with its leaving mark and moves planned to it, and
    // the map's epoch stays.
    #[test]
    fn removing_members() {
        let mut s = allocated();
        let remove = |node| Command::RemoveMember { node };
        assert_eq!(s.apply(&remove(8)), Err(CommandError::UnknownMember { node: 8 }));
        assert_eq!(
            s.apply(&remove(1)),
            Err(CommandError::MemberHoldsFragments { node: 1, fragments: 4 })
        );
        assert_eq!(s.apply(&begin(0, 2)), Ok(2));
        assert_eq!(
            s.apply(&remove(2)),
            Err(CommandError::MemberHoldsFragments { node: 2, fragments: 0 })
        );
        assert_eq!(s.apply(&Command::AbortHandoff { fragment: 0, handoff: 1 }), Ok(3));
        s.apply(&Command::SetLeaving { node: 2, leaving: true }).expect("leaving");
        s.apply(&Command::AddMember { node: 4, member: member(Role::Data) }).expect("added");
        s.apply(&Command::PlanMove { fragment: 1, to: 4 }).expect("planned");
        assert_eq!(s.apply(&remove(2)), Ok(3));
        assert_eq!(s.apply(&remove(3)), Ok(3));
        assert_eq!(s.apply(&remove(4)), Ok(3));
        assert!(s.leaving.is_empty());
        assert!(s.moves.is_empty());
        assert_eq!(s.members.keys().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(s.apply(&remove(4)), Err(CommandError::UnknownMember { node: 4 }));
    }

    // Checks a state written before handoffs existed (no `handoffs` field) still loads.
    #[test]
    fn compat_state_without_handoffs_loads() {
        let mut s = allocated();
        s.handoffs.clear();
        let mut json: serde_json::Value = serde_json::to_value(&s).expect("serializes");
        let obj = json.as_object_mut().expect("object");
        obj.remove("handoffs");
        obj.remove("last_handoff");
        obj.remove("leaving");
        let back: ClusterState = serde_json::from_value(json).expect("parses");
        assert_eq!(back, s);
    }

    fn command_strategy() -> impl proptest::strategy::Strategy<Value = Command> {
        use proptest::prelude::*;
        prop_oneof![
            (0u32..6, 1u32..5).prop_map(|(fragment, to)| Command::PlanMove { fragment, to }),
            (0u32..6, 1u32..5, 1u32..3).prop_map(|(fragment, to, max_in_flight)| {
                Command::BeginHandoff { fragment, to, max_in_flight }
            }),
            (0u32..6, 0u64..8)
                .prop_map(|(fragment, handoff)| Command::CommitHandoff { fragment, handoff }),
            (0u32..6, 0u64..8)
                .prop_map(|(fragment, handoff)| Command::AbortHandoff { fragment, handoff }),
        ]
    }

    proptest::proptest! {
        // Checks, for random sequences of move, begin, commit and abort commands (most of them
        // stale, duplicate or invalid), that after every applied command: the map is valid
        // with one owner per fragment, each owner a data member; at most one handoff per
        // fragment, starting at its owner, never to itself; handoffs within the bound; at most
        // one writer per fragment, and none while handing off; the epoch never goes back and
        // grows exactly when the map's routing changed; a refused command changes nothing.
        #[test]
        fn prop_handoff_invariants(commands in proptest::collection::vec(command_strategy(), 0..60)) {
            let mut s = ClusterState::default();
            for node in [1u32, 2, 3] {
                s.apply(&Command::AddMember { node, member: member(Role::Data) }).expect("added");
            }
            s.apply(&Command::AddMember { node: 4, member: member(Role::Proxy) }).expect("added");
            s.apply(&Command::Allocate { owners: vec![1, 2, 3, 1, 2, 3], min_members: 3 })
                .expect("allocated");
            for command in &commands {
                let before = s.clone();
                match s.apply(command) {
                    Ok(epoch) => {
                        proptest::prop_assert!(epoch >= before.epoch);
                        proptest::prop_assert_eq!(epoch, s.epoch);
                        let routing_changed = s.handoffs != before.handoffs
                            || s.fragments != before.fragments;
                        proptest::prop_assert_eq!(routing_changed, s.epoch > before.epoch);
                        if let Command::BeginHandoff { to, .. } = command {
                            proptest::prop_assert!(!s.leaving.contains(to));
                        }
                        let staying = s.data_members().filter(|n| !s.leaving.contains(n)).count();
                        proptest::prop_assert!(staying >= 1);
                    }
                    Err(_) => proptest::prop_assert_eq!(&s, &before),
                }
                let map = s.shard_map().expect("a valid map at every state");
                proptest::prop_assert_eq!(map.len(), 6);
                proptest::prop_assert_eq!(map.epoch(), Epoch(s.epoch));
                let max = commands.iter().filter_map(|c| match c {
                    Command::BeginHandoff { max_in_flight, .. } => Some(*max_in_flight),
                    _ => None,
                }).max().unwrap_or(1);
                proptest::prop_assert!(s.handoffs.len() <= max as usize);
                for f in &s.fragments {
                    proptest::prop_assert!(s.members.get(&f.node).is_some_and(|m| m.role == Role::Data));
                    let handoffs: Vec<&Handoff> =
                        s.handoffs.iter().filter(|h| h.fragment == f.id).collect();
                    proptest::prop_assert!(handoffs.len() <= 1);
                    if let Some(h) = handoffs.first() {
                        proptest::prop_assert_eq!(h.from, f.node);
                        proptest::prop_assert_ne!(h.to, f.node);
                        proptest::prop_assert!(h.id <= s.last_handoff);
                        proptest::prop_assert_eq!(s.writer_of(f.id), None);
                    } else {
                        proptest::prop_assert_eq!(s.writer_of(f.id), Some(f.node));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod reshape_tests {
    use super::*;

    fn member(role: Role) -> Member {
        Member {
            role,
            peer_addr: "127.0.0.1:1".into(),
            pg_addr: "127.0.0.1:2".into(),
            executors: 2,
        }
    }

    /// Nodes 1 and 2 (data); four fragments: $0, $1 on node 1, $2, $3 on node 2.
    fn allocated() -> ClusterState {
        let mut s = ClusterState::default();
        for node in [1, 2] {
            let add = Command::AddMember { node, member: member(Role::Data) };
            assert_eq!(s.apply(&add), Ok(0));
        }
        assert_eq!(s.apply(&Command::Allocate { owners: vec![1, 1, 2, 2], min_members: 1 }), Ok(1));
        s
    }

    fn ranges(s: &ClusterState) -> Vec<(u32, u32, u32, u32)> {
        s.fragments.iter().map(|f| (f.id, f.start, f.end, f.node)).collect()
    }

    // Checks a split's whole life: begin fences the source under reshape 1 with a new epoch
    // (the map is unchanged, nobody writes it), commit replaces it with two new ids cut at the
    // middle on the same owner and executor, and a duplicate commit or a late abort is a typed
    // no-op.
    #[test]
    fn split_begin_commit_and_duplicates() {
        let mut s = allocated();
        let (start, end) = (s.fragments[1].start, s.fragments[1].end);
        assert_eq!(s.apply(&Command::BeginSplit { fragment: 1, at: None }), Ok(2));
        assert_eq!(s.writer_of(1), None, "the source is fenced while it is split");
        assert_eq!(s.writer_of(0), Some(1));
        assert_eq!(s.fragments.len(), 4, "the map changes only at the commit");
        let r = s.reshape_of(1).expect("in flight").clone();
        assert_eq!((r.id, r.sources.as_slice(), r.begun_at), (1, &[1][..], 2));
        let mid = start + (end - start) / 2;
        let targets: Vec<_> = r.targets.iter().map(|t| (t.id, t.start, t.end, t.node)).collect();
        assert_eq!(targets, [(4, start, mid, 1), (5, mid, end, 1)]);
        assert_eq!(
            s.apply(&Command::BeginSplit { fragment: 1, at: None }),
            Err(CommandError::AlreadyReshaping { fragment: 1, reshape: 1 })
        );
        assert_eq!(s.apply(&Command::CommitReshape { reshape: 1 }), Ok(3));
        assert_eq!(ranges(&s)[1..3], [(4, start, mid, 1), (5, mid, end, 1)]);
        assert_eq!(s.fragments[1].executor, s.fragments[2].executor);
        assert_eq!(s.writer_of(4), Some(1));
        assert_eq!(s.writer_of(1), None, "the source is gone");
        let map = s.shard_map().expect("valid map");
        assert_eq!((map.len(), map.epoch()), (5, Epoch(3)));
        let before = s.clone();
        assert_eq!(
            s.apply(&Command::CommitReshape { reshape: 1 }),
            Err(CommandError::NoSuchReshape { reshape: 1 })
        );
        assert_eq!(
            s.apply(&Command::AbortReshape { reshape: 1 }),
            Err(CommandError::NoSuchReshape { reshape: 1 })
        );
        assert_eq!(s, before);
    }

    // Checks a merge of two neighbours on one node gets one new id on the left's executor,
    // and the refusals: not adjacent (either order, itself), different owners, unknown.
    #[test]
    fn merge_begin_commit_and_refusals() {
        let mut s = allocated();
        let merge = |left, right| Command::BeginMerge { left, right };
        assert_eq!(s.apply(&merge(1, 0)), Err(CommandError::NotAdjacent { left: 1, right: 0 }));
        assert_eq!(s.apply(&merge(0, 0)), Err(CommandError::NotAdjacent { left: 0, right: 0 }));
        assert_eq!(s.apply(&merge(0, 2)), Err(CommandError::NotAdjacent { left: 0, right: 2 }));
        assert_eq!(
            s.apply(&merge(1, 2)),
            Err(CommandError::OwnersDiffer { left: 1, left_node: 1, right: 2, right_node: 2 })
        );
        assert_eq!(s.apply(&merge(0, 9)), Err(CommandError::UnknownFragment { fragment: 9 }));
        assert_eq!(s, allocated(), "refusals change nothing");
        let (start, end, executor) =
            (s.fragments[2].start, s.fragments[3].end, s.fragments[2].executor);
        assert_eq!(s.apply(&merge(2, 3)), Ok(2));
        assert_eq!((s.writer_of(2), s.writer_of(3)), (None, None));
        assert_eq!(
            s.apply(&Command::BeginSplit { fragment: 3, at: None }),
            Err(CommandError::AlreadyReshaping { fragment: 3, reshape: 1 })
        );
        assert_eq!(
            s.apply(&Command::PlanMove { fragment: 2, to: 1 }),
            Err(CommandError::AlreadyReshaping { fragment: 2, reshape: 1 })
        );
        assert_eq!(s.apply(&Command::CommitReshape { reshape: 1 }), Ok(3));
        assert_eq!(ranges(&s)[2..], [(4, start, end, 2)]);
        assert_eq!(s.fragments[2].executor, executor);
        assert_eq!(s.shard_map().expect("valid").len(), 3);
    }

    // Checks the split point: strictly inside the range, else refused; an abort keeps the
    // source writable and its reserved ids are never given again.
    #[test]
    fn split_outside_and_abort_burns_ids() {
        let mut s = allocated();
        let f = s.fragments[0];
        for at in [f.start, f.end, f.end + 5] {
            assert_eq!(
                s.apply(&Command::BeginSplit { fragment: 0, at: Some(at) }),
                Err(CommandError::SplitOutside { fragment: 0, start: f.start, end: f.end, at })
            );
        }
        assert_eq!(s.apply(&Command::BeginSplit { fragment: 0, at: Some(f.start + 1) }), Ok(2));
        assert_eq!(
            s.apply(&Command::BeginHandoff { fragment: 0, to: 2, max_in_flight: 1 }),
            Err(CommandError::AlreadyReshaping { fragment: 0, reshape: 1 })
        );
        assert_eq!(s.apply(&Command::AbortReshape { reshape: 1 }), Ok(3));
        assert_eq!(s.writer_of(0), Some(1));
        assert_eq!(s.fragments.len(), 4);
        assert_eq!(s.apply(&Command::BeginSplit { fragment: 0, at: None }), Ok(4));
        let ids: Vec<u32> = s.reshapes[0].targets.iter().map(|t| t.id).collect();
        assert_eq!(ids, [6, 7], "ids 4 and 5 of the aborted split are not reused");
    }

    // Checks a fragment being handed off or with a planned move cannot be split, and that a
    // one-shard fragment cannot be split at all.
    #[test]
    fn split_refused_while_moving() {
        let mut s = allocated();
        s.apply(&Command::PlanMove { fragment: 0, to: 2 }).expect("planned");
        assert_eq!(
            s.apply(&Command::BeginSplit { fragment: 0, at: None }),
            Err(CommandError::AlreadyMoving { fragment: 0 })
        );
        s.apply(&Command::BeginHandoff { fragment: 0, to: 2, max_in_flight: 1 }).expect("begun");
        assert_eq!(
            s.apply(&Command::BeginSplit { fragment: 0, at: None }),
            Err(CommandError::AlreadyHandingOff { fragment: 0, handoff: 1 })
        );
        let mut one = allocated();
        let f = one.fragments[1];
        one.apply(&Command::BeginSplit { fragment: 1, at: Some(f.end - 1) }).expect("begun");
        one.apply(&Command::CommitReshape { reshape: 1 }).expect("committed");
        let last = *one.fragments.iter().find(|g| g.end == f.end).expect("upper part");
        assert_eq!(last.end - last.start, 1);
        assert_eq!(
            one.apply(&Command::BeginSplit { fragment: last.id, at: None }),
            Err(CommandError::SplitOutside {
                fragment: last.id,
                start: last.start,
                end: last.end,
                at: last.start
            })
        );
    }

    // Checks a state written before splits (no reshape fields) loads, and gives ids after the
    // highest one in use.
    #[test]
    fn compat_state_without_reshapes_loads() {
        let s = allocated();
        let mut json: serde_json::Value = serde_json::to_value(&s).expect("serializes");
        let obj = json.as_object_mut().expect("object");
        for field in ["reshapes", "last_reshape", "next_fragment"] {
            obj.remove(field);
        }
        let mut back: ClusterState = serde_json::from_value(json).expect("parses");
        assert_eq!(back, s);
        assert_eq!(back.apply(&Command::BeginMerge { left: 0, right: 1 }), Ok(2));
        assert_eq!(back.reshapes[0].targets[0].id, 4);
    }

    // Checks the automatic split's choice: off at 0; the largest fragment over the threshold
    // by its owner's report (another node's report of it does not count); none while a split
    // is in flight or for a fragment being handed off; a one-shard fragment never.
    #[test]
    fn oversized_picks_the_largest_over_threshold() {
        use crate::cluster::wire::FragmentBytes;
        let mut s = allocated();
        let bytes = |pairs: &[(u32, u64)]| {
            pairs.iter().map(|&(fragment, bytes)| FragmentBytes { fragment, bytes }).collect()
        };
        let mut reports = std::collections::HashMap::new();
        reports.insert(1, bytes(&[(0, 500), (1, 900), (2, 5000)]));
        reports.insert(2, bytes(&[(2, 700), (3, 100)]));
        assert_eq!(s.oversized(&reports, 0), None, "off");
        assert_eq!(s.oversized(&reports, 400), Some(1), "node 1's report of $2 does not count");
        assert_eq!(s.oversized(&reports, 600), Some(1));
        assert_eq!(s.oversized(&reports, 900), None);
        s.apply(&Command::BeginHandoff { fragment: 1, to: 2, max_in_flight: 1 }).expect("begun");
        assert_eq!(s.oversized(&reports, 400), Some(2));
        s.apply(&Command::BeginSplit { fragment: 0, at: None }).expect("begun");
        assert_eq!(s.oversized(&reports, 400), None, "one split at a time");
        let mut one = allocated();
        let f = one.fragments[3];
        one.apply(&Command::BeginSplit { fragment: 3, at: Some(f.end - 1) }).expect("begun");
        one.apply(&Command::CommitReshape { reshape: 1 }).expect("committed");
        let tiny = one.fragments.last().expect("upper part").id;
        reports.insert(2, bytes(&[(tiny, 10_000)]));
        assert_eq!(one.oversized(&reports, 400), Some(1), "the one-shard fragment is skipped");
    }

    fn command_strategy() -> impl proptest::strategy::Strategy<Value = Command> {
        use proptest::prelude::*;
        prop_oneof![
            (0u32..12, proptest::option::of(0u32..(1 << 20)))
                .prop_map(|(fragment, at)| Command::BeginSplit { fragment, at }),
            (0u32..12, 0u32..12).prop_map(|(left, right)| Command::BeginMerge { left, right }),
            (0u64..10).prop_map(|reshape| Command::CommitReshape { reshape }),
            (0u64..10).prop_map(|reshape| Command::AbortReshape { reshape }),
            (0u32..12, 1u32..3).prop_map(|(fragment, to)| Command::BeginHandoff {
                fragment,
                to,
                max_in_flight: 2
            }),
            (0u32..12, 0u64..6)
                .prop_map(|(fragment, handoff)| Command::CommitHandoff { fragment, handoff }),
        ]
    }

    proptest::proptest! {
        // Checks, for random sequences of splits, merges, commits, aborts and handoffs (many
        // stale, duplicate or invalid), that after every command: the map is a valid partition
        // of the 1,048,576 shards with exactly one owner (a data member) per fragment; ids are
        // unique and never reused; a fragment is in at most one reshape or handoff, and then
        // nobody writes it; reshape targets cover exactly their sources' shards on the sources'
        // node; the epoch grows exactly when routing changed; a refused command changes nothing.
        #[test]
        fn prop_reshape_keeps_a_partition(commands in proptest::collection::vec(command_strategy(), 0..80)) {
            let mut s = allocated();
            let mut ever: std::collections::BTreeSet<u32> = s.fragments.iter().map(|f| f.id).collect();
            for command in &commands {
                let before = s.clone();
                match s.apply(command) {
                    Ok(epoch) => {
                        proptest::prop_assert_eq!(epoch, s.epoch);
                        let routing_changed = s.handoffs != before.handoffs
                            || s.fragments != before.fragments
                            || s.reshapes != before.reshapes;
                        proptest::prop_assert_eq!(routing_changed, s.epoch > before.epoch);
                    }
                    Err(_) => proptest::prop_assert_eq!(&s, &before),
                }
                let map = s.shard_map().expect("a valid partition at every state");
                proptest::prop_assert_eq!(map.len(), s.fragments.len());
                let covered: u64 = s.fragments.iter().map(|f| u64::from(f.end - f.start)).sum();
                proptest::prop_assert_eq!(covered, 1 << 20);
                for f in &s.fragments {
                    proptest::prop_assert!(s.members.get(&f.node).is_some_and(|m| m.role == Role::Data));
                    let busy = usize::from(s.handoff_of(f.id).is_some())
                        + s.reshapes.iter().filter(|r| r.sources.contains(&f.id)).count();
                    proptest::prop_assert!(busy <= 1);
                    proptest::prop_assert_eq!(s.writer_of(f.id).is_some(), busy == 0);
                }
                for r in &s.reshapes {
                    let sources: Vec<&FragmentEntry> = r.sources.iter()
                        .map(|id| s.fragments.iter().find(|f| f.id == *id).expect("source in map"))
                        .collect();
                    let first = sources.first().expect("a source");
                    let last = sources.last().expect("a source");
                    proptest::prop_assert_eq!(r.targets.first().map(|t| t.start), Some(first.start));
                    proptest::prop_assert_eq!(r.targets.last().map(|t| t.end), Some(last.end));
                    for pair in r.targets.windows(2) {
                        proptest::prop_assert_eq!(pair[0].end, pair[1].start);
                    }
                    for t in &r.targets {
                        proptest::prop_assert_eq!(t.node, first.node);
                        proptest::prop_assert!(t.start < t.end);
                    }
                }
                let begun = matches!(command, Command::BeginSplit { .. } | Command::BeginMerge { .. });
                if begun && s.reshapes.len() > before.reshapes.len() {
                    for t in &s.reshapes.last().expect("the new reshape").targets {
                        proptest::prop_assert!(ever.insert(t.id), "id {} given twice", t.id);
                    }
                }
                let ids: std::collections::BTreeSet<u32> = s.fragments.iter().map(|f| f.id).collect();
                proptest::prop_assert_eq!(ids.len(), s.fragments.len());
                proptest::prop_assert!(ids.is_subset(&ever));
            }
        }
    }
}

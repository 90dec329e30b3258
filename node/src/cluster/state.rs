//! The coordinator's replicated state: members with their roles, the shard map (fragment
//! ranges, owners, epoch) once allocated, and the planned moves. Pure: `ClusterState::apply`
//! is what every replica runs for each committed command, so it must be deterministic and must
//! validate instead of trusting the proposer (a stale leader's proposal is refused, not
//! applied).

use std::collections::BTreeMap;

use router::{Epoch, ExecutorId, FragmentId, NodeId, Owner, ShardMap};
use serde::{Deserialize, Serialize};

use crate::cluster::limits::CLUSTER_MEMBERS_MAX;
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

/// A decided move not yet carried out (handoff is the next step of issue #7).
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
    /// The cluster is full.
    #[error("the cluster has {max} members, the most it accepts")]
    TooManyMembers {
        /// `CLUSTER_MEMBERS_MAX`.
        max: usize,
    },
}

/// What a committed command did, returned to its proposer.
pub type Applied = Result<u64, CommandError>;

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
        }
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
        if self.moves.iter().any(|m| m.fragment == fragment) {
            return Err(CommandError::AlreadyMoving { fragment });
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

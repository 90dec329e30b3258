//! Operator requests from the executors to the control plane, e.g. `ALTER FRAGMENT $n MOVE TO
//! NODE m`: a bounded flume channel into the `tessera-cluster` thread, each request carrying
//! its own one-slot reply channel. An executor awaits the reply with flume's runtime-agnostic
//! `recv_async`, never a tokio future; the control plane bounds its own work (a proposal or a
//! request to the coordinator) and always answers or drops the reply sender.

use std::sync::OnceLock;

use crate::cluster::limits::OPS_QUEUE_MAX;

/// Why a move could not be planned. Travels between nodes (`wire::Message::MoveAnswer`).
#[derive(
    rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq, thiserror::Error,
)]
#[non_exhaustive]
pub enum MoveError {
    /// This node is not part of a cluster.
    #[error("this statement needs a cluster; this node runs alone (no --cluster-name)")]
    NotCluster,
    /// The fragment is not in the shard map.
    #[error("fragment ${fragment} does not exist")]
    UnknownFragment {
        /// The fragment.
        fragment: u32,
    },
    /// No member has that id.
    #[error("node {node} is not a member of the cluster")]
    UnknownNode {
        /// The node.
        node: u32,
    },
    /// The node is a proxy: it hosts no fragments.
    #[error("node {node} is a proxy and hosts no fragments")]
    ProxyNode {
        /// The node.
        node: u32,
    },
    /// The fragment is there already.
    #[error("fragment ${fragment} is already owned by node {node}")]
    AlreadyOwner {
        /// The fragment.
        fragment: u32,
        /// Its owner.
        node: u32,
    },
    /// A move of the fragment is planned already.
    #[error("a move of fragment ${fragment} is already planned")]
    AlreadyMoving {
        /// The fragment.
        fragment: u32,
    },
    /// The shard map is not allocated yet.
    #[error("the shard map is not allocated yet (fewer data nodes than --min-members)")]
    NoMap,
    /// No coordinator could be asked, or it did not answer in time.
    #[error("no coordinator reachable: {reason}")]
    NoCoordinator {
        /// Why.
        reason: String,
    },
    /// The coordinator refused the split or merge (its reason: not adjacent, different
    /// owners, a split point outside the range, the fragment busy) or the catalog change.
    #[error("{reason}")]
    Refused {
        /// The state machine's reason.
        reason: String,
    },
    /// The replicated catalog changed since the proposer read it (at this version now).
    #[error("the collection catalog changed (now version {version})")]
    CatalogChanged {
        /// The catalog version now.
        version: u64,
    },
}

/// What the coordinator answered: the epoch the plan was recorded at, or why not.
pub type MoveResult = Result<u64, MoveError>;

/// What an operator asks of a fragment (or, `Collection`, of the catalog).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Move it to this node.
    Move {
        /// The destination node.
        to: u32,
    },
    /// Split it at this shard (`None`: the middle of its range).
    Split {
        /// The first shard of the upper part.
        at: Option<u32>,
    },
    /// Merge it with its upper neighbour.
    Merge {
        /// The neighbour starting where it ends.
        with: u32,
    },
    /// Remove a stopped member that owns no fragments (the request's `fragment` is unused).
    RemoveNode {
        /// The member.
        node: u32,
    },
    /// Set (`None`: remove) a collection's content sharding configuration, if the replicated
    /// catalog is still at version `expected` (the request's `fragment` is unused).
    Collection {
        /// The collection.
        name: String,
        /// The catalog version the change was decided against.
        expected: u64,
        /// The configuration's JSON text.
        sharding: Option<String>,
    },
}

/// One request to the control plane.
#[derive(Debug)]
pub struct MoveRequest {
    /// The fragment.
    pub fragment: u32,
    /// What to do with it.
    pub op: Op,
    /// Where the answer goes (capacity 1).
    pub reply: flume::Sender<MoveResult>,
}

/// The control plane's end, set once by `control::start`.
static OPS: OnceLock<flume::Sender<MoveRequest>> = OnceLock::new();

/// Creates the channel and installs its sending end for the executors; returns the receiving
/// end for the control plane, or `None` if a control plane already runs in this process.
pub fn install() -> Option<flume::Receiver<MoveRequest>> {
    let (tx, rx) = flume::bounded(OPS_QUEUE_MAX);
    OPS.set(tx).ok().map(|()| rx)
}

/// Asks the coordinator to plan moving `fragment` to node `to` (what `ALTER FRAGMENT` runs).
/// Callable from any executor: it awaits only flume's channel.
pub async fn plan_move(fragment: u32, to: u32) -> MoveResult {
    request(fragment, Op::Move { to }).await
}

/// Asks the coordinator to split `fragment` at shard `at` (`None`: the middle), what
/// `ALTER FRAGMENT $n SPLIT [AT s]` runs: the epoch the split was begun at, or why not. The
/// owner then builds the two new fragments and the coordinator commits them.
pub async fn split(fragment: u32, at: Option<u32>) -> MoveResult {
    request(fragment, Op::Split { at }).await
}

/// Asks the coordinator to merge `left` with its upper neighbour `right` (same owner node),
/// what `ALTER FRAGMENT $l MERGE WITH $r` runs.
pub async fn merge(left: u32, right: u32) -> MoveResult {
    request(left, Op::Merge { with: right }).await
}

/// Asks the coordinator to remove member `node`, what `ALTER CLUSTER REMOVE NODE` runs: the
/// map's epoch, or why not (the node answers, owns fragments, is unknown).
pub async fn remove_node(node: u32) -> MoveResult {
    request(0, Op::RemoveNode { node }).await
}

/// Asks the coordinator to set (`None`: remove) `name`'s content sharding configuration if
/// the replicated catalog is still at version `expected`: the catalog version of the change,
/// or why not (`CatalogChanged`: decide again against the newer catalog).
pub async fn set_collection(name: String, expected: u64, sharding: Option<String>) -> MoveResult {
    request(0, Op::Collection { name, expected, sharding }).await
}

async fn request(fragment: u32, op: Op) -> MoveResult {
    let Some(ops) = OPS.get() else { return Err(MoveError::NotCluster) };
    let (reply, answer) = flume::bounded(1);
    ops.try_send(MoveRequest { fragment, op, reply }).map_err(|e| MoveError::NoCoordinator {
        reason: match e {
            flume::TrySendError::Full(_) => {
                format!("{OPS_QUEUE_MAX} operator requests are waiting; try again")
            }
            flume::TrySendError::Disconnected(_) => "the control plane stopped".to_owned(),
        },
    })?;
    // The control plane's thread answers: it wakes this executor's relay, not this task.
    crate::runtime::relayed(answer.recv_async()).await.map_err(|_| MoveError::NoCoordinator {
        reason: "the control plane stopped before answering".to_owned(),
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks a process without a control plane answers NotCluster (unit tests never start
    // one, so the slot is empty).
    #[test]
    fn plan_move_without_cluster_is_not_cluster() {
        let answer = futures_lite::future::block_on(plan_move(1, 2));
        assert_eq!(answer, Err(MoveError::NotCluster));
    }
}

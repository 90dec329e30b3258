//! Load in bytes (`--rebalance-load bytes`): each node reports the live bytes of its
//! fragments, and the coordinator counts a node's load as the bytes of the fragments the map
//! gives it.
//!
//! Executor side: every executor publishes its fragments' live bytes (`Core::fragment_rows`,
//! the `bytes` of `SHOW FRAGMENTS`) into a process-wide table every `LOAD_REPORT_MS`
//! (`publish_loop`, a glommio task). Control-plane side: the coordinator asks each member for
//! that table (`Message::Load`, answered `LoadAnswer`) on its reachability pings, reads its
//! own directly, and builds the strategy's `Loads` with `loads_of`.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::{Mutex, OnceLock, PoisonError};

use router::{FragmentId, NodeId};

use crate::cluster::allocation::Loads;
use crate::cluster::limits::LOAD_REPORT_MS;
use crate::cluster::state::ClusterState;
use crate::cluster::wire::FragmentBytes;

/// This process's fragments and their live bytes, as the executors last published them.
static LOCAL: OnceLock<Mutex<BTreeMap<u32, u64>>> = OnceLock::new();

fn local_table() -> &'static Mutex<BTreeMap<u32, u64>> {
    LOCAL.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Records the live bytes of some fragments (one executor's).
pub fn report(fragments: impl IntoIterator<Item = (u32, u64)>) {
    let mut table = local_table().lock().unwrap_or_else(PoisonError::into_inner);
    for (fragment, bytes) in fragments {
        table.insert(fragment, bytes);
    }
}

/// This node's report: every fragment it holds and its live bytes, by fragment id.
pub fn local() -> Vec<FragmentBytes> {
    let table = local_table().lock().unwrap_or_else(PoisonError::into_inner);
    table
        .iter()
        .map(|(fragment, bytes)| FragmentBytes { fragment: *fragment, bytes: *bytes })
        .collect()
}

/// The executor's publisher: reports its fragments' bytes now and every `LOAD_REPORT_MS`
/// until the node shuts down. Runs on a glommio executor (started by `cli::serve` in cluster
/// mode only).
pub async fn publish_loop(core: Rc<crate::engine::Core>, shutdown: crate::runtime::Shutdown) {
    loop {
        report(core.fragment_rows().iter().map(|r| (r.fragment.get(), r.bytes)));
        glommio::timer::sleep(std::time::Duration::from_millis(LOAD_REPORT_MS)).await;
        if shutdown.is_triggered() {
            break;
        }
    }
}

/// The strategy's view of the map: every data member not leaving that `reachable` says
/// answers, each fragment on its owner with the bytes that owner reported for it (0 when it has
/// not reported yet). A leaving node's fragments are left out: they move through the drain,
/// never by the strategy. A node that does not answer is left out with its fragments: nothing
/// is placed on it (a stopped node would hold a move, or a leaving node's drain, until it
/// returns), and its fragments cannot be handed off anyway (their source must stream them).
pub fn loads_of(
    state: &ClusterState,
    reports: &HashMap<u32, Vec<FragmentBytes>>,
    reachable: impl Fn(u32) -> bool,
) -> Loads {
    let target = |n: &u32| !state.leaving.contains(n) && reachable(*n);
    let mut loads = Loads::new();
    for node in state.data_members().filter(target) {
        loads.add_node(NodeId(node));
    }
    for f in state.fragments.iter().filter(|f| target(&f.node)) {
        let bytes = reports
            .get(&f.node)
            .and_then(|r| r.iter().find(|b| b.fragment == f.id))
            .map_or(0, |b| b.bytes);
        loads.hold(NodeId(f.node), FragmentId::new(f.id), bytes);
    }
    loads
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::allocation::{AllocationStrategy, LeastShardAllocation, LoadUnit};
    use crate::cluster::state::{Command, Member};
    use crate::cluster::wire::Role;

    fn three_nodes_two_fragments_each() -> ClusterState {
        let mut s = ClusterState::default();
        for node in 1..=3 {
            let member = Member {
                role: Role::Data,
                peer_addr: format!("127.0.0.1:{node}"),
                pg_addr: String::new(),
                executors: 1,
            };
            s.apply(&Command::AddMember { node, member }).expect("member");
        }
        s.apply(&Command::Allocate { owners: vec![1, 2, 3, 1, 2, 3], min_members: 3 })
            .expect("map");
        s
    }

    fn fb(pairs: &[(u32, u64)]) -> Vec<FragmentBytes> {
        pairs
            .iter()
            .map(|(fragment, bytes)| FragmentBytes { fragment: *fragment, bytes: *bytes })
            .collect()
    }

    // Checks the coordinator's choice with bytes: two fragments each is balanced in
    // fragments, but node 1 holds most of the bytes, so counting bytes moves one of its
    // fragments (the one closest to half the gap) to the lightest node, and a report of a
    // fragment the node does not own is ignored.
    #[test]
    fn bytes_load_moves_what_fragment_count_does_not() {
        let state = three_nodes_two_fragments_each();
        let mut reports = HashMap::new();
        reports.insert(1, fb(&[(0, 900), (3, 500), (1, 10_000)]));
        reports.insert(2, fb(&[(1, 100), (4, 100)]));
        reports.insert(3, fb(&[(2, 50), (5, 50)]));
        let loads = loads_of(&state, &reports, |_| true);
        assert_eq!(loads.load(NodeId(1), LoadUnit::Bytes), 1400, "fragment 1 is node 2's");
        let by_count = LeastShardAllocation::default();
        assert!(by_count.rebalance(&loads, &[]).is_empty(), "balanced in fragments");
        let by_bytes = LeastShardAllocation {
            unit: LoadUnit::Bytes,
            rebalance_threshold: 200,
            max_simultaneous_rebalance: 1,
        };
        let moves = by_bytes.rebalance(&loads, &[]);
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!(
            (moves[0].fragment.get(), moves[0].from, moves[0].to),
            (3, NodeId(1), NodeId(3))
        );
    }

    // Checks that counting bytes, the first allocation (every fragment empty) still spreads
    // fragments evenly instead of giving all to the lowest id.
    #[test]
    fn bytes_allocation_of_empty_fragments_spreads() {
        let mut loads = Loads::new();
        for node in 1..=3 {
            loads.add_node(NodeId(node));
        }
        let strategy = LeastShardAllocation { unit: LoadUnit::Bytes, ..Default::default() };
        let owners = crate::cluster::allocation::allocate_all(&strategy, &loads, 6, 0);
        let owners: Vec<u32> = owners.into_iter().map(|n| n.0).collect();
        assert_eq!(owners, [1, 2, 3, 1, 2, 3]);
    }

    // Checks a node that has not reported counts its fragments as empty.
    #[test]
    fn unreported_fragments_count_zero_bytes() {
        let state = three_nodes_two_fragments_each();
        let loads = loads_of(&state, &HashMap::new(), |_| true);
        for node in 1..=3 {
            assert_eq!(loads.load(NodeId(node), LoadUnit::Bytes), 0);
            assert_eq!(loads.load(NodeId(node), LoadUnit::Fragments), 2);
        }
    }

    // Checks a node that does not answer is no target and its fragments are left out: with
    // node 3 silent, allocation and rebalancing see nodes 1 and 2 only (before, node 3 with
    // nothing was the least loaded and received every move).
    #[test]
    fn unreachable_nodes_receive_nothing() {
        let mut state = three_nodes_two_fragments_each();
        state.fragments.iter_mut().filter(|f| f.node == 3).for_each(|f| f.node = 1);
        let all = loads_of(&state, &HashMap::new(), |_| true);
        let strategy = LeastShardAllocation::default();
        assert_eq!(strategy.allocate(&all), Some(NodeId(3)));
        assert!(strategy.rebalance(&all, &[]).iter().all(|m| m.to == NodeId(3)));
        let loads = loads_of(&state, &HashMap::new(), |n| n != 3);
        assert_eq!(loads.nodes().collect::<Vec<_>>(), [NodeId(1), NodeId(2)]);
        assert_eq!(strategy.allocate(&loads), Some(NodeId(2)));
        let moves = strategy.rebalance(&loads, &[]);
        assert!(moves.iter().all(|m| m.to == NodeId(2)), "{moves:?}");
        // Node 2 silent instead: its fragments are not counted on anyone.
        let loads = loads_of(&state, &HashMap::new(), |n| n != 2);
        assert_eq!(loads.nodes().collect::<Vec<_>>(), [NodeId(1), NodeId(3)]);
        assert_eq!(loads.load(NodeId(1), LoadUnit::Fragments), 4);
    }
}

//! Where fragments go: allocation of new fragments and rebalancing decisions. Pure code: a
//! strategy reads a `Loads` table and answers; the coordinator turns answers into commands.
//!
//! `LeastShardAllocation` follows Akka's `LeastShardAllocationStrategy` applied to fragments:
//! a new fragment goes to the data node with the least load; rebalancing moves fragments from
//! the most to the least loaded node while their difference exceeds `rebalance_threshold`, at
//! most `max_simultaneous_rebalance` moves in flight. Load is counted in fragments or, as an
//! option, in bytes. `ManualAllocation` allocates the same way but never rebalances: moves come
//! only from an operator (`ALTER FRAGMENT … MOVE TO NODE …`, the `MoveFragment` command).
//!
//! Ties are broken by node id (lowest first) and fragment id, so a decision is a function of
//! the table alone: every replica of the coordinator would decide the same.

use std::collections::{BTreeMap, BTreeSet};

use router::{FragmentId, NodeId};

/// Default `rebalance_threshold`: rebalance when the most and least loaded nodes differ by
/// more than one fragment (Akka's default).
pub const REBALANCE_THRESHOLD_DEFAULT: u64 = 1;

/// Default `rebalance_threshold` when load is counted in bytes: a gap smaller than this is
/// not worth moving data for.
pub const REBALANCE_THRESHOLD_BYTES_DEFAULT: u64 = 64 << 20;

/// Default `max_simultaneous_rebalance`: moves in flight at once (Akka's default is 3).
pub const MAX_SIMULTANEOUS_REBALANCE_DEFAULT: usize = 3;

/// What load is counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadUnit {
    /// Number of fragments.
    Fragments,
    /// Bytes stored in them.
    Bytes,
}

/// The data nodes that may host fragments, with the fragments each holds and their sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loads {
    nodes: BTreeMap<NodeId, BTreeMap<FragmentId, u64>>,
}

/// One rebalancing decision: move `fragment` from `from` to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Move {
    /// The fragment.
    pub fragment: FragmentId,
    /// Its owner now.
    pub from: NodeId,
    /// Its owner after the handoff.
    pub to: NodeId,
}

impl Loads {
    /// An empty table.
    pub fn new() -> Loads {
        Loads::default()
    }

    /// Adds a data node holding nothing (no effect if present).
    pub fn add_node(&mut self, node: NodeId) {
        self.nodes.entry(node).or_default();
    }

    /// Records that `node` holds `fragment` of `bytes` (adding the node if needed).
    pub fn hold(&mut self, node: NodeId, fragment: FragmentId, bytes: u64) {
        self.nodes.entry(node).or_default().insert(fragment, bytes);
    }

    /// The data nodes, by id.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.keys().copied()
    }

    /// The fragments `node` holds.
    pub fn fragments_of(&self, node: NodeId) -> impl Iterator<Item = FragmentId> + '_ {
        self.nodes.get(&node).into_iter().flat_map(|f| f.keys().copied())
    }

    /// The load of `node` in `unit` (0 for an unknown node).
    pub fn load(&self, node: NodeId, unit: LoadUnit) -> u64 {
        self.nodes.get(&node).map_or(0, |f| match unit {
            LoadUnit::Fragments => f.len() as u64,
            LoadUnit::Bytes => f.values().copied().fold(0u64, u64::saturating_add),
        })
    }

    /// Whether `node` is in the table (a node that may receive fragments).
    pub fn contains(&self, node: NodeId) -> bool {
        self.nodes.contains_key(&node)
    }

    /// Applies a move to the table (as if its handoff had finished). A move of a fragment its
    /// `from` does not hold changes nothing; one to a node outside the table (a planned move
    /// to a node that does not answer) only takes the fragment off `from`, so the table never
    /// gains a node that may not receive fragments.
    pub fn apply(&mut self, m: Move) {
        let Some(bytes) = self.nodes.get_mut(&m.from).and_then(|f| f.remove(&m.fragment)) else {
            return;
        };
        if let Some(to) = self.nodes.get_mut(&m.to) {
            to.insert(m.fragment, bytes);
        }
    }

    /// The least loaded node; among equals the one with fewest fragments (so counting bytes,
    /// empty new fragments still spread), then the lowest id.
    pub fn least_loaded(&self, unit: LoadUnit) -> Option<NodeId> {
        self.nodes().min_by_key(|n| (self.load(*n, unit), self.load(*n, LoadUnit::Fragments), *n))
    }

    /// The most loaded node; among equals the one with most fragments, then the lowest id.
    pub fn most_loaded(&self, unit: LoadUnit) -> Option<NodeId> {
        use std::cmp::Reverse;
        self.nodes().min_by_key(|n| {
            (Reverse(self.load(*n, unit)), Reverse(self.load(*n, LoadUnit::Fragments)), *n)
        })
    }

    /// Most minus least load.
    pub fn spread(&self, unit: LoadUnit) -> u64 {
        let loads = self.nodes().map(|n| self.load(n, unit));
        let (lo, hi) = loads.fold((u64::MAX, 0), |(lo, hi), l| (lo.min(l), hi.max(l)));
        hi.saturating_sub(lo)
    }
}

/// How fragments are placed and moved. Implementations are pure and deterministic.
pub trait AllocationStrategy: Send + Sync + std::fmt::Debug {
    /// The node a new fragment goes to, or `None` if there is no data node.
    fn allocate(&self, loads: &Loads) -> Option<NodeId>;

    /// Moves to start now, given the moves already in flight (counted as done when judging
    /// loads). Never moves a fragment that is in flight; never returns more than the strategy's
    /// limit minus `in_flight.len()`.
    fn rebalance(&self, loads: &Loads, in_flight: &[Move]) -> Vec<Move>;

    /// The strategy's name for `SHOW CLUSTER` and logs.
    fn name(&self) -> &'static str;
}

/// Owners for `count` new fragments, chosen one after the other by `strategy` (each counted
/// before the next is placed). Empty if there is no data node.
pub fn allocate_all(
    strategy: &dyn AllocationStrategy,
    loads: &Loads,
    count: u32,
    first_id: u32,
) -> Vec<NodeId> {
    let mut loads = loads.clone();
    let mut owners = Vec::with_capacity(count as usize);
    for i in 0..count {
        let Some(node) = strategy.allocate(&loads) else { return Vec::new() };
        loads.hold(node, FragmentId::new(first_id.saturating_add(i)), 0);
        owners.push(node);
    }
    owners
}

/// Akka's least-shard strategy over fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeastShardAllocation {
    /// Rebalance only while most minus least load exceeds this (in `unit`).
    pub rebalance_threshold: u64,
    /// Moves in flight at once.
    pub max_simultaneous_rebalance: usize,
    /// What load is counted in.
    pub unit: LoadUnit,
}

impl Default for LeastShardAllocation {
    fn default() -> LeastShardAllocation {
        LeastShardAllocation {
            rebalance_threshold: REBALANCE_THRESHOLD_DEFAULT,
            max_simultaneous_rebalance: MAX_SIMULTANEOUS_REBALANCE_DEFAULT,
            unit: LoadUnit::Fragments,
        }
    }
}

impl AllocationStrategy for LeastShardAllocation {
    fn allocate(&self, loads: &Loads) -> Option<NodeId> {
        loads.least_loaded(self.unit)
    }

    fn rebalance(&self, loads: &Loads, in_flight: &[Move]) -> Vec<Move> {
        let mut projected = loads.clone();
        for m in in_flight {
            projected.apply(*m);
        }
        // A fragment in flight or already chosen in this round is never picked again (moved
        // 1 -> 3 by bytes, it could otherwise look like the best pick from 3 later on).
        let mut busy: BTreeSet<FragmentId> = in_flight.iter().map(|m| m.fragment).collect();
        let room = self.max_simultaneous_rebalance.saturating_sub(in_flight.len());
        let mut moves = Vec::new();
        while moves.len() < room {
            let (Some(from), Some(to)) =
                (projected.most_loaded(self.unit), projected.least_loaded(self.unit))
            else {
                break;
            };
            let diff = projected.load(from, self.unit) - projected.load(to, self.unit);
            if from == to || diff <= self.rebalance_threshold {
                break;
            }
            let Some(fragment) = self.pick(&projected, from, diff, &busy) else { break };
            let m = Move { fragment, from, to };
            projected.apply(m);
            busy.insert(fragment);
            moves.push(m);
        }
        moves
    }

    fn name(&self) -> &'static str {
        "least-shard"
    }
}

impl LeastShardAllocation {
    /// The fragment of `from` to move, among those not in flight. Counting fragments, any one
    /// closes the gap by two: the highest id (the youngest). Counting bytes, one whose size is
    /// below the gap (so the pair's spread shrinks), the closest to half of it.
    fn pick(
        &self,
        loads: &Loads,
        from: NodeId,
        diff: u64,
        busy: &BTreeSet<FragmentId>,
    ) -> Option<FragmentId> {
        let held = loads.nodes.get(&from)?;
        let free = held.iter().filter(|(f, _)| !busy.contains(f));
        match self.unit {
            // A gap of one would only flip the pair.
            LoadUnit::Fragments if diff < 2 => None,
            LoadUnit::Fragments => free.map(|(f, _)| *f).max(),
            LoadUnit::Bytes => free
                .filter(|(_, b)| **b > 0 && **b < diff)
                .min_by_key(|(f, b)| ((**b).abs_diff(diff / 2), **f))
                .map(|(f, _)| *f),
        }
    }
}

/// Allocates like `LeastShardAllocation` and never rebalances: placement changes only by an
/// operator's `MoveFragment`. For clusters whose operators place fragments by hand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ManualAllocation;

impl AllocationStrategy for ManualAllocation {
    fn allocate(&self, loads: &Loads) -> Option<NodeId> {
        loads.least_loaded(LoadUnit::Fragments)
    }

    fn rebalance(&self, _loads: &Loads, _in_flight: &[Move]) -> Vec<Move> {
        Vec::new()
    }

    fn name(&self) -> &'static str {
        "manual"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    fn f(i: u32) -> FragmentId {
        FragmentId::new(i)
    }

    // Checks allocation picks the least loaded node, lowest id among equals, and nothing
    // without data nodes.
    #[test]
    fn allocate_least_loaded() {
        let s = LeastShardAllocation::default();
        let mut loads = Loads::new();
        assert_eq!(s.allocate(&loads), None);
        loads.add_node(n(3));
        loads.add_node(n(2));
        assert_eq!(s.allocate(&loads), Some(n(2)));
        loads.hold(n(2), f(0), 10);
        assert_eq!(s.allocate(&loads), Some(n(3)));
        assert_eq!(allocate_all(&s, &loads, 3, 1), [n(3), n(2), n(3)]);
        assert_eq!(allocate_all(&s, &Loads::new(), 3, 0), Vec::<NodeId>::new());
    }

    // Checks the threshold: a difference of one never moves, two moves one fragment from the
    // most to the least loaded, and a bigger threshold holds it back.
    #[test]
    fn rebalance_threshold() {
        let s = LeastShardAllocation::default();
        let mut loads = Loads::new();
        loads.hold(n(1), f(0), 0);
        loads.add_node(n(2));
        assert_eq!(s.rebalance(&loads, &[]), Vec::new(), "1 vs 0 is within the threshold");
        loads.hold(n(1), f(1), 0);
        assert_eq!(s.rebalance(&loads, &[]), [Move { fragment: f(1), from: n(1), to: n(2) }]);
        let eager = LeastShardAllocation { rebalance_threshold: 0, ..s };
        loads.apply(Move { fragment: f(1), from: n(1), to: n(2) });
        loads.hold(n(1), f(2), 0);
        assert_eq!(eager.rebalance(&loads, &[]), Vec::new(), "a gap of one never flips");
        let lazy = LeastShardAllocation { rebalance_threshold: 3, ..s };
        assert_eq!(lazy.rebalance(&loads, &[]), Vec::new());
    }

    // Checks the in-flight limit and that a fragment in flight is neither moved again nor
    // counted twice.
    #[test]
    fn rebalance_limit_and_in_flight() {
        let s = LeastShardAllocation { max_simultaneous_rebalance: 2, ..Default::default() };
        let mut loads = Loads::new();
        for i in 0..9 {
            loads.hold(n(1), f(i), 0);
        }
        loads.add_node(n(2));
        loads.add_node(n(3));
        let first = s.rebalance(&loads, &[]);
        assert_eq!(first.len(), 2);
        assert_eq!(s.rebalance(&loads, &first), Vec::new(), "the limit is reached");
        let one = &first[..1];
        let next = s.rebalance(&loads, one);
        assert_eq!(next.len(), 1);
        assert_ne!(next[0].fragment, one[0].fragment);
    }

    // Checks a planned move to a node outside the table (one that does not answer) counts
    // as the fragment leaving its owner, and never adds that node as a target.
    #[test]
    fn in_flight_move_to_an_absent_node_adds_no_target() {
        let s = LeastShardAllocation {
            rebalance_threshold: 0,
            max_simultaneous_rebalance: 3,
            ..Default::default()
        };
        let mut loads = Loads::new();
        for i in 0..4 {
            loads.hold(n(1), f(i), 0);
        }
        loads.add_node(n(2));
        let stuck = [Move { fragment: f(3), from: n(1), to: n(9) }];
        let moves = s.rebalance(&loads, &stuck);
        assert_eq!(moves, [Move { fragment: f(2), from: n(1), to: n(2) }], "3 vs 0, then 2 vs 1");
        let mut applied = loads.clone();
        applied.apply(stuck[0]);
        assert!(!applied.contains(n(9)));
        assert_eq!(applied.load(n(1), LoadUnit::Fragments), 3);
        assert_eq!(applied.nodes().collect::<Vec<_>>(), [n(1), n(2)]);
    }

    // Checks that counting bytes moves a fragment that narrows the gap, not one that would
    // flip it.
    #[test]
    fn rebalance_by_bytes() {
        let s = LeastShardAllocation { unit: LoadUnit::Bytes, ..Default::default() };
        let mut loads = Loads::new();
        loads.hold(n(1), f(0), 1000);
        loads.hold(n(1), f(1), 300);
        loads.hold(n(1), f(2), 10);
        loads.hold(n(2), f(3), 100);
        // Loads 1310 vs 100: gap 1210, half 605; 300 is the closest (1000 is 395 away), so it
        // moves first, leaving 1010 vs 400; then 10 (1000 is over the gap of 610).
        let moves = s.rebalance(&loads, &[]);
        assert_eq!(
            moves,
            [
                Move { fragment: f(1), from: n(1), to: n(2) },
                Move { fragment: f(2), from: n(1), to: n(2) }
            ]
        );
        let mut after = loads.clone();
        for m in &moves {
            after.apply(*m);
        }
        assert!(after.spread(LoadUnit::Bytes) < loads.spread(LoadUnit::Bytes));
    }

    // Checks the manual strategy allocates like the default and never rebalances.
    #[test]
    fn manual_never_rebalances() {
        let mut loads = Loads::new();
        for i in 0..10 {
            loads.hold(n(1), f(i), 0);
        }
        loads.add_node(n(2));
        assert_eq!(ManualAllocation.rebalance(&loads, &[]), Vec::new());
        assert_eq!(ManualAllocation.allocate(&loads), Some(n(2)));
        assert!(!LeastShardAllocation::default().rebalance(&loads, &[]).is_empty());
    }

    fn arb_loads() -> impl Strategy<Value = Loads> {
        // Up to 6 nodes with up to 12 fragments each, sizes up to 1000.
        proptest::collection::vec(proptest::collection::vec(0u64..1000, 0..12), 1..6).prop_map(
            |nodes| {
                let mut loads = Loads::new();
                let mut id = 0;
                for (i, sizes) in nodes.iter().enumerate() {
                    let node = n(u32::try_from(i).expect("few") + 1);
                    loads.add_node(node);
                    for b in sizes {
                        loads.hold(node, f(id), *b);
                        id += 1;
                    }
                }
                loads
            },
        )
    }

    proptest! {
        // Checks every move is legal (the source holds the fragment, no fragment twice, never
        // to itself), the limit holds, and the spread never grows, in both units.
        #[test]
        fn prop_rebalance_moves_are_sound(
            loads in arb_loads(),
            threshold in 0u64..4,
            max in 0usize..5,
            bytes in proptest::bool::ANY,
        ) {
            let unit = if bytes { LoadUnit::Bytes } else { LoadUnit::Fragments };
            let s = LeastShardAllocation {
                rebalance_threshold: threshold,
                max_simultaneous_rebalance: max,
                unit,
            };
            let moves = s.rebalance(&loads, &[]);
            prop_assert!(moves.len() <= max);
            let mut seen = BTreeSet::new();
            let mut after = loads.clone();
            for m in &moves {
                prop_assert!(seen.insert(m.fragment), "fragment moved twice");
                prop_assert_ne!(m.from, m.to);
                prop_assert!(after.fragments_of(m.from).any(|x| x == m.fragment));
                let before = after.spread(unit);
                after.apply(*m);
                prop_assert!(after.spread(unit) <= before);
            }
            prop_assert!(after.spread(unit) <= loads.spread(unit));
            if moves.len() < max && unit == LoadUnit::Fragments {
                prop_assert!(after.spread(unit) <= threshold.max(1));
            }
        }

        // Model test against random memberships: nodes join and leave (a leaving node's
        // fragments go to the least loaded), fragments are allocated, and after each change
        // rebalancing to a fixed point (moves applied as they finish) leaves a spread within
        // the threshold, never loses or duplicates a fragment, and never uses a departed node.
        #[test]
        fn model_membership_changes(ops in proptest::collection::vec((0u8..4, 1u32..8), 1..40)) {
            let s = LeastShardAllocation::default();
            let mut loads = Loads::new();
            let mut fragments = 0u32;
            loads.add_node(n(1));
            for (op, arg) in ops {
                match op {
                    0 => loads.add_node(n(arg)),
                    1 if loads.nodes().count() > 1 => {
                        let node = n(arg);
                        let held: Vec<_> = loads.fragments_of(node).collect();
                        loads.nodes.remove(&node);
                        if loads.nodes.is_empty() { loads.add_node(node); continue; }
                        for fr in held {
                            let to = s.allocate(&loads).expect("a node is left");
                            loads.hold(to, fr, 0);
                        }
                    }
                    _ => {
                        for owner in allocate_all(&s, &loads, arg, fragments) {
                            loads.hold(owner, f(fragments), 0);
                            fragments += 1;
                        }
                    }
                }
                for _ in 0..1000 {
                    let moves = s.rebalance(&loads, &[]);
                    if moves.is_empty() { break; }
                    for m in moves {
                        prop_assert!(loads.nodes.contains_key(&m.to));
                        loads.apply(m);
                    }
                }
                prop_assert!(loads.spread(LoadUnit::Fragments) <= s.rebalance_threshold);
                let all: BTreeSet<_> = loads.nodes().flat_map(|n| loads.fragments_of(n).collect::<Vec<_>>()).collect();
                let total: usize = loads.nodes().map(|n| loads.fragments_of(n).count()).sum();
                prop_assert_eq!(all.len(), total, "a fragment is held twice");
                prop_assert_eq!(total, fragments as usize, "a fragment was lost");
            }
        }
    }
}

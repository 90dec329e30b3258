//! The shard map: fragments as contiguous half-open shard ranges covering `0 .. SHARD_COUNT`
//! with no gap and no overlap, the owner of each, and an epoch bumped by every change.
//!
//! Fragments are kept sorted by range, so shard -> fragment is a binary search. Splits give
//! the upper part a fresh fragment id; merges keep the lower fragment's id.

use std::fmt;

use crate::error::MapError;
use crate::ids::{FragmentId, SHARD_COUNT, ShardId, ShardRange};
use crate::limits::FRAGMENTS_MAX;

/// A node of the cluster.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct NodeId(pub u32);

/// An executor (one per core) on a node.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ExecutorId(pub u32);

/// Who owns a fragment: one executor on one node.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Owner {
    /// The node.
    pub node: NodeId,
    /// The executor on that node.
    pub executor: ExecutorId,
}

impl Owner {
    /// Executor `executor` of node `node`.
    pub const fn new(node: u32, executor: u32) -> Owner {
        Owner { node: NodeId(node), executor: ExecutorId(executor) }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} executor {}", self.node.0, self.executor.0)
    }
}

/// The shard map's version. Routers cache locations per epoch; every change bumps it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One fragment's entry in the map.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Fragment {
    id: FragmentId,
    range: ShardRange,
    owner: Owner,
}

impl Fragment {
    /// An entry; whether a set of entries forms a map is checked by [`ShardMap::new`].
    pub const fn new(id: FragmentId, range: ShardRange, owner: Owner) -> Fragment {
        Fragment { id, range, owner }
    }

    /// The fragment's id.
    pub const fn id(&self) -> FragmentId {
        self.id
    }

    /// The shards it holds.
    pub const fn range(&self) -> ShardRange {
        self.range
    }

    /// Its owner.
    pub const fn owner(&self) -> Owner {
        self.owner
    }
}

/// The versioned fragment layout. Valid by construction: the fragments cover every shard
/// exactly once.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ShardMap {
    epoch: Epoch,
    /// Sorted by range start; contiguous from 0 to `SHARD_COUNT`.
    fragments: Vec<Fragment>,
    /// The id the next split gives out: one past the largest id ever in the map.
    next_id: Option<u32>,
}

impl ShardMap {
    /// A map from its fragments (any order) at `epoch`; refused unless the ranges cover
    /// `0 .. SHARD_COUNT` with no gap and no overlap and the ids are distinct.
    pub fn new(mut fragments: Vec<Fragment>, epoch: Epoch) -> Result<ShardMap, MapError> {
        if fragments.is_empty() {
            return Err(MapError::Empty);
        }
        if fragments.len() > FRAGMENTS_MAX as usize {
            return Err(MapError::TooManyFragments { count: fragments.len(), max: FRAGMENTS_MAX });
        }
        fragments.sort_by_key(|f| (f.range.start(), f.range.end()));
        check_cover(&fragments)?;
        let mut ids: Vec<FragmentId> = fragments.iter().map(|f| f.id).collect();
        ids.sort_unstable();
        if let Some(pair) = ids.windows(2).find(|w| w.first() == w.get(1)) {
            let fragment = pair.first().copied().unwrap_or(FragmentId::new(0));
            return Err(MapError::DuplicateFragment { fragment });
        }
        let next_id = ids.last().and_then(|id| id.get().checked_add(1));
        Ok(ShardMap { epoch, fragments, next_id })
    }

    /// `n` fragments of (nearly) equal size, `$0 .. $n-1` in shard order, owned round-robin
    /// by `owners`, at epoch 1.
    pub fn even(n: u32, owners: &[Owner]) -> Result<ShardMap, MapError> {
        if n == 0 {
            return Err(MapError::Empty);
        }
        if n > FRAGMENTS_MAX {
            return Err(MapError::TooManyFragments { count: n as usize, max: FRAGMENTS_MAX });
        }
        if owners.is_empty() {
            return Err(MapError::NoOwners);
        }
        let bound = |i: u32| {
            let b = u64::from(i) * u64::from(SHARD_COUNT) / u64::from(n);
            // b <= SHARD_COUNT because i <= n.
            u32::try_from(b).unwrap_or(SHARD_COUNT)
        };
        let mut fragments = Vec::with_capacity(n as usize);
        for (i, owner) in (0..n).zip(owners.iter().cycle()) {
            // n <= FRAGMENTS_MAX <= SHARD_COUNT, so consecutive bounds differ.
            let range = ShardRange::new(bound(i), bound(i + 1)).ok_or(MapError::Empty)?;
            fragments.push(Fragment::new(FragmentId::new(i), range, *owner));
        }
        ShardMap::new(fragments, Epoch(1))
    }

    /// The map's version.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Every fragment, in shard order.
    pub fn fragments(&self) -> &[Fragment] {
        &self.fragments
    }

    /// Number of fragments (at least 1).
    pub fn len(&self) -> usize {
        self.fragments.len()
    }

    /// Always false: a map has at least one fragment.
    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty()
    }

    /// The fragment holding `shard`, by binary search.
    pub fn fragment_of(&self, shard: ShardId) -> FragmentId {
        self.holding(shard).id
    }

    /// The owner of the fragment holding `shard`, by binary search.
    pub fn owner_of_shard(&self, shard: ShardId) -> Owner {
        self.holding(shard).owner
    }

    fn holding(&self, shard: ShardId) -> &Fragment {
        let at = self.fragments.partition_point(|f| f.range.end() <= shard.get());
        // The fragments cover every shard (checked by `new`, kept by every change), so some
        // fragment ends after `shard`.
        self.fragments.get(at).expect("the shard map covers every shard")
    }

    /// The fragments sharing at least one shard with `range`, in shard order.
    pub fn fragments_overlapping(&self, range: ShardRange) -> &[Fragment] {
        let lo = self.fragments.partition_point(|f| f.range.end() <= range.start());
        let hi = self.fragments.partition_point(|f| f.range.start() < range.end());
        self.fragments.get(lo..hi).unwrap_or(&[])
    }

    /// The fragment named `id`.
    pub fn get(&self, id: FragmentId) -> Option<&Fragment> {
        self.fragments.iter().find(|f| f.id == id)
    }

    /// The owner of fragment `id`.
    pub fn owner_of(&self, id: FragmentId) -> Option<Owner> {
        self.get(id).map(|f| f.owner)
    }

    /// Gives fragment `id` to `owner`; bumps the epoch.
    pub fn set_owner(&mut self, id: FragmentId, owner: Owner) -> Result<(), MapError> {
        let at = self.position(id)?;
        let epoch = self.next_epoch()?;
        if let Some(f) = self.fragments.get_mut(at) {
            f.owner = owner;
        }
        self.epoch = epoch;
        Ok(())
    }

    /// Splits fragment `id` at `at`: it keeps `[start, at)` and a new fragment, with the same
    /// owner, takes `[at, end)`. Returns the new fragment's id; bumps the epoch.
    pub fn split(&mut self, id: FragmentId, at: ShardId) -> Result<FragmentId, MapError> {
        let index = self.position(id)?;
        let old = *self.fragments.get(index).ok_or(MapError::UnknownFragment { fragment: id })?;
        let outside = MapError::SplitOutside { fragment: id, range: old.range, at };
        let lower = ShardRange::new(old.range.start(), at.get()).ok_or(outside.clone())?;
        let upper = ShardRange::new(at.get(), old.range.end()).ok_or(outside)?;
        if self.fragments.len() >= FRAGMENTS_MAX as usize {
            return Err(MapError::TooManyFragments {
                count: self.fragments.len() + 1,
                max: FRAGMENTS_MAX,
            });
        }
        let new_id = self.next_id.ok_or(MapError::FragmentIdsExhausted)?;
        let epoch = self.next_epoch()?;
        let new = Fragment::new(FragmentId::new(new_id), upper, old.owner);
        if let Some(f) = self.fragments.get_mut(index) {
            f.range = lower;
        }
        self.fragments.insert(index + 1, new);
        self.next_id = new_id.checked_add(1);
        self.epoch = epoch;
        debug_assert_eq!(check_cover(&self.fragments), Ok(()));
        Ok(new.id)
    }

    /// Merges fragment `right` into `left`, whose range it must directly follow; both must
    /// have the same owner. `left` keeps its id and takes the union; bumps the epoch.
    pub fn merge(&mut self, left: FragmentId, right: FragmentId) -> Result<(), MapError> {
        let li = self.position(left)?;
        let ri = self.position(right)?;
        let (l, r) = match (self.fragments.get(li), self.fragments.get(ri)) {
            (Some(l), Some(r)) => (*l, *r),
            _ => return Err(MapError::UnknownFragment { fragment: left }),
        };
        if l.range.end() != r.range.start() {
            return Err(MapError::NotAdjacent {
                left,
                left_range: l.range,
                right,
                right_range: r.range,
            });
        }
        if l.owner != r.owner {
            return Err(MapError::OwnersDiffer { left, right });
        }
        let union = ShardRange::new(l.range.start(), r.range.end())
            .expect("two adjacent ranges form a range");
        let epoch = self.next_epoch()?;
        if let Some(f) = self.fragments.get_mut(li) {
            f.range = union;
        }
        self.fragments.remove(ri);
        self.epoch = epoch;
        debug_assert_eq!(check_cover(&self.fragments), Ok(()));
        Ok(())
    }

    fn position(&self, id: FragmentId) -> Result<usize, MapError> {
        self.fragments
            .iter()
            .position(|f| f.id == id)
            .ok_or(MapError::UnknownFragment { fragment: id })
    }

    fn next_epoch(&self) -> Result<Epoch, MapError> {
        self.epoch.0.checked_add(1).map(Epoch).ok_or(MapError::EpochExhausted)
    }
}

/// Whether sorted `fragments` cover `0 .. SHARD_COUNT` with no gap and no overlap.
fn check_cover(fragments: &[Fragment]) -> Result<(), MapError> {
    let Some(first) = fragments.first() else {
        return Err(MapError::Empty);
    };
    if first.range.start() != 0 {
        return Err(MapError::GapAtStart { first_start: first.range.start() });
    }
    for pair in fragments.windows(2) {
        let [a, b] = pair else { continue };
        if a.range.end() < b.range.start() {
            return Err(MapError::Gap {
                before: a.id,
                end: a.range.end(),
                after: b.id,
                next_start: b.range.start(),
            });
        }
        if a.range.end() > b.range.start() {
            return Err(MapError::Overlap {
                first: a.id,
                first_range: a.range,
                second: b.id,
                second_range: b.range,
            });
        }
    }
    let last_end = fragments.last().map_or(0, |f| f.range.end());
    if last_end != SHARD_COUNT {
        return Err(MapError::GapAtEnd { last_end });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u32, end: u32) -> ShardRange {
        ShardRange::new(start, end).expect("test range is valid")
    }

    fn shard(n: u32) -> ShardId {
        ShardId::new(n).expect("test shard in range")
    }

    const A: Owner = Owner::new(1, 0);
    const B: Owner = Owner::new(1, 1);

    // Checks the even layout covers everything, alternates owners and answers lookups at
    // every fragment edge.
    #[test]
    fn even_layout_and_lookup() {
        let map = ShardMap::even(3, &[A, B]).expect("valid layout");
        assert_eq!(map.epoch(), Epoch(1));
        let ranges: Vec<_> = map.fragments().iter().map(|f| f.range()).collect();
        assert_eq!(
            ranges,
            [range(0, 349_525), range(349_525, 699_050), range(699_050, SHARD_COUNT)]
        );
        assert_eq!(map.owner_of(FragmentId::new(1)), Some(B));
        assert_eq!(map.owner_of(FragmentId::new(2)), Some(A));
        for f in map.fragments() {
            assert_eq!(map.fragment_of(shard(f.range().start())), f.id());
            assert_eq!(map.fragment_of(shard(f.range().end() - 1)), f.id());
        }
        assert_eq!(map.owner_of_shard(ShardId::MAX), A);
        assert_eq!(ShardMap::even(0, &[A]), Err(MapError::Empty));
        assert_eq!(ShardMap::even(2, &[]), Err(MapError::NoOwners));
        assert!(ShardMap::even(FRAGMENTS_MAX + 1, &[A]).is_err());
        assert_eq!(
            ShardMap::even(FRAGMENTS_MAX, &[A]).map(|m| m.len()),
            Ok(FRAGMENTS_MAX as usize)
        );
    }

    // Checks the constructor refuses gaps, overlaps, missing ends and duplicate ids.
    #[test]
    fn constructor_validates_cover() {
        let f = |id, s, e| Fragment::new(FragmentId::new(id), range(s, e), A);
        let ok = ShardMap::new(vec![f(1, 10, SHARD_COUNT), f(0, 0, 10)], Epoch(7)).expect("valid");
        assert_eq!(ok.fragment_of(shard(9)), FragmentId::new(0));
        assert_eq!(ok.epoch(), Epoch(7));
        assert_eq!(ShardMap::new(vec![], Epoch(1)), Err(MapError::Empty));
        assert!(matches!(
            ShardMap::new(vec![f(0, 1, SHARD_COUNT)], Epoch(1)),
            Err(MapError::GapAtStart { first_start: 1 })
        ));
        assert!(matches!(
            ShardMap::new(vec![f(0, 0, 10), f(1, 11, SHARD_COUNT)], Epoch(1)),
            Err(MapError::Gap { .. })
        ));
        assert!(matches!(
            ShardMap::new(vec![f(0, 0, 10), f(1, 9, SHARD_COUNT)], Epoch(1)),
            Err(MapError::Overlap { .. })
        ));
        assert!(matches!(
            ShardMap::new(vec![f(0, 0, 10)], Epoch(1)),
            Err(MapError::GapAtEnd { last_end: 10 })
        ));
        assert!(matches!(
            ShardMap::new(vec![f(0, 0, 10), f(0, 10, SHARD_COUNT)], Epoch(1)),
            Err(MapError::DuplicateFragment { .. })
        ));
    }

    // Checks split and merge keep the cover, name fragments as documented, refuse bad
    // arguments without changing anything, and bump the epoch only on success.
    #[test]
    fn split_merge_and_owners() {
        let mut map = ShardMap::even(2, &[A]).expect("valid layout");
        let new = map.split(FragmentId::new(0), shard(100)).expect("inside");
        assert_eq!(new, FragmentId::new(2));
        assert_eq!(map.epoch(), Epoch(2));
        assert_eq!(map.fragment_of(shard(99)), FragmentId::new(0));
        assert_eq!(map.fragment_of(shard(100)), FragmentId::new(2));
        let overlapping: Vec<_> =
            map.fragments_overlapping(range(50, 600_000)).iter().map(|f| f.id().get()).collect();
        assert_eq!(overlapping, [0, 2, 1]);
        assert!(matches!(
            map.split(FragmentId::new(0), shard(0)),
            Err(MapError::SplitOutside { .. })
        ));
        assert!(matches!(
            map.split(FragmentId::new(0), shard(100)),
            Err(MapError::SplitOutside { .. })
        ));
        assert!(matches!(
            map.split(FragmentId::new(9), shard(5)),
            Err(MapError::UnknownFragment { .. })
        ));
        assert!(matches!(
            map.merge(FragmentId::new(0), FragmentId::new(1)),
            Err(MapError::NotAdjacent { .. })
        ));
        map.set_owner(FragmentId::new(2), B).expect("known fragment");
        assert_eq!(map.epoch(), Epoch(3));
        assert!(matches!(
            map.merge(FragmentId::new(0), FragmentId::new(2)),
            Err(MapError::OwnersDiffer { .. })
        ));
        assert_eq!(map.epoch(), Epoch(3), "refused changes do not bump the epoch");
        map.set_owner(FragmentId::new(2), A).expect("known fragment");
        map.merge(FragmentId::new(0), FragmentId::new(2)).expect("adjacent, same owner");
        assert_eq!(map.epoch(), Epoch(5));
        let ranges: Vec<_> = map.fragments().iter().map(|f| (f.id().get(), f.range())).collect();
        assert_eq!(ranges, [(0, range(0, 524_288)), (1, range(524_288, SHARD_COUNT))]);
        assert!(matches!(
            map.set_owner(FragmentId::new(2), A),
            Err(MapError::UnknownFragment { .. })
        ));
        // Fragment ids are never reused after a merge retires one.
        assert_eq!(map.split(FragmentId::new(1), shard(600_000)), Ok(FragmentId::new(3)));
    }
}

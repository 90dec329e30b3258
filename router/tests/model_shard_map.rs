//! Model test of the shard map: random splits, merges and owner changes run against
//! `ShardMap` and against a plain list of `(start, end, id, owner)` oracle entries; after
//! every operation the cover, the lookups of random and edge shards, the overlapping-range
//! query and the epoch (bumped by exactly one on success, unchanged on refusal) must agree.

mod common;

use proptest::prelude::*;
use router::{Epoch, FragmentId, Owner, SHARD_COUNT, ShardId, ShardMap, ShardRange};

#[derive(Clone, Debug)]
enum Op {
    Split { pick: usize, at: u32 },
    Merge { pick: usize, owner_first: bool },
    SetOwner { pick: usize, owner: u32 },
}

fn ops() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<usize>(), any::<u32>()).prop_map(|(pick, at)| Op::Split { pick, at }),
        (any::<usize>(), any::<bool>())
            .prop_map(|(pick, owner_first)| Op::Merge { pick, owner_first }),
        (any::<usize>(), 0u32..3).prop_map(|(pick, owner)| Op::SetOwner { pick, owner }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Entry {
    start: u32,
    end: u32,
    id: u32,
    owner: Owner,
}

fn check(map: &ShardMap, oracle: &[Entry], probes: &[u32]) -> Result<(), TestCaseError> {
    let got: Vec<Entry> = map
        .fragments()
        .iter()
        .map(|f| Entry {
            start: f.range().start(),
            end: f.range().end(),
            id: f.id().get(),
            owner: f.owner(),
        })
        .collect();
    prop_assert_eq!(&got, &oracle.to_vec());
    let mut edges: Vec<u32> = oracle.iter().flat_map(|e| [e.start, e.end - 1]).collect();
    edges.extend(probes.iter().map(|p| p % SHARD_COUNT));
    for s in edges {
        let shard = ShardId::new(s).expect("below SHARD_COUNT");
        let expected = oracle.iter().find(|e| e.start <= s && s < e.end).expect("covered");
        prop_assert_eq!(map.fragment_of(shard), FragmentId::new(expected.id));
        prop_assert_eq!(map.owner_of_shard(shard), expected.owner);
    }
    for pair in probes.chunks(2) {
        if let [a, b] = pair {
            let (a, b) = (a % SHARD_COUNT, b % SHARD_COUNT);
            let Some(range) = ShardRange::new(a.min(b), a.max(b) + 1) else { continue };
            let got: Vec<u32> =
                map.fragments_overlapping(range).iter().map(|f| f.id().get()).collect();
            let expected: Vec<u32> = oracle
                .iter()
                .filter(|e| e.start < range.end() && range.start() < e.end)
                .map(|e| e.id)
                .collect();
            prop_assert_eq!(got, expected);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(common::config())]

    // Checks every operation sequence keeps map and oracle equal, with epoch accounting.
    #[test]
    fn map_matches_oracle(
        n in 1u32..6,
        ops in proptest::collection::vec(ops(), 0..40),
        probes in proptest::collection::vec(any::<u32>(), 0..16),
    ) {
        let owners = [Owner::new(0, 0), Owner::new(0, 1), Owner::new(1, 0)];
        let mut map = ShardMap::even(n, &owners[..1]).expect("valid layout");
        let mut oracle: Vec<Entry> = map
            .fragments()
            .iter()
            .map(|f| Entry { start: f.range().start(), end: f.range().end(), id: f.id().get(), owner: f.owner() })
            .collect();
        let mut next_id = n;
        check(&map, &oracle, &probes)?;
        for op in ops {
            let epoch = map.epoch();
            let applied = match op {
                Op::Split { pick, at } => {
                    let i = pick % oracle.len();
                    let e = oracle[i];
                    let at = at % SHARD_COUNT;
                    let result = map.split(FragmentId::new(e.id), ShardId::new(at).expect("in range"));
                    if e.start < at && at < e.end {
                        prop_assert_eq!(result, Ok(FragmentId::new(next_id)));
                        oracle[i].end = at;
                        oracle.insert(i + 1, Entry { start: at, end: e.end, id: next_id, owner: e.owner });
                        next_id += 1;
                        true
                    } else {
                        prop_assert!(result.is_err());
                        false
                    }
                }
                Op::Merge { pick, owner_first } => {
                    let i = pick % oracle.len();
                    let Some(&right) = oracle.get(i + 1) else {
                        // The last fragment has no right neighbour: merging with the first is
                        // refused (not adjacent) unless there is only one fragment.
                        let first = oracle[0];
                        let result = map.merge(FragmentId::new(oracle[i].id), FragmentId::new(first.id));
                        prop_assert!(result.is_err());
                        continue;
                    };
                    if owner_first {
                        // Align owners first so the merge can succeed.
                        map.set_owner(FragmentId::new(right.id), oracle[i].owner).expect("known fragment");
                        oracle[i + 1].owner = oracle[i].owner;
                        prop_assert_eq!(map.epoch(), Epoch(epoch.0 + 1));
                    }
                    let epoch_before = map.epoch();
                    let result = map.merge(FragmentId::new(oracle[i].id), FragmentId::new(right.id));
                    if oracle[i].owner == oracle[i + 1].owner {
                        prop_assert_eq!(result, Ok(()));
                        oracle[i].end = right.end;
                        oracle.remove(i + 1);
                        prop_assert_eq!(map.epoch(), Epoch(epoch_before.0 + 1));
                    } else {
                        prop_assert!(result.is_err());
                        prop_assert_eq!(map.epoch(), epoch_before);
                    }
                    check(&map, &oracle, &probes)?;
                    continue;
                }
                Op::SetOwner { pick, owner } => {
                    let i = pick % oracle.len();
                    let owner = owners[owner as usize % owners.len()];
                    map.set_owner(FragmentId::new(oracle[i].id), owner).expect("known fragment");
                    oracle[i].owner = owner;
                    true
                }
            };
            let expected_epoch = if applied { Epoch(epoch.0 + 1) } else { epoch };
            prop_assert_eq!(map.epoch(), expected_epoch);
            check(&map, &oracle, &probes)?;
        }
    }
}

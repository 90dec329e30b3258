//! Property tests of `shard_of` (SHARDING.md §1, §2): total over any input, always below
//! 2^20, case-insensitive, and each `$` rule holds for generated ids.

mod common;

use proptest::prelude::*;
use router::{IdError, Placement, SHARD_COUNT, ShardId, hash, shard_of, shard_of_bytes};

proptest! {
    #![proptest_config(common::config())]

    // Checks any byte string gives a shard below 2^20 or a typed error, never a panic.
    #[test]
    fn total_over_bytes(data in proptest::collection::vec(any::<u8>(), 0..700)) {
        match shard_of_bytes(&data) {
            Ok(placement) => {
                if let Some(shard) = placement.shard() {
                    prop_assert!(shard.get() < SHARD_COUNT);
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    // Checks any Unicode string agrees between the str and byte entries, stays below 2^20,
    // and places the same as its lower-cased form.
    #[test]
    fn total_over_strings(id in "\\PC{0,80}") {
        let placed = shard_of(&id);
        prop_assert_eq!(&placed, &shard_of_bytes(id.as_bytes()));
        if let Ok(Some(shard)) = placed.as_ref().map(|p| p.shard()) {
            prop_assert!(shard.get() < SHARD_COUNT);
        }
        if let Ok(p) = placed {
            prop_assert_eq!(shard_of(&id.to_lowercase()), Ok(p));
        }
    }

    // Checks ASCII ids are case-insensitive for placement.
    #[test]
    fn ascii_case_insensitive(id in "[a-zA-Z0-9/$@-]{1,60}") {
        let placed = shard_of(&id);
        match (&placed, shard_of(&id.to_ascii_uppercase()), shard_of(&id.to_ascii_lowercase())) {
            (Ok(a), Ok(b), Ok(c)) => {
                prop_assert_eq!(*a, b);
                prop_assert_eq!(*a, c);
            }
            (Err(_), Err(_), Err(_)) => {}
            other => prop_assert!(false, "validity depends on case: {:?}", other),
        }
    }

    // Checks `$@N` names shard N for every N < 2^20, with any prefix and leading zeros.
    #[test]
    fn explicit_suffix(prefix in "[^$]{1,20}", n in 0..SHARD_COUNT, zeros in 0usize..4) {
        let id = format!("{prefix}$@{}{n}", "0".repeat(zeros));
        let shard = ShardId::new(n).expect("n < SHARD_COUNT");
        prop_assert_eq!(shard_of(&id), Ok(Placement::Explicit(shard)));
    }

    // Checks out-of-range suffixes are refused.
    #[test]
    fn explicit_suffix_out_of_range(n in SHARD_COUNT..u32::MAX) {
        let refused = matches!(
            shard_of(&format!("x$@{n}")),
            Err(IdError::ShardSuffixTooLarge { .. })
        );
        prop_assert!(refused);
    }

    // Checks the text after the last `$` is what gets hashed.
    #[test]
    fn tail_is_hashed(head in "[^$]{1,20}", middle in "[^$]{0,10}", tail in "[^$@][^$]{0,20}") {
        let id = format!("{head}${middle}${tail}");
        prop_assert_eq!(shard_of(&id), Ok(Placement::Hashed(hash(&tail))));
    }
}

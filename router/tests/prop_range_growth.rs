//! Property test of online Range changes (SHARDING.md §3, "Online changes"): growing Range
//! by a whole multiple keeps every valid document valid and is accepted; any growth that is
//! not a multiple is refused (and such growth really can break a document).

mod common;

use proptest::prelude::*;
use router::{ChangeError, SHARD_COUNT, ShardingConfig, check_change, validate};
use serde_json::json;

fn config(range: u32) -> ShardingConfig {
    ShardingConfig::parse(&format!(r#"{{"Fields": ["Customer"], "Range": {range}}}"#))
        .expect("generated configuration is valid")
}

proptest! {
    #![proptest_config(common::config())]

    // Checks a document placed anywhere in its block under Range r is still valid under
    // Range k*r, and the change is accepted.
    #[test]
    fn multiple_growth_keeps_documents_valid(
        r in 1u32..5000,
        k_pick in any::<u32>(),
        customer in "\\PC{0,16}",
        pick in any::<u32>(),
    ) {
        // k in 1 ..= SHARD_COUNT / r, so k * r stays within RANGE_MAX.
        let k = 1 + k_pick % (SHARD_COUNT / r);
        let grown = r * k;
        let (old, new) = (config(r), config(grown));
        prop_assert_eq!(check_change(&old, &new), Ok(()));
        let doc = json!({ "Customer": customer });
        let content = old.content_shard(&doc).expect("string field").expect("content-based");
        let block = old.block_of(content);
        let shard = block.start() + pick % block.len();
        let id = format!("orders/1$@{shard}");
        prop_assert_eq!(validate(&old, &id, &doc), Ok(()));
        prop_assert_eq!(validate(&new, &id, &doc), Ok(()));
    }

    // Checks every growth that is not a whole multiple is refused with its reason.
    #[test]
    fn non_multiple_growth_refused(r in 2u32..5000, extra in 1u32..100_000) {
        let new_range = (r + extra).min(SHARD_COUNT);
        prop_assume!(new_range % r != 0);
        prop_assert_eq!(
            check_change(&config(r), &config(new_range)),
            Err(ChangeError::RangeNotMultiple { old: r, new: new_range })
        );
    }
}

// Checks the reason behind the rule with one concrete document: Range 10 -> 15 moves a block
// edge, so a document valid before (content shard 14, id shard 16) is invalid after.
#[test]
fn non_multiple_growth_would_break_a_document() {
    // Content shard 14 in both cases: a numeric() configuration makes it exact.
    let numeric = |range: u32| {
        ShardingConfig::parse(&format!(r#"{{"Fields": ["numeric(N)"], "Range": {range}}}"#))
            .expect("valid configuration")
    };
    let doc = json!({ "N": 14 });
    assert_eq!(validate(&numeric(10), "x$@16", &doc), Ok(()));
    assert!(validate(&numeric(15), "x$@16", &doc).is_err());
    assert!(check_change(&numeric(10), &numeric(15)).is_err());
    assert_eq!(check_change(&numeric(10), &numeric(20)), Ok(()));
}

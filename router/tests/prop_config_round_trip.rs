//! Property test of the sharding configuration text: any valid configuration (generated from
//! its parts, with arbitrary field names including quotes, backslashes and non-ASCII) prints
//! as canonical JSON that parses back to the same configuration, and the printed text is a
//! fixed point.

mod common;

use proptest::prelude::*;
use router::limits::RANGE_MAX;
use router::{ContentKey, FieldPath, ShardingConfig};

fn paths() -> impl Strategy<Value = FieldPath> {
    proptest::collection::vec("[^.()]{1,8}", 1..4)
        .prop_map(|steps| FieldPath::parse(&steps.join(".")).expect("non-empty steps"))
}

fn keys() -> impl Strategy<Value = ContentKey> {
    prop_oneof![
        proptest::collection::vec(paths(), 1..5).prop_map(ContentKey::Fields),
        paths().prop_map(ContentKey::Numeric),
        paths().prop_map(ContentKey::Ticks),
        Just(ContentKey::Id),
    ]
}

proptest! {
    #![proptest_config(common::config())]

    // Checks parse(to_json(c)) == c and to_json is stable.
    #[test]
    fn round_trip(key in keys(), range in 1..=RANGE_MAX, mutable in any::<bool>()) {
        let config = ShardingConfig::new(key, range, mutable).expect("generated parts are valid");
        let json = config.to_json();
        let parsed = ShardingConfig::parse(&json);
        prop_assert_eq!(parsed.as_ref(), Ok(&config), "{}", json);
        prop_assert_eq!(parsed.map(|p| p.to_json()), Ok(json));
    }
}

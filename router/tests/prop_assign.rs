//! Property test of content-based assignment (SHARDING.md §3): for random configurations
//! (plain fields, several fields, numeric(), ticks(); any Range) and documents, an assigned
//! trailing-`$` id validates, `shard_of` of the rewritten id is the assigned shard, and that
//! shard lies in the block of the document's content.

mod common;

use proptest::prelude::*;
use router::{Placement, SHARD_COUNT, ShardingConfig, assign, shard_of, validate};
use serde_json::{Value, json};

/// A generated configuration: which function, and the Range.
fn configs() -> impl Strategy<Value = ShardingConfig> {
    let fields = prop_oneof![
        Just(r#"["Customer"]"#),
        Just(r#"["Address.City", "Name"]"#),
        Just(r#"["numeric(N)"]"#),
        Just(r#"["ticks(At)"]"#),
    ];
    let range = prop_oneof![Just(1u32), 1u32..2000, Just(SHARD_COUNT), 1..=SHARD_COUNT];
    (fields, range).prop_map(|(fields, range)| {
        ShardingConfig::parse(&format!(r#"{{"Fields": {fields}, "Range": {range}}}"#))
            .expect("generated configuration is valid")
    })
}

fn scalars() -> impl Strategy<Value = Value> {
    prop_oneof![
        "\\PC{0,12}".prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
    ]
}

fn date_times() -> impl Strategy<Value = String> {
    (1u32..=9999, 1u32..=12, 1u32..=28, 0u32..24, 0u32..60, 0u32..60, 0u32..10_000_000, -14i32..=14)
        .prop_map(|(y, mo, d, h, mi, s, frac, off)| {
            let offset = if off == 0 {
                "Z".to_owned()
            } else {
                format!("{}{:02}:00", if off < 0 { '-' } else { '+' }, off.unsigned_abs())
            };
            format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{frac:07}{offset}")
        })
}

fn docs() -> impl Strategy<Value = Value> {
    (scalars(), scalars(), scalars(), any::<i64>(), date_times()).prop_map(
        |(customer, city, name, n, at)| {
            json!({"Customer": customer, "Address": {"City": city}, "Name": name, "N": n, "At": at})
        },
    )
}

proptest! {
    #![proptest_config(common::config())]

    // Checks assign -> validate -> shard_of agree for every generated case; a date-time
    // outside the era (offset pushing year 1 or 9999 over the edge) is the only refusal.
    #[test]
    fn assigned_ids_validate(config in configs(), doc in docs(), base in "[a-zA-Z0-9/-]{1,20}") {
        let id = format!("{base}$");
        let (final_id, shard) = match assign(&config, &id, &doc) {
            Ok(assigned) => assigned,
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.contains("outside 0001"), "unexpected refusal: {}", text);
                return Ok(());
            }
        };
        prop_assert_eq!(&final_id, &format!("{base}$@{shard}"));
        prop_assert_eq!(shard_of(&final_id), Ok(Placement::Explicit(shard)));
        prop_assert_eq!(validate(&config, &final_id, &doc), Ok(()));
        let content = config.content_shard(&doc).expect("assigned, so content is readable");
        let block = config.block_of(content.expect("content-based configuration"));
        prop_assert!(block.contains(shard));
        // Case does not matter: the upper-cased id is the same document on the same shard.
        prop_assert_eq!(shard_of(&final_id.to_uppercase()), Ok(Placement::Explicit(shard)));
    }
}

//! Property: binding a parameter gives the same rows as writing the value inline, and an
//! untyped text parameter matches what the number literal matches, the equal string, and the
//! boolean it spells.

mod common;

use common::Cluster;
use proptest::prelude::*;
use query::{Datum, Statement, bind, parse};
use serde_json::json;

fn ids(c: &Cluster, stmt: &Statement) -> Vec<String> {
    let Statement::Select(s) = stmt else { panic!("select") };
    let mut v: Vec<String> =
        c.select(s).rows.into_iter().map(|r| r[0].encode_text().expect("id")).collect();
    v.sort();
    v
}

fn arb_value() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        (-3i64..4).prop_map(|i| json!(i)),
        (-3i64..4).prop_map(|i| json!(i as f64)),
        (-3i64..4).prop_map(|i| json!(i.to_string())),
        Just(json!(true)),
        Just(json!(null)),
    ]
}

proptest! {
    #[test]
    fn prop_bound_equals_inline(values in prop::collection::vec(arb_value(), 0..30), k in -3i64..4, frags in 1u32..5) {
        let mut c = Cluster::new(frags);
        for (n, v) in values.iter().enumerate() {
            c.put("c", &format!("c/{n}"), json!({"a": v}));
        }
        let inline = ids(&c, &parse(&format!("SELECT id() FROM c WHERE a = {k}")).expect("plans").remove(0));
        let prepared = parse("SELECT id() FROM c WHERE a = $1").expect("plans").remove(0);
        let typed = ids(&c, &bind(&prepared, &[Datum::Int8(k)]).expect("binds"));
        prop_assert_eq!(&typed, &inline);
        let cast = parse("SELECT id() FROM c WHERE a = $1::int8").expect("plans").remove(0);
        let from_text = ids(&c, &bind(&cast, &[Datum::Int8(k)]).expect("binds"));
        prop_assert_eq!(&from_text, &inline);
        // Untyped text: the numbers equal to k, the strings spelling k, and for 1 and 0 the
        // booleans they spell.
        let untyped = ids(&c, &bind(&prepared, &[Datum::Text(k.to_string())]).expect("binds"));
        let string = ids(&c, &parse(&format!("SELECT id() FROM c WHERE a = '{k}'")).expect("plans").remove(0));
        let boolean = match k {
            1 => ids(&c, &parse("SELECT id() FROM c WHERE a = true").expect("plans").remove(0)),
            0 => ids(&c, &parse("SELECT id() FROM c WHERE a = false").expect("plans").remove(0)),
            _ => Vec::new(),
        };
        let mut want: Vec<String> = inline.iter().chain(&string).chain(&boolean).cloned().collect();
        want.sort();
        prop_assert_eq!(&untyped, &want);
    }
}

//! Model test of pruning soundness: random shard maps, content configurations, stored
//! documents and predicates; a brute-force evaluator decides which documents could match, and
//! every such document's fragment (and shard) must be in the plan. The evaluator is the most
//! liberal reading of the query rules (ids and strings compare case-insensitively, integers
//! and floats compare as numbers through `f64`, `Any` matches everything), so passing here
//! covers every stricter query engine too.

mod common;

use proptest::prelude::*;
use router::content::block;
use router::{
    FragmentId, Literal, Owner, Placement, Predicate, SHARD_COUNT, ShardId, ShardMap,
    ShardingConfig, assign, doc_key, route, shard_of, validate,
};
use serde_json::{Value, json};

/// Values stored in documents and used as literals (`None` = the field is missing).
fn value(i: usize) -> Option<Value> {
    let values = [
        Some(json!("customers/1-A")),
        Some(json!("CUSTOMERS/1-a")),
        Some(json!("c/2")),
        Some(json!("ÀB")),
        Some(json!("àb")),
        Some(json!("3")),
        Some(json!("true")),
        Some(json!("1.5")),
        Some(json!("")),
        Some(json!(3)),
        Some(json!(0)),
        Some(json!(-1)),
        Some(json!(9_007_199_254_740_993_i64)),
        Some(json!(1_048_581)),
        Some(json!(3.0)),
        Some(json!(1.5)),
        Some(json!(-0.0)),
        Some(json!(9_007_199_254_740_992.0)),
        Some(json!(true)),
        Some(json!("2000-01-01T00:00:00Z")),
        Some(json!("2000-01-01T01:00:00+01:00")),
        Some(json!("2000-01-01t00:00:00z")),
        Some(json!("2024-02-29T12:00:00.1234567-05:00")),
        Some(Value::Null),
        None,
    ];
    values.get(i % values.len()).cloned().flatten()
}

fn literal(v: Option<Value>) -> Literal {
    match v {
        Some(Value::String(s)) => Literal::Str(s),
        Some(Value::Bool(b)) => Literal::Bool(b),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => Literal::Int(i),
            None => Literal::Float(n.as_f64().unwrap_or(0.0)),
        },
        _ => Literal::Null,
    }
}

const CONFIGS: [Option<&str>; 7] = [
    None,
    Some(r#"["Customer"]"#),
    Some(r#"["A", "B.C"]"#),
    Some(r#"["numeric(N)"]"#),
    Some(r#"["ticks(T)"]"#),
    Some(r#"["id()"]"#),
    Some(r#"["customer"]"#),
];

/// The field paths each entry of `CONFIGS` shards by.
const CONFIG_PATHS: [&[&[&str]]; 7] =
    [&[], &[&["Customer"]], &[&["A"], &["B", "C"]], &[&["N"]], &[&["T"]], &[], &[&["customer"]]];

const PATHS: [&[&str]; 7] =
    [&["Customer"], &["A"], &["B", "C"], &["N"], &["T"], &["customer"], &["B"]];

const IDS: [&str; 8] = [
    "orders/1-A",
    "orders/2-A$customers/1-A",
    "users/1",
    "$@5",
    "\u{212a}/1",
    "a$b$c",
    "x$@982173",
    "ÀB/ΣΑΣ",
];

/// One stored document.
#[derive(Debug)]
struct Stored {
    id: String,
    shard: ShardId,
    doc: Value,
}

#[derive(Clone, Debug)]
enum Spec {
    Id {
        pick: usize,
        case: u8,
    },
    Field {
        path: usize,
        value: usize,
        from: Option<(usize, usize)>,
    },
    /// Equalities on every configured field, with literals read from one stored document
    /// (sometimes from another path of it, so types meet), in either order.
    Content {
        doc: usize,
        cross: Option<usize>,
        reverse: bool,
    },
    Any,
    And(Vec<Spec>),
    Or(Vec<Spec>),
}

fn specs() -> impl Strategy<Value = Spec> {
    let leaf = prop_oneof![
        3 => (any::<usize>(), any::<u8>()).prop_map(|(pick, case)| Spec::Id { pick, case }),
        2 => (0..PATHS.len(), any::<usize>(), any::<Option<(usize, usize)>>())
            .prop_map(|(path, value, from)| Spec::Field { path, value, from }),
        4 => (any::<usize>(), any::<Option<usize>>(), any::<bool>())
            .prop_map(|(doc, cross, reverse)| Spec::Content { doc, cross, reverse }),
        1 => Just(Spec::Any),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Spec::And),
            proptest::collection::vec(inner, 0..4).prop_map(Spec::Or),
        ]
    })
}

fn to_predicate(spec: &Spec, stored: &[Stored], config_pick: usize) -> Predicate {
    match spec {
        Spec::Id { pick, case } => {
            let bad = ["x$@", "orders/1-A$", "", "x$@1048576"];
            let n = stored.len() + IDS.len() + bad.len();
            let i = pick % n;
            let base = if let Some(s) = stored.get(i) {
                s.id.clone()
            } else if let Some(id) = IDS.get(i - stored.len()) {
                (*id).to_owned()
            } else {
                bad.get(i - stored.len() - IDS.len()).copied().unwrap_or("").to_owned()
            };
            Predicate::IdEq(match case % 3 {
                0 => base,
                1 => base.to_uppercase(),
                _ => base.to_lowercase(),
            })
        }
        Spec::Field { path, value: v, from } => {
            // Half the time, the literal is some stored document's value (at any path, so
            // integers, floats and strings meet across fields); otherwise one from the pool.
            let from_doc = from.and_then(|(doc, at)| {
                let s = stored.get(doc % stored.len().max(1))?;
                let mut v = Some(&s.doc);
                for step in PATHS[at % PATHS.len()] {
                    v = v.and_then(|v| v.get(*step));
                }
                v.cloned()
            });
            Predicate::FieldEq {
                path: PATHS[*path].iter().map(|s| (*s).to_owned()).collect(),
                value: literal(from_doc.or_else(|| value(*v))),
            }
        }
        Spec::Content { doc, cross, reverse } => {
            let Some(s) = stored.get(doc % stored.len().max(1)) else {
                return Predicate::Any;
            };
            let mut equalities: Vec<Predicate> = CONFIG_PATHS[config_pick]
                .iter()
                .map(|path| {
                    let read_at = cross.map_or(*path, |c| PATHS[c % PATHS.len()]);
                    let mut v = Some(&s.doc);
                    for step in read_at {
                        v = v.and_then(|v| v.get(*step));
                    }
                    Predicate::FieldEq {
                        path: path.iter().map(|s| (*s).to_owned()).collect(),
                        value: literal(v.cloned()),
                    }
                })
                .collect();
            if *reverse {
                equalities.reverse();
            }
            match equalities.len() {
                0 => Predicate::Any,
                1 if !reverse => equalities.pop().unwrap_or(Predicate::Any),
                _ => Predicate::And(equalities),
            }
        }
        Spec::Any => Predicate::Any,
        Spec::And(children) => {
            Predicate::And(children.iter().map(|c| to_predicate(c, stored, config_pick)).collect())
        }
        Spec::Or(children) => {
            Predicate::Or(children.iter().map(|c| to_predicate(c, stored, config_pick)).collect())
        }
    }
}

/// The liberal model of `field = literal`.
fn value_matches(stored: Option<&Value>, literal: &Literal) -> bool {
    match (stored, literal) {
        (Some(Value::String(a)), Literal::Str(b)) => a.to_lowercase() == b.to_lowercase(),
        (Some(Value::Bool(a)), Literal::Bool(b)) => a == b,
        (Some(Value::Number(a)), Literal::Int(b)) => match a.as_i64() {
            Some(a) => a == *b || (a as f64) == (*b as f64),
            None => a.as_f64() == Some(*b as f64),
        },
        (Some(Value::Number(a)), Literal::Float(b)) => a.as_f64() == Some(*b),
        _ => false,
    }
}

fn matches(p: &Predicate, s: &Stored) -> bool {
    match p {
        Predicate::IdEq(x) => doc_key(x) == doc_key(&s.id),
        Predicate::FieldEq { path, value } => {
            let mut at = Some(&s.doc);
            for step in path {
                at = at.and_then(|v| v.get(step));
            }
            value_matches(at, value)
        }
        Predicate::And(children) => children.iter().all(|c| matches(c, s)),
        Predicate::Or(children) => children.iter().any(|c| matches(c, s)),
        Predicate::Any => true,
    }
}

fn layout(cuts: &[u32]) -> ShardMap {
    let mut cuts: Vec<u32> = cuts.iter().map(|c| 1 + c % (SHARD_COUNT - 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut map = ShardMap::even(1, &[Owner::new(0, 0)]).expect("one fragment");
    for cut in cuts {
        let shard = ShardId::new(cut).expect("cut < SHARD_COUNT");
        let fragment = map.fragment_of(shard);
        // A cut at a fragment's start is not strictly inside; skip it.
        let _ = map.split(fragment, shard);
    }
    map
}

/// Builds the documents a store with this configuration would hold.
fn store(config: Option<&ShardingConfig>, raw: &[(usize, [usize; 5], u32, u8)]) -> Vec<Stored> {
    let mut out = Vec::new();
    for (i, (id_pick, fields, pick, form)) in raw.iter().enumerate() {
        let mut doc = serde_json::Map::new();
        let mut nested = serde_json::Map::new();
        for (name, v) in ["Customer", "A", "N", "T", "customer"].iter().zip(fields) {
            if let Some(v) = value(*v) {
                doc.insert((*name).to_owned(), v);
            }
        }
        if let Some(v) = value(fields[1] / 7) {
            nested.insert("C".to_owned(), v);
        }
        doc.insert("B".to_owned(), Value::Object(nested));
        let doc = Value::Object(doc);
        let base = IDS[id_pick % IDS.len()];
        let id = match (form % 3, config) {
            // Content-assigned, as an insert of `<base>/<i>$` would be.
            (0, Some(c)) => match assign(c, &format!("{base}/{i}$"), &doc) {
                Ok((id, _)) => id,
                Err(_) => continue,
            },
            // An explicit shard: anywhere, or inside the content block when there is one.
            (1, _) => {
                let content = config.and_then(|c| c.content_shard(&doc).ok().flatten());
                let shard = match (content, config) {
                    (Some(c), Some(cfg)) => {
                        let b = block(c, cfg.range());
                        b.start() + pick % b.len()
                    }
                    _ => pick % SHARD_COUNT,
                };
                format!("{base}/{i}$@{shard}")
            }
            _ => base.to_owned(),
        };
        // The store refuses writes that break an immutable configuration.
        if let Some(c) = config
            && validate(c, &id, &doc).is_err()
        {
            continue;
        }
        let Ok(Placement::Hashed(shard) | Placement::Explicit(shard)) = shard_of(&id) else {
            continue;
        };
        out.push(Stored { id, shard, doc });
    }
    out
}

proptest! {
    // More cases than the default: a content-pruning bug needs a rare combination (a content
    // configuration, a stored value and an equal literal of another type) to show.
    #![proptest_config(common::config_with_cases(1024))]

    // Checks no document the model says could match lives outside the plan's fragments or
    // shard ranges, and that an empty plan means the model finds no match.
    #[test]
    fn pruning_is_sound(
        cuts in proptest::collection::vec(any::<u32>(), 0..12),
        config_pick in 0..CONFIGS.len(),
        range in prop_oneof![Just(1u32), 1u32..3000, Just(SHARD_COUNT)],
        mutable in proptest::bool::weighted(0.2),
        raw in proptest::collection::vec(
            (any::<usize>(), any::<[usize; 5]>(), any::<u32>(), any::<u8>()), 1..24),
        specs in proptest::collection::vec(specs(), 1..6),
    ) {
        let map = layout(&cuts);
        let config = CONFIGS[config_pick].map(|fields| {
            ShardingConfig::parse(&format!(
                r#"{{"Fields": {fields}, "Range": {range}, "Mutable": {mutable}}}"#
            ))
            .expect("generated configuration is valid")
        });
        let stored = store(config.as_ref(), &raw);
        for spec in &specs {
            let predicate = to_predicate(spec, &stored, config_pick);
            let plan = route(&predicate, config.as_ref(), &map);
            for s in stored.iter().filter(|s| matches(&predicate, s)) {
                let fragment: FragmentId = map.fragment_of(s.shard);
                prop_assert!(
                    plan.fragments.contains(&fragment),
                    "{:?} matches {:?} on shard {} in {}, but the plan is {:?}",
                    predicate, s, s.shard, fragment, plan
                );
                prop_assert!(plan.shards.iter().any(|r| r.contains(s.shard)));
            }
        }
    }
}

//! Model test: random documents spread over several fake fragments, random queries (filters,
//! ORDER BY + LIMIT/OFFSET, GROUP BY aggregates). Checks that the merged multi-fragment result
//! equals a single-fragment run, and equals a brute-force oracle written independently of the
//! evaluator (from the documented comparison and ordering rules).
//!
//! Case count: `PROPTEST_CASES` (proptest's own variable), default 256.

mod common;

use std::cmp::Ordering;

use common::Cluster;
use proptest::prelude::*;
use query::Datum;
use serde_json::{Value, json};

/// A value of field `a`: exercises numbers, strings (mismatched kinds), JSON null, absence.
#[derive(Clone, Debug)]
enum A {
    Missing,
    Null,
    Int(i64),
    Float(f64),
    Str(String),
}

#[derive(Clone, Debug)]
struct Doc {
    id: String,
    a: A,
    g: Option<String>,
}

impl Doc {
    fn json(&self) -> Value {
        let mut m = serde_json::Map::new();
        match &self.a {
            A::Missing => {}
            A::Null => {
                m.insert("a".into(), Value::Null);
            }
            A::Int(i) => {
                m.insert("a".into(), json!(i));
            }
            A::Float(f) => {
                m.insert("a".into(), json!(f));
            }
            A::Str(s) => {
                m.insert("a".into(), json!(s));
            }
        }
        if let Some(g) = &self.g {
            m.insert("g".into(), json!(g));
        }
        Value::Object(m)
    }

    /// `a` as a number, or `Err(())` for a string, `Ok(None)` for NULL.
    fn num(&self) -> Result<Option<f64>, ()> {
        match &self.a {
            A::Missing | A::Null => Ok(None),
            A::Int(i) => Ok(Some(*i as f64)),
            A::Float(f) => Ok(Some(*f)),
            A::Str(_) => Err(()),
        }
    }
}

fn arb_doc(n: usize) -> impl Strategy<Value = Doc> {
    let a = prop_oneof![
        Just(A::Missing),
        Just(A::Null),
        (-5i64..6).prop_map(A::Int),
        (-10i64..10).prop_map(|x| A::Float(x as f64 / 2.0 + 0.25)),
        "[a-c]{0,2}".prop_map(A::Str),
    ];
    let g = prop_oneof![Just(None), "[xyz]".prop_map(Some), "[xyz]{2}".prop_map(Some)];
    (a, g).prop_map(move |(a, g)| Doc { id: format!("d/{n}"), a, g })
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Debug)]
enum P {
    Cmp(Op, i64),
    IsNull(bool),
    GEq(String),
    In(Vec<i64>),
    Between(i64, i64),
    Like(String),
    Not(Box<P>),
    And(Box<P>, Box<P>),
    Or(Box<P>, Box<P>),
}

fn arb_pred() -> impl Strategy<Value = P> {
    let op = prop_oneof![
        Just(Op::Eq),
        Just(Op::Ne),
        Just(Op::Lt),
        Just(Op::Le),
        Just(Op::Gt),
        Just(Op::Ge)
    ];
    let leaf = prop_oneof![
        (op, -5i64..6).prop_map(|(o, k)| P::Cmp(o, k)),
        any::<bool>().prop_map(P::IsNull),
        "[xyz]{1,2}".prop_map(P::GEq),
        prop::collection::vec(-5i64..6, 1..4).prop_map(P::In),
        (-5i64..6, -5i64..6).prop_map(|(l, h)| P::Between(l, h)),
        "[xyz]{0,1}".prop_map(P::Like),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|p| P::Not(Box::new(p))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| P::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| P::Or(Box::new(a), Box::new(b))),
        ]
    })
}

impl P {
    fn sql(&self) -> String {
        match self {
            P::Cmp(op, k) => {
                let o = match op {
                    Op::Eq => "=",
                    Op::Ne => "<>",
                    Op::Lt => "<",
                    Op::Le => "<=",
                    Op::Gt => ">",
                    Op::Ge => ">=",
                };
                format!("a {o} {k}")
            }
            P::IsNull(neg) => format!("a IS {}NULL", if *neg { "NOT " } else { "" }),
            P::GEq(s) => format!("g = '{s}'"),
            P::In(list) => format!(
                "a IN ({})",
                list.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ")
            ),
            P::Between(l, h) => format!("a BETWEEN {l} AND {h}"),
            P::Like(p) => format!("g LIKE '{p}%'"),
            P::Not(p) => format!("NOT ({})", p.sql()),
            P::And(a, b) => format!("({}) AND ({})", a.sql(), b.sql()),
            P::Or(a, b) => format!("({}) OR ({})", a.sql(), b.sql()),
        }
    }

    /// Three-valued truth per the documented rules (`None` is NULL).
    fn eval(&self, d: &Doc) -> Option<bool> {
        match self {
            P::Cmp(op, k) => match d.num() {
                Ok(None) => None,
                Err(()) => Some(matches!(op, Op::Ne)),
                Ok(Some(v)) => {
                    let k = *k as f64;
                    Some(match op {
                        Op::Eq => v == k,
                        Op::Ne => v != k,
                        Op::Lt => v < k,
                        Op::Le => v <= k,
                        Op::Gt => v > k,
                        Op::Ge => v >= k,
                    })
                }
            },
            P::IsNull(neg) => Some(matches!(d.a, A::Missing | A::Null) != *neg),
            P::GEq(s) => d.g.as_ref().map(|g| g == s),
            P::In(list) => match d.num() {
                Ok(None) => None,
                Err(()) => Some(false),
                Ok(Some(v)) => Some(list.iter().any(|k| *k as f64 == v)),
            },
            P::Between(l, h) => match d.num() {
                Ok(None) => None,
                Err(()) => Some(false),
                Ok(Some(v)) => Some(*l as f64 <= v && v <= *h as f64),
            },
            P::Like(p) => d.g.as_ref().map(|g| g.starts_with(p.as_str())),
            P::Not(p) => p.eval(d).map(|b| !b),
            P::And(a, b) => match (a.eval(d), b.eval(d)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            P::Or(a, b) => match (a.eval(d), b.eval(d)) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
        }
    }
}

/// The documented total order on `a`'s values (numbers < strings), NULL handled by callers.
fn cmp_a(x: &A, y: &A) -> Ordering {
    let rank = |a: &A| match a {
        A::Int(_) | A::Float(_) => 0,
        A::Str(_) => 1,
        A::Missing | A::Null => 2,
    };
    let num = |a: &A| match a {
        A::Int(i) => *i as f64,
        A::Float(f) => *f,
        _ => 0.0,
    };
    match rank(x).cmp(&rank(y)) {
        Ordering::Equal => match (x, y) {
            (A::Str(a), A::Str(b)) => a.cmp(b),
            _ => num(x).partial_cmp(&num(y)).unwrap_or(Ordering::Equal),
        },
        o => o,
    }
}

fn a_json(a: &A) -> Datum {
    match a {
        A::Missing | A::Null => Datum::Null,
        A::Int(i) => Datum::Json(json!(i)),
        A::Float(f) => Datum::Json(json!(f)),
        A::Str(s) => Datum::Json(json!(s)),
    }
}

fn build(docs: &[Doc], fragments: u32) -> Cluster {
    let mut c = Cluster::new(fragments);
    for d in docs {
        c.put("c", &d.id, d.json());
    }
    c
}

fn arb_docs() -> impl Strategy<Value = Vec<Doc>> {
    (0usize..40).prop_flat_map(|n| (0..n).map(arb_doc).collect::<Vec<_>>())
}

fn ids(rows: &[Vec<Datum>]) -> Vec<String> {
    rows.iter()
        .map(|r| match r.first() {
            Some(Datum::Text(s)) => s.clone(),
            other => panic!("id column: {other:?}"),
        })
        .collect()
}

/// The documents matching `p`, grouped by `g` (groups in the map's order, None first).
fn groups_by_g<'d>(docs: &'d [Doc], p: &P) -> Vec<(Option<String>, Vec<&'d Doc>)> {
    let mut groups: std::collections::BTreeMap<Option<String>, Vec<&Doc>> = Default::default();
    for d in docs.iter().filter(|d| p.eval(d) == Some(true)) {
        groups.entry(d.g.clone()).or_default().push(d);
    }
    groups.into_iter().collect()
}

/// Group keys in the query's ascending order: NULL last.
fn cmp_g(x: &Option<String>, y: &Option<String>) -> Ordering {
    match (x, y) {
        (None, None) => Ordering::Equal,
        (None, _) => Ordering::Greater,
        (_, None) => Ordering::Less,
        (Some(a), Some(b)) => a.cmp(b),
    }
}

proptest! {
    // Filters: the set of matching ids equals the oracle's, on 1 and on k fragments.
    #[test]
    fn model_filter(docs in arb_docs(), p in arb_pred(), k in 2u32..6) {
        let sql = format!("SELECT id() FROM c WHERE {}", p.sql());
        let single = build(&docs, 1).query(&sql);
        let multi = build(&docs, k).query(&sql);
        let mut got = ids(&multi.rows);
        got.sort();
        let mut single_ids = ids(&single.rows);
        single_ids.sort();
        let mut want: Vec<String> = docs.iter().filter(|d| p.eval(d) == Some(true)).map(|d| d.id.clone()).collect();
        want.sort();
        prop_assert_eq!(&got, &want, "{}", sql);
        prop_assert_eq!(&single_ids, &want, "{}", sql);
        prop_assert_eq!(multi.rows_scanned, docs.len() as u64);
    }

    // ORDER BY a [DESC] LIMIT/OFFSET: exact row order equals the oracle's (ties by id).
    #[test]
    fn model_top_k(
        docs in arb_docs(),
        p in arb_pred(),
        desc in any::<bool>(),
        limit in 0usize..8,
        offset in 0usize..5,
        k in 2u32..6,
    ) {
        let sql = format!(
            "SELECT id(), a FROM c WHERE {} ORDER BY a {} LIMIT {limit} OFFSET {offset}",
            p.sql(),
            if desc { "DESC" } else { "ASC" },
        );
        let multi = build(&docs, k).query(&sql);
        let single = build(&docs, 1).query(&sql);
        // rows_scanned may differ: a fragment stops reading once LIMIT is met.
        prop_assert_eq!(&multi.rows, &single.rows, "{}", sql);
        prop_assert_eq!(&multi.columns, &single.columns);
        let mut want: Vec<&Doc> = docs.iter().filter(|d| p.eval(d) == Some(true)).collect();
        want.sort_by(|x, y| {
            let xn = matches!(x.a, A::Missing | A::Null);
            let yn = matches!(y.a, A::Missing | A::Null);
            let o = match (xn, yn) {
                (true, true) => Ordering::Equal,
                // NULLS LAST for ASC, FIRST for DESC (PostgreSQL's defaults).
                (true, false) => if desc { Ordering::Less } else { Ordering::Greater },
                (false, true) => if desc { Ordering::Greater } else { Ordering::Less },
                (false, false) => if desc { cmp_a(&y.a, &x.a) } else { cmp_a(&x.a, &y.a) },
            };
            o.then_with(|| x.id.cmp(&y.id))
        });
        let want: Vec<Vec<Datum>> = want
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|d| vec![Datum::Text(d.id.clone()), a_json(&d.a)])
            .collect();
        prop_assert_eq!(&multi.rows, &want, "{}", sql);
    }

    // GROUP BY g with count/sum/min/max: equals the oracle per group, groups ordered by g.
    #[test]
    fn model_group_by(docs in arb_docs(), p in arb_pred(), k in 2u32..6) {
        let sql = format!(
            "SELECT g, count(*), count(a), sum(a), min(a), max(a) FROM c WHERE {} GROUP BY g ORDER BY g",
            p.sql()
        );
        let multi = build(&docs, k).query(&sql);
        let single = build(&docs, 1).query(&sql);
        prop_assert_eq!(&multi, &single, "{}", sql);
        let mut ordered = groups_by_g(&docs, &p);
        ordered.sort_by(|(x, _), (y, _)| cmp_g(x, y));
        let want: Vec<Vec<Datum>> = ordered
            .into_iter()
            .map(|(g, ds)| {
                let nums: Vec<f64> = ds.iter().filter_map(|d| d.num().ok().flatten()).collect();
                let non_null: Vec<&A> = ds.iter().map(|d| &d.a).filter(|a| !matches!(a, A::Missing | A::Null)).collect();
                let min = non_null.iter().copied().min_by(|x, y| cmp_a(x, y)).map_or(Datum::Null, a_json);
                let max = non_null.iter().copied().max_by(|x, y| cmp_a(x, y)).map_or(Datum::Null, a_json);
                vec![
                    g.map_or(Datum::Null, |g| Datum::Json(json!(g))),
                    Datum::Int8(ds.len() as i64),
                    Datum::Int8(non_null.len() as i64),
                    if nums.is_empty() { Datum::Null } else { Datum::Float8(nums.iter().sum()) },
                    min,
                    max,
                ]
            })
            .collect();
        prop_assert_eq!(&multi.rows, &want, "{}", sql);
    }

    // HAVING, an expression over an aggregate, and ORDER BY an aggregate that is not
    // selected: equal over any number of fragments, and to the oracle's filtered groups
    // ordered by how many non-NULL `a` each has (most first), then g.
    #[test]
    fn model_having(docs in arb_docs(), p in arb_pred(), k in 2u32..6, least in 1i64..4) {
        let sql = format!(
            "SELECT g, count(*) * 2 AS twice FROM c WHERE {} GROUP BY g HAVING count(*) >= {least} \
             ORDER BY count(a) DESC, g",
            p.sql()
        );
        let multi = build(&docs, k).query(&sql);
        let single = build(&docs, 1).query(&sql);
        prop_assert_eq!(&multi, &single, "{}", sql);
        let non_null = |ds: &[&Doc]| ds.iter().filter(|d| !matches!(d.a, A::Missing | A::Null)).count();
        let mut kept = groups_by_g(&docs, &p);
        kept.retain(|(_, ds)| ds.len() as i64 >= least);
        kept.sort_by(|(x, xs), (y, ys)| non_null(ys).cmp(&non_null(xs)).then_with(|| cmp_g(x, y)));
        let want: Vec<Vec<Datum>> = kept
            .into_iter()
            .map(|(g, ds)| {
                vec![g.map_or(Datum::Null, |g| Datum::Json(json!(g))), Datum::Int8(2 * ds.len() as i64)]
            })
            .collect();
        prop_assert_eq!(&multi.rows, &want, "{}", sql);
    }

    // Aggregates without GROUP BY give exactly one row, even when nothing matches; a
    // count(DISTINCT g) counts each non-NULL g once over every fragment, a sum(DISTINCT a)
    // adds each number once.
    #[test]
    fn model_global_aggregate(docs in arb_docs(), p in arb_pred(), k in 2u32..6) {
        let sql = format!(
            "SELECT count(*), avg(a), count(DISTINCT g), sum(DISTINCT a) FROM c WHERE {}",
            p.sql()
        );
        let multi = build(&docs, k).query(&sql);
        let matching: Vec<&Doc> = docs.iter().filter(|d| p.eval(d) == Some(true)).collect();
        let nums: Vec<f64> = matching.iter().filter_map(|d| d.num().ok().flatten()).collect();
        let avg = if nums.is_empty() { Datum::Null } else { Datum::Float8(nums.iter().sum::<f64>() / nums.len() as f64) };
        let distinct_g: std::collections::BTreeSet<&String> = matching.iter().filter_map(|d| d.g.as_ref()).collect();
        // The generated numbers (small integers, odd quarters) add up exactly in any order.
        let distinct_a: std::collections::BTreeSet<u64> = nums.iter().map(|f| f.to_bits()).collect();
        let sum_distinct = if distinct_a.is_empty() {
            Datum::Null
        } else {
            Datum::Float8(distinct_a.iter().map(|b| f64::from_bits(*b)).sum())
        };
        prop_assert_eq!(
            multi.rows,
            vec![vec![
                Datum::Int8(matching.len() as i64),
                avg,
                Datum::Int8(distinct_g.len() as i64),
                sum_distinct,
            ]],
            "{}",
            sql
        );
    }
}

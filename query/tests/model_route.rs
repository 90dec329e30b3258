//! Model test of routing soundness: documents of a content-sharded collection are placed as
//! node would place them (`router::assign` for `$`-suffixed ids, `router::shard_of` for the
//! rest), then random filters mixing id equalities, content equalities (literal and untyped
//! parameters), IN lists, ranges and NOT run twice: on the fragments router names and on
//! every fragment. The routed result must equal the scatter result.

mod common;

use common::Cluster;
use proptest::prelude::*;
use query::plan::Select;
use query::{Datum, Statement, bind, parse};
use serde_json::json;

#[derive(Clone, Debug)]
enum F {
    Id(usize),
    IdIn(Vec<usize>),
    Cust(u8),
    CustParam(u8),
    CustNum(i64),
    NGt(i64),
    /// `doc() @> '{"Customer": …}'` (a string or, for 6 and 7, a number), or its `<@` mirror.
    Contains(u8, bool),
    Not(Box<F>),
    And(Box<F>, Box<F>),
    Or(Box<F>, Box<F>),
}

fn arb_filter() -> impl Strategy<Value = F> {
    let leaf = prop_oneof![
        (0usize..30).prop_map(F::Id),
        prop::collection::vec(0usize..30, 1..4).prop_map(F::IdIn),
        (0u8..6).prop_map(F::Cust),
        (0u8..6).prop_map(F::CustParam),
        (0i64..4).prop_map(F::CustNum),
        (0i64..10).prop_map(F::NGt),
        (0u8..8, any::<bool>()).prop_map(|(c, mirrored)| F::Contains(c, mirrored)),
    ];
    leaf.prop_recursive(3, 10, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|f| F::Not(Box::new(f))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| F::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| F::Or(Box::new(a), Box::new(b))),
        ]
    })
}

/// SQL for a filter, collecting untyped parameter values.
fn sql(f: &F, ids: &[String], params: &mut Vec<Datum>) -> String {
    match f {
        F::Id(i) => format!("id() = '{}'", ids[i % ids.len().max(1)]),
        F::IdIn(list) => format!(
            "id() IN ({})",
            list.iter()
                .map(|i| format!("'{}'", ids[i % ids.len().max(1)]))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        F::Cust(c) => format!("\"Customer\" = 'customers/{c}'"),
        F::CustParam(c) => {
            params.push(Datum::Text(format!("customers/{c}")));
            format!("\"Customer\" = ${}", params.len())
        }
        F::CustNum(n) => {
            params.push(Datum::Text(n.to_string()));
            format!("\"Customer\" = ${}", params.len())
        }
        F::NGt(k) => format!("n > {k}"),
        F::Contains(c, mirrored) => {
            let value = if *c >= 6 {
                (i64::from(*c) - 6).to_string()
            } else {
                format!("\"customers/{c}\"")
            };
            let template = format!(r#"'{{"Customer": {value}}}'"#);
            if *mirrored { format!("{template} <@ doc()") } else { format!("doc() @> {template}") }
        }
        F::Not(a) => format!("NOT ({})", sql(a, ids, params)),
        F::And(a, b) => format!("({}) AND ({})", sql(a, ids, params), sql(b, ids, params)),
        F::Or(a, b) => format!("({}) OR ({})", sql(a, ids, params), sql(b, ids, params)),
    }
}

proptest! {
    #[test]
    fn model_routed_equals_scatter(
        customers in prop::collection::vec(0u8..8, 1..30),
        filter in arb_filter(),
        fragments in 2u32..9,
        range in prop_oneof![Just(1u32), Just(1000), Just(65536)],
    ) {
        let config = router::ShardingConfig::parse(&format!(r#"{{"Fields": ["Customer"], "Range": {range}}}"#))
            .expect("config");
        let mut cluster = Cluster::new(fragments);
        let mut ids = Vec::new();
        for (n, c) in customers.iter().enumerate() {
            // Customers 6 and 7 are numbers, so untyped numeric parameters have something to match.
            let customer = if *c >= 6 { json!(i64::from(*c) - 6) } else { json!(format!("customers/{c}")) };
            let doc = json!({"Customer": customer, "n": n});
            let (id, shard) = router::assign(&config, &format!("orders/{n}$"), &doc).expect("assigns");
            cluster.put_on("orders", &id, shard, doc);
            ids.push(id);
        }
        let mut params = Vec::new();
        let where_sql = sql(&filter, &ids, &mut params);
        let text = format!("SELECT id(), n FROM orders WHERE {where_sql} ORDER BY id()");
        let stmt = parse(&text).expect("plans").remove(0);
        let Statement::Select(select) = bind(&stmt, &params).expect("binds") else { panic!() };
        let select: Select = select;
        let (routed, plan) = cluster.select_routed_with(&select, Some(&config));
        let full = cluster.select(&select);
        prop_assert_eq!(&routed.rows, &full.rows, "{} {:?} routed by {}", text, params, plan.rule);
    }
}

// Checks the model exercises pruning: content equalities, literal or untyped parameter, route
// to a single fragment, and the routed answer is the document.
#[test]
fn content_equality_prunes() {
    let config = router::ShardingConfig::parse(r#"{"Fields": ["Customer"]}"#).expect("config");
    let mut cluster = Cluster::new(8);
    for n in 0..20 {
        let doc = json!({"Customer": format!("customers/{}", n % 5), "n": n});
        let (id, shard) = router::assign(&config, &format!("orders/{n}$"), &doc).expect("assigns");
        cluster.put_on("orders", &id, shard, doc);
    }
    for (sql, params) in [
        ("SELECT n FROM orders WHERE \"Customer\" = 'customers/3' ORDER BY n", vec![]),
        (
            "SELECT n FROM orders WHERE \"Customer\" = $1 ORDER BY n",
            vec![Datum::Text("customers/3".into())],
        ),
        (r#"SELECT n FROM orders WHERE doc() @> '{"Customer": "customers/3"}' ORDER BY n"#, vec![]),
        (
            "SELECT n FROM orders WHERE doc() @> $1 ORDER BY n",
            vec![Datum::Json(json!({"Customer": "customers/3"}))],
        ),
    ] {
        let Statement::Select(select) =
            bind(&parse(sql).expect("plans").remove(0), &params).expect("binds")
        else {
            panic!()
        };
        let (routed, plan) = cluster.select_routed_with(&select, Some(&config));
        assert_eq!(plan.opcode, router::prune::Opcode::Single, "{sql}: {}", plan.rule);
        let ns: Vec<Datum> = [3, 8, 13, 18].into_iter().map(|n| Datum::Json(json!(n))).collect();
        assert_eq!(routed.rows, ns.into_iter().map(|d| vec![d]).collect::<Vec<_>>());
    }
}

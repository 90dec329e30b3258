//! End to end over the in-memory cluster: every statement kind plans, binds, executes on the
//! fragments router names, and merges to what users see.

mod common;

use common::{Cluster, MemFragment, one, unsupported};
use query::exec::NewDocument;
use query::plan::{Count, OnConflict, SelectShape};
use query::{
    Datum, ExecError, Format, PlacedDocument, SqlType, Statement, WriteIntent, bind,
    execute_delete, execute_insert, execute_update, param_types,
};
use router::prune::Opcode;
use serde_json::json;

fn cluster() -> Cluster {
    let mut c = Cluster::new(4);
    c.put("orders", "orders/1-A", json!({"Customer": "customers/1-A", "total": 10, "address": {"city": "Oslo"}, "paid": true}));
    c.put("orders", "orders/2-A", json!({"Customer": "customers/6-A", "total": 25.5, "address": {"city": "Rome"}, "paid": false}));
    c.put(
        "orders",
        "orders/3-A",
        json!({"Customer": "customers/1-A", "total": 7, "address": {"city": "oslo"}}),
    );
    c.put("orders", "orders/4-A", json!({"Customer": "customers/6-A", "total": "n/a"}));
    c.put("users", "users/1", json!({"name": "Ann"}));
    c
}

fn texts(rows: &[Vec<Datum>]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            r.iter()
                .map(|d| d.encode_text().unwrap_or_else(|| "NULL".into()))
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

/// A query's rows as text, in the order the query returns them.
fn query_texts(c: &Cluster, sql: &str) -> Vec<String> {
    texts(&c.query(sql).rows)
}

/// A query's rows as text, sorted (for results whose order the query leaves open).
fn sorted_texts(c: &Cluster, sql: &str) -> Vec<String> {
    let mut v = query_texts(c, sql);
    v.sort();
    v
}

// Checks SELECT * gives id text and doc json, fields are json, casts are typed, and dotted
// and quoted paths read case-sensitive fields.
#[test]
fn select_columns_and_types() {
    let c = cluster();
    let r = c.query("SELECT * FROM orders WHERE id() = 'orders/1-A'");
    assert_eq!(
        r.columns.iter().map(|c| (c.name.as_str(), c.ty)).collect::<Vec<_>>(),
        [("id", SqlType::Text), ("doc", SqlType::Json)]
    );
    assert_eq!(r.rows.len(), 1);
    let r = c.query(
        "SELECT id(), \"Customer\", address.city, total::int8 AS t, total::float8, paid::bool, total + 1 FROM orders WHERE total::text = '10'",
    );
    let types: Vec<SqlType> = r.columns.iter().map(|c| c.ty).collect();
    assert_eq!(
        types,
        [
            SqlType::Text,
            SqlType::Json,
            SqlType::Json,
            SqlType::Int8,
            SqlType::Float8,
            SqlType::Bool,
            SqlType::Float8
        ]
    );
    let names: Vec<&str> = r.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["id", "Customer", "city", "t", "total", "paid", "?column?"]);
    assert_eq!(texts(&r.rows), ["orders/1-A|\"customers/1-A\"|\"Oslo\"|10|10|t|11"]);
    // Unquoted identifiers fold to lower case, so `Customer` reads field `customer`: NULL.
    let r = c.query("SELECT Customer FROM orders WHERE id() = 'orders/1-A'");
    assert_eq!(r.rows, vec![vec![Datum::Null]]);
}

// Checks WHERE operators end to end, including the mismatched-kinds rule and LIKE.
#[test]
fn where_operators() {
    let c = cluster();
    let ids = |sql: &str| sorted_texts(&c, sql);
    assert_eq!(ids("SELECT id() FROM orders WHERE total > 8"), ["orders/1-A", "orders/2-A"]);
    assert_eq!(
        ids("SELECT id() FROM orders WHERE total <> 10"),
        ["orders/2-A", "orders/3-A", "orders/4-A"]
    );
    assert_eq!(
        ids("SELECT id() FROM orders WHERE total BETWEEN 7 AND 10"),
        ["orders/1-A", "orders/3-A"]
    );
    assert_eq!(ids("SELECT id() FROM orders WHERE paid IS NULL"), ["orders/3-A", "orders/4-A"]);
    assert_eq!(ids("SELECT id() FROM orders WHERE address.city LIKE 'O%'"), ["orders/1-A"]);
    assert_eq!(ids("SELECT id() FROM orders WHERE NOT paid"), ["orders/2-A"]);
    assert_eq!(
        ids("SELECT id() FROM orders WHERE total IN (7, 25.5) OR total = 'n/a'"),
        ["orders/2-A", "orders/3-A", "orders/4-A"]
    );
    assert_eq!(ids("SELECT id() FROM orders o WHERE o.address.city = 'Rome'"), ["orders/2-A"]);
    assert_eq!(
        ids(
            "SELECT id() FROM orders WHERE id() LIKE 'orders/_-A' AND \"Customer\" = 'customers/6-A'"
        ),
        ["orders/2-A", "orders/4-A"]
    );
}

// Checks ORDER BY with NULLS, LIMIT/OFFSET and aggregates with GROUP BY over fragments.
#[test]
fn order_limit_and_aggregates() {
    let c = cluster();
    let r = c.query("SELECT id() FROM orders ORDER BY total DESC LIMIT 3");
    // Strings sort above numbers, so 'n/a' is first in DESC.
    assert_eq!(texts(&r.rows), ["orders/4-A", "orders/2-A", "orders/1-A"]);
    let r = c.query("SELECT id() FROM orders ORDER BY paid NULLS FIRST, id() DESC OFFSET 1");
    assert_eq!(texts(&r.rows), ["orders/3-A", "orders/2-A", "orders/1-A"]);
    let r = c.query(
        "SELECT \"Customer\" AS c, count(*), sum(total), avg(total), min(total), max(total::text) FROM orders GROUP BY c ORDER BY 2 DESC, c",
    );
    assert_eq!(
        r.columns.iter().map(|c| c.ty).collect::<Vec<_>>(),
        [
            SqlType::Json,
            SqlType::Int8,
            SqlType::Float8,
            SqlType::Float8,
            SqlType::Json,
            SqlType::Text
        ]
    );
    assert_eq!(
        texts(&r.rows),
        ["\"customers/1-A\"|2|17|8.5|7|7", "\"customers/6-A\"|2|25.5|25.5|25.5|n/a"]
    );
    let r = c.query(
        "SELECT count(*), sum(total::int8) FROM orders WHERE total::text LIKE '1%' OR total = 7",
    );
    assert_eq!(texts(&r.rows), ["2|17"]);
    let r = c.query("SELECT count(*), max(total) FROM orders WHERE total > 1000");
    assert_eq!(texts(&r.rows), ["0|NULL"]);
    let r = c.query("SELECT count(*) FROM nothing_here");
    assert_eq!(texts(&r.rows), ["0"]);
}

// Checks router is consulted: an id query goes to one fragment through get(), a content
// scan to all, and the routed run equals the full one.
#[test]
fn routing_and_point_lookup() {
    let c = cluster();
    let Statement::Select(point) = one("SELECT id(), total FROM orders WHERE id() = 'orders/2-A'")
    else {
        panic!()
    };
    cov_mark::check!(point_lookup);
    let (r, plan) = c.select_routed(&point);
    assert_eq!(plan.opcode, Opcode::Single);
    assert_eq!(texts(&r.rows), ["orders/2-A|25.5"]);
    assert_eq!(r.rows_scanned, 1);
    let Statement::Select(scan) = one("SELECT id() FROM orders WHERE total > 0 ORDER BY id()")
    else {
        panic!()
    };
    let (r, plan) = c.select_routed(&scan);
    assert_eq!(plan.opcode, Opcode::Scatter);
    assert_eq!(r, c.select(&scan));
    let Statement::Select(two) =
        one("SELECT id() FROM orders WHERE id() IN ('orders/1-A', 'orders/2-A') ORDER BY id()")
    else {
        panic!()
    };
    let (r, _) = c.select_routed(&two);
    assert_eq!(texts(&r.rows), ["orders/1-A", "orders/2-A"]);
}

// Checks a prepared point query binds from wire-format parameters without parsing again,
// and an untyped text parameter compares with numbers by the field's kind.
#[test]
fn prepared_point_query() {
    let c = cluster();
    let prepared = one("SELECT id(), total FROM orders WHERE id() = $1 AND total > $2 LIMIT $3");
    let types = param_types(&prepared);
    assert_eq!(types, [Some(SqlType::Text), None, Some(SqlType::Int8)]);
    let wire = [
        (b"orders/1-A".as_slice(), Format::Text),
        (b"9".as_slice(), Format::Text),
        (&5i64.to_be_bytes()[..], Format::Binary),
    ];
    for _ in 0..3 {
        let params: Vec<Datum> = wire
            .iter()
            .zip(&types)
            .enumerate()
            .map(|(i, ((bytes, format), ty))| {
                Datum::decode_param(i + 1, ty.unwrap_or(SqlType::Text), *format, Some(bytes))
                    .expect("decodes")
            })
            .collect();
        let Statement::Select(bound) = bind(&prepared, &params).expect("binds") else { panic!() };
        assert_eq!(bound.limit, Some(Count::Value(5)));
        let (r, plan) = c.select_routed(&bound);
        assert_eq!(plan.opcode, Opcode::Single);
        assert_eq!(texts(&r.rows), ["orders/1-A|10"]);
    }
}

fn placed(docs: Vec<NewDocument>) -> Vec<PlacedDocument> {
    docs.into_iter()
        .map(|d| PlacedDocument { shard: common::test_shard(&d.id), id: d.id, doc: d.doc })
        .collect()
}

fn apply(fragment: &mut MemFragment, collection: &str, intents: &[WriteIntent]) {
    for i in intents {
        match i {
            WriteIntent::Put { id, doc, .. } => fragment.put(collection, id, doc.clone()),
            WriteIntent::Delete { id, .. } => {
                fragment.docs.remove(&(collection.to_owned(), id.to_lowercase()));
            }
        }
    }
}

// Checks INSERT in both forms, RETURNING, duplicate ids (23505), DO NOTHING and DO UPDATE.
#[test]
fn insert_and_upsert() {
    let mut f = MemFragment::default();
    let Statement::Insert(ins) =
        one("INSERT INTO c VALUES ('a/1', '{\"n\": 1}'), ('a/2', '{\"n\": 2}') RETURNING id()")
    else {
        panic!()
    };
    let docs = placed(ins.documents().expect("documents"));
    let out = execute_insert(&ins, &f, &docs).expect("inserts");
    assert_eq!(out.affected(), 2);
    assert_eq!(
        out.returning,
        vec![vec![Datum::Text("a/1".into())], vec![Datum::Text("a/2".into())]]
    );
    assert!(out.intents.iter().all(|i| matches!(i, WriteIntent::Put { version_read: None, .. })));
    apply(&mut f, "c", &out.intents);

    let Statement::Insert(dup) = one("INSERT INTO c (id, n, tag) VALUES ('A/1', 5, 'x')") else {
        panic!()
    };
    let docs = placed(dup.documents().expect("documents"));
    assert_eq!(docs[0].doc, json!({"n": 5, "tag": "x"}));
    let err = execute_insert(&dup, &f, &docs).expect_err("duplicate");
    assert!(matches!(err, ExecError::DuplicateId { .. }));
    assert_eq!(err.category(), query::ExecErrorCategory::DuplicateId);

    let Statement::Insert(nothing) =
        one("INSERT INTO c (id, n) VALUES ('a/1', 5), ('a/3', 3) ON CONFLICT (id) DO NOTHING")
    else {
        panic!()
    };
    assert_eq!(nothing.on_conflict, OnConflict::DoNothing);
    let docs = placed(nothing.documents().expect("documents"));
    assert_eq!(execute_insert(&nothing, &f, &docs).expect("inserts").affected(), 1);

    let Statement::Insert(up) = one(
        "INSERT INTO c (id, n) VALUES ('a/2', 40) ON CONFLICT (id) DO UPDATE SET n = n + excluded.n, meta.seen = true RETURNING id(), n::int8",
    ) else {
        panic!()
    };
    let docs = placed(up.documents().expect("documents"));
    let out = execute_insert(&up, &f, &docs).expect("upserts");
    assert_eq!(out.returning, vec![vec![Datum::Text("a/2".into()), Datum::Int8(42)]]);
    match &out.intents[0] {
        WriteIntent::Put { doc, version_read, .. } => {
            assert_eq!(doc, &json!({"n": 42, "meta": {"seen": true}}));
            assert!(version_read.is_some());
        }
        other => panic!("{other:?}"),
    }

    let Statement::Insert(twice) = one("INSERT INTO c VALUES ('z', '{}'), ('Z', '{}')") else {
        panic!()
    };
    let docs = placed(twice.documents().expect("documents"));
    assert!(matches!(execute_insert(&twice, &f, &docs), Err(ExecError::DuplicateId { .. })));
    let Statement::Insert(bad) = one("INSERT INTO c VALUES ('z', '[1]')") else { panic!() };
    assert!(matches!(bad.documents(), Err(ExecError::InvalidDocument { .. })));
    let Statement::Insert(bad_json) = one("INSERT INTO c VALUES ('z', '{oops')") else { panic!() };
    assert!(matches!(bad_json.documents(), Err(ExecError::InvalidCast { .. })));
}

// Checks INSERT with parameters: the document parameter is json, the id text.
#[test]
fn insert_with_parameters() {
    let prepared = one("INSERT INTO c VALUES ($1, $2)");
    let Statement::Insert(ins) =
        bind(&prepared, &[Datum::Text("p/1".into()), Datum::Json(json!({"k": [1, 2]}))])
            .expect("binds")
    else {
        panic!()
    };
    let docs = ins.documents().expect("documents");
    assert_eq!(docs, vec![NewDocument { id: "p/1".into(), doc: json!({"k": [1, 2]}) }]);
}

// Checks UPDATE computes every SET from the old document, keeps versions for optimistic
// concurrency, and DELETE returns intents with the versions read.
#[test]
fn update_and_delete() {
    let c = cluster();
    let Statement::Update(up) = one(
        "UPDATE orders SET total = total * 2, address.zip = '0150', old = total WHERE \"Customer\" = 'customers/1-A' RETURNING id(), total",
    ) else {
        panic!()
    };
    let mut intents = Vec::new();
    let mut returning = Vec::new();
    for (i, f) in c.fragments.iter().enumerate() {
        let out = execute_update(&up, f, &[c.ranges[i]]).expect("updates");
        intents.extend(out.intents);
        returning.extend(out.returning);
    }
    assert_eq!(intents.len(), 2);
    let one_a = intents.iter().find_map(|i| match i {
        WriteIntent::Put { id, doc, version_read, .. } if id == "orders/1-A" => {
            Some((doc.clone(), *version_read))
        }
        _ => None,
    });
    let (doc, version) = one_a.expect("orders/1-A updated");
    assert_eq!(doc["total"], json!(20));
    assert_eq!(doc["old"], json!(10));
    assert_eq!(doc["address"], json!({"city": "Oslo", "zip": "0150"}));
    assert_eq!(version.map(|v| v.get()), Some(1));
    returning.sort_by_key(|r| r[0].encode_text());
    assert_eq!(texts(&returning), ["orders/1-A|20", "orders/3-A|14"]);

    let Statement::Update(conflict) =
        one("UPDATE orders SET address.city.x = 1 WHERE id() = 'orders/1-A'")
    else {
        panic!()
    };
    let errs: Vec<_> = c
        .fragments
        .iter()
        .map(|f| execute_update(&conflict, f, &[router::ShardRange::ALL]))
        .collect();
    assert!(errs.iter().any(|e| matches!(e, Err(ExecError::PathConflict { .. }))));

    let Statement::Delete(del) =
        one("DELETE FROM orders WHERE total::text = 'n/a' OR paid = false")
    else {
        panic!()
    };
    let mut n = 0;
    for (i, f) in c.fragments.iter().enumerate() {
        let out = execute_delete(&del, f, &[c.ranges[i]]).expect("deletes");
        assert!(out.intents.iter().all(|i| matches!(i, WriteIntent::Delete { .. })));
        n += out.affected();
    }
    assert_eq!(n, 2);
}

// Checks the statements node answers itself plan to their variants.
#[test]
fn utility_statements() {
    assert!(matches!(
        one(
            "CREATE TABLE orders () WITH (sharding = '{\"Fields\": [\"Customer\"], \"Range\": 10}')"
        ),
        Statement::CreateCollection { sharding: Some(_), .. }
    ));
    assert!(matches!(
        one("CREATE TABLE IF NOT EXISTS t ()"),
        Statement::CreateCollection { sharding: None, if_not_exists: true, .. }
    ));
    assert!(matches!(
        one(
            "ALTER TABLE orders SET (sharding = '{\"Fields\": [\"Customer\"], \"Mutable\": true}')"
        ),
        Statement::AlterSharding { .. }
    ));
    let bad = query::parse("CREATE TABLE t () WITH (sharding = '{\"Fields\": []}')")
        .expect_err("refused");
    assert_eq!(bad.category(), query::PlanErrorCategory::InvalidSharding);
    assert!(
        matches!(one("SELECT * FROM verify_sharding('orders')"), Statement::VerifySharding { collection } if collection.as_str() == "orders")
    );
    assert_eq!(one("SHOW FRAGMENTS"), Statement::ShowFragments);
    assert_eq!(one("SHOW COLLECTIONS"), Statement::ShowCollections);
    assert_eq!(one("show tables"), Statement::ShowCollections);
    assert!(query::parse("SHOW FULL TABLES").is_err(), "MySQL's clauses stay unsupported");
    assert_eq!(one("DISCARD ALL"), Statement::DiscardAll);
    assert!(query::parse("DISCARD PLANS").is_err(), "only DISCARD ALL");
    assert_eq!(one("DEALLOCATE ALL"), Statement::Deallocate { name: None });
    assert_eq!(one("DEALLOCATE PREPARE Foo"), Statement::Deallocate { name: Some("foo".into()) });
    assert_eq!(one("DEALLOCATE \"ALL\""), Statement::Deallocate { name: Some("ALL".into()) });
    assert_eq!(one("RESET ALL"), Statement::Reset { name: None });
    assert_eq!(
        one("RESET Application_Name"),
        Statement::Reset { name: Some("application_name".into()) }
    );
    let columns = Statement::ShowCollections.result_columns().expect("rows");
    let columns: Vec<(&str, SqlType)> = columns.iter().map(|c| (c.name.as_str(), c.ty)).collect();
    assert_eq!(
        columns,
        [("collection", SqlType::Text), ("documents", SqlType::Int8), ("sharding", SqlType::Json)]
    );
    assert_eq!(one("SHOW SHARDING"), Statement::ShowSharding { collection: None });
    assert_eq!(
        one("SHOW transaction_isolation"),
        Statement::Show { name: "transaction_isolation".into() }
    );
    assert_eq!(one("SHOW server_version"), Statement::Show { name: "server_version".into() });
    assert_eq!(
        one("SET extra_float_digits = 3"),
        Statement::Set { name: "extra_float_digits".into(), value: "3".into() }
    );
    assert_eq!(
        one("SET SESSION client_encoding TO 'UTF8'"),
        Statement::Set { name: "client_encoding".into(), value: "UTF8".into() }
    );
    assert_eq!(
        one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        Statement::Set { name: "transaction".into(), value: "ISOLATION LEVEL SERIALIZABLE".into() }
    );
    assert_eq!(
        one("SET TIME ZONE 'UTC'"),
        Statement::Set { name: "timezone".into(), value: "UTC".into() }
    );
    assert_eq!(one("BEGIN ISOLATION LEVEL SERIALIZABLE"), Statement::Begin);
    assert_eq!(
        one("SHOW TRANSACTION ISOLATION LEVEL"),
        Statement::Show { name: "transaction isolation level".into() }
    );
    assert_eq!(one("END"), Statement::Commit);
    assert_eq!(one("BEGIN"), Statement::Begin);
    assert_eq!(one("START TRANSACTION"), Statement::Begin);
    assert_eq!(one("COMMIT"), Statement::Commit);
    assert_eq!(one("ROLLBACK"), Statement::Rollback);
    assert!(matches!(
        one("EXPLAIN ANALYZE SELECT * FROM c"),
        Statement::Explain { analyze: true, .. }
    ));
    assert_eq!(query::parse("BEGIN; SELECT 1; COMMIT").expect("three").len(), 3);
    let Statement::Select(s) = one("SELECT 1, 'a'::text AS t, 2.5::int8, true") else { panic!() };
    assert!(matches!(s.shape, SelectShape::Rows { .. }));
    let r = query::execute_constant(&s).expect("evaluates");
    assert_eq!(texts(&r.rows), ["1|a|3|t"]);
}

// Checks verify_sharding lists exactly the documents whose id shard is outside their content
// block, and result_columns describes each statement's rows.
#[test]
fn verify_sharding_and_result_columns() {
    let mut f = MemFragment::default();
    // customers/1-A hashes to 982173 (SHARDING.md); `$@982173` pins that shard explicitly.
    f.put("orders", "orders/1-A$@982173", json!({"Customer": "customers/1-A"}));
    f.put("orders", "orders/2-A$@5", json!({"Customer": "customers/1-A"}));
    let config = router::ShardingConfig::parse(r#"{"Fields": ["Customer"]}"#).expect("config");
    let collection = query::CollectionName::new("orders");
    let out = query::execute_verify_sharding(&collection, &config, &f, &[router::ShardRange::ALL])
        .expect("verifies");
    assert_eq!(out.rows_scanned, 2);
    assert_eq!(
        out.violations.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["orders/2-A$@5"]
    );
    // With Mutable = true writes are not validated, which is exactly when the check matters.
    let mutable = router::ShardingConfig::parse(r#"{"Fields": ["Customer"], "Mutable": true}"#)
        .expect("config");
    let out = query::execute_verify_sharding(&collection, &mutable, &f, &[router::ShardRange::ALL])
        .expect("verifies");
    assert_eq!(out.violations.len(), 1, "{:?}", out.violations);

    let cols = |sql: &str| {
        one(sql).result_columns().map(|c| c.into_iter().map(|c| c.name).collect::<Vec<_>>())
    };
    assert_eq!(
        cols("SELECT * FROM verify_sharding('orders')"),
        Some(vec!["id".into(), "reason".into()])
    );
    assert_eq!(cols("EXPLAIN SELECT 1"), Some(vec!["QUERY PLAN".into()]));
    assert_eq!(cols("INSERT INTO c VALUES ('a', '{}')"), None);
    assert_eq!(cols("INSERT INTO c VALUES ('a', '{}') RETURNING id()"), Some(vec!["id".into()]));
    assert_eq!(cols("SHOW server_version"), Some(vec!["server_version".into()]));
    assert_eq!(cols("BEGIN"), None);
    let coll = |sql: &str| one(sql).collection().map(|c| c.as_str().to_owned());
    assert_eq!(coll("EXPLAIN UPDATE \"Orders\" SET a = 1"), Some("Orders".into()));
    assert_eq!(coll("SELECT * FROM public.orders"), Some("orders".into()));
    assert_eq!(coll("SELECT 1"), None);
}

// Checks ORDER BY … LIMIT skips rows that cannot beat the fragment's current k-th best
// without building their output, and still returns the right rows.
#[test]
fn top_k_skips_hopeless_rows() {
    let mut f = MemFragment::default();
    for n in 0..200 {
        f.put("c", &format!("c/{n}"), json!({"n": (n * 37) % 200}));
    }
    let Statement::Select(s) = one("SELECT n FROM c ORDER BY n LIMIT 3") else { panic!() };
    cov_mark::check!(top_k_skip);
    let p = query::execute_select(&s, &f, &[router::ShardRange::ALL]).expect("executes");
    let r = query::merge(&s, vec![p]).expect("merges");
    assert_eq!(texts(&r.rows), ["0", "1", "2"]);
}

// Checks numbers that compare equal (1 and 1.0) form one group with one spelling, whichever
// fragment is read first.
#[test]
fn equal_numbers_group_together() {
    let mut c = Cluster::new(4);
    for (n, v) in [json!(1), json!(1.0), json!(2.5), json!(1)].into_iter().enumerate() {
        c.put("c", &format!("c/{n}"), json!({"v": v}));
    }
    let r = c.query("SELECT v, count(*), min(v), max(v) FROM c GROUP BY v ORDER BY v");
    assert_eq!(texts(&r.rows), ["1|3|1|1", "2.5|1|2.5|2.5"]);
}

// Checks a driver-style UPDATE with untyped text parameters: `n = n + $1` adds the number.
#[test]
fn untyped_parameter_in_arithmetic() {
    let mut f = MemFragment::default();
    f.put("c", "c/1", json!({"n": 40}));
    let prepared = one("UPDATE c SET n = n + $1 WHERE id() = $2 RETURNING n");
    assert_eq!(param_types(&prepared), [None, Some(SqlType::Text)]);
    let Statement::Update(up) =
        bind(&prepared, &[Datum::Text("2".into()), Datum::Text("c/1".into())]).expect("binds")
    else {
        panic!()
    };
    let out = execute_update(&up, &f, &[router::ShardRange::ALL]).expect("updates");
    assert_eq!(out.returning, vec![vec![Datum::Json(json!(42))]]);
}

// Checks an id spelled in another case finds the document on both paths: the routed point
// lookup (get) and a scan (a filter under NOT is never a point lookup).
#[test]
fn id_in_another_case_finds_the_document() {
    let c = cluster();
    let Statement::Select(point) = one("SELECT id() FROM orders WHERE id() = 'ORDERS/2-a'") else {
        panic!()
    };
    let (r, plan) = c.select_routed(&point);
    assert_eq!(plan.opcode, Opcode::Single);
    assert_eq!(texts(&r.rows), ["orders/2-A"], "the stored case is returned");
    let r = c.query("SELECT id() FROM orders WHERE NOT id() <> 'ORDERS/2-a'");
    assert_eq!(texts(&r.rows), ["orders/2-A"]);
}

// Checks `||` concatenates as PostgreSQL's text operator does: a JSON string field gives its
// characters (no quotes), numbers and booleans their text form, NULL or a missing field on
// either side gives NULL, and the result column is text.
#[test]
fn concatenation() {
    let c = cluster();
    let r = c.query(
        "SELECT id() || ':' || address.city, 'total ' || total, paid || '!', \"Customer\" || NULL FROM orders WHERE id() = 'orders/2-A'",
    );
    assert!(r.columns.iter().all(|c| c.ty == SqlType::Text));
    assert_eq!(texts(&r.rows), ["orders/2-A:Rome|total 25.5|false!|NULL"]);
    assert_eq!(
        query_texts(&c, "SELECT id() || address.city FROM orders WHERE id() = 'orders/4-A'"),
        ["NULL"]
    );
    assert_eq!(
        query_texts(&c, "SELECT id() FROM orders WHERE address.city || '/' || total = 'Oslo/10'"),
        ["orders/1-A"]
    );
}

// Checks a parameter beside `||` is text (as PostgreSQL infers it) and an UPDATE stores the
// joined string.
#[test]
fn concatenation_with_a_parameter_in_an_update() {
    let mut f = MemFragment::default();
    f.put("users", "users/1", json!({"name": "Ann"}));
    let prepared = one("UPDATE users SET name = name || $1 WHERE id() = 'users/1' RETURNING name");
    assert_eq!(param_types(&prepared), [Some(SqlType::Text)]);
    let Statement::Update(up) = bind(&prepared, &[Datum::Text(" Lee".into())]).expect("binds")
    else {
        panic!()
    };
    let out = execute_update(&up, &f, &[router::ShardRange::ALL]).expect("updates");
    assert_eq!(out.returning, vec![vec![Datum::Json(json!("Ann Lee"))]]);
}

// Checks `version()` (also as `pg_catalog.version()`) answers in PostgreSQL's form (drivers
// read the leading "PostgreSQL <version>") with the version reported at startup, and takes
// no arguments; `current_schema()` is `public`.
#[test]
fn version_in_postgresql_form() {
    let Statement::Select(select) = one("SELECT version()") else { panic!() };
    let r = query::exec::execute_constant(&select).expect("evaluates");
    assert_eq!(r.columns.first().map(|c| c.ty), Some(SqlType::Text));
    let text = texts(&r.rows).concat();
    assert!(text.starts_with(&format!("PostgreSQL {} (Tessera ", query::SERVER_VERSION)), "{text}");
    assert!(matches!(query::parse("SELECT version(1)"), Err(query::PlanError::Unsupported { .. })));
    // Qualified with pg_catalog, as SQLAlchemy asks it; another schema is not a built-in.
    let Statement::Select(select) = one("SELECT pg_catalog.version()") else { panic!() };
    let qualified = query::exec::execute_constant(&select).expect("evaluates");
    assert_eq!(texts(&qualified.rows), texts(&r.rows));
    assert!(matches!(
        query::parse("SELECT other.version()"),
        Err(query::PlanError::Unsupported { .. })
    ));
    // The one namespace, as drivers ask on connect (SQLAlchemy: `select current_schema()`).
    let Statement::Select(select) = one("SELECT current_schema()") else { panic!() };
    let schema = query::exec::execute_constant(&select).expect("evaluates");
    assert_eq!(texts(&schema.rows), ["public"]);
}

// Checks the scalar functions: lower/upper/length over the text form (NULL in, NULL out),
// coalesce takes the first argument that is not NULL, result columns are named after the
// function and typed (lower text, length int8, coalesce its arguments' type when they agree,
// else text), and a filter on lower() finds both spellings.
#[test]
fn scalar_functions() {
    let c = cluster();
    let r = c.query(
        "SELECT upper(address.city), length(id()), char_length('héllo'), lower(total), \
         coalesce(paid, address.paid), coalesce(address.city, 'none'), lower(address.city) \
         FROM orders WHERE id() = 'orders/4-A'",
    );
    let columns: Vec<(&str, SqlType)> = r.columns.iter().map(|c| (c.name.as_str(), c.ty)).collect();
    assert_eq!(
        columns,
        [
            ("upper", SqlType::Text),
            ("length", SqlType::Int8),
            ("char_length", SqlType::Int8),
            ("lower", SqlType::Text),
            ("coalesce", SqlType::Json),
            ("coalesce", SqlType::Text),
            ("lower", SqlType::Text),
        ]
    );
    assert_eq!(texts(&r.rows), ["NULL|10|5|n/a|NULL|none|NULL"]);
    let r = c.query("SELECT coalesce(paid, false) FROM orders WHERE id() = 'orders/2-A'");
    assert_eq!(r.columns.first().map(|c| c.ty), Some(SqlType::Text));
    assert_eq!(texts(&r.rows), ["false"]);
    assert_eq!(
        query_texts(&c, "SELECT upper('é' || address.city) FROM orders WHERE id() = 'orders/2-A'"),
        ["ÉROME"]
    );
    assert_eq!(
        query_texts(&c, "SELECT id() FROM orders WHERE lower(address.city) = 'oslo' ORDER BY id()"),
        ["orders/1-A", "orders/3-A"]
    );
    assert_eq!(query_texts(&c, "SELECT coalesce(nickname, name, 'anon') FROM users"), ["Ann"]);
    assert_eq!(
        query_texts(&c, "SELECT lower(address.city), count(*) FROM orders GROUP BY 1 ORDER BY 1"),
        ["oslo|2", "rome|1", "NULL|1"]
    );
}

// Checks a parameter inside lower() is text, and one inside coalesce() takes the type of a
// typed sibling argument.
#[test]
fn scalar_function_parameters() {
    assert_eq!(
        param_types(&one("SELECT id() FROM c WHERE lower(name) = lower($1)")),
        [Some(SqlType::Text)]
    );
    assert_eq!(param_types(&one("SELECT coalesce(n, $1, 0) FROM c")), [Some(SqlType::Int8)]);
}

// Checks CASE: searched (first true condition wins, NULL conditions do not), simple (the
// operand compared as `=` compares, ids case-insensitively), ELSE and its absence (NULL),
// the result type (agreeing results, a bare NULL agreeing with any; else text), CASE in an
// aggregate's argument and in an UPDATE.
#[test]
fn case_expressions() {
    let c = cluster();
    let r = c.query(
        "SELECT id(), CASE WHEN total > 20 THEN 'big' WHEN total > 8 THEN 'mid' ELSE 'small' END, \
         CASE address.city WHEN 'Oslo' THEN 1 WHEN 'Rome' THEN 2 ELSE NULL END, \
         CASE id() WHEN 'ORDERS/3-a' THEN true END, \
         CASE WHEN paid THEN total ELSE 'unpaid' END \
         FROM orders ORDER BY id()",
    );
    let types: Vec<SqlType> = r.columns.iter().map(|c| c.ty).collect();
    assert_eq!(types, [SqlType::Text, SqlType::Text, SqlType::Int8, SqlType::Bool, SqlType::Text]);
    assert_eq!(r.columns.get(1).map(|c| c.name.as_str()), Some("case"));
    assert_eq!(
        texts(&r.rows),
        [
            "orders/1-A|mid|1|NULL|10",
            "orders/2-A|big|2|NULL|unpaid",
            "orders/3-A|small|NULL|t|unpaid",
            "orders/4-A|small|NULL|NULL|unpaid",
        ]
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT sum(CASE WHEN paid THEN 1 ELSE 0 END), count(*) FROM orders WHERE id() <> 'orders/4-A'",
        ),
        ["1|3"]
    );
    let mut f = MemFragment::default();
    f.put("c", "c/1", json!({"n": 5}));
    let Statement::Update(up) = one(
        "UPDATE c SET size = CASE WHEN n < 10 THEN 'small' ELSE 'large' END WHERE id() = 'c/1' RETURNING size",
    ) else {
        panic!()
    };
    let out = execute_update(&up, &f, &[router::ShardRange::ALL]).expect("updates");
    assert_eq!(out.returning, vec![vec![Datum::Json(json!("small"))]]);
}

// Checks parameters in CASE: conditions are bool, WHEN values of a simple CASE take the
// operand's type, results a typed sibling result's.
#[test]
fn case_parameters() {
    let types = param_types(&one("SELECT CASE WHEN $1 THEN $2 ELSE 0 END FROM c"));
    assert_eq!(types, [Some(SqlType::Bool), Some(SqlType::Int8)]);
    let types = param_types(&one("SELECT CASE id() WHEN $1 THEN 'a' END FROM c"));
    assert_eq!(types, [Some(SqlType::Text)]);
}

// Checks SELECT DISTINCT: duplicates removed across fragments (planned as GROUP BY the
// select list), NULL one value, aliases and ORDER BY/LIMIT over the distinct rows; `*` rows
// and a SELECT without FROM are distinct already.
#[test]
fn select_distinct() {
    let c = cluster();
    let r = c.query("SELECT DISTINCT \"Customer\" FROM orders ORDER BY 1");
    assert_eq!(
        r.columns.first().map(|c| (c.name.as_str(), c.ty)),
        Some(("Customer", SqlType::Json))
    );
    assert_eq!(texts(&r.rows), ["\"customers/1-A\"", "\"customers/6-A\""]);
    assert_eq!(
        query_texts(&c, "SELECT DISTINCT lower(address.city) AS city FROM orders ORDER BY city"),
        ["oslo", "rome", "NULL"]
    );
    let r = c.query("SELECT DISTINCT paid, \"Customer\" FROM orders");
    assert_eq!(r.rows.len(), 4);
    assert_eq!(
        query_texts(&c, "SELECT DISTINCT \"Customer\" FROM orders ORDER BY 1 DESC LIMIT 1"),
        ["\"customers/6-A\""]
    );
    assert_eq!(c.query("SELECT DISTINCT * FROM orders").rows.len(), 4);
    let Statement::Select(constant) = one("SELECT DISTINCT 1") else { panic!() };
    assert_eq!(query::exec::execute_constant(&constant).expect("evaluates").rows.len(), 1);
}

// Checks `||` with an array or object on either side is PostgreSQL's jsonb concatenation:
// arrays append (a JSON-text or plain-text other side read as JSON), objects merge with the
// right side winning, mixed sides wrap the non-array in an array, NULL stays NULL; an
// UPDATE stores the result as JSON.
#[test]
fn json_concatenation() {
    let mut f = MemFragment::default();
    f.put("c", "c/1", json!({"name": "Ann", "tags": ["a"], "meta": {"k": 1}}));
    let Statement::Update(up) =
        one("UPDATE c SET tags = tags || '[\"b\", 2]', meta = meta || '{\"k\": 2, \"z\": true}', \
         both = meta || tags, named = name || tags, word = tags || 'c', gone = tags || NULL \
         WHERE id() = 'c/1' RETURNING tags, meta, both, named, word, gone")
    else {
        panic!()
    };
    let out = execute_update(&up, &f, &[router::ShardRange::ALL]).expect("updates");
    assert_eq!(
        out.returning,
        vec![vec![
            Datum::Json(json!(["a", "b", 2])),
            Datum::Json(json!({"k": 2, "z": true})),
            Datum::Json(json!([{"k": 1}, "a"])),
            Datum::Json(json!(["Ann", "a"])),
            Datum::Json(json!(["a", "c"])),
            Datum::Null,
        ]]
    );
}

// Checks ILIKE matches regardless of case on both sides (NOT ILIKE the complement among
// strings, NULL and non-strings as for LIKE), and EXPLAIN shows it as written.
#[test]
fn ilike_ignores_case() {
    let c = cluster();
    let ids = |sql: &str| sorted_texts(&c, sql);
    assert_eq!(
        ids("SELECT id() FROM orders WHERE address.city ILIKE 'o%'"),
        ["orders/1-A", "orders/3-A"]
    );
    assert_eq!(ids("SELECT id() FROM orders WHERE address.city LIKE 'o%'"), ["orders/3-A"]);
    assert_eq!(ids("SELECT id() FROM orders WHERE address.city NOT ILIKE 'OSLO'"), ["orders/2-A"]);
    assert_eq!(
        ids("SELECT id() FROM orders WHERE 'ÉTÉ' ILIKE 'été' AND total = 7"),
        ["orders/3-A"]
    );
    let Statement::Select(s) = one("SELECT * FROM orders WHERE address.city NOT ILIKE 'a%'") else {
        panic!()
    };
    assert_eq!(s.filter.map(|f| f.to_string()).as_deref(), Some("(address.city NOT ILIKE 'a%')"));
}

// Checks aggregate queries compute over the group's values as PostgreSQL does: HAVING
// (with and without GROUP BY), expressions over aggregates and over group keys in the select
// list, ORDER BY an aggregate that is not selected, a HAVING parameter typed by its sibling,
// and a document reference outside GROUP BY refused with 42803's error.
#[test]
fn having_and_expressions_over_groups() {
    let c = cluster();
    // c1: totals 10 and 7; c6: 25.5 and "n/a" (a string, not summed).
    assert_eq!(
        query_texts(
            &c,
            "SELECT \"Customer\", count(*) FROM orders GROUP BY 1 HAVING sum(total) > 20"
        ),
        ["\"customers/6-A\"|2"]
    );
    let r = c.query(
        "SELECT \"Customer\" AS c, sum(total) / count(*) AS per, max(total) IS NULL, 'x' \
         FROM orders GROUP BY c ORDER BY per DESC",
    );
    let types: Vec<SqlType> = r.columns.iter().map(|c| c.ty).collect();
    assert_eq!(types, [SqlType::Json, SqlType::Float8, SqlType::Bool, SqlType::Text]);
    assert_eq!(texts(&r.rows), ["\"customers/6-A\"|12.75|f|x", "\"customers/1-A\"|8.5|f|x"]);
    assert_eq!(
        query_texts(&c, "SELECT \"Customer\" FROM orders GROUP BY 1 ORDER BY min(total) DESC"),
        ["\"customers/6-A\"", "\"customers/1-A\""]
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT lower(address.city) || '!', count(*) * 10 FROM orders \
             GROUP BY lower(address.city) ORDER BY 1",
        ),
        ["oslo!|20", "rome!|10", "NULL|10"]
    );
    assert_eq!(query_texts(&c, "SELECT count(*) FROM orders HAVING count(*) > 3"), ["4"]);
    assert!(query_texts(&c, "SELECT count(*) FROM orders HAVING count(*) > 4").is_empty());
    let having = one("SELECT paid FROM orders GROUP BY paid HAVING count(*) > $1 ORDER BY 1");
    assert_eq!(param_types(&having), [Some(SqlType::Int8)]);
    let Statement::Select(bound) = bind(&having, &[Datum::Int8(1)]).expect("binds") else {
        panic!()
    };
    assert_eq!(texts(&c.select(&bound).rows), ["NULL"]);
    for (sql, column) in [
        ("SELECT \"Customer\" FROM orders GROUP BY 1 HAVING total > 5", "total"),
        ("SELECT count(*) FROM orders HAVING id() = 'x'", "id()"),
        ("SELECT paid, total + count(*) FROM orders GROUP BY paid", "total"),
        ("SELECT paid FROM orders GROUP BY paid ORDER BY address.city", "address.city"),
    ] {
        match query::parse(sql) {
            Err(query::PlanError::NotGrouped { column: got }) => assert_eq!(got, column, "{sql}"),
            other => panic!("{sql}: {other:?}"),
        }
    }
}

// Checks EXPLAIN names an aggregate query's group values (key1…, agg1…) in its outputs,
// HAVING and ORDER BY.
#[test]
fn explain_shows_group_values() {
    let stmt =
        one("SELECT \"Customer\" AS c, sum(total) / count(*) AS per FROM orders GROUP BY c \
         HAVING count(*) > 1 ORDER BY max(total)");
    let lines = query::explain(&stmt, None, None).join("\n");
    for want in [
        "Group by: key1 = \"Customer\"",
        "Aggregates: agg1 = sum(total), agg2 = count(*), agg3 = max(total)",
        "Having: (agg2 > 1) (at merge)",
        "Output: c = key1, per = (agg1 / agg2)",
        "Order by: agg3 ASC NULLS LAST",
    ] {
        assert!(lines.contains(want), "{want:?} not in:\n{lines}");
    }
}

// Checks the deepest expression the planner accepts in HAVING and in an aggregate query's
// select list plans (the group scope plans each level's subtree again to find GROUP BY
// expressions), binds and evaluates per group on a test thread's stack; one level more is
// refused as too deep.
#[test]
fn deepest_group_expressions_evaluate() {
    let mut c = Cluster::new(2);
    c.put("c", "c/1", json!({"a": 1}));
    c.put("c", "c/2", json!({"a": 1}));
    let depth = query::limits::EXPR_DEPTH_MAX - 2;
    let chain = " + 1".repeat(depth);
    let r = c.query(&format!("SELECT a{chain} FROM c GROUP BY a HAVING a{chain} > count(*)"));
    assert_eq!(texts(&r.rows), [(depth + 1).to_string()]);
    let too_deep =
        format!("SELECT count(*) FROM c GROUP BY a HAVING a{} > 0", " + 1".repeat(depth + 10));
    assert!(matches!(query::parse(&too_deep), Err(query::PlanError::TooDeep { .. })));
}

// Checks PostgreSQL's jsonb access operators on fields: `->` is the nested field (json),
// `->>` its text, `#>` / `#>>` the same by path array; they filter, group and type as the
// dotted path and its `::text` cast do; array indexes, non-field operands and malformed
// paths are refused by name.
#[test]
fn json_access_operators() {
    let c = cluster();
    let r = c.query(
        "SELECT address->>'city', address->'city', address #>> '{city}', \"Customer\"->>'x', \
         address->>'zip' FROM orders WHERE id() = 'orders/1-A'",
    );
    let types: Vec<SqlType> = r.columns.iter().map(|c| c.ty).collect();
    assert_eq!(types, [SqlType::Text, SqlType::Json, SqlType::Text, SqlType::Text, SqlType::Text]);
    assert_eq!(texts(&r.rows), ["Oslo|\"Oslo\"|Oslo|NULL|NULL"]);
    assert_eq!(
        query_texts(&c, "SELECT id() FROM orders WHERE address->>'city' = 'Oslo'"),
        ["orders/1-A"]
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT lower(address->>'city') AS city, count(*) FROM orders GROUP BY 1 ORDER BY 1",
        ),
        ["oslo|2", "rome|1", "NULL|1"]
    );
    let mut nested = Cluster::new(2);
    nested.put("c", "c/1", json!({"a": {"b": {"c": 5, "d": [1, 2]}}}));
    assert_eq!(
        query_texts(
            &nested,
            "SELECT a->'b'->>'c', a #> '{b, \"d\"}', (a #>> '{b,c}')::int8 + 1 FROM c"
        ),
        ["5|[1,2]|6"]
    );
    for (sql, construct) in [("SELECT a->b FROM c", "not a string or integer literal")] {
        match query::parse(sql) {
            Err(query::PlanError::Unsupported { construct: got }) => {
                assert!(got.contains(construct), "{sql}: {got}")
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    for bad in
        ["SELECT a #> 'b' FROM c", "SELECT a #> '{b,{c}}' FROM c", "SELECT a #> '{\"b}' FROM c"]
    {
        assert!(matches!(query::parse(bad), Err(query::PlanError::InvalidLiteral { .. })), "{bad}");
    }
}

// Checks count(DISTINCT e): NULLs skipped, equal numbers (`7` and `7.0`) one value, per
// group and over fragments; sum and avg of DISTINCT numbers (other values skipped), min of
// DISTINCT as min; EXPLAIN names them.
#[test]
fn count_distinct() {
    let mut c = cluster();
    c.put("orders", "orders/5-A", json!({"Customer": "customers/1-A", "total": 7.0}));
    assert_eq!(
        query_texts(
            &c,
            "SELECT count(DISTINCT \"Customer\"), count(DISTINCT total), count(DISTINCT paid), count(*) FROM orders",
        ),
        ["2|4|2|5"]
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT \"Customer\", count(DISTINCT total) AS n, count(total) FROM orders \
             GROUP BY 1 HAVING count(DISTINCT total) > 1 ORDER BY n DESC",
        ),
        ["\"customers/1-A\"|2|3", "\"customers/6-A\"|2|2"]
    );
    let lines = query::explain(&one("SELECT count(DISTINCT a), count(a) FROM c"), None, None);
    assert!(
        lines.iter().any(|l| l.contains("agg1 = count(DISTINCT a), agg2 = count(a)")),
        "{lines:?}"
    );
    // totals 10, 25.5, 7, "n/a", 7.0: the distinct numbers are 7, 10 and 25.5.
    assert_eq!(
        query_texts(
            &c,
            "SELECT sum(DISTINCT total), avg(DISTINCT total), min(DISTINCT total), sum(total) FROM orders",
        ),
        ["42.5|14.166666666666666|7|49.5"]
    );
    assert_eq!(
        query_texts(&c, "SELECT sum(DISTINCT total) FROM orders WHERE total::text = 'n/a'"),
        ["NULL"]
    );
    let lines = query::explain(&one("SELECT sum(DISTINCT a), avg(DISTINCT a) FROM c"), None, None);
    assert!(
        lines.iter().any(|l| l.contains("agg1 = sum(DISTINCT a), agg2 = avg(DISTINCT a)")),
        "{lines:?}"
    );
    assert!(query::parse("SELECT lower(DISTINCT a) FROM c").is_err());
}

// Checks the numeric and text functions PostgreSQL users reach for: nullif, greatest/least
// (NULLs skipped, int8 with float8 is float8), abs/round/floor/ceil (halves away from zero,
// integers stay integers, round with digits float8, non-numbers NULL, abs overflow 22003),
// replace, substr and SUBSTRING (1-based, a start before 1 shortens the count, a negative
// count refused), concat (NULLs skipped), btrim/ltrim/rtrim and TRIM's three forms.
#[test]
fn numeric_and_text_functions() {
    let mut c = Cluster::new(2);
    c.put("c", "c/1", json!({"s": "  Hi  ", "n": -5, "f": 2.5, "t": "abc"}));
    let r = c.query(
        "SELECT nullif(n::int8, -5), nullif(t::text, 'x'), greatest(1, 3, NULL, 2), \
         least(1.5, 2), greatest(NULL, NULL), abs(n), abs(-7), round(f), round(-2.5), \
         round(2.375, 2), round(1234.5678, -2), round(5), floor(-2.5), ceil(-2.5), ceiling(2.1), \
         floor(t) FROM c",
    );
    let types: Vec<SqlType> = r.columns.iter().map(|c| c.ty).collect();
    use SqlType::{Float8 as F, Int8 as I, Text as T};
    assert_eq!(types, [I, T, I, F, T, F, I, F, F, F, F, I, F, F, F, F]);
    assert_eq!(texts(&r.rows), ["NULL|abc|3|1.5|NULL|5|7|3|-3|2.38|1200|5|-3|-2|3|NULL"]);
    let r = c.query(
        "SELECT replace('abcabc', 'b', 'X'), replace(t, '', 'x'), substr('hello', 2, 3), \
         substr('hello', 0, 3), substr('hello', 3), SUBSTRING('hello' FROM 2 FOR 2), \
         SUBSTRING('hello' FROM 4), concat('a', NULL, 1, true), TRIM(s), \
         TRIM(LEADING 'x' FROM 'xxaxx'), TRIM(TRAILING ' ' FROM '  a  '), btrim('xyaxy', 'xy'), \
         ltrim('  a '), rtrim('a..', '.') FROM c",
    );
    assert!(r.columns.iter().all(|c| c.ty == SqlType::Text));
    assert_eq!(texts(&r.rows), ["aXcaXc|abc|ell|he|llo|el|lo|a1true|Hi|axx|  a|a|a |a"]);
    for (sql, want) in [
        ("SELECT abs(-9223372036854775807 - 1) FROM c", "Overflow"),
        ("SELECT substr('hello', 2, -1) FROM c", "InvalidArgument"),
    ] {
        let Statement::Select(s) = one(sql) else { panic!() };
        let mut f = MemFragment::default();
        f.put("c", "c/1", json!({}));
        let e = query::exec::execute_select(&s, &f, &[router::ShardRange::ALL])
            .and_then(|p| query::exec::merge(&s, vec![p]))
            .expect_err(sql);
        assert!(format!("{e:?}").starts_with(want), "{sql}: {e:?}");
    }
    assert_eq!(
        param_types(&one("SELECT abs($1), round($2, $3), substr($4, $5), greatest($6, 2) FROM c")),
        [
            Some(SqlType::Float8),
            Some(SqlType::Float8),
            Some(SqlType::Int8),
            Some(SqlType::Text),
            Some(SqlType::Int8),
            Some(SqlType::Int8)
        ]
    );
    assert!(matches!(query::parse("SELECT round(1, 2, 3)"), Err(query::PlanError::Invalid { .. })));
}

// Checks current_user / session_user / user and current_database() / current_catalog plan
// as session values that node puts in (`Select::with_session`) for a SELECT without FROM,
// are an error if evaluated without it, and are refused by name wherever they would be
// evaluated over documents (on executors that know no session).
#[test]
fn session_values() {
    let Statement::Select(s) =
        one("SELECT current_user, session_user, user, current_database(), current_catalog")
    else {
        panic!()
    };
    assert!(s.columns().iter().all(|c| c.ty == SqlType::Text));
    assert_eq!(s.columns().first().map(|c| c.name.as_str()), Some("current_user"));
    assert!(query::exec::execute_constant(&s).is_err(), "not evaluated without the session");
    let names = query::expr::SessionNames { user: "alice".into(), database: "shop".into() };
    let r = query::exec::execute_constant(&s.with_session(&names)).expect("evaluates");
    assert_eq!(texts(&r.rows), ["alice|alice|alice|shop|shop"]);
    assert!(query::parse("EXPLAIN SELECT current_user").is_ok());
    for sql in [
        "SELECT current_user FROM c",
        "SELECT id() FROM c WHERE owner = current_user",
        "INSERT INTO c (id, owner) VALUES ('c/1', current_user)",
        "UPDATE c SET owner = current_database()",
        "DELETE FROM c WHERE owner = session_user",
        "EXPLAIN SELECT current_user FROM c",
    ] {
        let construct = unsupported(sql);
        assert!(construct.contains("current_user or current_database()"), "{sql}: {construct}");
    }
    assert!(query::parse("SELECT current_database(1)").is_err());
}

// Checks `c.*` / `alias.*` is `*` (another table's qualifier refused), and FETCH FIRST n ROWS
// ONLY is LIMIT n (FIRST ROW ONLY one; WITH TIES and LIMIT beside it refused).
#[test]
fn qualified_star_and_fetch_first() {
    let c = cluster();
    let r = c.query("SELECT orders.*, total FROM orders WHERE id() = 'orders/1-A'");
    let names: Vec<&str> = r.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["id", "doc", "total"]);
    assert_eq!(
        query_texts(&c, "SELECT o.*, total FROM orders o ORDER BY 3 DESC FETCH FIRST 1 ROW ONLY")
            .len(),
        1
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT id() FROM orders ORDER BY id() OFFSET 1 ROWS FETCH FIRST 2 ROWS ONLY"
        ),
        ["orders/2-A", "orders/3-A"]
    );
    assert_eq!(
        query_texts(&c, "SELECT id() FROM orders ORDER BY id() FETCH FIRST ROW ONLY"),
        ["orders/1-A"]
    );
    assert!(query::parse("SELECT other.* FROM orders").is_err());
    assert!(query::parse("SELECT * FROM orders FETCH FIRST 2 ROWS WITH TIES").is_err());
    assert!(query::parse("SELECT * FROM orders LIMIT 1 FETCH FIRST 2 ROWS ONLY").is_err());
}

// Checks FILTER (WHERE …) on aggregates: only documents for which it is true are counted,
// the same call with and without FILTER are two aggregates, it works per group and in
// HAVING, EXPLAIN shows it, and a FILTER on a scalar function is refused by name.
#[test]
fn aggregate_filter() {
    let c = cluster();
    assert_eq!(
        query_texts(
            &c,
            "SELECT count(*) FILTER (WHERE paid), count(*), \
             sum(total) FILTER (WHERE \"Customer\" = 'customers/1-A') FROM orders",
        ),
        ["1|4|17"]
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT \"Customer\", count(*) FILTER (WHERE total > 8) AS big FROM orders \
             GROUP BY 1 HAVING count(*) FILTER (WHERE total > 8) > 0 ORDER BY 1",
        ),
        ["\"customers/1-A\"|1", "\"customers/6-A\"|1"]
    );
    let lines = query::explain(&one("SELECT count(*) FILTER (WHERE paid) FROM c"), None, None);
    assert!(lines.iter().any(|l| l.contains("agg1 = count(*) FILTER (WHERE paid)")), "{lines:?}");
    let construct = unsupported("SELECT lower(a) FILTER (WHERE true) FROM c");
    assert!(construct.contains("FILTER on a function that is not an aggregate"), "{construct}");
    assert!(query::parse("SELECT count(*) FILTER (WHERE count(*) > 1) FROM c").is_err());
}

// Checks COPY plans: FROM STDIN with both column orders and every option spelling psql
// passes on (new-style, legacy `CSV HEADER`, `DELIMITER AS`), TO STDOUT of a collection (its
// columns, `id` as `id()`) and of a query, which route and execute as that SELECT; and the
// refusals (files, PROGRAM, binary, other columns, bad option combinations) by category.
#[test]
fn copy_plans_and_refusals() {
    use query::copy::{CopyFormat, CopyKind};
    use query::plan::CopyColumn;
    let from = |sql: &str| match one(sql) {
        Statement::CopyFrom { collection, columns, format } => {
            (collection.as_str().to_owned(), columns, format)
        }
        other => panic!("{sql}: {other:?}"),
    };
    let (c, columns, format) = from("COPY Orders FROM STDIN");
    assert_eq!(
        (c.as_str(), columns, format),
        ("orders", [CopyColumn::Id, CopyColumn::Doc], CopyFormat::text())
    );
    let (_, columns, format) = from(
        "COPY public.o (doc, id) FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'x', ESCAPE '\\')",
    );
    assert_eq!(columns, [CopyColumn::Doc, CopyColumn::Id]);
    assert_eq!(
        format,
        CopyFormat {
            delimiter: b';',
            null: "x".into(),
            header: true,
            escape: b'\\',
            ..CopyFormat::csv()
        }
    );
    let (_, _, format) = from("COPY o FROM STDIN CSV HEADER");
    assert_eq!((format.kind, format.header, format.delimiter), (CopyKind::Csv, true, b','));
    let (_, _, format) = from("COPY o FROM STDIN DELIMITER AS '|' NULL AS ''");
    assert_eq!((format.kind, format.delimiter, format.null.as_str()), (CopyKind::Text, b'|', ""));

    let c = cluster();
    let to = |sql: &str| match one(sql) {
        Statement::CopyTo { query, format } => (*query, format),
        other => panic!("{sql}: {other:?}"),
    };
    let (select, format) = to("COPY orders (id, total) TO STDOUT (FORMAT csv)");
    assert_eq!(format.kind, CopyKind::Csv);
    assert_eq!(select, one("SELECT id(), total FROM orders"));
    let (select, _) = to("COPY orders TO STDOUT");
    assert_eq!(select, one("SELECT * FROM orders"));
    let (select, _) = to("COPY (SELECT id() FROM orders WHERE id() = 'orders/2-A') TO STDOUT");
    let Statement::Select(select) = select else { panic!("a SELECT") };
    let (result, plan) = c.select_routed(&select);
    assert_eq!(texts(&result.rows), vec!["orders/2-A"]);
    assert_eq!(plan.opcode, Opcode::Single, "COPY of a query routes as the query");

    for (sql, category) in [
        ("COPY o FROM '/etc/passwd'", query::PlanErrorCategory::Unsupported),
        ("COPY o TO PROGRAM 'ls'", query::PlanErrorCategory::Unsupported),
        ("COPY o TO STDIN", query::PlanErrorCategory::Unsupported),
        ("COPY o FROM STDIN BINARY", query::PlanErrorCategory::Unsupported),
        ("COPY o (name) FROM STDIN", query::PlanErrorCategory::Unsupported),
        ("COPY o (id) FROM STDIN", query::PlanErrorCategory::Unsupported),
        ("COPY (SELECT 1) FROM STDIN", query::PlanErrorCategory::Syntax),
        ("COPY o FROM STDIN (FORCE_NULL (a))", query::PlanErrorCategory::Unsupported),
        ("COPY o FROM STDIN (DELIMITER 'é')", query::PlanErrorCategory::Syntax),
        ("COPY o FROM STDIN (FORMAT xml)", query::PlanErrorCategory::Invalid),
        ("COPY o FROM STDIN (QUOTE '\"')", query::PlanErrorCategory::Invalid),
        ("COPY o FROM STDIN (DELIMITER '\\')", query::PlanErrorCategory::Invalid),
        (
            "COPY o FROM STDIN (FORMAT csv, DELIMITER ',', NULL 'a,b')",
            query::PlanErrorCategory::Invalid,
        ),
        ("COPY o (id, id) FROM STDIN", query::PlanErrorCategory::Invalid),
        ("EXPLAIN COPY o TO STDOUT", query::PlanErrorCategory::Unsupported),
    ] {
        let err = query::parse(sql).expect_err(sql);
        assert_eq!(err.category(), category, "{sql}: {err}");
    }
}

// Checks TRUNCATE plans each collection once in order (options that need sequences or
// foreign keys change nothing here), and a fragment's share of a capped DELETE stops at
// its cap.
#[test]
fn truncate_plans_and_a_capped_delete_stops() {
    let names = |sql: &str| match one(sql) {
        Statement::Truncate { collections } => {
            collections.iter().map(|c| c.as_str().to_owned()).collect::<Vec<_>>()
        }
        other => panic!("{sql}: {other:?}"),
    };
    assert_eq!(names("TRUNCATE a"), ["a"]);
    assert_eq!(names("TRUNCATE TABLE ONLY A, \"B\", a RESTART IDENTITY CASCADE"), ["a", "B"]);
    assert!(query::parse("EXPLAIN TRUNCATE a").is_err());

    let mut c = Cluster::new(2);
    for i in 0..10 {
        c.put("t", &format!("t/{i}"), json!({"i": i}));
    }
    let Statement::Delete(mut delete) = one("DELETE FROM t") else { panic!("delete") };
    let per_fragment = |delete: &query::plan::Delete| -> Vec<usize> {
        let fragments = c.fragments.iter().enumerate();
        fragments
            .map(|(i, f)| execute_delete(delete, f, &[c.ranges[i]]).unwrap().intents.len())
            .collect()
    };
    let all = per_fragment(&delete);
    assert_eq!(all.iter().sum::<usize>(), 10);
    delete.per_fragment_max = Some(3);
    let capped = per_fragment(&delete);
    let expected: Vec<usize> = all.iter().map(|&n| n.min(3)).collect();
    assert!(expected.iter().sum::<usize>() < 10, "the cap bites: {all:?}");
    assert_eq!(capped, expected);
}

// Checks IS [NOT] DISTINCT FROM (NULL compared as a value, ids case-insensitively) and IS
// [NOT] TRUE / FALSE / UNKNOWN over documents where `paid` is true, false or missing; the
// results are bool and never NULL; a parameter is typed from the other side as in `=`.
#[test]
fn distinct_from_and_truth_tests() {
    let c = cluster();
    let ids = |filter: &str| sorted_texts(&c, &format!("SELECT id() FROM orders WHERE {filter}"));
    let all = ["orders/1-A", "orders/2-A", "orders/3-A", "orders/4-A"];
    assert_eq!(ids("paid IS DISTINCT FROM true"), all[1..]);
    assert_eq!(ids("paid IS NOT DISTINCT FROM NULL"), all[2..]);
    assert_eq!(ids("paid IS NOT DISTINCT FROM false"), ["orders/2-A"]);
    assert_eq!(ids("total IS DISTINCT FROM 10"), all[1..]);
    assert_eq!(ids("id() IS NOT DISTINCT FROM 'ORDERS/1-a'"), ["orders/1-A"]);
    assert_eq!(ids("paid IS TRUE"), ["orders/1-A"]);
    assert_eq!(ids("paid IS NOT TRUE"), all[1..]);
    assert_eq!(ids("paid IS FALSE"), ["orders/2-A"]);
    assert_eq!(ids("paid IS NOT FALSE"), ["orders/1-A", "orders/3-A", "orders/4-A"]);
    assert_eq!(ids("paid IS UNKNOWN"), all[2..]);
    assert_eq!(ids("paid IS NOT UNKNOWN"), all[..2]);
    assert_eq!(ids("(paid = true) IS NOT TRUE"), all[1..], "NOT TRUE holds where = is NULL");

    let Statement::Select(s) = one(
        "SELECT NULL IS DISTINCT FROM NULL, 1 IS DISTINCT FROM 2, NULL IS NOT DISTINCT FROM NULL, \
         1 IS DISTINCT FROM NULL, NULL IS TRUE",
    ) else {
        panic!("select")
    };
    let r = query::execute_constant(&s).expect("evaluates");
    assert_eq!(texts(&r.rows), ["f|t|t|t|f"]);
    assert!(s.columns().iter().all(|c| c.ty == SqlType::Bool));
    let with_param = one("SELECT id() FROM orders WHERE total IS DISTINCT FROM $1");
    assert_eq!(param_types(&with_param), [None], "typed from the field, as in total = $1");
    let with_cast = one("SELECT id() FROM orders WHERE total::int8 IS DISTINCT FROM $1");
    assert_eq!(param_types(&with_cast), [Some(SqlType::Int8)]);
}

fn json_cluster() -> Cluster {
    let mut c = Cluster::new(3);
    c.put("c", "c/1", json!({"tags": ["a", "b", {"x": 1}], "who": "k1", "n": 2, "addr": {"city": "Oslo", "zip": ["0150"]}}));
    c.put("c", "c/2", json!({"tags": [], "who": "k2", "n": 2.0, "addr": {"city": "Rome"}}));
    c.put("c", "c/3", json!({"tags": "a", "who": "k3", "0": "zero"}));
    c
}

// Checks jsonb access that indexes arrays as PostgreSQL does: `->` with an integer (negative
// from the end), `#>` path elements that index arrays, chains of both, `->>` text, NULL for a
// step that does not fit (a key on an array, an index on an object or scalar, past the end),
// and `doc()` as the whole document.
#[test]
fn jsonb_array_access() {
    let c = json_cluster();
    assert_eq!(
        query_texts(
            &c,
            "SELECT id(), tags->0, tags->>1, tags -> -1, tags -> -1 ->> 'x', tags->5, \
             tags #> '{2,x}', tags #>> '{-3}', addr->'zip'->>0, doc()->>'who' FROM c ORDER BY id()"
        ),
        [
            "c/1|\"a\"|b|{\"x\":1}|1|NULL|1|a|0150|k1",
            "c/2|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|k2",
            "c/3|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|k3",
        ]
    );
    // A key never indexes an array; `->` with a key on an object named "0" is that member,
    // and so is a `#>` element on an object.
    assert_eq!(
        query_texts(&c, "SELECT tags->'0', doc()->>'0', doc() #>> '{0}' FROM c ORDER BY id()"),
        ["NULL|NULL|NULL", "NULL|NULL|NULL", "NULL|zero|zero"]
    );
    // Filters and literals: an untyped string literal on the left is json.
    assert_eq!(query_texts(&c, "SELECT id() FROM c WHERE tags->>0 = 'a'"), ["c/1"]);
    assert_eq!(
        query_texts(
            &c,
            r#"SELECT '{"a":[1,2,3]}' -> 'a' -> -1, '[1,[2]]'::json #>> '{1,0}', '"s"'::json -> 0
               FROM c WHERE id() = 'c/1'"#
        ),
        ["3|2|NULL"]
    );
    let r = c.query("SELECT tags->0, tags->>0, doc() FROM c WHERE id() = 'c/1'");
    let types: Vec<SqlType> = r.columns.iter().map(|c| c.ty).collect();
    assert_eq!(types, [SqlType::Json, SqlType::Text, SqlType::Json]);
    assert_eq!(r.columns[0].name, "?column?");
    assert_eq!(r.columns[2].name, "doc");
}

// Checks `@>`, `<@`, `?`, `?|`, `?&`, jsonb_typeof and jsonb_array_length against
// PostgreSQL's documented answers, over documents and literals.
#[test]
fn jsonb_containment_and_keys() {
    let c = json_cluster();
    let ids =
        |filter: &str| query_texts(&c, &format!("SELECT id() FROM c WHERE {filter} ORDER BY id()"));
    assert_eq!(ids(r#"doc() @> '{"who": "k1"}'"#), ["c/1"]);
    assert_eq!(ids(r#"doc() @> '{"n": 2}'"#), ["c/1", "c/2"], "numbers by value");
    assert_eq!(ids(r#"doc() @> '{"addr": {"city": "Oslo"}}'"#), ["c/1"]);
    assert_eq!(ids(r#"doc() @> '{"addr": {"zip": []}}'"#), ["c/1"]);
    assert_eq!(ids(r#"doc() @> '{"tags": [{"x": 1}, "a"]}'"#), ["c/1"], "any order");
    assert_eq!(ids(r#"doc() @> '{"tags": "a"}'"#), ["c/3"], "no bare scalar below the top");
    assert_eq!(ids(r#"tags @> '"a"'"#), ["c/1", "c/3"], "an array contains its scalar at the top");
    assert_eq!(ids(r#"'{"who": "k2"}' <@ doc()"#), ["c/2"]);
    assert_eq!(ids("doc() @> '{}'"), ["c/1", "c/2", "c/3"]);
    assert_eq!(ids("missing @> '{}'"), Vec::<String>::new(), "NULL is not true");
    assert_eq!(ids("doc() ? 'n'"), ["c/1", "c/2"]);
    assert_eq!(ids("tags ? 'a'"), ["c/1", "c/3"], "array string elements and the string itself");
    assert_eq!(ids("tags ? 'x'"), Vec::<String>::new(), "keys of nested objects do not count");
    assert_eq!(ids("doc() ?| ARRAY['0', 'addr']"), ["c/1", "c/2", "c/3"]);
    assert_eq!(ids("doc() ?& '{who,addr}'"), ["c/1", "c/2"]);
    assert_eq!(ids("doc() ?| '{}'"), Vec::<String>::new());
    assert_eq!(ids("doc() ?& '{}'"), ["c/1", "c/2", "c/3"]);
    assert_eq!(
        query_texts(
            &c,
            "SELECT jsonb_typeof(tags), json_typeof(who), jsonb_typeof(n), jsonb_typeof(addr), \
             jsonb_typeof(missing), jsonb_array_length(tags) FROM c WHERE id() <> 'c/3' ORDER BY id()"
        ),
        ["array|string|number|object|NULL|3", "array|string|number|object|NULL|0"]
    );
    assert_eq!(
        query_texts(
            &c,
            // PostgreSQL's documented answers: 3 is no element of the first array.
            r#"SELECT '[1,2,[1,3]]'::json @> '[1,3]', '[1,2,[1,3]]'::json @> '[[1,3]]',
                      '{"a":[1]}' @> '{"a":1}', '[1.0]'::json @> '[1]', '"a"'::json ? 'a',
                      '"a"' @> '"a"'
               FROM c WHERE id() = 'c/1'"#
        ),
        ["f|t|f|t|t|t"]
    );
    // Out of its domain jsonb_array_length raises, as in PostgreSQL.
    let Statement::Select(s) = one("SELECT jsonb_array_length(who) FROM c") else { panic!() };
    let partials: Result<Vec<_>, _> = (0..3)
        .map(|i| query::execute_select(&s, &c.fragments[i], &[router::ShardRange::ALL]))
        .collect();
    assert!(matches!(
        partials,
        Err(ExecError::InvalidArgument { function: "jsonb_array_length", .. })
    ));
}

// Checks jsonb access and containment forms the planner refuses or rejects, by name.
#[test]
fn jsonb_operator_errors() {
    assert!(unsupported("SELECT a->>b FROM c").contains("not a string or integer literal"));
    assert!(unsupported("SELECT a #> 1 FROM c").contains("not a text array literal"));
    assert!(unsupported("SELECT a ?| b FROM c").contains("?|"));
    assert!(matches!(
        common::err("SELECT doc() @> 'nope' FROM c"),
        query::PlanError::InvalidLiteral { .. }
    ));
    assert!(matches!(
        common::err("SELECT a->'1.5'->1.5 FROM c"),
        query::PlanError::InvalidLiteral { .. }
    ));
    assert!(matches!(
        common::err("INSERT INTO c VALUES ('x', doc())"),
        query::PlanError::Invalid { .. }
    ));
    let deep = format!("SELECT a{} FROM c", "->0".repeat(query::limits::PATH_STEPS_MAX + 1));
    assert!(matches!(common::err(&deep), query::PlanError::LimitExceeded { .. }));
}

// Checks the display of jsonb access and tests (EXPLAIN's Filter and Output lines) is SQL
// that plans back to the same expression.
#[test]
fn jsonb_expressions_display_as_sql_that_plans_back() {
    let planned = |sql: &str| match one(sql) {
        Statement::Select(s) => match s.shape {
            SelectShape::Rows { mut outputs } => outputs.remove(0).expr,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    for e in [
        "tags->0",
        "a->'b'-> -1->>'c'",
        "a #> '{b,0,c}'",
        "a #>> '{\"it''s\",1}'",
        "doc()->'x'",
        "'[1,[2]]' -> 1 -> 0",
        "doc() @> '{\"a\": [1, {\"b\": null}]}'",
        "'{\"a\":1}' <@ doc()",
        "tags ? 'x'",
        "doc() ?| ARRAY['a', 'b']",
        "doc() ?& '{a,b}'",
        "jsonb_array_length(tags) + 1",
    ] {
        let first = planned(&format!("SELECT {e} FROM c"));
        let shown = first.to_string();
        assert_eq!(planned(&format!("SELECT {shown} FROM c")), first, "{e} shown as {shown}");
    }
}

// Checks `SET f = DEFAULT` removes the field (a document's only default is absence), nested
// paths too, keeping the other members in their order; a field that is not there, or whose
// parent is not an object, is left alone; `"default"` quoted is a field; EXPLAIN shows it.
#[test]
fn update_set_default_removes_the_field() {
    let c = cluster();
    let Statement::Update(up) =
        one("UPDATE orders SET total = DEFAULT, address.city = default, missing.x = DEFAULT, \
         \"Customer\".y = DEFAULT, note = \"default\" WHERE id() = 'orders/1-A'")
    else {
        panic!()
    };
    let mut docs = Vec::new();
    for (i, f) in c.fragments.iter().enumerate() {
        for intent in execute_update(&up, f, &[c.ranges[i]]).expect("updates").intents {
            if let WriteIntent::Put { doc, .. } = intent {
                docs.push(doc);
            }
        }
    }
    assert_eq!(docs.len(), 1);
    assert_eq!(
        serde_json::to_string(&docs[0]).unwrap(),
        r#"{"Customer":"customers/1-A","address":{},"paid":true,"note":null}"#
    );
    let Statement::Explain { inner, .. } =
        one("EXPLAIN UPDATE orders SET total = DEFAULT WHERE id() = 'x'")
    else {
        panic!()
    };
    let lines = query::explain(&inner, None, None);
    assert!(lines.iter().any(|l| l.contains("Set: total = DEFAULT")), "{lines:?}");
}

// Checks jsonb's modifying operators and functions against PostgreSQL's documented answers:
// `-` with a key or ARRAY of keys (objects lose members, arrays their string elements), `#-`
// with a path (array steps by index, negative from the end), jsonb_set (replace, create the
// last step or not, a path that leads nowhere leaves the value alone, negative and
// out-of-range indexes), jsonb_build_object / jsonb_build_array / to_jsonb; `n - 1` stays
// arithmetic and a non-container minus a key is NULL.
#[test]
fn jsonb_modifications_and_construction() {
    let mut c = Cluster::new(1);
    c.put(
        "j",
        "j/1",
        json!({"a": 1, "b": {"c": [1, 2, 3], "d": "x"}, "tags": ["x", "y", "x"], "n": 5}),
    );
    let row = |select: &str| query_texts(&c, &format!("SELECT {select} FROM j"));
    assert_eq!(row("doc() - 'a'"), [r#"{"b":{"c":[1,2,3],"d":"x"},"tags":["x","y","x"],"n":5}"#]);
    assert_eq!(
        row("tags - 'x', doc() - ARRAY['a', 'n', 'nope']"),
        [r#"["y"]|{"b":{"c":[1,2,3],"d":"x"},"tags":["x","y","x"]}"#]
    );
    assert_eq!(row("n - 1, n - '1', b - 'd'"), [r#"4|NULL|{"c":[1,2,3]}"#]);
    assert_eq!(
        row("b #- '{c,-1}', b #- '{c,9}', doc() #- '{b,d}' #- '{tags}'"),
        [r#"{"c":[1,2],"d":"x"}|{"c":[1,2,3],"d":"x"}|{"a":1,"b":{"c":[1,2,3]},"n":5}"#]
    );
    assert_eq!(
        row(
            "jsonb_set(b, '{c,0}', '9'), jsonb_set(b, '{e}', '[true]'), jsonb_set(b, '{e}', '1', false)"
        ),
        [r#"{"c":[9,2,3],"d":"x"}|{"c":[1,2,3],"d":"x","e":[true]}|{"c":[1,2,3],"d":"x"}"#]
    );
    assert_eq!(
        row(
            "jsonb_set(b, '{c,-1}', '0'), jsonb_set(b, '{c,9}', '4'), jsonb_set(b, '{c,-9}', '0'), jsonb_set(b, '{x,y}', '1')"
        ),
        [
            r#"{"c":[1,2,0],"d":"x"}|{"c":[1,2,3,4],"d":"x"}|{"c":[0,1,2,3],"d":"x"}|{"c":[1,2,3],"d":"x"}"#
        ]
    );
    assert_eq!(
        row(
            "jsonb_build_object('k', n, 'at', b->'d', 'none', missing), jsonb_build_array(1, 'two', tags->0, NULL), to_jsonb(n::text), to_jsonb(missing)"
        ),
        [r#"{"k":5,"at":"x","none":null}|[1,"two","x",null]|"5"|NULL"#]
    );
    let r =
        c.query("SELECT tags - 'x', jsonb_set(b, '{d}', '1'), jsonb_build_array(), n - 1 FROM j");
    let types: Vec<SqlType> = r.columns.iter().map(|c| c.ty).collect();
    assert_eq!(types, [SqlType::Json, SqlType::Json, SqlType::Json, SqlType::Float8]);
    // In an UPDATE, the way to edit nested values.
    let Statement::Update(up) = one(
        "UPDATE j SET tags = tags - 'x', b = jsonb_set(b, '{c,1}', '20') #- '{d}' WHERE id() = 'j/1'",
    ) else {
        panic!()
    };
    let out = execute_update(&up, &c.fragments[0], &[c.ranges[0]]).expect("updates");
    let WriteIntent::Put { doc, .. } = &out.intents[0] else { panic!() };
    assert_eq!(doc["tags"], json!(["y"]));
    assert_eq!(doc["b"], json!({"c": [1, 20, 3]}));
    assert!(matches!(
        common::err("SELECT jsonb_build_object('a') FROM j"),
        query::PlanError::Invalid { .. }
    ));
    assert!(unsupported("SELECT jsonb_set(b, b, '1') FROM j").contains("text array"));
    assert!(unsupported("SELECT b #- b FROM j").contains("#-"));
}

// Checks the collecting aggregates over fragments: jsonb_agg keeps every value (NULL and a
// missing field as JSON null) in the call's ORDER BY (DESC, NULLS FIRST honoured, ties in
// arrival order), string_agg skips NULLs and puts each row's delimiter before its value,
// jsonb_object_agg builds an object (a later key wins), all NULL over no rows; per group,
// with FILTER, HAVING, parameters (bound in the argument, the delimiter and the ORDER BY);
// EXPLAIN shows the call.
#[test]
fn collecting_aggregates() {
    let c = cluster();
    assert_eq!(
        query_texts(
            &c,
            "SELECT jsonb_agg(total ORDER BY id()), string_agg(id(), ',' ORDER BY id() DESC) FROM orders",
        ),
        ["[10,25.5,7,\"n/a\"]|orders/4-A,orders/3-A,orders/2-A,orders/1-A"]
    );
    assert_eq!(
        query_texts(&c, "SELECT jsonb_agg(paid ORDER BY paid NULLS FIRST, id()) FROM orders",),
        ["[null,null,false,true]"]
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT \"Customer\", json_agg(address.city ORDER BY address.city), \
             string_agg(total::text, ' + ' ORDER BY total::text) FILTER (WHERE total::text <> 'n/a') \
             FROM orders GROUP BY 1 HAVING count(*) > 1 ORDER BY 1",
        ),
        ["\"customers/1-A\"|[\"Oslo\",\"oslo\"]|10 + 7", "\"customers/6-A\"|[\"Rome\",null]|25.5"]
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT jsonb_object_agg(id(), total ORDER BY id()) FROM orders WHERE paid IS NOT NULL",
        ),
        ["{\"orders/1-A\":10,\"orders/2-A\":25.5}"]
    );
    assert_eq!(
        query_texts(&c, "SELECT jsonb_object_agg('k', total ORDER BY total::text) FROM orders"),
        ["{\"k\":\"n/a\"}"],
        "a later value of a key replaces the earlier one"
    );
    assert_eq!(
        query_texts(
            &c,
            "SELECT jsonb_agg(total), string_agg(id(), ','), jsonb_object_agg(id(), 1) FROM orders WHERE total::text = 'none'",
        ),
        ["NULL|NULL|NULL"]
    );
    // string_agg of values that are all NULL is NULL; a NULL delimiter joins without one.
    assert_eq!(query_texts(&c, "SELECT string_agg(nothing, ',') FROM orders"), ["NULL"]);
    assert_eq!(
        query_texts(&c, "SELECT string_agg(id(), NULL ORDER BY id()) FROM users"),
        ["users/1"]
    );
    let bound = bind(
        &one("SELECT string_agg(id(), $1 ORDER BY id()) FROM orders WHERE total::text <> $2"),
        &[Datum::Text("; ".into()), Datum::Text("n/a".into())],
    )
    .expect("bind");
    let Statement::Select(s) = bound else { panic!("select") };
    assert_eq!(texts(&c.select(&s).rows), ["orders/1-A; orders/2-A; orders/3-A"]);
    let lines =
        query::explain(&one("SELECT string_agg(a, ', ' ORDER BY b DESC) FROM c"), None, None);
    assert!(
        lines.iter().any(|l| l.contains("agg1 = string_agg(a, ', ' ORDER BY b DESC NULLS FIRST)")),
        "{lines:?}"
    );
}

// Checks what the collecting aggregates refuse, by name: DISTINCT, a missing or extra
// argument, ORDER BY inside an aggregate that keeps no order, other clauses; and a NULL key
// of jsonb_object_agg at run time.
#[test]
fn collecting_aggregates_refuse() {
    for (sql, want) in [
        ("SELECT jsonb_agg(DISTINCT a) FROM c", "DISTINCT in jsonb_agg"),
        ("SELECT string_agg(a) FROM c", "string_agg with these arguments"),
        ("SELECT jsonb_agg(a, b) FROM c", "jsonb_agg with these arguments"),
        ("SELECT jsonb_object_agg(a) FROM c", "jsonb_object_agg with these arguments"),
        ("SELECT count(a ORDER BY a) FROM c", "ORDER BY inside count"),
        ("SELECT jsonb_agg(a LIMIT 1) FROM c", "clauses in a function call other than ORDER BY"),
    ] {
        let got = unsupported(sql);
        assert!(got.contains(want), "{sql}: {got}");
    }
    let c = cluster();
    let Statement::Select(s) = one("SELECT jsonb_object_agg(paid, 1) FROM orders") else {
        panic!("select")
    };
    let failed = c.fragments.iter().zip(&c.ranges).any(|(f, r)| {
        matches!(
            query::execute_select(&s, f, std::slice::from_ref(r)),
            Err(ExecError::InvalidArgument { function: "jsonb_object_agg", .. })
        )
    });
    assert!(failed, "a NULL key is refused");
}

// Checks a write statement stops at what one transaction may write: an UPDATE and a DELETE
// matching one document more than WRITE_DOCS_MAX on one fragment, and an UPDATE whose new
// documents pass WRITE_BYTES_MAX, fail with WriteTooLarge (54000) naming the bound, instead
// of holding every match; at the bounds they succeed.
#[test]
fn write_statements_stop_at_the_transaction_bounds() {
    use query::limits::{WRITE_BYTES_MAX, WRITE_DOCS_MAX};
    let mut f = MemFragment::default();
    for n in 0..=WRITE_DOCS_MAX {
        f.put("c", &format!("c/{n}"), json!({"n": n}));
    }
    let update = |sql: &str| {
        let Statement::Update(up) = bind(&one(sql), &[]).expect("binds") else { panic!() };
        execute_update(&up, &f, &[router::ShardRange::ALL])
    };
    let e = update("UPDATE c SET m = 1").unwrap_err();
    assert_eq!(e, ExecError::WriteTooLarge { what: "documents", limit: WRITE_DOCS_MAX });
    assert_eq!(e.category(), query::ExecErrorCategory::LimitExceeded);
    assert!(e.to_string().contains("split it into smaller statements"), "{e}");
    let Statement::Delete(del) = bind(&one("DELETE FROM c"), &[]).expect("binds") else { panic!() };
    let e = execute_delete(&del, &f, &[router::ShardRange::ALL]).unwrap_err();
    assert_eq!(e, ExecError::WriteTooLarge { what: "documents", limit: WRITE_DOCS_MAX });
    let out =
        update(&format!("UPDATE c SET m = 1 WHERE n < {WRITE_DOCS_MAX}")).expect("at the bound");
    assert_eq!(out.intents.len(), WRITE_DOCS_MAX);
    // About 1 MB per new document: the bytes bound falls after about 256 of them.
    let big = "b".repeat(1_000_000);
    let e = update(&format!("UPDATE c SET s = '{big}' WHERE n < 300")).unwrap_err();
    assert_eq!(
        e,
        ExecError::WriteTooLarge { what: "bytes of new documents", limit: WRITE_BYTES_MAX }
    );
    let out = update(&format!("UPDATE c SET s = '{big}' WHERE n < 200")).expect("within bytes");
    assert!(out.doc_bytes > 200_000_000 && out.doc_bytes <= WRITE_BYTES_MAX, "{}", out.doc_bytes);
}

/// Every page of `sql` over `f` in `ranges`: the ids of each page's rows.
fn pages(f: &MemFragment, sql: &str, ranges: &[router::ShardRange]) -> Vec<Vec<String>> {
    let Statement::Select(s) = bind(&one(sql), &[]).expect("binds") else { panic!("select") };
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = query::execute_select_page(&s, f, ranges, after.as_ref()).unwrap();
        let query::exec::PartialBody::Rows(rows) = page.body else { panic!("rows") };
        out.push(rows.into_iter().map(|r| r.id).collect());
        match next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

// Checks a streamed SELECT's pages: together every matching row once (as the unpaged scan
// has them), each within the page bounds (rows, bytes, documents read), in any range order;
// a document changed behind the scan is not read again, one added ahead of it is read; an
// id filter is one page; a SELECT that does not stream is refused.
#[test]
fn select_pages_read_every_row_once() {
    use query::limits::{STREAM_PAGE_BYTES, STREAM_PAGE_ROWS, STREAM_PAGE_SCANNED};
    let mut f = MemFragment::default();
    let many = router::ShardId::new(5).unwrap();
    for n in 0..10_000 {
        f.put("c", &format!("c/{n}"), json!({"n": n}));
        // Half as many in one shard: a page boundary falls inside a shard.
        if n % 2 == 0 {
            f.put_on("c", &format!("C{n}$@5"), many, json!({"n": n}));
        }
    }
    let all = router::ShardRange::ALL;
    let got = pages(&f, "SELECT id() FROM c", &[all]);
    assert!(got.len() >= 4, "{} pages", got.len());
    assert!(got.iter().all(|p| p.len() <= STREAM_PAGE_ROWS));
    let mut ids: Vec<String> = got.concat();
    let Statement::Select(s) = bind(&one("SELECT id() FROM c"), &[]).unwrap() else { panic!() };
    let whole = query::execute_select(&s, &f, &[all]).unwrap();
    let query::exec::PartialBody::Rows(rows) = whole.body else { panic!() };
    let mut want: Vec<String> = rows.into_iter().map(|r| r.id).collect();
    ids.sort();
    want.sort();
    assert_eq!(ids.len(), 15_000);
    assert_eq!(ids, want, "every row once");

    // Ranges in any order, a filter: the same rows as unpaged.
    let (lo, hi) = (
        router::ShardRange::new(0, 500_000).unwrap(),
        router::ShardRange::new(500_000, router::SHARD_COUNT).unwrap(),
    );
    let filtered = pages(&f, "SELECT id() FROM c WHERE n % 3 = 0", &[hi, lo]).concat();
    let expected = pages(&f, "SELECT id() FROM c WHERE n % 3 = 0", &[all]).concat();
    assert_eq!(filtered, expected);
    assert_eq!(filtered.len(), 3_334 + 1_667);

    // Rows of about 8 KB: the bytes bound ends a page first.
    let mut big = MemFragment::default();
    for n in 0..2_000 {
        big.put("c", &format!("b/{n}"), json!({"s": "x".repeat(8_000)}));
    }
    let got = pages(&big, "SELECT id(), s FROM c", &[all]);
    let first = got[0].len();
    // Each row counts its 8,000 characters plus what the row, its id and its two values take
    // (about 220 bytes, `query::memory::row_bytes`): the page ends near 4 MiB.
    assert!(
        first < STREAM_PAGE_ROWS
            && first > STREAM_PAGE_BYTES / 8_300
            && first <= STREAM_PAGE_BYTES / 8_000 + 1,
        "{first}"
    );
    assert_eq!(got.concat().len(), 2_000);

    // A filter matching nothing still returns after STREAM_PAGE_SCANNED documents.
    let mut wide = MemFragment::default();
    for n in 0..STREAM_PAGE_SCANNED + 10 {
        wide.put("c", &format!("w/{n}"), json!({"n": n}));
    }
    let got = pages(&wide, "SELECT id() FROM c WHERE n < 0", &[all]);
    assert_eq!(got, vec![Vec::<String>::new(), Vec::new()]);

    // Between pages: a document behind the scan rewritten is not read again, one added
    // ahead of it is read.
    let Statement::Select(s) = bind(&one("SELECT id() FROM c"), &[]).unwrap() else { panic!() };
    let (page, next) = query::execute_select_page(&s, &f, &[all], None).unwrap();
    let next = next.expect("more pages");
    let query::exec::PartialBody::Rows(rows) = page.body else { panic!() };
    let behind = rows[0].id.clone();
    f.put("c", &behind, json!({"n": -1}));
    f.put_on("c", "zzz$@1048575", router::ShardId::new(1_048_575).unwrap(), json!({"n": 0}));
    let mut rest = Vec::new();
    let mut after = Some(next);
    while let Some(a) = after {
        let (page, n) = query::execute_select_page(&s, &f, &[all], Some(&a)).unwrap();
        let query::exec::PartialBody::Rows(rows) = page.body else { panic!() };
        rest.extend(rows.into_iter().map(|r| r.id));
        after = n;
    }
    assert!(!rest.contains(&behind), "read twice");
    assert!(rest.iter().any(|id| id == "zzz$@1048575"), "added ahead, not read");
    assert_eq!(rows.len() + rest.len(), 15_001);

    // Ids: one page. Not streamable: refused.
    assert_eq!(pages(&f, "SELECT id() FROM c WHERE id() IN ('c/1', 'c/2')", &[all]).len(), 1);
    for sql in
        ["SELECT id() FROM c ORDER BY n", "SELECT id() FROM c LIMIT 2", "SELECT count(*) FROM c"]
    {
        let Statement::Select(s) = bind(&one(sql), &[]).unwrap() else { panic!() };
        let e = query::execute_select_page(&s, &f, &[all], None).unwrap_err();
        assert!(matches!(e, ExecError::WrongStatement { .. }), "{sql}: {e}");
    }
}

// Checks a SELECT's share read in slices (SelectScan::read_slice, what the node does
// between yields) gives the result of the share read at once, for aggregates, groups, ORDER BY … LIMIT,
// LIMIT alone and plain rows, over more documents than one slice reads.
#[test]
fn select_scan_in_slices_equals_one_go() {
    use query::limits::STREAM_PAGE_SCANNED;
    let mut f = MemFragment::default();
    for n in 0..STREAM_PAGE_SCANNED + 5_000 {
        f.put("c", &format!("c/{n}"), json!({"n": n, "g": n % 7}));
    }
    let all = [router::ShardRange::ALL];
    for sql in [
        "SELECT count(*), sum(n::int8), max(n) FROM c",
        "SELECT g, count(*), string_agg(id(), ',' ORDER BY n DESC) FROM c WHERE n % 3 = 0 GROUP BY g",
        "SELECT id(), n FROM c ORDER BY n DESC LIMIT 5",
        "SELECT id() FROM c WHERE n > 100 LIMIT 3",
        "SELECT id(), n FROM c WHERE g = 2",
    ] {
        let Statement::Select(s) = bind(&one(sql), &[]).expect("binds") else { panic!("{sql}") };
        let whole = query::execute_select(&s, &f, &all).unwrap();
        let mut scan = query::SelectScan::new(&s).unwrap();
        let mut slices = 1;
        while scan.read_slice(&f, &all).unwrap() {
            slices += 1;
        }
        // Compared merged: collecting aggregates keep values in arrival order, which the
        // merge sorts, and MemFragment's plain scan visits in id order, not shard order.
        let sliced = query::merge(&s, vec![scan.finish()]).unwrap();
        let whole = query::merge(&s, vec![whole]).unwrap();
        let limited = sql.contains("LIMIT 3");
        if limited {
            // Any 3 matching rows are the answer; which depends on the scan's order.
            assert_eq!((sliced.rows.len(), whole.rows.len()), (3, 3), "{sql}");
        } else {
            // Rows without ORDER BY come in scan order: compared as sets.
            let sorted = |rows: &[Vec<Datum>]| {
                let mut rows: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
                rows.sort();
                rows
            };
            assert!(sorted(&sliced.rows) == sorted(&whole.rows), "{sql}: another result");
            assert!(!whole.rows.is_empty(), "{sql}");
        }
        assert!(slices >= 2 || limited, "{sql}: {slices} slice(s)");
    }
}

// Checks an UPDATE's or DELETE's share read in slices (WriteScan::read_slice, what a
// transaction block's write does between yields) gives the share read at once: the same
// writes (with the versions read), RETURNING rows and documents read, over many slices; an id
// filter reads its documents in one slice; a SELECT is refused.
#[test]
fn write_scan_in_slices_equals_one_go() {
    let mut f = MemFragment::default();
    for n in 0..1_000 {
        f.put("c", &format!("c/{n}"), json!({"n": n, "g": n % 7}));
    }
    let all = [router::ShardRange::ALL];
    for (sql, point) in [
        ("UPDATE c SET m = n * 2 WHERE g = 2 RETURNING id(), m", false),
        ("UPDATE c SET m = 1", false),
        ("DELETE FROM c WHERE n % 3 = 0 RETURNING id(), n", false),
        ("DELETE FROM c WHERE id() IN ('c/1', 'c/500', 'c/2000')", true),
    ] {
        let statement = bind(&one(sql), &[]).expect("binds");
        let whole = match &statement {
            Statement::Update(u) => query::execute_update(u, &f, &all).unwrap(),
            Statement::Delete(d) => query::execute_delete(d, &f, &all).unwrap(),
            _ => panic!("{sql}"),
        };
        let mut scan = query::WriteScan::new(&statement, 64).unwrap();
        let mut slices = 1;
        while scan.read_slice(&f, &all).unwrap() {
            slices += 1;
        }
        let sliced = scan.finish();
        // MemFragment's plain scan visits in id order, the sliced one in shard order.
        let sorted = |items: Vec<String>| {
            let mut items = items;
            items.sort();
            items
        };
        let intents =
            |w: &query::WritePartial| sorted(w.intents.iter().map(|i| format!("{i:?}")).collect());
        let returning = |w: &query::WritePartial| {
            sorted(w.returning.iter().map(|r| format!("{r:?}")).collect())
        };
        assert!(!whole.intents.is_empty(), "{sql}");
        assert!(intents(&sliced) == intents(&whole), "{sql}: other writes");
        assert!(returning(&sliced) == returning(&whole), "{sql}: other RETURNING rows");
        assert_eq!(sliced.rows_scanned, whole.rows_scanned, "{sql}");
        assert_eq!(sliced.doc_bytes, whole.doc_bytes, "{sql}");
        match point {
            true => assert_eq!(slices, 1, "{sql}"),
            false => assert!(slices >= 1_000 / 64, "{sql}: {slices} slice(s)"),
        }
    }
    let select = bind(&one("SELECT * FROM c"), &[]).unwrap();
    assert!(matches!(query::WriteScan::new(&select, 64), Err(ExecError::WrongStatement { .. })));
}

// Checks that no expression builds a text or JSON value past VALUE_BYTES_MAX: `replace`
// (which multiplies), `||` on texts and on JSON, `concat`, `upper`, `jsonb_build_array`,
// `jsonb_build_object` and doubling `jsonb_set` chains fail with 54000 naming the bound, and
// the same shapes just under it evaluate.
#[test]
fn expressions_stop_at_the_value_bound() {
    use query::limits::VALUE_BYTES_MAX;
    let mib = "m".repeat(1 << 20);
    let mut f = MemFragment::default();
    f.put("c", "c/1", json!({"a": "a".repeat(1_000), "m": mib, "u": "ΐ".repeat(12_000_000)}));
    let run = |sql: &str| {
        let Statement::Select(s) = one(sql) else { panic!("{sql}") };
        query::execute_select(&s, &f, &[router::ShardRange::ALL]).map(|p| p.rows_scanned)
    };
    let refused = |sql: &str| {
        let shown: String = sql.chars().take(80).collect();
        let e = run(sql).expect_err(&shown);
        let bound = ExecError::LimitExceeded {
            what: "bytes of one text or JSON value an expression builds",
            limit: VALUE_BYTES_MAX,
        };
        assert_eq!(e, bound, "{shown}");
        assert_eq!(e.category(), query::ExecErrorCategory::LimitExceeded);
    };
    let list = |item: &str, sep: &str, n: usize| vec![item; n].join(sep);
    // 1,000 a's each replaced by 70,000 or 60,000 bytes.
    refused(&format!("SELECT replace(a, 'a', '{}') FROM c", "x".repeat(70_000)));
    assert_eq!(run(&format!("SELECT replace(a, 'a', '{}') FROM c", "x".repeat(60_000))), Ok(1));
    refused(&format!("SELECT {} FROM c", list("m", " || ", 70)));
    assert_eq!(run(&format!("SELECT {} FROM c", list("m::text", " || ", 60))), Ok(1));
    refused(&format!("SELECT concat({}) FROM c", list("m", ", ", 70)));
    assert_eq!(run(&format!("SELECT concat({}) FROM c", list("m", ", ", 60))), Ok(1));
    refused(&format!("SELECT {} FROM c", list("jsonb_build_array(m)", " || ", 70)));
    refused(&format!("SELECT jsonb_build_array({}) FROM c", list("doc()", ", ", 70)));
    assert_eq!(run(&format!("SELECT jsonb_build_array({}) FROM c", list("m", ", ", 60))), Ok(1));
    let pairs: Vec<String> = (0..70).map(|k| format!("'k{k}', m")).collect();
    refused(&format!("SELECT jsonb_build_object({}) FROM c", pairs.join(", ")));
    // Each level holds the one below twice: seven levels over a 1 MiB document are 128 MiB.
    let mut doubled = "doc()".to_owned();
    for k in 0..7 {
        doubled = format!("jsonb_set({doubled}, '{{k{k}}}', {doubled})");
    }
    refused(&format!("SELECT {doubled} FROM c"));
    // 'ΐ' (2 bytes) upper-cases to 6 bytes: 24 MB of it would become 72 MB.
    refused("SELECT upper(u) FROM c");
    assert_eq!(run("SELECT lower(u) FROM c"), Ok(1));
}

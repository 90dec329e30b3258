//! tokio-postgres against a real `tessera serve`: the simple protocol (several statements per
//! query, text results, command tags), the extended protocol (typed parameters in binary and
//! text format, binary results, NULLs, prepared statement reuse), and errors carrying their
//! SQLSTATE with the connection usable after each.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use bytes::BytesMut;
use support::{Node, simple_rows, sqlstate};
use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::error::ErrorPosition;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

/// A JSON parameter sent in json's binary format (the text itself).
#[derive(Debug)]
struct Json<'a>(&'a str);

impl ToSql for Json<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        if *ty == Type::JSONB {
            out.extend_from_slice(&[1]);
        }
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }

    to_sql_checked!();
}

/// A json result column read from its binary format, parsed.
struct JsonOut(serde_json::Value);

impl<'a> FromSql<'a> for JsonOut {
    fn from_sql(
        _ty: &Type,
        raw: &'a [u8],
    ) -> Result<JsonOut, Box<dyn std::error::Error + Sync + Send>> {
        Ok(JsonOut(serde_json::from_slice(raw)?))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON
    }
}

/// A parameter sent in text format, whatever its declared type.
#[derive(Debug)]
struct AsText<'a>(&'a str);

impl ToSql for AsText<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> tokio_postgres::types::Format {
        tokio_postgres::types::Format::Text
    }

    to_sql_checked!();
}

fn command_count(messages: &[SimpleQueryMessage]) -> Vec<u64> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .collect()
}

// Checks the simple protocol end to end: a multi-row INSERT, reads with filters, ORDER BY and
// aggregates, UPDATE and DELETE with their row counts, and several statements in one Query
// message each answering in turn.
#[tokio::test]
async fn simple_protocol_runs_statements_in_order() {
    let node = Node::start();
    let client = node.connect().await;
    let done = client
        .simple_query(
            r#"INSERT INTO people VALUES
                 ('p1', '{"name":"Ann","age":30,"city":"Oslo"}'),
                 ('p2', '{"name":"Bob","age":25,"city":"Rome"}'),
                 ('p3', '{"name":"Cid","age":41,"city":"Oslo"}')"#,
        )
        .await
        .unwrap();
    assert_eq!(command_count(&done), vec![3]);

    let rows = client
        .simple_query("SELECT id(), name::text, age::int8 FROM people ORDER BY age DESC")
        .await
        .unwrap();
    let rows = simple_rows(&rows);
    let expected: Vec<Vec<Option<String>>> =
        [["p3", "Cid", "41"], ["p1", "Ann", "30"], ["p2", "Bob", "25"]]
            .iter()
            .map(|r| r.iter().map(|v| Some((*v).to_owned())).collect())
            .collect();
    assert_eq!(rows, expected);

    let rows = client
        .simple_query("SELECT city::text, count(*), sum(age) FROM people GROUP BY 1 ORDER BY 1")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&rows),
        vec![
            vec![Some("Oslo".into()), Some("2".into()), Some("71".into())],
            vec![Some("Rome".into()), Some("1".into()), Some("25".into())],
        ]
    );

    let updated =
        client.simple_query("UPDATE people SET age = age + 1 WHERE city = 'Oslo'").await.unwrap();
    assert_eq!(command_count(&updated), vec![2]);
    let deleted = client.simple_query("DELETE FROM people WHERE id() = 'p2'").await.unwrap();
    assert_eq!(command_count(&deleted), vec![1]);

    // Three statements in one Query message: each answers with its own rows and tag.
    let batch = client
        .simple_query("SELECT count(*) FROM people; SELECT age::int8 FROM people WHERE id() = 'p1'; SELECT 1 + 1")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&batch),
        vec![vec![Some("2".into())], vec![Some("31".into())], vec![Some("2".into())]]
    );
    assert_eq!(command_count(&batch), vec![1, 1, 1]);

    // A missing field reads as NULL.
    let rows = client.simple_query("SELECT missing FROM people WHERE id() = 'p1'").await.unwrap();
    assert_eq!(simple_rows(&rows), vec![vec![None]]);
}

// Checks the extended protocol with typed parameters: int8, text, float8, bool and json sent
// in binary, the same sent in text format, a NULL, and results read back in binary format
// (tokio-postgres asks for binary results) and, through the simple protocol, as text.
#[tokio::test]
async fn extended_protocol_binds_typed_parameters() {
    let node = Node::start();
    let client = node.connect().await;
    let insert = client
        .prepare(
            "INSERT INTO typed (id, n, s, f, b, j) VALUES ($1, $2::int8, $3::text, $4::float8, $5::bool, $6::json)",
        )
        .await
        .unwrap();
    assert_eq!(
        insert.params(),
        &[Type::TEXT, Type::INT8, Type::TEXT, Type::FLOAT8, Type::BOOL, Type::JSON]
    );
    let n = client
        .execute(
            &insert,
            &[&"t1", &42_i64, &"héllo", &2.5_f64, &true, &Json(r#"{"k":[1,2,{"z":null}]}"#)],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let n = client
        .execute(
            &insert,
            &[
                &AsText("t2"),
                &AsText("-7"),
                &AsText("text form"),
                &AsText("0.125"),
                &AsText("false"),
                &AsText(r#"{"k":"v"}"#),
            ],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let n = client
        .execute(&insert, &[&"t3", &None::<i64>, &"null int", &1.0_f64, &false, &Json("{}")])
        .await
        .unwrap();
    assert_eq!(n, 1);

    let read = client
        .prepare("SELECT n::int8, s::text, f::float8, b::bool, j, id() FROM typed WHERE id() = $1")
        .await
        .unwrap();
    assert_eq!(read.params(), &[Type::TEXT]);
    let types: Vec<Type> = read.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(
        types,
        vec![Type::INT8, Type::TEXT, Type::FLOAT8, Type::BOOL, Type::JSON, Type::TEXT]
    );

    let row = client.query_one(&read, &[&"t1"]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 42);
    assert_eq!(row.get::<_, String>(1), "héllo");
    assert_eq!(row.get::<_, f64>(2), 2.5);
    assert!(row.get::<_, bool>(3));
    assert_eq!(row.get::<_, JsonOut>(4).0, serde_json::json!({"k": [1, 2, {"z": null}]}));
    assert_eq!(row.get::<_, String>(5), "t1");
    // `*` is the id and the whole document.
    let whole = client.query_one("SELECT * FROM typed WHERE id() = $1", &[&"t1"]).await.unwrap();
    assert_eq!(whole.get::<_, String>(0), "t1");
    let doc = whole.get::<_, JsonOut>(1).0;
    assert_eq!(doc["n"], serde_json::json!(42));
    assert_eq!(doc["s"], serde_json::json!("héllo"));
    assert_eq!(doc["b"], serde_json::json!(true));

    let row = client.query_one(&read, &[&"t2"]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), -7);
    assert_eq!(row.get::<_, String>(1), "text form");
    assert_eq!(row.get::<_, f64>(2), 0.125);
    assert!(!row.get::<_, bool>(3));
    assert_eq!(row.get::<_, JsonOut>(4).0, serde_json::json!({"k": "v"}));

    let row = client.query_one(&read, &[&"t3"]).await.unwrap();
    assert_eq!(row.get::<_, Option<i64>>(0), None);

    // The same values through the simple protocol, in text format.
    let text = client
        .simple_query("SELECT n::int8, s::text, f::float8, b::bool, j FROM typed WHERE id() = 't1'")
        .await
        .unwrap();
    let text = simple_rows(&text);
    assert_eq!(text.len(), 1);
    assert_eq!(text[0][0].as_deref(), Some("42"));
    assert_eq!(text[0][1].as_deref(), Some("héllo"));
    assert_eq!(text[0][2].as_deref(), Some("2.5"));
    assert_eq!(text[0][3].as_deref(), Some("t"));
    let j: serde_json::Value = serde_json::from_str(text[0][4].as_deref().unwrap()).unwrap();
    assert_eq!(j, serde_json::json!({"k": [1, 2, {"z": null}]}));

    // A parameter compared with a field takes the field's kind per document.
    let by_n = client.query("SELECT id() FROM typed WHERE n = $1", &[&AsText("42")]).await.unwrap();
    assert_eq!(by_n.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(), vec!["t1"]);
    // LIMIT takes an int8 parameter.
    let limited =
        client.query("SELECT id() FROM typed ORDER BY id() LIMIT $1", &[&2_i64]).await.unwrap();
    assert_eq!(limited.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(), vec!["t1", "t2"]);
}

// Checks that one prepared statement (planned once) runs many times with different values,
// that an upsert prepared once counts correctly when reused, and that a statement failing at
// execution can be executed again with good values.
#[tokio::test]
async fn prepared_statements_are_reused() {
    let node = Node::start();
    let client = node.connect().await;
    let insert = client.prepare("INSERT INTO kv VALUES ($1, $2)").await.unwrap();
    for i in 0..40_i64 {
        let doc = format!(r#"{{"v":{i}}}"#);
        client.execute(&insert, &[&format!("k{i}"), &Json(&doc)]).await.unwrap();
    }
    let upsert = client
        .prepare(
            "INSERT INTO kv VALUES ($1, '{\"v\":0}') ON CONFLICT (id) DO UPDATE SET v = v + 1000",
        )
        .await
        .unwrap();
    for i in (0..40).step_by(4) {
        client.execute(&upsert, &[&format!("k{i}")]).await.unwrap();
    }
    let read = client.prepare("SELECT v::int8 FROM kv WHERE id() = $1").await.unwrap();
    for i in 0..40_i64 {
        let v: i64 = client.query_one(&read, &[&format!("k{i}")]).await.unwrap().get(0);
        let expected = if i % 4 == 0 { i + 1000 } else { i };
        assert_eq!(v, expected, "k{i}");
    }
    // The insert fails on a duplicate, then works again with a fresh id.
    let e = client.execute(&insert, &[&"k1", &Json("{}")]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    assert_eq!(client.execute(&insert, &[&"k40", &Json("{}")]).await.unwrap(), 1);
    let count: i64 = client.query_one("SELECT count(*) FROM kv", &[]).await.unwrap().get(0);
    assert_eq!(count, 41);
}

// Checks every error class a client meets, each with its SQLSTATE (and a 1-based position
// for syntax errors), over both protocols, and that the same connection answers afterwards.
#[tokio::test]
async fn errors_carry_sqlstate_and_the_connection_survives() {
    let node = Node::start();
    let client = node.connect().await;
    client.batch_execute(r#"INSERT INTO e VALUES ('dup', '{"a":1}')"#).await.unwrap();
    client
        .batch_execute(
            r#"CREATE TABLE orders () WITH (sharding = '{"Fields":["Customer"],"Range":1000}')"#,
        )
        .await
        .unwrap();

    let cases: &[(&str, &str)] = &[
        (r#"INSERT INTO e VALUES ('dup', '{"a":2}')"#, "23505"),
        ("SELECT * FRM e", "42601"),
        ("SELECT DISTINCT ON (a) a FROM e", "0A000"),
        ("SELECT a FROM e JOIN f ON true", "0A000"),
        (r#"INSERT INTO orders VALUES ('orders/9-A', '{"Customer":"customers/1-A"}')"#, "23514"),
        (r#"INSERT INTO e VALUES ('x$@9999999', '{}')"#, "22023"),
        (r#"INSERT INTO e VALUES ('y$', '{}')"#, "22023"),
        ("SELECT 1 / 0", "22012"),
        ("SHOW no_such_setting", "42704"),
        ("SELECT a, count(*) FROM e", "42803"),
    ];
    for (sql, code) in cases {
        let simple = client.simple_query(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&simple), *code, "simple: {sql}: {simple:?}");
        let extended = client.query(*sql, &[]).await.expect_err(sql);
        assert_eq!(sqlstate(&extended), *code, "extended: {sql}: {extended:?}");
        let one: i64 = client.query_one("SELECT 1::int8", &[]).await.unwrap().get(0);
        assert_eq!(one, 1, "connection usable after {sql}");
    }

    // A syntax error points at the offending token, 1-based.
    let sql = "SELECT a FROM e WHERE a = = 1";
    let e = client.simple_query(sql).await.unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "42601");
    // The second '=' is character 27 (1-based); the message names it.
    assert!(db.message().contains("position 27"), "{}", db.message());
    match db.position() {
        Some(ErrorPosition::Original(p)) => {
            // The wire field is the same 1-based position: psql draws its caret there.
            assert_eq!(*p, 27, "position of {sql:?}");
        }
        other => panic!("syntax error without position: {other:?}"),
    }
    // Nothing of the failed statements was written.
    let a: i64 =
        client.query_one("SELECT a::int8 FROM e WHERE id() = 'dup'", &[]).await.unwrap().get(0);
    assert_eq!(a, 1);
    let n: i64 = client.query_one("SELECT count(*) FROM orders", &[]).await.unwrap().get(0);
    assert_eq!(n, 0);
}

// Regression: ids that differ only in case are one document (SHARDING.md; storage keys them
// lowercased and refuses the second INSERT with 23505), but `WHERE id() = 'ORDERS/1-A'`
// found nothing because the filter re-checked the stored 'Orders/1-A' byte-wise. Checks
// SELECT, IN, UPDATE and DELETE by id in another case, over both protocols.
#[tokio::test]
async fn ids_match_in_any_case() {
    let node = Node::start();
    let client = node.connect().await;
    client.simple_query(r#"INSERT INTO o VALUES ('Orders/1-A', '{"v":1}')"#).await.unwrap();
    let e =
        client.simple_query(r#"INSERT INTO o VALUES ('orders/1-a', '{"v":2}')"#).await.unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    let rows = client
        .query("SELECT id(), v::int8 FROM o WHERE id() = $1", &[&"ORDERS/1-A"])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, String>(0), "Orders/1-A", "the first-written case is kept");
    let rows =
        client.simple_query("SELECT id() FROM o WHERE id() IN ('x', 'orders/1-a')").await.unwrap();
    assert_eq!(simple_rows(&rows), vec![vec![Some("Orders/1-A".to_owned())]]);
    let updated =
        client.execute("UPDATE o SET v = 5 WHERE id() = 'oRdErS/1-a'", &[]).await.unwrap();
    assert_eq!(updated, 1);
    let v: i64 = client
        .query_one("SELECT v::int8 FROM o WHERE id() = 'Orders/1-A'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, 5);
    let deleted = client.execute("DELETE FROM o WHERE id() = 'ORDERS/1-a'", &[]).await.unwrap();
    assert_eq!(deleted, 1);
    let n: i64 = client.query_one("SELECT count(*) FROM o", &[]).await.unwrap().get(0);
    assert_eq!(n, 0);
}

// Checks SHOW COLLECTIONS (and SHOW TABLES) lists every collection with documents, summed
// over every executor's fragments, and every configured one, even empty, with its sharding
// configuration; a collection whose last document is deleted leaves the list.
#[tokio::test]
async fn show_collections_lists_documents_and_configuration() {
    let node = Node::start();
    let client = node.connect().await;
    for i in 0..40 {
        client
            .execute("INSERT INTO books VALUES ($1, '{}')", &[&format!("books/{i}")])
            .await
            .unwrap();
    }
    client.batch_execute(r#"INSERT INTO gone VALUES ('gone/1', '{}')"#).await.unwrap();
    client
        .batch_execute(r#"CREATE TABLE orders () WITH (sharding = '{"Fields":["Customer"]}')"#)
        .await
        .unwrap();
    // Forty ids spread over every executor's fragments.
    let fragments = simple_rows(&client.simple_query("SHOW FRAGMENTS").await.unwrap());
    let holding = fragments.iter().filter(|r| r[3].as_deref() != Some("0")).count();
    assert!(holding > 1, "{fragments:?}");
    let show = |sql: &'static str| {
        let client = &client;
        async move { simple_rows(&client.simple_query(sql).await.unwrap()) }
    };
    let orders = r#"{"Fields":["Customer"],"Range":1,"Mutable":false}"#;
    let want = vec![
        vec![Some("books".to_owned()), Some("40".to_owned()), None],
        vec![Some("gone".to_owned()), Some("1".to_owned()), None],
        vec![Some("orders".to_owned()), Some("0".to_owned()), Some(orders.to_owned())],
    ];
    assert_eq!(show("SHOW COLLECTIONS").await, want);
    assert_eq!(show("SHOW TABLES").await, want);
    client.batch_execute("DELETE FROM gone WHERE id() = 'gone/1'").await.unwrap();
    let names: Vec<Option<String>> =
        show("SHOW COLLECTIONS").await.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(names, [Some("books".to_owned()), Some("orders".to_owned())]);
}

// Checks current_user, session_user and current_database() answer the startup message's
// names over both protocols (the database defaulting to the user, as in PostgreSQL), and
// that a statement reading documents refuses them by name instead of evaluating them on
// an executor that knows no session.
#[tokio::test]
async fn session_names_are_the_startup_names() {
    let node = Node::start();
    let port = node.conn_str();
    let port = port.split_whitespace().find_map(|kv| kv.strip_prefix("port=")).unwrap().to_owned();
    for (extra, database) in [("dbname=shop", "shop"), ("", "alice")] {
        let conn = format!("host=127.0.0.1 port={port} user=alice sslmode=disable {extra}");
        let (client, connection) =
            tokio_postgres::connect(&conn, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let sql = "SELECT current_user, session_user, current_database(), current_catalog";
        let want = vec![vec![
            Some("alice".to_owned()),
            Some("alice".to_owned()),
            Some(database.to_owned()),
            Some(database.to_owned()),
        ]];
        assert_eq!(simple_rows(&client.simple_query(sql).await.unwrap()), want);
        let row = client.query_one(sql, &[]).await.unwrap();
        assert_eq!(row.get::<_, String>(2), database);
        assert_eq!(row.columns()[0].name(), "current_user");
        let e = client.simple_query("SELECT current_user FROM books").await.unwrap_err();
        assert_eq!(sqlstate(&e), "0A000", "{e}");
    }
}

// Checks what connection poolers and drivers send between clients: DEALLOCATE name / ALL
// drop prepared statements (a missing one is 26000), RESET puts settings back, DISCARD ALL
// does both (over either protocol) and is refused inside a transaction block (25001).
#[tokio::test]
async fn deallocate_reset_and_discard_all() {
    let node = Node::start();
    let client = node.connect().await;
    // (DEALLOCATE of one named statement: e2e_bad_input, on the raw protocol.)
    let two = client.prepare("SELECT 2::int8").await.unwrap();
    assert_eq!(client.query_one(&two, &[]).await.unwrap().get::<_, i64>(0), 2);
    let e = client.simple_query("DEALLOCATE PREPARE nosuch").await.unwrap_err();
    assert_eq!(sqlstate(&e), "26000", "{e}");
    let tags: Vec<String> = client
        .simple_query("DEALLOCATE ALL")
        .await
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::CommandComplete(_) => Some("done".to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(tags, ["done"]);
    let e = client.query_one(&two, &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "26000", "{e}");

    let show = |sql: &'static str| {
        let client = &client;
        async move { simple_rows(&client.simple_query(sql).await.unwrap()) }
    };
    client.batch_execute("SET application_name = 'pooled'").await.unwrap();
    assert_eq!(show("SHOW application_name").await, [[Some("pooled".to_owned())]]);
    client.batch_execute("RESET application_name").await.unwrap();
    assert_eq!(show("SHOW application_name").await, [[Some(String::new())]]);
    client.batch_execute("SET application_name = 'again'").await.unwrap();
    let kept = client.prepare("SELECT 3::int8").await.unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    let e = client.simple_query("DISCARD ALL").await.unwrap_err();
    assert_eq!(sqlstate(&e), "25001", "{e}");
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(client.query_one(&kept, &[]).await.unwrap().get::<_, i64>(0), 3);
    // Over the extended protocol, the portal running DISCARD ALL stays until it answers.
    client.execute("DISCARD ALL", &[]).await.unwrap();
    assert_eq!(show("SHOW application_name").await, [[Some(String::new())]]);
    let e = client.query_one(&kept, &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "26000", "{e}");
    client.batch_execute("SET application_name = 'x'; RESET ALL").await.unwrap();
    assert_eq!(show("SHOW application_name").await, [[Some(String::new())]]);
}

// Checks jsonb's operators over the wire: array indexes in `->` / `#>>`, containment with a
// json parameter in binary format (a prepared statement), key tests in UPDATE and DELETE
// filters, 22023 from jsonb_array_length on a non-array, and that `doc() @> '{…}'` on a
// content-configured collection routes to the one content block (EXPLAIN).
#[tokio::test]
async fn jsonb_operators_over_the_wire() {
    let node = Node::start();
    let client = node.connect().await;
    client
        .batch_execute(
            r#"CREATE TABLE t () WITH (sharding = '{"Fields":["team"]}');
               INSERT INTO t VALUES
                 ('t/1$', '{"team":"red","tags":["a","b"],"n":1}'),
                 ('t/2$', '{"team":"blue","tags":["b"],"n":2}'),
                 ('t/3$', '{"team":"red","n":3}')"#,
        )
        .await
        .unwrap();
    let rows = simple_rows(
        &client
            .simple_query("SELECT n::int8, tags->>0, tags #>> '{-1}' FROM t ORDER BY n")
            .await
            .unwrap(),
    );
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(
        rows,
        vec![vec![s("1"), s("a"), s("b")], vec![s("2"), s("b"), s("b")], vec![s("3"), None, None]]
    );
    let contains =
        client.prepare("SELECT n::int8 FROM t WHERE doc() @> $1 ORDER BY n").await.unwrap();
    assert_eq!(contains.params(), [Type::JSON]);
    let ns = |rows: Vec<tokio_postgres::Row>| rows.iter().map(|r| r.get(0)).collect::<Vec<i64>>();
    let red = ns(client.query(&contains, &[&Json(r#"{"team":"red"}"#)]).await.unwrap());
    assert_eq!(red, [1, 3]);
    let b = ns(client.query(&contains, &[&Json(r#"{"tags":["b"]}"#)]).await.unwrap());
    assert_eq!(b, [1, 2]);
    let plan = simple_rows(
        &client
            .simple_query(r#"EXPLAIN SELECT n FROM t WHERE doc() @> '{"team":"red"}'"#)
            .await
            .unwrap(),
    );
    assert_eq!(plan[1], vec![s("  Route: Single")], "{plan:?}");
    let updated = client.execute("UPDATE t SET seen = true WHERE tags ? 'a'", &[]).await.unwrap();
    assert_eq!(updated, 1);
    // SET f = DEFAULT removes the field again.
    let unset = client.execute("UPDATE t SET seen = DEFAULT WHERE doc() ? 'seen'", &[]).await;
    assert_eq!(unset.unwrap(), 1);
    let seen: i64 =
        client.query_one("SELECT count(*) FROM t WHERE doc() ? 'seen'", &[]).await.unwrap().get(0);
    assert_eq!(seen, 0);
    let deleted = client.execute("DELETE FROM t WHERE NOT doc() ? 'tags'", &[]).await.unwrap();
    assert_eq!(deleted, 1);
    let left: Vec<i64> = client
        .query("SELECT jsonb_array_length(tags) FROM t WHERE doc() ?& '{tags,n}' ORDER BY n", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, [2, 1]);
    let e = client.simple_query("SELECT jsonb_array_length(team) FROM t").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    let e = client.simple_query("SELECT doc() @> 'not json' FROM t").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22P02");
}

// Checks the collecting aggregates through a driver, over fragments of both executors: the
// JSON and text results, a per-group jsonb_object_agg, and a parameter as the delimiter
// (typed text).
#[tokio::test]
async fn collecting_aggregates_over_the_wire() {
    let node = Node::start();
    let client = node.connect().await;
    client
        .batch_execute(
            r#"INSERT INTO t VALUES
                 ('a$@0', '{"team":"red","n":1}'),
                 ('b$@131072', '{"team":"blue","n":2}'),
                 ('c$@262144', '{"team":"red","n":3}'),
                 ('d$@393216', '{"team":"red"}')"#,
        )
        .await
        .unwrap();
    let rows = simple_rows(
        &client
            .simple_query(
                "SELECT team, jsonb_agg(n ORDER BY id()), jsonb_object_agg(id(), n ORDER BY id()) \
                 FROM t GROUP BY team ORDER BY team",
            )
            .await
            .unwrap(),
    );
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(
        rows,
        vec![
            vec![s("\"blue\""), s("[2]"), s(r#"{"b$@131072":2}"#)],
            vec![s("\"red\""), s("[1,3,null]"), s(r#"{"a$@0":1,"c$@262144":3,"d$@393216":null}"#)],
        ]
    );
    let joined =
        client.prepare("SELECT string_agg(n::text, $1 ORDER BY n DESC) FROM t").await.unwrap();
    assert_eq!(joined.params(), [Type::TEXT]);
    let text: String = client.query_one(&joined, &[&" > "]).await.unwrap().get(0);
    assert_eq!(text, "3 > 2 > 1");
}

// Checks EXPLAIN says when a SELECT's rows go out one fragment at a time: plain rows outside
// a block do; ORDER BY, LIMIT, an aggregate, or a transaction block gather the whole result.
#[tokio::test]
async fn explain_says_when_rows_are_sent_per_fragment() {
    let node = Node::start();
    let client = node.connect().await;
    client.batch_execute(r#"INSERT INTO t VALUES ('a', '{"n": 1}')"#).await.unwrap();
    let sent = |sql: &'static str| {
        let client = &client;
        async move {
            let rows = simple_rows(&client.simple_query(&format!("EXPLAIN {sql}")).await.unwrap());
            rows.iter().any(|r| {
                r[0].as_deref()
                    == Some("  Sent: page by page (1,024 rows or 4 MiB), as each fragment answers")
            })
        }
    };
    assert!(sent("SELECT * FROM t WHERE n = 1").await);
    for sql in ["SELECT * FROM t ORDER BY n", "SELECT * FROM t LIMIT 5", "SELECT count(*) FROM t"] {
        assert!(!sent(sql).await, "{sql}");
    }
    client.batch_execute("BEGIN").await.unwrap();
    assert!(!sent("SELECT * FROM t").await, "inside a block");
    client.batch_execute("COMMIT").await.unwrap();
}

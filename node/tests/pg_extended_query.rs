//! Extended query protocol end to end with tokio-postgres against the test engine: prepared
//! statement reuse, text and binary parameters and results, NULLs, unnamed statements, errors
//! with SQLSTATE followed by a working session, and portals with a row limit
//! (PortalSuspended).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use node::pg::PgConfig;
use pg_support::Server;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| pg_support::start(PgConfig::default(), 64))
}

// Checks that a statement prepared once runs many times with different binary parameters
// (tokio-postgres sends and asks for binary) without the engine planning it again.
#[tokio::test]
async fn extended_prepared_statement_is_reused() {
    let server = pg_support::start(PgConfig::default(), 4);
    let client = server.connect().await;
    let statement = client.prepare("select $1::int4, $2::text").await.unwrap();
    assert_eq!(statement.params(), &[Type::INT4, Type::TEXT]);
    assert_eq!(statement.columns()[0].name(), "c1");
    assert_eq!(statement.columns()[1].type_(), &Type::TEXT);
    let plans = server.shared.plans.load(Ordering::SeqCst);
    for i in 0..20i32 {
        let text = format!("row {i}");
        let row = client.query_one(&statement, &[&i, &text]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), i);
        assert_eq!(row.get::<_, &str>(1), text);
    }
    assert_eq!(server.shared.plans.load(Ordering::SeqCst), plans);
    pg_support::assert_no_warnings();
}

// Checks NULL parameters come back as NULL, and int8 round trips in binary.
#[tokio::test]
async fn extended_null_and_int8_parameters() {
    let client = server().connect().await;
    let row = client
        .query_one("select $1::int8, $2::text", &[&(i64::MAX - 1), &None::<&str>])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), i64::MAX - 1);
    assert_eq!(row.get::<_, Option<&str>>(1), None);
    pg_support::assert_no_warnings();
}

// Checks the unnamed statement path (Parse "" + Bind + Execute in one round trip) with typed
// parameters.
#[tokio::test]
async fn extended_unnamed_statement_typed_query() {
    let client = server().connect().await;
    let rows = client.query_typed("select $1::int4", &[(&41i32, Type::INT4)]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i32>(0), 41);
    let rows = client.query_typed("series 4", &[]).await.unwrap();
    let got: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![1, 2, 3, 4]);
    pg_support::assert_no_warnings();
}

// Checks that a Parse error carries SQLSTATE 42601 and that the connection recovers at Sync:
// the next statement on the same client works.
#[tokio::test]
async fn extended_parse_error_then_recovery() {
    let client = server().connect().await;
    let err = client.prepare("selec 1").await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code(), &SqlState::SYNTAX_ERROR);
    let err = client.prepare("select 1; select 2").await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code(), &SqlState::SYNTAX_ERROR);
    let row = client.query_one("select 5", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 5);
    pg_support::assert_no_warnings();
}

// Checks that an execution error inside Bind/Execute is reported with its SQLSTATE and the
// session goes on.
#[tokio::test]
async fn extended_execute_error_then_recovery() {
    let client = server().connect().await;
    let err = client.execute("fail", &[]).await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code(), &SqlState::DIVISION_BY_ZERO);
    assert_eq!(client.execute("insert", &[]).await.unwrap(), 1);
    pg_support::assert_no_warnings();
}

// Checks that a wrong parameter value is a per-statement error (22P03 from the engine).
#[tokio::test]
async fn extended_bad_binary_parameter() {
    let client = server().connect().await;
    let statement = client.prepare_typed("select $1::int4", &[Type::INT4]).await.unwrap();
    // Bind an int8 where the statement declared int4: the engine sees 8 bytes for an int4.
    let err = client.query_typed("select $1::int4", &[(&7i64, Type::INT8)]).await.unwrap_err();
    assert!(err.as_db_error().is_some(), "{err}");
    let row = client.query_one(&statement, &[&3i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 3);
    pg_support::assert_no_warnings();
}

// Checks Execute with a row limit: a portal inside a transaction is fetched 3 rows at a
// time (PortalSuspended in between) until CommandComplete.
#[tokio::test]
async fn extended_portal_row_limit() {
    let mut client = server().connect().await;
    let transaction = client.transaction().await.unwrap();
    let statement = transaction.prepare("series 8").await.unwrap();
    let portal = transaction.bind(&statement, &[]).await.unwrap();
    let mut got = Vec::new();
    loop {
        let rows = transaction.query_portal(&portal, 3).await.unwrap();
        if rows.is_empty() {
            break;
        }
        assert!(rows.len() <= 3);
        got.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
    }
    assert_eq!(got, (1..=8).collect::<Vec<i64>>());
    transaction.commit().await.unwrap();
    pg_support::assert_no_warnings();
}

// Checks a result larger than PG_RESULT_BYTES_MAX (70 rows of 1 MiB against a 64 MiB bound)
// streams out whole, since the engine calls `flush_if_needed` between rows; without streaming
// it would fail with 54000. Then many small rows, in order, in both protocols.
#[tokio::test]
async fn extended_large_result_streams() {
    let client = server().connect().await;
    let rows = client.query("wide 70 1048576", &[]).await.unwrap();
    assert_eq!(rows.len(), 70);
    assert!(rows.iter().all(|r| r.get::<_, &str>(0).len() == 1 << 20));
    let rows = client.query("series 100000", &[]).await.unwrap();
    assert_eq!(rows.len(), 100_000);
    assert!(
        rows.iter().enumerate().all(|(i, r)| r.get::<_, i64>(0) == i64::try_from(i).unwrap() + 1)
    );
    let messages = client.simple_query("series 100000").await.unwrap();
    let count =
        messages.iter().filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_))).count();
    assert_eq!(count, 100_000);
    pg_support::assert_no_warnings();
}

// Checks rows kept in portals for later Executes share one session budget
// (PG_RESULT_BYTES_MAX, 64 MiB): a second 40 MiB portal fails with 54000 while the first is
// still held, and the first still delivers its rows.
#[tokio::test]
async fn extended_portal_budget_is_per_session() {
    let mut client = server().connect().await;
    let transaction = client.transaction().await.unwrap();
    let statement = transaction.prepare("wide 40 1048576").await.unwrap();
    let first = transaction.bind(&statement, &[]).await.unwrap();
    assert_eq!(transaction.query_portal(&first, 1).await.unwrap().len(), 1);
    let second = transaction.bind(&statement, &[]).await.unwrap();
    let err = transaction.query_portal(&second, 1).await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code(), &SqlState::PROGRAM_LIMIT_EXCEEDED);
    assert_eq!(transaction.query_portal(&first, 0).await.unwrap().len(), 39);
    drop(transaction);
    let rows = client.query("series 2", &[]).await.unwrap();
    assert_eq!(rows.len(), 2);
    pg_support::assert_no_warnings();
}

//! Simple query protocol end to end with tokio-postgres against the test engine: results,
//! several statements in one string, errors with SQLSTATE that stop the rest of the string,
//! empty queries, notices, transaction status, and the session surviving every error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::sync::OnceLock;

use node::pg::PgConfig;
use pg_support::Server;
use tokio_postgres::SimpleQueryMessage as M;
use tokio_postgres::error::SqlState;

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| pg_support::start(PgConfig::default(), 64))
}

fn rows(messages: &[M]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            M::Row(row) => Some((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect()),
            _ => None,
        })
        .collect()
}

fn tags(messages: &[M]) -> Vec<u64> {
    messages
        .iter()
        .filter_map(|m| match m {
            M::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .collect()
}

// Checks that one string with three statements returns each one's rows and tag, in order.
#[tokio::test]
async fn simple_query_runs_every_statement() {
    let client = server().connect().await;
    let messages = client.simple_query("select 7; series 3; insert").await.unwrap();
    assert_eq!(
        rows(&messages),
        vec![
            vec![Some("7".to_owned())],
            vec![Some("1".to_owned())],
            vec![Some("2".to_owned())],
            vec![Some("3".to_owned())],
        ]
    );
    assert_eq!(tags(&messages), vec![1, 3, 1]);
    pg_support::assert_no_warnings();
}

// Checks that a syntax error reports 42601 with the engine's position and hint, that nothing
// of that string ran, and that the session answers the next query.
#[tokio::test]
async fn simple_query_syntax_error_keeps_session() {
    let client = server().connect().await;
    let err = client.simple_query("insert; selec 1").await.unwrap_err();
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code(), &SqlState::SYNTAX_ERROR);
    assert_eq!(db.message(), "syntax error at or near \"selec\"");
    assert!(db.hint().is_some());
    assert!(matches!(db.position(), Some(tokio_postgres::error::ErrorPosition::Original(9))));
    let messages = client.simple_query("select 1").await.unwrap();
    assert_eq!(rows(&messages), vec![vec![Some("1".to_owned())]]);
    pg_support::assert_no_warnings();
}

// Checks that the wire layer ends every query of several statements with the engine's
// `end_implicit` (its implicit transaction), saying whether a statement failed, never for a
// query of one statement; and that an error of that end (a commit's 40001) reaches the client
// after the statements' results and the session goes on.
#[tokio::test]
async fn simple_query_several_statements_end_their_implicit_transaction() {
    let client = server().connect().await;
    let ends = |messages: &[M]| rows(messages)[0][0].clone().unwrap();
    client.simple_query("insert").await.unwrap();
    assert_eq!(ends(&client.simple_query("implicit_ends").await.unwrap()), "");
    client.simple_query("insert; insert").await.unwrap();
    assert_eq!(ends(&client.simple_query("implicit_ends").await.unwrap()), "ok");
    let err = client.simple_query("insert; fail; insert").await.unwrap_err();
    assert_eq!(err.as_db_error().expect("a server error").code().code(), "22012");
    assert_eq!(ends(&client.simple_query("implicit_ends").await.unwrap()), "ok,failed");
    let err = client.simple_query("insert; doomed").await.unwrap_err();
    assert_eq!(
        err.as_db_error().expect("a server error").code(),
        &SqlState::T_R_SERIALIZATION_FAILURE
    );
    assert_eq!(ends(&client.simple_query("implicit_ends").await.unwrap()), "ok,failed,ok");
    let messages = client.simple_query("select 3").await.unwrap();
    assert_eq!(rows(&messages), vec![vec![Some("3".to_owned())]]);
    pg_support::assert_no_warnings();
}

// Checks that an execution error stops the statements after it in the same string.
#[tokio::test]
async fn simple_query_error_stops_the_rest() {
    let client = server().connect().await;
    let err = client.simple_query("insert; fail; insert").await.unwrap_err();
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "22012");
    assert_eq!(db.hint(), Some("Do not divide by zero."));
    // The engine counts nothing here, so check the session is still usable and sane.
    assert_eq!(tags(&client.simple_query("insert").await.unwrap()), vec![1]);
    pg_support::assert_no_warnings();
}

// Checks that an empty or blank string gets EmptyQueryResponse (no rows; tokio-postgres
// reports it as a completion of 0 rows) and the session goes on.
#[tokio::test]
async fn simple_query_empty_string() {
    let client = server().connect().await;
    let messages = client.simple_query("").await.unwrap();
    assert!(rows(&messages).is_empty());
    assert_eq!(tags(&messages), vec![0]);
    let messages = client.simple_query("  ;  ").await.unwrap();
    assert_eq!(tags(&messages), vec![0]);
    assert_eq!(tags(&client.simple_query("select 2").await.unwrap()), vec![1]);
    pg_support::assert_no_warnings();
}

// Checks transaction status flows from the engine to ReadyForQuery: a failed statement inside
// a transaction block leaves it failed (25P02 for the next statement) until ROLLBACK.
#[tokio::test]
async fn simple_query_transaction_status() {
    let client = server().connect().await;
    client.simple_query("begin").await.unwrap();
    client.simple_query("fail").await.unwrap_err();
    let err = client.simple_query("select 1").await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code(), &SqlState::IN_FAILED_SQL_TRANSACTION);
    client.simple_query("rollback").await.unwrap();
    assert_eq!(tags(&client.simple_query("select 1").await.unwrap()), vec![1]);
    pg_support::assert_no_warnings();
}

// Checks that a notice sent by the engine reaches the client ahead of the command's completion.
#[tokio::test]
async fn simple_query_notice_reaches_client() {
    let (client, connection) =
        tokio_postgres::connect(&server().conn_str(""), tokio_postgres::NoTls).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut connection = std::pin::pin!(connection);
        loop {
            match std::future::poll_fn(|cx| connection.as_mut().poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notice(n))) => {
                    tx.send(n.message().to_owned()).unwrap();
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
    });
    client.simple_query("notice").await.unwrap();
    assert_eq!(rx.recv().await.unwrap(), "hello from the test engine");
    pg_support::assert_no_warnings();
}

// Checks statements of one string are planned in turn, after the ones before them ran: `use t`
// plans because `create t` already executed; alone on a fresh session it fails (42P01) at
// plan time, in both protocols.
#[tokio::test]
async fn simple_query_plans_each_statement_after_the_previous_ran() {
    let client = server().connect().await;
    let messages = client.simple_query("create t; use t").await.unwrap();
    assert_eq!(tags(&messages), vec![0, 0]);
    let fresh = server().connect().await;
    let err = fresh.simple_query("use t").await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code(), &SqlState::UNDEFINED_TABLE);
    let err = fresh.prepare("use t").await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code(), &SqlState::UNDEFINED_TABLE);
    client.prepare("use t").await.unwrap();
    pg_support::assert_no_warnings();
}

// Checks tokio-postgres connects with sslmode=prefer (with NoTls it goes straight to plain
// text; psql's SSLRequest fallback is covered by pg_psql, the raw 'N' by pg_bad_frames).
#[tokio::test]
async fn simple_query_sslmode_prefer_connects() {
    let client = server().connect_with("sslmode=prefer").await.unwrap();
    assert_eq!(tags(&client.simple_query("select 1").await.unwrap()), vec![1]);
    pg_support::assert_no_warnings();
}

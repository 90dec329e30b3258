//! SCRAM-SHA-256 login end to end: tokio-postgres logs in with the configured password, a wrong
//! password is FATAL 28P01, and a raw client that offers channel binding is refused clearly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::io::Write;
use std::sync::OnceLock;

use node::pg::{PgAuth, PgConfig, ScramCredentials};
use pg_support::Server;
use pg_support::raw::{connect, error_codes, frame, read_message, read_to_eof, startup_packet};
use tokio_postgres::error::SqlState;

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let credentials = ScramCredentials::from_password("s3cret").unwrap();
        pg_support::start(PgConfig { auth: PgAuth::Scram(credentials), ..PgConfig::default() }, 64)
    })
}

// Checks a SCRAM login with the right password, then a query on the session.
#[tokio::test]
async fn scram_login_succeeds() {
    let client = server().connect_with("password=s3cret").await.unwrap();
    let rows = client.simple_query("select 1").await.unwrap();
    assert_eq!(pg_support::first_column(&rows), vec!["1".to_owned()]);
    pg_support::assert_no_warnings();
}

// Checks a wrong password is refused with 28P01 and a message naming the user.
#[tokio::test]
async fn scram_wrong_password_is_28p01() {
    let err = server().connect_with("password=wrong").await.unwrap_err();
    let db = err.as_db_error().expect("server error");
    assert_eq!(db.code(), &SqlState::INVALID_PASSWORD);
    assert_eq!(db.message(), "password authentication failed for user \"tester\"");
    // The server is fine afterwards.
    server().connect_with("password=s3cret").await.unwrap();
    pg_support::assert_no_warnings();
}

// Checks a client-first message asking for channel binding gets a clear FATAL (0A000).
#[test]
fn scram_channel_binding_is_refused() {
    let mut stream = connect(server().addr);
    stream.write_all(&startup_packet(3, 0, &[("user", "x")])).unwrap();
    let (tag, body) = read_message(&mut stream).unwrap();
    assert_eq!(tag, b'R');
    assert_eq!(&body[..4], &10i32.to_be_bytes());
    assert!(body.windows(13).any(|w| w == b"SCRAM-SHA-256"));
    let client_first = b"p=tls-server-end-point,,n=,r=abcdef";
    let mut sasl = b"SCRAM-SHA-256\0".to_vec();
    sasl.extend_from_slice(&i32::try_from(client_first.len()).unwrap().to_be_bytes());
    sasl.extend_from_slice(client_first);
    stream.write_all(&frame(b'p', &sasl)).unwrap();
    let messages = read_to_eof(&mut stream);
    assert_eq!(error_codes(&messages), vec!["0A000"]);
    pg_support::assert_no_warnings();
}

// Checks an operator-supplied verifier in PostgreSQL's format authenticates like the password
// it was made from.
#[tokio::test]
async fn scram_verifier_configuration() {
    let verifier = ScramCredentials::from_password("hunter2").unwrap().to_verifier();
    let credentials = ScramCredentials::parse_verifier(&verifier).unwrap();
    let server =
        pg_support::start(PgConfig { auth: PgAuth::Scram(credentials), ..PgConfig::default() }, 4);
    server.connect_with("password=hunter2").await.unwrap();
    pg_support::assert_no_warnings();
}

// Checks an engine's refusal at session start (here: unknown database) reaches the client as
// FATAL with its SQLSTATE and hint, after a successful password exchange.
#[tokio::test]
async fn start_session_refusal_is_fatal_with_hint() {
    let err = server().connect_with("password=s3cret dbname=nodb").await.unwrap_err();
    let db = err.as_db_error().expect("server error");
    assert_eq!(db.code(), &SqlState::INVALID_CATALOG_NAME);
    assert_eq!(db.severity(), "FATAL");
    assert_eq!(db.hint(), Some("Connect to database test."));
    pg_support::assert_no_warnings();
}

//! Connection limit, idle timeout and stopping: the connection past the limit gets FATAL 53300
//! while the others keep working, a freed slot is reusable, an idle session gets FATAL 57P05
//! and is closed, and the accept loop returns when told to stop.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::io::Write;
use std::time::Duration;

use node::pg::PgConfig;
use pg_support::raw::{
    error_codes, error_field, frame, query, read_to_eof, read_until_ready, session, tags,
};
use tokio_postgres::error::SqlState;

// Checks the limit: with room for two sessions, a third client is refused with 53300; after
// one session terminates (its socket reaches EOF, so its slot is free) a new client gets in.
#[tokio::test]
async fn limit_connections_refuses_past_max() {
    let server = pg_support::start(PgConfig::default(), 2);
    let first = server.connect().await;
    let mut second = session(server.addr);
    let err = server.connect_with("").await.unwrap_err();
    assert_eq!(err.as_db_error().expect("server error").code(), &SqlState::TOO_MANY_CONNECTIONS);
    // The admitted sessions are unaffected.
    first.simple_query("select 1").await.unwrap();
    second.write_all(&frame(b'X', b"")).unwrap();
    assert!(read_to_eof(&mut second).is_empty());
    let third = server.connect().await;
    third.simple_query("select 1").await.unwrap();
    pg_support::assert_no_warnings();
}

// Checks the idle timeout: a session that sends nothing gets FATAL 57P05 and EOF, while a
// session that stays busy is not affected before it idles.
#[test]
fn limit_idle_timeout_closes_session() {
    let config = PgConfig { idle_timeout: Duration::from_millis(50), ..PgConfig::default() };
    let server = pg_support::start(config, 4);
    let mut stream = session(server.addr);
    stream.write_all(&query("select 1")).unwrap();
    assert_eq!(tags(&read_until_ready(&mut stream)), "TDCZ");
    let messages = read_to_eof(&mut stream);
    assert_eq!(error_codes(&messages), vec!["57P05"]);
    assert_eq!(error_field(&messages[0].1, b'S').as_deref(), Some("FATAL"));
    pg_support::assert_no_warnings();
}

// Checks the startup timeout: a client that connects and sends nothing gets FATAL 08P01 and
// EOF, without waiting for the (much longer) idle timeout.
#[test]
fn limit_startup_timeout_closes_silent_client() {
    let config = PgConfig { startup_timeout: Duration::from_millis(50), ..PgConfig::default() };
    let server = pg_support::start(config, 4);
    let mut stream = pg_support::raw::connect(server.addr);
    let messages = read_to_eof(&mut stream);
    assert_eq!(error_codes(&messages), vec!["08P01"]);
    pg_support::assert_no_warnings();
}

// Checks `accept_loop` returns when its stop future completes: the executor thread, whose only
// future is the accept loop, ends and joins. (Whether the port refuses connections right after
// is not checked: glommio closes sockets asynchronously.)
#[test]
fn limit_accept_loop_stops() {
    let server = pg_support::start(PgConfig::default(), 4);
    drop(session(server.addr));
    server.shutdown();
    pg_support::assert_no_warnings();
}

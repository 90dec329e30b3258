//! CancelRequest end to end: a statement that runs until cancelled is stopped by
//! tokio-postgres' cancel token (a second connection carrying the BackendKeyData key) with
//! 57014, and the session answers the next query.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::sync::Arc;

use node::pg::PgConfig;
use tokio_postgres::error::SqlState;

// Checks cancellation: wait until the engine reports the statement running (a Notify, no
// sleeps), cancel it, and expect 57014 on the running query and a working session after.
#[tokio::test]
async fn cancel_request_stops_running_statement() {
    let server = pg_support::start(PgConfig::default(), 8);
    let client = Arc::new(server.connect().await);
    let token = client.cancel_token();
    let running = {
        let client = Arc::clone(&client);
        tokio::spawn(async move { client.simple_query("wait_for_cancel").await })
    };
    server.shared.started.notified().await;
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let err = running.await.unwrap().unwrap_err();
    assert_eq!(err.as_db_error().expect("server error").code(), &SqlState::QUERY_CANCELED);
    let rows = client.simple_query("select 1").await.unwrap();
    assert_eq!(pg_support::first_column(&rows), vec!["1".to_owned()]);
    pg_support::assert_no_warnings();
}

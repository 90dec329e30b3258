//! Password authentication of `tessera serve --password`: tokio-postgres logs in with
//! SCRAM-SHA-256 with the right password and gets 28P01 with a wrong one; the node serves
//! the good connection throughout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, NodeOptions, sqlstate};

// Checks both logins against a node started with a password, then a statement on the
// authenticated connection.
#[tokio::test]
async fn password_is_required_and_checked() {
    let node = Node::start_with(NodeOptions {
        password: Some("s3cret-pass".to_owned()),
        ..NodeOptions::default()
    });
    let client = node.connect().await;
    let base =
        format!("host=127.0.0.1 port={} user=tester dbname=tessera sslmode=disable", node.port());
    let wrong = tokio_postgres::connect(&format!("{base} password=nope"), tokio_postgres::NoTls)
        .await
        .err()
        .expect("a wrong password is refused");
    assert_eq!(sqlstate(&wrong), "28P01", "{wrong:?}");
    client.simple_query(r#"INSERT INTO a VALUES ('x', '{}')"#).await.unwrap();
    let n: i64 = client.query_one("SELECT count(*) FROM a", &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
}

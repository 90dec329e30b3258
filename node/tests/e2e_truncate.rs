//! TRUNCATE against a real `tessera serve` with two fragments (one per executor): a
//! collection too large for one DELETE (more than `TXN_WRITES_MAX` documents, so `DELETE FROM
//! c` is 54000) is emptied in rounds; other collections are left alone; TRUNCATE of several
//! collections, of one never written, and inside a block.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use bytes::Bytes;
use futures_util::{SinkExt, pin_mut};
use support::{Node, NodeOptions, simple_rows, sqlstate};

async fn load(client: &tokio_postgres::Client, collection: &str, n: usize) {
    let mut input = String::new();
    for i in 0..n {
        input.push_str(&format!("{collection}/{i}\t{{\"n\": {i}}}\n"));
    }
    let sink = client.copy_in::<_, Bytes>(&format!("COPY {collection} FROM STDIN")).await.unwrap();
    pin_mut!(sink);
    sink.send(Bytes::from(input)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), n as u64);
}

async fn count(client: &tokio_postgres::Client, collection: &str) -> i64 {
    let row = client.query_one(&format!("SELECT count(*) FROM {collection}"), &[]).await.unwrap();
    row.get(0)
}

// Checks 70,000 documents over two fragments (above the 65,536 one transaction may write)
// are refused by DELETE and emptied by TRUNCATE in rounds; a second
// collection keeps its documents until it is truncated too; the collection then takes new
// documents, and SHOW COLLECTIONS no longer lists an emptied collection without a
// configuration.
#[tokio::test]
async fn truncate_empties_a_collection_too_large_for_one_delete() {
    let node = Node::start_with(NodeOptions { fragments: 2, ..NodeOptions::default() });
    let client = node.connect().await;
    load(&client, "big", 70_000).await;
    load(&client, "small", 10).await;
    let err = client.batch_execute("DELETE FROM big").await.unwrap_err();
    assert_eq!(sqlstate(&err), "54000", "{err:?}");
    assert_eq!(count(&client, "big").await, 70_000, "the refused DELETE changed nothing");

    let messages = client.simple_query("TRUNCATE TABLE big").await.unwrap();
    assert!(
        messages
            .iter()
            .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::CommandComplete(0))),
        "{messages:?}"
    );
    assert_eq!(count(&client, "big").await, 0);
    assert_eq!(count(&client, "small").await, 10);
    let listed = simple_rows(&client.simple_query("SHOW COLLECTIONS").await.unwrap());
    let names: Vec<_> = listed.iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!(names, ["small"], "{listed:?}");

    client.batch_execute("INSERT INTO big VALUES ('big/1', '{}')").await.unwrap();
    client
        .batch_execute("TRUNCATE big, small, never_written RESTART IDENTITY CASCADE")
        .await
        .unwrap();
    assert_eq!((count(&client, "big").await, count(&client, "small").await), (0, 0));
}

// Checks TRUNCATE inside a block is refused by name (it cannot be atomic) and fails the
// block, and EXPLAIN TRUNCATE is refused; nothing is deleted by either.
#[tokio::test]
async fn truncate_is_refused_inside_a_block() {
    let node = Node::start();
    let client = node.connect().await;
    load(&client, "t", 5).await;
    client.batch_execute("BEGIN").await.unwrap();
    let err = client.batch_execute("TRUNCATE t").await.unwrap_err();
    assert_eq!(sqlstate(&err), "0A000", "{err:?}");
    let message = err.as_db_error().unwrap().message();
    assert!(message.contains("TRUNCATE inside a transaction block"), "{message}");
    let failed = client.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(sqlstate(&failed), "25P02");
    client.batch_execute("ROLLBACK").await.unwrap();
    let err = client.batch_execute("EXPLAIN TRUNCATE t").await.unwrap_err();
    assert_eq!(sqlstate(&err), "0A000", "{err:?}");
    assert_eq!(count(&client, "t").await, 5);
}

// Checks DROP TABLE deletes the documents and removes the sharding configuration (durably:
// gone after a restart, and a trailing-`$` id then has nothing to place it by), that a
// collection with neither is 42P01 and with IF EXISTS only a notice, that it is refused in a
// block, and that the name can be configured again.
#[tokio::test]
async fn drop_table_removes_documents_and_configuration() {
    let mut node = Node::start();
    let client = node.connect().await;
    let configure = r#"CREATE TABLE inv () WITH (sharding = '{"Fields": ["Customer"]}')"#;
    client.batch_execute(configure).await.unwrap();
    let insert = r#"INSERT INTO inv VALUES ('inv/1$', '{"Customer": "c/1"}'), ('inv/2$', '{"Customer": "c/2"}')"#;
    client.batch_execute(insert).await.unwrap();
    load(&client, "plain", 10).await;
    client.batch_execute("DROP TABLE inv, public.plain").await.unwrap();
    assert_eq!((count(&client, "inv").await, count(&client, "plain").await), (0, 0));
    assert!(simple_rows(&client.simple_query("SHOW COLLECTIONS").await.unwrap()).is_empty());
    assert!(simple_rows(&client.simple_query("SHOW SHARDING").await.unwrap()).is_empty());
    let err = client.batch_execute(insert).await.unwrap_err();
    assert_eq!(sqlstate(&err), "22023", "no configuration places a trailing-$ id: {err:?}");

    let err = client.batch_execute("DROP TABLE inv").await.unwrap_err();
    assert_eq!(sqlstate(&err), "42P01", "{err:?}");
    client.batch_execute("DROP TABLE IF EXISTS inv").await.unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    let err = client.batch_execute("DROP TABLE IF EXISTS inv").await.unwrap_err();
    assert_eq!(sqlstate(&err), "0A000", "{err:?}");
    client.batch_execute("ROLLBACK").await.unwrap();
    let err = client.batch_execute("DROP VIEW inv").await.unwrap_err();
    assert_eq!(sqlstate(&err), "0A000", "only tables: {err:?}");

    drop(client);
    node.restart();
    let client = node.connect().await;
    assert!(simple_rows(&client.simple_query("SHOW SHARDING").await.unwrap()).is_empty());
    client.batch_execute(configure).await.unwrap();
    client.batch_execute(insert).await.unwrap();
    assert_eq!(count(&client, "inv").await, 2);
}

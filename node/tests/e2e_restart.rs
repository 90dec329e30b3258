//! Durability seen by a client: documents, updates, deletes and a collection's sharding
//! configuration survive a clean restart (SIGTERM, start on the same data directory), and
//! every write acknowledged before a SIGKILL is there after the next start.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::BTreeMap;

use support::{Node, simple_rows, sqlstate};

const CONFIG: &str = r#"{"Fields":["Customer"],"Range":1000,"Mutable":false}"#;

async fn all_docs(client: &tokio_postgres::Client, collection: &str) -> BTreeMap<String, String> {
    let rows = client.simple_query(&format!("SELECT * FROM {collection}")).await.unwrap();
    simple_rows(&rows).into_iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap())).collect()
}

// Checks a clean restart: documents in two collections (after updates and deletes), the
// content configuration (SHOW SHARDING, validation still enforced with 23514, routing still
// by block) and the fragment layout (a restart asking for 4 fragments keeps the 8 created,
// and one executor serves all 8 of them).
#[tokio::test]
async fn clean_restart_keeps_data_and_configuration() {
    let mut node = Node::start();
    let (items, orders, sharding) = {
        let client = node.connect().await;
        let values: Vec<String> = (0..50)
            .map(|i| format!(r#"('items/{i}', '{{"n":{i},"tag":"t{}"}}')"#, i % 3))
            .collect();
        client
            .simple_query(&format!("INSERT INTO items VALUES {}", values.join(", ")))
            .await
            .unwrap();
        client.simple_query("UPDATE items SET n = n * 10 WHERE tag = 't1'").await.unwrap();
        client.simple_query("DELETE FROM items WHERE tag = 't2'").await.unwrap();
        client
            .simple_query(&format!("CREATE TABLE orders () WITH (sharding = '{CONFIG}')"))
            .await
            .unwrap();
        for i in 0..10 {
            client
                .simple_query(&format!(
                    r#"INSERT INTO orders VALUES ('orders/{i}$', '{{"Customer":"customers/{}-A"}}')"#,
                    i % 2
                ))
                .await
                .unwrap();
        }
        let sharding = simple_rows(&client.simple_query("SHOW SHARDING").await.unwrap());
        (all_docs(&client, "items").await, all_docs(&client, "orders").await, sharding)
    };
    assert_eq!(items.len(), 34);
    assert_eq!(orders.len(), 10);

    node.restart();
    let client = node.connect().await;
    assert_eq!(all_docs(&client, "items").await, items);
    assert_eq!(all_docs(&client, "orders").await, orders);
    assert_eq!(simple_rows(&client.simple_query("SHOW SHARDING").await.unwrap()), sharding);
    let e = client
        .simple_query(r#"INSERT INTO orders VALUES ('orders/x', '{"Customer":"customers/1-A"}')"#)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23514", "the configuration is enforced after restart");
    let plan = client
        .simple_query("EXPLAIN SELECT * FROM orders WHERE \"Customer\" = 'customers/1-A'")
        .await
        .unwrap();
    let plan: Vec<String> = simple_rows(&plan).into_iter().map(|r| r[0].clone().unwrap()).collect();
    assert!(plan.iter().any(|l| l.contains("content block [982000, 983000)")), "{plan:?}");
    drop(client);

    // The data directory keeps the layout it was created with.
    node.stop();
    node.set_fragments(4);
    node.set_executors(1);
    node.expect_log("keeps the fragment count");
    node.start_again();
    let client = node.connect().await;
    let fragments = simple_rows(&client.simple_query("SHOW FRAGMENTS").await.unwrap());
    assert_eq!(fragments.len(), 8);
    assert!(fragments.iter().all(|f| f[2].as_deref() == Some("executor-0")), "{fragments:?}");
    assert_eq!(all_docs(&client, "items").await, items);
    assert_eq!(all_docs(&client, "orders").await, orders);
}

// Checks kill -9: four connections write (inserts, then upserts bumping a counter) and record
// what was acknowledged; after 200 acknowledgements the node is SIGKILLed while they keep
// writing. After a restart every acknowledged insert is there and every counter is at least
// its last acknowledged value (a write in flight at the kill may or may not have landed).
#[tokio::test]
async fn sigkill_keeps_every_acknowledged_write() {
    let mut node = Node::start();
    {
        let client = node.connect().await;
        client
            .simple_query(&format!("CREATE TABLE orders () WITH (sharding = '{CONFIG}')"))
            .await
            .unwrap();
    }
    let acked = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<String, i64>::new()));
    let (enough_tx, mut enough_rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut tasks = Vec::new();
    for c in 0..4 {
        let client = node.connect().await;
        let acked = std::sync::Arc::clone(&acked);
        let enough = enough_tx.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10_000_i64 {
                let key = format!("w{c}/{}", i % 25);
                let sql = format!(
                    r#"INSERT INTO crash VALUES ('{key}', '{{"n":{i}}}') ON CONFLICT (id) DO UPDATE SET n = excluded.n"#
                );
                if client.simple_query(&sql).await.is_err() {
                    return; // the node is gone
                }
                let total = {
                    let mut a = acked.lock().unwrap();
                    a.insert(key, i);
                    a.len() + usize::try_from(i).unwrap()
                };
                if total >= 200 {
                    let _ = enough.try_send(());
                }
            }
        }));
    }
    drop(enough_tx);
    enough_rx.recv().await.expect("writers made progress");
    node.kill9();
    for task in tasks {
        task.await.expect("writer task");
    }
    node.start_again();
    let client = node.connect().await;
    let acked = acked.lock().unwrap().clone();
    assert!(!acked.is_empty());
    for (key, n) in &acked {
        let row = client
            .query_opt(&format!("SELECT n::int8 FROM crash WHERE id() = '{key}'"), &[])
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("acknowledged {key} is missing"));
        let stored: i64 = row.get(0);
        assert!(stored >= *n, "{key}: stored {stored} < acknowledged {n}");
    }
    let sharding = simple_rows(&client.simple_query("SHOW SHARDING orders").await.unwrap());
    assert_eq!(sharding.len(), 1, "the acknowledged CREATE TABLE survived");
}

// Checks that a second `tessera serve` on a data directory in use exits 1 at once with an
// ERROR naming the directory, and that the first node keeps serving and stops cleanly.
#[tokio::test]
async fn a_second_node_on_the_same_data_directory_is_refused() {
    let node = Node::start();
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let mut second = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"));
    second
        .arg("serve")
        .arg("--data-dir")
        .arg(node.data_dir())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--executors", "1", "--fragments", "8"])
        .env("NO_COLOR", "1");
    let out = support::run_client(second);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("is in use by another tessera process"), "{stderr}");
    let client = node.connect().await;
    let one: i64 = client.query_one("SELECT 1::int8", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

// Checks SIGTERM with client connections open: the node still exits 0 (within the harness's
// stop bound), the open connections then fail instead of hanging, and after a start on the
// same directory a new connection reads what they wrote.
#[tokio::test]
async fn sigterm_with_open_connections_exits_cleanly() {
    let mut node = Node::start();
    let idle = node.connect().await;
    let busy = node.connect().await;
    busy.simple_query(r#"INSERT INTO open VALUES ('o', '{"v":1}')"#).await.unwrap();
    node.stop();
    assert!(idle.simple_query("SELECT 1").await.is_err(), "the connection ended with the node");
    assert!(busy.simple_query("SELECT 1").await.is_err(), "the connection ended with the node");
    node.start_again();
    let client = node.connect().await;
    let v: i64 =
        client.query_one("SELECT v::int8 FROM open WHERE id() = 'o'", &[]).await.unwrap().get(0);
    assert_eq!(v, 1);
}

//! Online changes to a collection's content configuration through SQL, under SHARDING.md §3:
//! which changes are refused and why, what validation does before and after, the statement
//! that lists violating ids, and durability of the last configuration across a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, simple_rows, sqlstate};

async fn alter(client: &tokio_postgres::Client, config: &str) -> Result<(), tokio_postgres::Error> {
    client
        .simple_query(&format!("ALTER TABLE orders SET (sharding = '{config}')"))
        .await
        .map(|_| ())
}

async fn sharding(client: &tokio_postgres::Client) -> String {
    let rows = simple_rows(&client.simple_query("SHOW SHARDING orders").await.unwrap());
    rows[0][1].clone().expect("a configuration")
}

// Checks the rules end to end: a document whose id does not place it in its content block is
// refused (23514) while Mutable = false; Range grows only by a whole multiple (a refused
// change is 55000 and names the reason); Mutable = true lets the bad document in; switching
// back to false checks nothing, and verify_sharding then lists exactly the violating id; the
// configuration in force survives a restart and keeps being enforced.
#[tokio::test]
async fn configuration_changes_follow_the_rules() {
    let mut node = Node::start();
    let client = node.connect().await;
    client
        .simple_query(
            r#"CREATE TABLE orders () WITH (sharding = '{"Fields":["Customer"],"Range":1}')"#,
        )
        .await
        .unwrap();
    // `orders/1-A$` with Customer customers/1-A lands on 982173 (SHARDING.md §3 example).
    let assigned = simple_rows(
        &client
            .simple_query(
                r#"INSERT INTO orders VALUES ('orders/1-A$', '{"Customer":"customers/1-A"}') RETURNING id()"#,
            )
            .await
            .unwrap(),
    );
    assert_eq!(assigned[0][0].as_deref(), Some("orders/1-A$@982173"));

    // A hashed id outside the content block is refused while Mutable = false.
    let bad = r#"INSERT INTO orders VALUES ('orders/2-A', '{"Customer":"customers/1-A"}')"#;
    let e = client.simple_query(bad).await.unwrap_err();
    assert_eq!(sqlstate(&e), "23514", "{e}");

    // Range may grow by a whole multiple; 2 -> 3 is not one and is refused with the reason.
    alter(&client, r#"{"Fields":["Customer"],"Range":2}"#).await.unwrap();
    let e = alter(&client, r#"{"Fields":["Customer"],"Range":3}"#).await.unwrap_err();
    assert_eq!(sqlstate(&e), "55000", "{e}");
    assert!(e.as_db_error().unwrap().message().contains("multiple"), "{e}");
    // Changing Fields needs Mutable = true.
    let e = alter(&client, r#"{"Fields":["Other"],"Range":2}"#).await.unwrap_err();
    assert_eq!(sqlstate(&e), "55000", "{e}");

    // Mutable = true: nothing is validated, the bad document goes in.
    alter(&client, r#"{"Fields":["Customer"],"Range":2,"Mutable":true}"#).await.unwrap();
    client.simple_query(bad).await.unwrap();
    // Back to false is allowed without checking old documents...
    alter(&client, r#"{"Fields":["Customer"],"Range":2,"Mutable":false}"#).await.unwrap();
    // ...and the verification statement lists exactly the one that breaks the configuration.
    let violations =
        simple_rows(&client.simple_query("SELECT * FROM verify_sharding('orders')").await.unwrap());
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0][0].as_deref(), Some("orders/2-A"));
    assert!(violations[0][1].as_deref().is_some_and(|r| !r.is_empty()));

    // The last configuration is durable and still enforced after a restart.
    let before = sharding(&client).await;
    drop(client);
    node.restart();
    let client = node.connect().await;
    assert_eq!(sharding(&client).await, before);
    let e = client
        .simple_query(r#"INSERT INTO orders VALUES ('orders/3-A', '{"Customer":"customers/1-A"}')"#)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23514", "{e}");
    node.stop();
}

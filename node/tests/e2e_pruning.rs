//! Routing seen from outside: `SHOW fragment_counters` is read before and after one statement,
//! and the fragments whose `statements` counter grew are exactly the ones the statement had
//! to touch: one for a query by id, the block's fragments for a content-routed query, all of
//! them for a predicate that cannot be routed. Each case is cross-checked with the
//! `Fragments:` line of `EXPLAIN` and, for ids, with `tessera shard-of` and `SHOW FRAGMENTS`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::process::Command;

use support::{Node, fragment_counters, fragments_touched, run_client};

/// The fragments named by EXPLAIN's `Fragments:` line (`$0, $3`).
async fn explained_fragments(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let rows = client.query(&format!("EXPLAIN {sql}"), &[]).await.unwrap();
    let lines: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
    let line = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("Fragments:"))
        .unwrap_or_else(|| panic!("no Fragments line in {lines:?}"));
    line.split(',').map(|f| f.trim().to_owned()).filter(|f| !f.is_empty()).collect()
}

/// Runs `sql` once and returns the fragments whose statement counter grew, checking that
/// EXPLAIN predicted the same set.
async fn touched_by(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let explained = explained_fragments(client, sql).await;
    let before = fragment_counters(client).await;
    client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    let after = fragment_counters(client).await;
    let touched = fragments_touched(&before, &after);
    assert_eq!(touched, explained, "counters and EXPLAIN disagree for {sql}");
    touched
}

/// The shard of a document id, from the binary's own `shard-of` command.
fn shard_of(id: &str) -> u32 {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command.arg("shard-of").arg(id);
    let out = run_client(command);
    assert!(out.status.success(), "shard-of {id}: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.trim().rsplit('\t').next().unwrap().parse().unwrap()
}

/// The fragment holding `shard`, from `SHOW FRAGMENTS` (`[start, end)` ranges).
async fn fragment_of(client: &tokio_postgres::Client, shard: u32) -> String {
    let rows = client.simple_query("SHOW FRAGMENTS").await.unwrap();
    for row in support::simple_rows(&rows) {
        let name = row[0].clone().unwrap();
        let range = row[1].clone().unwrap();
        let (start, end) =
            range.trim_matches(|c| c == '[' || c == ')').split_once(", ").expect("range");
        let (start, end): (u32, u32) = (start.parse().unwrap(), end.parse().unwrap());
        if (start..end).contains(&shard) {
            return name;
        }
    }
    panic!("no fragment holds shard {shard}");
}

// Checks that statements by id touch exactly the fragment holding the id's shard (as computed
// by `tessera shard-of` and located with SHOW FRAGMENTS): SELECT, UPDATE, DELETE and a
// single-row INSERT; an IN list touches the union of its ids' fragments.
#[tokio::test]
async fn statements_by_id_touch_one_fragment() {
    let node = Node::start();
    let client = node.connect().await;
    let ids: Vec<String> = (0..40).map(|i| format!("items/{i}")).collect();
    let values: Vec<String> = ids.iter().map(|id| format!("('{id}', '{{\"n\":1}}')")).collect();
    client.simple_query(&format!("INSERT INTO items VALUES {}", values.join(", "))).await.unwrap();

    let x = "items/7";
    let home = fragment_of(&client, shard_of(x)).await;
    for sql in [
        format!("SELECT * FROM items WHERE id() = '{x}'"),
        format!("SELECT count(*) FROM items WHERE id() = '{x}' AND n > 0"),
        format!("UPDATE items SET n = n + 1 WHERE id() = '{x}'"),
        format!("DELETE FROM items WHERE id() = '{x}'"),
    ] {
        assert_eq!(touched_by(&client, &sql).await, vec![home.clone()], "{sql}");
    }
    // A single-row INSERT writes to one fragment (EXPLAIN of an INSERT has no Fragments line
    // to compare, so only the counters are checked).
    let before = fragment_counters(&client).await;
    client.simple_query(&format!("INSERT INTO items VALUES ('{x}', '{{}}')")).await.unwrap();
    let after = fragment_counters(&client).await;
    assert_eq!(fragments_touched(&before, &after), vec![home.clone()]);

    // An IN list of two ids on different fragments touches both and nothing else.
    let mut other = None;
    for id in &ids {
        let f = fragment_of(&client, shard_of(id)).await;
        if f != home {
            other = Some((id.clone(), f));
            break;
        }
    }
    let (other_id, other_home) = other.expect("40 ids land on more than one fragment");
    let mut expected = vec![home.clone(), other_home];
    expected.sort_by_key(|f| f.trim_start_matches('$').parse::<u32>().unwrap());
    let sql = format!("SELECT id() FROM items WHERE id() IN ('{x}', '{other_id}')");
    assert_eq!(touched_by(&client, &sql).await, expected);
}

// Checks content routing with `{"Fields":["Customer"],"Range":1000}`: a query fixing
// `Customer` touches only the fragments overlapping the customer's 1000-shard block, one
// fragment for a block inside a fragment and two for a block across a fragment boundary
// (customers/1582-A hashes to 131243, block [131000, 132000) across $0 | $1 at 131072);
// trailing-`$` ids are placed in the block; a predicate that fixes nothing touches all.
#[tokio::test]
async fn content_routed_queries_touch_the_block_fragments() {
    let node = Node::start();
    let client = node.connect().await;
    client
        .simple_query(
            r#"CREATE TABLE orders () WITH (sharding = '{"Fields":["Customer"],"Range":1000}')"#,
        )
        .await
        .unwrap();
    for (i, customer) in ["customers/1-A", "customers/1582-A", "customers/6-A"].iter().enumerate() {
        for j in 0..5 {
            let sql = format!(
                r#"INSERT INTO orders VALUES ('orders/{i}-{j}$', '{{"Customer":"{customer}","total":{j}}}')"#
            );
            client.simple_query(&sql).await.unwrap();
        }
    }
    let all: Vec<String> = (0..8).map(|f| format!("${f}")).collect();

    // customers/1-A: content shard 982173, block [982000, 983000) inside $7 [917504, 1048576).
    let one = "SELECT id() FROM orders WHERE \"Customer\" = 'customers/1-A'";
    assert_eq!(touched_by(&client, one).await, vec!["$7".to_owned()]);
    let rows = client.query(one, &[]).await.unwrap();
    assert_eq!(rows.len(), 5);
    for row in &rows {
        let id: String = row.get(0);
        let shard: u32 = id.rsplit("$@").next().unwrap().parse().unwrap();
        assert!((982_000..983_000).contains(&shard), "{id} placed in the block");
    }

    // customers/1582-A: block [131000, 132000) spans $0 and $1.
    let two = "SELECT count(*) FROM orders WHERE \"Customer\" = 'customers/1582-A'";
    assert_eq!(touched_by(&client, two).await, vec!["$0".to_owned(), "$1".to_owned()]);
    let n: i64 = client.query_one(two, &[]).await.unwrap().get(0);
    assert_eq!(n, 5);

    // AND with another predicate still routes by the content field.
    let and = "SELECT id() FROM orders WHERE total > 2 AND \"Customer\" = 'customers/1-A'";
    assert_eq!(touched_by(&client, and).await, vec!["$7".to_owned()]);

    // Not routable: a range on another field, an OR with a non-routable side.
    for sql in [
        "SELECT id() FROM orders WHERE total > 2",
        "SELECT id() FROM orders WHERE \"Customer\" = 'customers/1-A' OR total = 1",
        "SELECT count(*) FROM orders",
    ] {
        assert_eq!(touched_by(&client, sql).await, all, "{sql}");
    }

    // With Mutable = true content predicates are not used for pruning.
    client
        .simple_query(
            r#"ALTER TABLE orders SET (sharding = '{"Fields":["Customer"],"Range":1000,"Mutable":true}')"#,
        )
        .await
        .unwrap();
    assert_eq!(touched_by(&client, one).await, all);
}

/// (fragment, rows scanned) from EXPLAIN ANALYZE's `Fragment $n: rows scanned=X ...` lines.
async fn analyzed(client: &tokio_postgres::Client, sql: &str) -> Vec<(String, i64)> {
    let rows = client.query(&format!("EXPLAIN ANALYZE {sql}"), &[]).await.unwrap();
    rows.iter()
        .map(|r| r.get::<_, String>(0))
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("Fragment ")?;
            let (fragment, rest) = rest.split_once(": rows scanned=")?;
            let scanned = rest.split_whitespace().next()?.parse().ok()?;
            Some((fragment.to_owned(), scanned))
        })
        .collect()
}

// Checks EXPLAIN ANALYZE against the counters: the fragments it reports and the rows each
// scanned equal the growth of `statements` and `rows_scanned` around it; a lookup by id reads
// at most one document, a content-routed query only its customer's documents' fragment.
#[tokio::test]
async fn explain_analyze_agrees_with_counters() {
    let node = Node::start();
    let client = node.connect().await;
    client
        .simple_query(
            r#"CREATE TABLE orders () WITH (sharding = '{"Fields":["Customer"],"Range":1000}')"#,
        )
        .await
        .unwrap();
    for i in 0..30 {
        let customer = ["customers/1-A", "customers/6-A", "customers/1582-A"][i % 3];
        client
            .simple_query(&format!(
                r#"INSERT INTO orders VALUES ('orders/{i}$', '{{"Customer":"{customer}","i":{i}}}')"#
            ))
            .await
            .unwrap();
    }
    let first_id: String =
        client.query_one("SELECT id() FROM orders WHERE i = 0", &[]).await.unwrap().get(0);
    for sql in [
        format!("SELECT * FROM orders WHERE id() = '{first_id}'"),
        "SELECT * FROM orders WHERE \"Customer\" = 'customers/1-A'".to_owned(),
        "SELECT count(*) FROM orders WHERE \"Customer\" = 'customers/1582-A'".to_owned(),
        "SELECT * FROM orders WHERE i > 20".to_owned(),
    ] {
        let before = fragment_counters(&client).await;
        let report = analyzed(&client, &sql).await;
        let after = fragment_counters(&client).await;
        let grown: Vec<(String, i64)> = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| a.1 > b.1)
            .map(|(b, a)| (a.0.clone(), a.2 - b.2))
            .collect();
        assert_eq!(report, grown, "{sql}");
        let scanned: i64 = report.iter().map(|r| r.1).sum();
        if sql.contains("id()") {
            assert_eq!(report.len(), 1, "{sql}");
            assert!(scanned <= 1, "{sql}: a point lookup scanned {scanned}");
        } else if sql.contains("customers/") {
            assert_eq!(scanned, 10, "{sql}: only the customer's ten orders are read");
        } else {
            assert_eq!(report.len(), 8, "{sql}");
            assert_eq!(scanned, 30, "{sql}");
        }
    }
}

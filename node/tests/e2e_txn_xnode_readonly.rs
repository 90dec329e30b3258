//! A cross-node two-phase commit with a read-only participant node: three data nodes, one
//! executor each. The block, run through node 1, reads a document of node 3 and updates one
//! of node 1 and one of node 2. Node 3 only holds its check in memory (no record); the
//! coordinator does not wait for its report, so the decision is still forgotten once the
//! writers reported; the write lands on both writers and node 3's document stays writable.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::cluster::{cluster_args, simple, wait_for};
use support::{Node, NodeOptions, free_loopback_port};

const FRAGMENTS: u32 = 6;

fn options(id: u32, peer: u16, join: Option<u16>) -> NodeOptions {
    let extra_args = cluster_args("xro", id, peer, join, &["--min-members", "3"]);
    NodeOptions { executors: 1, fragments: FRAGMENTS, extra_args, ..NodeOptions::default() }
}

/// A document id in a fragment owned by node `owner` (from `node`'s SHOW FRAGMENTS).
async fn id_owned_by(node: &Node, owner: u32, salt: &str) -> String {
    let rows = simple(node, "SHOW FRAGMENTS").await.unwrap();
    let prefix = format!("node {owner} ");
    let ranges: Vec<(u32, u32)> = rows
        .iter()
        .filter(|r| r[2].as_deref().unwrap().starts_with(&prefix))
        .map(|r| {
            let range = r[1].as_deref().unwrap().trim_matches(|c| c == '[' || c == ')');
            let (a, b) = range.split_once(", ").unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert!(!ranges.is_empty(), "node {owner} owns no fragment: {rows:?}");
    (0..100_000)
        .map(|i| format!("{salt}/{i}"))
        .find(|id| {
            let shard = router::shard_of(id).unwrap().shard().unwrap().get();
            ranges.iter().any(|(a, b)| (*a..*b).contains(&shard))
        })
        .unwrap()
}

async fn balance(client: &tokio_postgres::Client, id: &str) -> i64 {
    client
        .query_one("SELECT balance::int8 FROM accounts WHERE id() = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

// Checks the cross-node commit with a read-only node (see the module comment), five times,
// then that node 1's coordinator holds no decision and no participant anything prepared.
#[tokio::test]
async fn cross_node_commit_with_a_read_only_node() {
    let seed = free_loopback_port();
    let mut first = Node::start_with(options(1, seed, None));
    let mut second = Node::start_with(options(2, free_loopback_port(), Some(seed)));
    let mut third = Node::start_with(options(3, free_loopback_port(), Some(seed)));
    // The nodes stop one after another at the end (dropped), each handing its fragments off
    // first: the ones still running may report a stopped one unreachable (WARN) meanwhile.
    for node in [&mut first, &mut second, &mut third] {
        node.expect_log("is unreachable");
    }
    let nodes = [&first, &second, &third];
    for node in nodes {
        wait_for(&nodes, "every fragment served", || async {
            let rows = simple(node, "SHOW FRAGMENTS").await?;
            let owners: std::collections::BTreeSet<String> = rows
                .iter()
                .filter_map(|r| {
                    r[2].as_deref().and_then(|o| o.split(' ').nth(1)).map(str::to_owned)
                })
                .collect();
            (rows.len() == FRAGMENTS as usize && owners.len() == 3).then_some(())
        })
        .await;
    }
    let c = id_owned_by(&first, 1, "ro-c").await;
    let a = id_owned_by(&first, 2, "ro-a").await;
    let r = id_owned_by(&first, 3, "ro-r").await;
    let client = first.connect().await;
    for id in [&a, &c, &r] {
        client
            .execute("INSERT INTO accounts VALUES ($1, '{\"balance\":100}')", &[id])
            .await
            .unwrap();
    }
    for n in 1..=5i64 {
        client.batch_execute("BEGIN").await.unwrap();
        assert_eq!(balance(&client, &r).await, 100);
        client
            .execute("UPDATE accounts SET balance = balance - 1 WHERE id() = $1", &[&a])
            .await
            .unwrap();
        client
            .execute("UPDATE accounts SET balance = balance + 1 WHERE id() = $1", &[&c])
            .await
            .unwrap();
        client.batch_execute("COMMIT").await.unwrap();
        assert_eq!((balance(&client, &a).await, balance(&client, &c).await), (100 - n, 100 + n));
    }
    wait_for(&nodes, "decisions forgotten, nothing prepared", || async {
        for node in nodes {
            let rows = simple(node, "SHOW TRANSACTIONS").await?;
            let left = rows.iter().any(|row| {
                matches!(row[1].as_deref(), Some("committed (applying)" | "prepared" | "held"))
            });
            if left {
                return None;
            }
        }
        Some(())
    })
    .await;
    let other = third.connect().await;
    other.execute("UPDATE accounts SET balance = 7 WHERE id() = $1", &[&r]).await.unwrap();
    assert_eq!(balance(&other, &r).await, 7, "no hold left on the read-only node");
}

//! Blocks that only read on some cluster nodes: three data nodes, one executor each, every
//! block run through node 1. A cross-node two-phase commit with a read-only participant
//! node, and read-only blocks whose counts and absences span nodes (held on each at one
//! instant, released before COMMIT answers). And the reading of a write's share another
//! node asks for: an autocommit UPDATE over several nodes reads a large share there in
//! slices under a pause, a block's UPDATE in slices; and one rewritten between its reads and
//! its commit (a test-only hook) commits on its retry, which prepares on every node as it
//! reads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use bytes::Bytes;
use futures_util::{SinkExt, pin_mut};

use support::cluster::{cluster_args, id_owned_by, ranges_owned_by, simple, wait_for, wait_served};
use support::{Node, NodeOptions, free_loopback_port, sqlstate, tx_counter};

const FRAGMENTS: u32 = 6;

fn options(id: u32, peer: u16, join: Option<u16>, env: &[(String, String)]) -> NodeOptions {
    let extra_args = cluster_args("xro", id, peer, join, &["--min-members", "3"]);
    let env = env.to_vec();
    NodeOptions { executors: 1, fragments: FRAGMENTS, extra_args, env, ..NodeOptions::default() }
}

/// Starts three nodes and waits until each sees every fragment served, by all three.
async fn start_cluster() -> [Node; 3] {
    start_cluster_with(&[]).await
}

/// The same with `env` for every node.
async fn start_cluster_with(env: &[(String, String)]) -> [Node; 3] {
    let seed = free_loopback_port();
    let mut first = Node::start_with(options(1, seed, None, env));
    let mut second = Node::start_with(options(2, free_loopback_port(), Some(seed), env));
    let mut third = Node::start_with(options(3, free_loopback_port(), Some(seed), env));
    // The nodes stop one after another at the end (dropped), each handing its fragments off
    // first: the ones still running may report a stopped one unreachable (WARN) meanwhile.
    for node in [&mut first, &mut second, &mut third] {
        node.expect_log("is unreachable");
        if !env.is_empty() {
            node.expect_log("TESSERA_FAULT");
        }
    }
    wait_served(&[&first, &second, &third], FRAGMENTS as usize, 3).await;
    [first, second, third]
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
    let [first, second, third] = start_cluster().await;
    let nodes = [&first, &second, &third];
    let client = first.connect().await;
    let c = id_owned_by(&client, 1, "ro-c").await;
    let a = id_owned_by(&client, 2, "ro-a").await;
    let r = id_owned_by(&client, 3, "ro-r").await;
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

/// Whether no node holds documents for a read-only participant or commit.
async fn nothing_held(nodes: &[&Node]) -> bool {
    for node in nodes {
        let rows = simple(node, "SHOW TRANSACTIONS").await.unwrap();
        if rows.iter().any(|r| r[1].as_deref() == Some("held")) {
            return false;
        }
    }
    true
}

// Checks read-only blocks over fragments of several nodes: one that counted ranges (a scan of
// every fragment) or found documents missing on two fragments, of two nodes or of node 1 and
// another, holds those on each node (`read_only_holds` of node 1) and releases them before
// COMMIT answers, on every node. One that read existing documents by id on two nodes, or
// found one missing on one fragment only, holds nothing. A hold refused on another node
// because a document entered a counted range there fails COMMIT with 40001 and releases the
// holds taken elsewhere. A block that read more documents on a node than are held whole
// holds only the counts there, then checks the versions: a document rewritten there after
// the read fails it with 40001.
#[tokio::test]
async fn read_only_blocks_hold_across_nodes() {
    let [first, second, third] = start_cluster().await;
    let nodes = [&first, &second, &third];
    let client = first.connect().await;
    let (a, b) = (id_owned_by(&client, 2, "h-a").await, id_owned_by(&client, 3, "h-b").await);
    let gone = [
        id_owned_by(&client, 1, "gone").await,
        id_owned_by(&client, 2, "gone").await,
        id_owned_by(&client, 3, "gone").await,
    ];
    for id in [&a, &b] {
        client.execute("INSERT INTO t VALUES ($1, '{\"v\":100}')", &[id]).await.unwrap();
    }
    let holds = tx_counter(&client, "read_only_holds").await;
    let blocks: [(String, i64); 5] = [
        ("SELECT count(*) FROM t".to_owned(), 1),
        (format!("SELECT v FROM t WHERE id() IN ('{a}', '{b}')"), 0),
        (format!("SELECT v FROM t WHERE id() = '{}'", gone[1]), 0),
        (format!("SELECT v FROM t WHERE id() IN ('{}', '{}')", gone[1], gone[2]), 1),
        (format!("SELECT v FROM t WHERE id() IN ('{}', '{b}')", gone[0]), 1),
    ];
    let mut expected = holds;
    for (sql, held) in blocks {
        client.batch_execute("BEGIN").await.unwrap();
        client.simple_query(&sql).await.unwrap();
        client.batch_execute("COMMIT").await.unwrap();
        expected += held;
        assert_eq!(tx_counter(&client, "read_only_holds").await, expected, "{sql}");
        assert!(nothing_held(&nodes).await, "{sql}: released on every node");
    }
    let other = third.connect().await;
    client.batch_execute("BEGIN").await.unwrap();
    client.simple_query("SELECT count(*) FROM t").await.unwrap();
    other.execute("INSERT INTO t VALUES ($1, '{\"v\":1}')", &[&gone[2]]).await.unwrap();
    let err = client.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(sqlstate(&err), "40001", "{err:?}");
    assert!(nothing_held(&nodes).await, "the holds taken were released");
    assert_eq!(tx_counter(&client, "read_only_holds").await, expected, "no commit counted");
    other.execute("DELETE FROM t WHERE id() = $1", &[&gone[2]]).await.unwrap();
    // More documents on node 2 than a part held whole (4,096 checks).
    let (start, _) = ranges_owned_by(&client, 2).await[0];
    let input: String = (0..5_000).map(|i| format!("many{i}$@{start}\t{{\"v\":1}}\n")).collect();
    let sink = client.copy_in::<_, Bytes>("COPY t FROM STDIN").await.unwrap();
    pin_mut!(sink);
    sink.send(Bytes::from(input)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 5_000);
    for rewrite in [false, true] {
        client.batch_execute("BEGIN").await.unwrap();
        let n: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
        assert_eq!(n, 5_002);
        if !rewrite {
            client.batch_execute("COMMIT").await.unwrap();
            continue;
        }
        let sql = format!("UPDATE t SET v = 2 WHERE id() = 'many4999$@{start}'");
        other.batch_execute(&sql).await.unwrap();
        let err = client.batch_execute("COMMIT").await.unwrap_err();
        assert_eq!(sqlstate(&err), "40001", "{err:?}");
    }
    assert!(nothing_held(&nodes).await, "released after the large blocks");
    assert_eq!(tx_counter(&client, "read_only_holds").await, expected + 1);
}

// Checks another node reads a write's share as the asking node would: an autocommit UPDATE
// of every fragment, sent through node 1, reads node 2's 5,000 documents in slices at one
// instant (node 2's `paused_reads` grows; a share read in one go, as before `TxnWriteAs`,
// would not), and updates them all; a block's UPDATE of them (read in slices, each at its own
// instant, its versions kept for the commit) commits with every document updated.
#[tokio::test]
async fn write_shares_are_read_as_the_asking_node_reads() {
    const DOCS: usize = 5_000;
    let [first, second, _third] = start_cluster().await;
    let client = first.connect().await;
    let (shard, _) = ranges_owned_by(&client, 2).await[0];
    let input: String = (0..DOCS).map(|i| format!("s{i}$@{shard}\t{{\"n\":0}}\n")).collect();
    let sink = client.copy_in::<_, Bytes>("COPY big FROM STDIN").await.unwrap();
    pin_mut!(sink);
    sink.send(Bytes::from(input)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), DOCS as u64);
    let there = second.connect().await;
    let paused = tx_counter(&there, "paused_reads").await;
    let n = client.execute("UPDATE big SET n = n + 1", &[]).await.unwrap();
    assert_eq!(n, DOCS as u64);
    assert!(tx_counter(&there, "paused_reads").await > paused, "node 2 read its share in slices");
    client.batch_execute("BEGIN").await.unwrap();
    let n = client.execute("UPDATE big SET n = n + 1 WHERE n = 1", &[]).await.unwrap();
    assert_eq!(n, DOCS as u64);
    client.batch_execute("COMMIT").await.unwrap();
    let row = client.query_one("SELECT count(*), min(n::int8)::int8 FROM big", &[]).await.unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (DOCS as i64, 2));
}

// Checks an autocommit UPDATE over fragments of all three nodes whose documents are rewritten
// after each node's read and before the commit (`TESSERA_FAULT=autocommit-rewrite-after-read`
// on every node): its first attempt conflicts, its retry prepares as it reads on every node
// (`Share::TxnWritePrepared`) and commits every document once; nothing stays prepared. Before
// those retries the other nodes' shares were read again in one go and rewritten each attempt,
// and the statement ended in 40001.
#[tokio::test]
async fn autocommit_update_rewritten_on_other_nodes_commits() {
    let hook = ("TESSERA_FAULT".to_owned(), "autocommit-rewrite-after-read".to_owned());
    let nodes = start_cluster_with(&[hook]).await;
    let client = nodes[0].connect().await;
    let mut total = 0;
    for owner in 1..=3 {
        for (shard, _) in ranges_owned_by(&client, owner).await {
            for i in 0..3 {
                let id = format!("r{owner}_{shard}_{i}$@{shard}");
                let sql = format!("INSERT INTO t VALUES ('{id}', '{{\"c\":0}}')");
                client.batch_execute(&sql).await.unwrap();
                total += 1;
            }
        }
    }
    let conflicts = tx_counter(&client, "conflicts").await;
    let retries = tx_counter(&client, "prepared_attempts").await;
    let n = client.execute("UPDATE t SET c = c + 1 WHERE c >= 0", &[]).await.unwrap();
    assert_eq!(n, total);
    assert!(
        tx_counter(&client, "prepared_attempts").await > retries,
        "a retry prepared as it read"
    );
    let mut seen_conflicts = tx_counter(&client, "conflicts").await - conflicts;
    for node in &nodes[1..] {
        seen_conflicts += tx_counter(&node.connect().await, "conflicts").await;
    }
    assert!(seen_conflicts > 0, "the first attempt conflicted");
    let row =
        client.query_one("SELECT count(*), min(c::int8)::int8, max(c::int8)::int8 FROM t", &[]);
    let row = row.await.unwrap();
    let got = (row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2));
    assert_eq!(got, (total as i64, 1, 1), "every document updated once");
    for node in &nodes {
        let rows = simple(node, "SHOW TRANSACTIONS").await.unwrap();
        assert!(rows.iter().all(|r| r[1].as_deref() != Some("prepared")), "{rows:?}");
    }
}

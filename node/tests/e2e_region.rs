//! The cluster's data path (issue #7, regions): nodes serve the fragments of the replicated
//! shard map, statements for fragments without a location wait in bounded buffers, and every
//! node serves every document by forwarding each remote node's share to its owner. Every
//! wait polls until a deadline (polling, not synchronisation).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use support::{Node, NodeOptions, free_loopback_port, simple_rows};

/// How long a cluster change may take before the test fails with the logs.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(60);
/// Pause between two polls (polling, not synchronisation).
const POLL_EVERY: Duration = Duration::from_millis(100);
const FRAGMENTS: u32 = 6;

fn options(id: u32, peer: u16, join: Option<u16>, executors: u32, more: &[&str]) -> NodeOptions {
    let mut extra_args = vec![
        "--cluster-name".to_owned(),
        "region".to_owned(),
        "--node-id".to_owned(),
        id.to_string(),
        "--peer-listen".to_owned(),
        format!("127.0.0.1:{peer}"),
    ];
    extra_args.extend(more.iter().map(|m| (*m).to_owned()));
    if let Some(j) = join {
        extra_args.push("--join".to_owned());
        extra_args.push(format!("127.0.0.1:{j}"));
    }
    NodeOptions { executors, fragments: FRAGMENTS, extra_args, ..NodeOptions::default() }
}

async fn simple(node: &Node, sql: &str) -> Option<Vec<Vec<Option<String>>>> {
    let (client, conn) =
        tokio_postgres::connect(&node.conn_str(), tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let messages = client.simple_query(sql).await.ok()?;
    Some(simple_rows(&messages))
}

/// (epoch, fragments per node) as `node` shows it in SHOW CLUSTER.
async fn cluster_map(node: &Node) -> Option<(u64, BTreeMap<u32, u64>)> {
    let rows = simple(node, "SHOW CLUSTER").await?;
    let epoch = rows.first()?[7].as_deref()?.parse().ok()?;
    let per_node = rows
        .iter()
        .map(|r| {
            (r[0].as_deref().unwrap().parse().unwrap(), r[8].as_deref().unwrap().parse().unwrap())
        })
        .collect();
    Some((epoch, per_node))
}

/// The fragments `node` serves itself (SHOW FRAGMENTS on a node lists its own).
async fn own_fragments(node: &Node) -> Option<BTreeSet<String>> {
    let rows = simple(node, "SHOW FRAGMENTS").await?;
    Some(rows.iter().map(|r| r[0].clone().unwrap()).collect())
}

/// Polls `check` until it gives a value; fails with every log after the deadline.
async fn wait_for<T, F, Fut>(nodes: &[&Node], what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = nodes.iter().map(|n| n.log_text()).collect();
            panic!(
                "{what}: not reached in {CLUSTER_DEADLINE:?}\nlogs:\n{}",
                logs.join("\n-----\n")
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

// Checks step 1 of the data path: once the coordinator allocates the map, each data node opens
// exactly the fragments the map gives it (created empty), on as many executors as it runs, the
// fragments of all data nodes are every fragment once, and a proxy opens none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_nodes_open_the_fragments_the_map_gives_them() {
    let seed_port = free_loopback_port();
    let mut first = Node::start_with(options(1, seed_port, None, 2, &["--min-members", "2"]));
    let mut proxy = Node::start_with(options(
        3,
        free_loopback_port(),
        Some(seed_port),
        1,
        &["--role", "proxy"],
    ));
    // Before min-members, nothing is allocated and nothing is open.
    assert_eq!(own_fragments(&first).await.unwrap(), BTreeSet::new());
    let mut second = Node::start_with(options(2, free_loopback_port(), Some(seed_port), 1, &[]));
    let nodes = [&first, &second, &proxy];
    let (epoch, per_node) = wait_for(&nodes, "an allocated map", || async {
        let m = cluster_map(&first).await?;
        (m.0 > 0 && m.1.len() == 3).then_some(m)
    })
    .await;
    assert!(epoch >= 1);
    let mut all = BTreeSet::new();
    for (id, node) in [(1u32, &first), (2, &second), (3, &proxy)] {
        let want = per_node[&id];
        let open = wait_for(&nodes, "a node's fragments open", || async {
            let open = own_fragments(node).await?;
            (open.len() as u64 == want).then_some(open)
        })
        .await;
        if id == 3 {
            assert!(open.is_empty(), "a proxy opens no fragment");
        }
        for f in &open {
            assert!(all.insert(f.clone()), "fragment {f} open on two nodes");
        }
    }
    assert_eq!(all.len(), FRAGMENTS as usize, "every fragment open exactly once: {all:?}");
    // The first node spreads its fragments over its two executors, as the map says.
    let rows = simple(&first, "SHOW FRAGMENTS").await.unwrap();
    let executors: BTreeSet<String> = rows.iter().map(|r| r[2].clone().unwrap()).collect();
    if per_node[&1] >= 2 {
        assert_eq!(executors.len(), 2, "{rows:?}");
    }
    for n in [&mut first, &mut second, &mut proxy] {
        n.stop();
    }
}

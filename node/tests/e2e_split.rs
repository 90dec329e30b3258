//! Splitting and merging fragments end to end (issue #7 item 5, last part): real `tessera`
//! processes on loopback. `ALTER FRAGMENT $n SPLIT` and `ALTER FRAGMENT $a MERGE WITH $b`
//! under a continuous writer, then every acknowledged document is read exactly once through
//! every node and the fragments' counts sum up; a crash of the owner (`TESSERA_HANDOFF_FAULT`
//! `reshape-after-build`) mid-split, then a restart, loses nothing and stores nothing twice.
//! Every wait polls until a deadline (polling, not synchronisation); nothing asserts timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::cluster::{
    CLUSTER_DEADLINE, check_documents, cluster_args, local_fragments, query, wait_for,
    write_retrying,
};
use support::{Node, NodeOptions, free_loopback_port};

/// WARN lines a cluster with crashing members is expected to log.
const CLUSTER_NOISE: &[&str] = &[
    "is unreachable",
    "split or merge failed",
    "decision not confirmed",
    "decision refused",
    "reconcile step",
    "cannot list this node's fragments",
    "TESSERA_HANDOFF_FAULT",
];

fn options(id: u32, peer: u16, join: Option<u16>, more: &[&str]) -> NodeOptions {
    let mut extra_args = cluster_args("split", id, peer, join, more);
    extra_args.extend(["--handoff-on-shutdown".to_owned(), "false".to_owned()]);
    NodeOptions { executors: 2, fragments: 4, extra_args, ..NodeOptions::default() }
}

fn start(options: NodeOptions) -> Node {
    let mut node = Node::start_with(options);
    for noise in CLUSTER_NOISE {
        node.expect_log(noise);
    }
    node
}

/// Each node's own fragments with their documents, once the nodes serve exactly the
/// fragments `want` says (by node), each once.
async fn settled_now(
    nodes: &[&Node],
    want: &[BTreeSet<String>],
) -> Option<Vec<BTreeMap<String, u64>>> {
    let mut per_node = Vec::new();
    for (node, want) in nodes.iter().zip(want) {
        let own = local_fragments(node).await?;
        if own.keys().cloned().collect::<BTreeSet<_>>() != *want {
            return None;
        }
        per_node.push(own);
    }
    Some(per_node)
}

async fn wait_settled(nodes: &[&Node], want: &[BTreeSet<String>]) -> Vec<BTreeMap<String, u64>> {
    wait_for(nodes, &format!("the nodes to serve {want:?}"), || settled_now(nodes, want)).await
}

fn total(per_node: &[BTreeMap<String, u64>]) -> u64 {
    per_node.iter().flat_map(|m| m.values()).sum()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

/// Loads `count` documents `{prefix}{i}` through `node`, 50 per INSERT.
async fn load(node: &Node, prefix: &str, count: usize) -> BTreeSet<String> {
    let client = node.connect().await;
    let mut ids = BTreeSet::new();
    for batch in (0..count).collect::<Vec<_>>().chunks(50) {
        let values: Vec<String> =
            batch.iter().map(|i| format!("('{prefix}{i}', '{{\"n\": {i}}}')")).collect();
        let sql = format!("INSERT INTO notes VALUES {}", values.join(", "));
        write_retrying(&[node], &client, &sql).await;
        ids.extend(batch.iter().map(|i| format!("{prefix}{i}")));
    }
    ids
}

/// What the writer saw: ids acknowledged, and ids attempted without a clear answer.
#[derive(Default)]
struct Written {
    acked: BTreeSet<String>,
    maybe: BTreeSet<String>,
}

/// A writer inserting `{prefix}{i}` one at a time through `conn` until `stop`; a 23505
/// answer to a retry means an earlier attempt was stored.
fn spawn_writer(
    conn: String,
    prefix: &'static str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Written> {
    tokio::spawn(async move {
        let mut written = Written::default();
        let mut i = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let id = format!("{prefix}{i}");
            let sql = format!("INSERT INTO notes VALUES ('{id}', '{{\"n\": {i}}}')");
            let mut retried = false;
            let deadline = Instant::now() + CLUSTER_DEADLINE;
            loop {
                match query(&conn, &sql).await {
                    Ok(_) => break,
                    Err(e) if e.starts_with("23505") && retried => break,
                    Err(e) if e.starts_with("23505") => panic!("{id} exists before it was written"),
                    Err(e) if ["55000", "40001", "53400"].iter().any(|c| e.starts_with(c)) => {}
                    Err(_) => {
                        written.maybe.insert(id.clone());
                    }
                }
                retried = true;
                assert!(Instant::now() < deadline, "{id}: not taken in {CLUSTER_DEADLINE:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            written.maybe.remove(&id);
            written.acked.insert(id);
            i += 1;
        }
        written
    })
}

/// Waits until the writer stored `more` documents beyond `seen`.
async fn wait_writes(nodes: &[&Node], want: &[BTreeSet<String>], seen: u64, more: u64) {
    wait_for(nodes, "the writer to make progress", || async {
        let now = total(&settled_now(nodes, want).await?);
        (now >= seen + more).then_some(())
    })
    .await;
}

// Checks a split then a merge under a continuous writer on a two-node cluster: `$0` (node
// 1's) splits at its middle into `$4` and `$5` on node 1, writes keep landing, then `$4` and
// `$5` merge into `$6`; after each step every acknowledged document is read exactly once
// through both nodes and the fragments' counts sum to what was written. Also checks the
// refusals: merging fragments of different nodes, splitting at a shard outside the range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_split_and_merge_under_a_writer() {
    let seed_port = free_loopback_port();
    let mut first = start(options(1, seed_port, None, &["--min-members", "2"]));
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), &[]));
    let nodes = [&first, &second];
    let before = [set(&["$0", "$2"]), set(&["$1", "$3"])];
    wait_settled(&nodes, &before).await;
    let loaded = load(&first, "l", 400).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(second.conn_str(), "w", Arc::clone(&stop));
    wait_writes(&nodes, &before, 400, 20).await;

    let refused = query(&second.conn_str(), "ALTER FRAGMENT $0 MERGE WITH $1").await;
    assert!(
        matches!(&refused, Err(e) if e.starts_with("55000") && e.contains("different owners")),
        "{refused:?}"
    );
    let refused = query(&second.conn_str(), "ALTER FRAGMENT $0 SPLIT AT 900000").await;
    assert!(
        matches!(&refused, Err(e) if e.starts_with("55000") && e.contains("cannot split")),
        "{refused:?}"
    );

    // Split, asked through the node that does not own the fragment.
    query(&second.conn_str(), "ALTER FRAGMENT $0 SPLIT").await.unwrap();
    let split = [set(&["$2", "$4", "$5"]), set(&["$1", "$3"])];
    let per_node = wait_settled(&nodes, &split).await;
    wait_writes(&nodes, &split, total(&per_node), 20).await;

    // Merge the two halves back into one new fragment.
    query(&first.conn_str(), "ALTER FRAGMENT $4 MERGE WITH $5").await.unwrap();
    let merged = [set(&["$2", "$6"]), set(&["$1", "$3"])];
    let per_node = wait_settled(&nodes, &merged).await;
    wait_writes(&nodes, &merged, total(&per_node), 20).await;

    stop.store(true, Ordering::SeqCst);
    let written = writer.await.unwrap();
    let per_node = wait_settled(&nodes, &merged).await;
    let mut acked = written.acked.clone();
    acked.extend(loaded);
    check_documents(&nodes, &per_node, &acked, &written.maybe).await;
    let committed = first.log_text().matches("split or merge committed").count();
    assert_eq!(committed, 2, "one split, one merge, each committed once:\n{}", first.log_text());
    second.stop();
    first.stop();
}

// Checks a crash of the owner (also the coordinator) once the split's new fragments are
// durable and before the coordinator heard of it: after the restart the split completes
// (its build starts over) and every document loaded before is stored exactly once, in the
// two new fragments, which take writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_split_crash_owner_after_build() {
    crash_during_split(
        "reshape-after-build",
        "ALTER FRAGMENT $1 SPLIT",
        &["$0", "$2", "$3", "$4", "$5"],
    )
    .await;
}

// Checks a crash of the owner once a merge's new fragment is durable: after the restart the
// merge completes and every document is stored exactly once, in the merged fragment and the
// others, which take writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_merge_crash_owner_after_build() {
    crash_during_split(
        "reshape-after-build",
        "ALTER FRAGMENT $1 MERGE WITH $2",
        &["$0", "$3", "$4"],
    )
    .await;
}

// Checks a crash of the owner after the split's commit was applied and before it deleted the
// source: at restart it serves only the new fragments, deletes the leftover source, and every
// document is stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_split_crash_owner_before_delete() {
    crash_during_split(
        "source-before-delete",
        "ALTER FRAGMENT $1 SPLIT",
        &["$0", "$2", "$3", "$4", "$5"],
    )
    .await;
}

/// A crash of a one-node cluster's owner at `fault` during `alter` (a split or merge), then a
/// restart: it completes (the node serves `after`), every document loaded before is stored
/// once, every fragment takes writes.
async fn crash_during_split(fault: &str, alter: &str, after: &[&str]) {
    let mut opts = options(1, free_loopback_port(), None, &[]);
    opts.env = vec![("TESSERA_HANDOFF_FAULT".to_owned(), fault.to_owned())];
    let mut node = start(opts);
    wait_settled(&[&node], &[set(&["$0", "$1", "$2", "$3"])]).await;
    let loaded = load(&node, "c", 2_000).await;
    query(&node.conn_str(), alter).await.unwrap();
    node.wait_crash();
    assert!(node.log_text().contains("TESSERA_HANDOFF_FAULT: aborting"), "{}", node.log_text());
    node.set_env(Vec::new());
    node.start_again();
    let after = [set(after)];
    let per_node = wait_settled(&[&node], &after).await;
    check_documents(&[&node], &per_node, &loaded, &BTreeSet::new()).await;
    assert_eq!(total(&per_node), loaded.len() as u64);
    let more = load(&node, "after", 200).await;
    let per_node = wait_settled(&[&node], &after).await;
    assert_eq!(total(&per_node), (loaded.len() + more.len()) as u64);
    assert!(per_node[0].values().all(|n| *n > 0), "{per_node:?}");
    node.stop();
}

// Checks automatic splitting (`--split-fragment-bytes`): a one-node cluster loaded with
// about 2 MiB over four fragments splits every fragment over the threshold until none is
// (one split at a time, each at the middle), and every document is stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_split_oversized_fragments_automatically() {
    const THRESHOLD: u64 = 400_000;
    let threshold = THRESHOLD.to_string();
    let mut node =
        start(options(1, free_loopback_port(), None, &["--split-fragment-bytes", &threshold]));
    wait_settled(&[&node], &[set(&["$0", "$1", "$2", "$3"])]).await;
    let client = node.connect().await;
    let filler = "x".repeat(1_000);
    let mut loaded = BTreeSet::new();
    for batch in (0..2_000).collect::<Vec<_>>().chunks(50) {
        let values: Vec<String> =
            batch.iter().map(|i| format!("('a{i}', '{{\"pad\": \"{filler}\"}}')")).collect();
        // A split can start once a fragment passes the threshold, before the load ends: a
        // batch meeting it gets 40001 with nothing applied (seen with four tests at once).
        let sql = format!("INSERT INTO notes VALUES {}", values.join(", "));
        write_retrying(&[&node], &client, &sql).await;
        loaded.extend(batch.iter().map(|i| format!("a{i}")));
    }
    let per_node = wait_for(&[&node], "every fragment under the threshold", || async {
        let rows = query(&node.conn_str(), "SHOW local_fragments").await.ok()?;
        let small =
            rows.iter().all(|r| r[4].as_deref().unwrap().parse::<u64>().unwrap() <= THRESHOLD);
        let docs: BTreeMap<String, u64> = rows
            .iter()
            .map(|r| (r[0].clone().unwrap(), r[3].as_deref().unwrap().parse().unwrap()))
            .collect();
        (small && docs.len() >= 8 && docs.values().sum::<u64>() == loaded.len() as u64)
            .then_some(vec![docs])
    })
    .await;
    assert!(!per_node[0].contains_key("$0"), "the oversized $0 was split: {per_node:?}");
    check_documents(&[&node], &per_node, &loaded, &BTreeSet::new()).await;
    assert!(node.log_text().contains("splitting an oversized fragment"), "{}", node.log_text());
    node.stop();
}

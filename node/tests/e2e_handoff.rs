//! Fragment handoff end to end (issue #7 items 5-6): real `tessera` processes on loopback.
//! Rebalancing moves fragments to a joining node under a continuous writer; a SIGTERM hands a
//! node's fragments to the others before it leaves; a crash of the source, the destination
//! or the coordinator at injected steps (`TESSERA_HANDOFF_FAULT`) leaves one owner per
//! fragment and every acknowledged document, exactly once. Every wait polls until a deadline
//! (polling, not synchronisation); nothing asserts timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::cluster::{
    CLUSTER_DEADLINE, check_documents, cluster_args, local_fragments, query, wait_for,
};
use support::{Node, NodeOptions, free_loopback_port};

const FRAGMENTS: u32 = 4;

/// WARN lines a cluster with crashing or leaving members is expected to log.
const CLUSTER_NOISE: &[&str] = &[
    "is unreachable",
    "handoff failed",
    "aborted a handoff",
    "decision not confirmed",
    "decision refused",
    "source answered",
    "reconcile step",
    "cannot list this node's fragments",
    "TESSERA_HANDOFF_FAULT",
];

fn options(id: u32, peer: u16, join: Option<u16>, more: &[&str]) -> NodeOptions {
    let mut extra_args = cluster_args("handoff", id, peer, join, more);
    extra_args.extend(["--max-simultaneous-rebalance".to_owned(), "1".to_owned()]);
    NodeOptions { executors: 2, fragments: FRAGMENTS, extra_args, ..NodeOptions::default() }
}

fn start(options: NodeOptions) -> Node {
    let mut node = Node::start_with(options);
    for noise in CLUSTER_NOISE {
        node.expect_log(noise);
    }
    node
}

/// Waits until the nodes serve every fragment exactly once, `want[i]` of them on `nodes[i]`;
/// returns each node's fragments with their documents.
async fn wait_settled(nodes: &[&Node], want: &[usize]) -> Vec<BTreeMap<String, u64>> {
    wait_for(nodes, "every fragment served once, as the map says", || async {
        let mut all = BTreeSet::new();
        let mut per_node = Vec::new();
        for (node, want) in nodes.iter().zip(want) {
            let own = local_fragments(node).await?;
            if own.len() != *want {
                return None;
            }
            for f in own.keys() {
                if !all.insert(f.clone()) {
                    return None;
                }
            }
            per_node.push(own);
        }
        (all.len() == FRAGMENTS as usize).then_some(per_node)
    })
    .await
}

/// Loads `count` documents `{prefix}{i}` of about `pad` bytes through `node`, 50 per INSERT.
async fn load(node: &Node, prefix: &str, count: usize, pad: usize) -> BTreeSet<String> {
    let client = node.connect().await;
    let filler = "x".repeat(pad);
    let mut ids = BTreeSet::new();
    for batch in (0..count).collect::<Vec<_>>().chunks(50) {
        let values: Vec<String> = batch
            .iter()
            .map(|i| format!("('{prefix}{i}', '{{\"n\": {i}, \"pad\": \"{filler}\"}}')"))
            .collect();
        client
            .simple_query(&format!("INSERT INTO notes VALUES {}", values.join(", ")))
            .await
            .unwrap_or_else(|e| panic!("load: {e}\nlog:\n{}", node.log_text()));
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

/// A writer inserting `{prefix}{i}` one at a time through the first node of `conns` that
/// takes it (the owner: without region forwarding another node refuses a remote fragment),
/// until `stop`. A 23505 answer to a retry means an earlier attempt was stored.
fn spawn_writer(
    conns: Arc<Mutex<Vec<String>>>,
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
                let targets = conns.lock().unwrap().clone();
                let mut done = false;
                for conn in &targets {
                    match query(conn, &sql).await {
                        Ok(_) => done = true,
                        Err(e) if e.starts_with("23505") && retried => done = true,
                        Err(e) if e.starts_with("23505") => {
                            panic!("{id} exists before it was written")
                        }
                        Err(e) if ["55000", "0A000", "40001"].iter().any(|c| e.starts_with(c)) => {}
                        Err(_) => {
                            written.maybe.insert(id.clone());
                        }
                    }
                    retried = true;
                    if done {
                        break;
                    }
                }
                if done {
                    written.maybe.remove(&id);
                    written.acked.insert(id.clone());
                    break;
                }
                assert!(Instant::now() < deadline, "{id}: no node took it in {CLUSTER_DEADLINE:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            i += 1;
        }
        written
    })
}

// Checks a rebalance-driven move under a continuous writer: a second node joins, the
// coordinator moves two of the four fragments to it (one at a time), the writer keeps going
// through whichever node owns each document, and afterwards every acknowledged document is
// stored once, on the fragment's one owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_handoff_rebalance_under_a_writer() {
    let seed_port = free_loopback_port();
    let off = ["--handoff-on-shutdown", "false"];
    let mut first = start(options(1, seed_port, None, &off));
    wait_settled(&[&first], &[4]).await;
    let loaded = load(&first, "l", 400, 200).await;
    let conns = Arc::new(Mutex::new(vec![first.conn_str()]));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(Arc::clone(&conns), "w", Arc::clone(&stop));
    wait_for(&[&first], "the writer to make progress", || async {
        (wait_settled_now(&[&first]).await? >= 400 + 20).then_some(())
    })
    .await;
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), &off));
    conns.lock().unwrap().push(second.conn_str());
    let per_node = wait_settled(&[&first, &second], &[2, 2]).await;
    // More writes after the moves, then stop.
    let seen = per_node.iter().flat_map(|m| m.values()).sum::<u64>();
    wait_for(&[&first, &second], "writes after the moves", || async {
        let after = wait_settled_now(&[&first, &second]).await?;
        (after > seen + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let written = writer.await.unwrap();
    let per_node = wait_settled(&[&first, &second], &[2, 2]).await;
    let mut acked = written.acked.clone();
    acked.extend(loaded);
    check_documents(&[&first, &second], &per_node, &acked, &written.maybe).await;
    let committed = first.log_text().matches("handoff committed").count();
    assert_eq!(committed, 2, "two moves, each committed once:\n{}", first.log_text());
    second.stop();
    first.stop();
}

/// Documents the nodes serve in all, if every fragment is served once.
async fn wait_settled_now(nodes: &[&Node]) -> Option<u64> {
    let mut all = BTreeSet::new();
    let mut docs = 0;
    for node in nodes {
        for (f, n) in local_fragments(node).await? {
            if !all.insert(f) {
                return None;
            }
            docs += n;
        }
    }
    (all.len() == FRAGMENTS as usize).then_some(docs)
}

// Checks graceful shutdown under load: SIGTERM on one of two data nodes hands both of its
// fragments to the other before it exits (status 0), while a writer keeps writing; then the
// survivor serves every fragment and every acknowledged document once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_handoff_graceful_shutdown_under_load() {
    let seed_port = free_loopback_port();
    let mut first = start(options(1, seed_port, None, &["--min-members", "2"]));
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), &[]));
    wait_settled(&[&first, &second], &[2, 2]).await;
    let conns = Arc::new(Mutex::new(vec![first.conn_str(), second.conn_str()]));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(Arc::clone(&conns), "g", Arc::clone(&stop));
    wait_for(&[&first, &second], "the writer to make progress", || async {
        (wait_settled_now(&[&first, &second]).await? >= 20).then_some(())
    })
    .await;
    second.stop();
    assert!(
        second.log_text().contains("handed off every fragment"),
        "the node left without handing off:\n{}",
        second.log_text()
    );
    conns.lock().unwrap().retain(|c| *c == first.conn_str());
    let after = wait_settled(&[&first], &[4]).await;
    let seen: u64 = after.iter().flat_map(|m| m.values()).sum();
    wait_for(&[&first], "writes after the shutdown", || async {
        (wait_settled_now(&[&first]).await? > seen + 10).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let written = writer.await.unwrap();
    let per_node = wait_settled(&[&first], &[4]).await;
    check_documents(&[&first], &per_node, &written.acked, &written.maybe).await;
    first.stop();
}

/// A crash at `fault` (armed on node `victim`, 1 or 2) during the first handoff from node 1
/// to a joining node 2; after the victim restarts, the moves complete and every document
/// loaded before is stored once.
async fn crash_during_handoff(fault: &str, victim: usize) {
    let seed_port = free_loopback_port();
    let off = ["--handoff-on-shutdown", "false"];
    let mut first_opts = options(1, seed_port, None, &off);
    let mut second_opts = options(2, free_loopback_port(), Some(seed_port), &off);
    let armed = vec![("TESSERA_HANDOFF_FAULT".to_owned(), fault.to_owned())];
    if victim == 1 {
        first_opts.env = armed;
    } else {
        second_opts.env = armed;
    }
    let mut first = start(first_opts);
    wait_settled(&[&first], &[4]).await;
    // About 3 MiB per fragment: three export chunks each.
    let loaded = load(&first, "c", 6_000, 2_000).await;
    let mut second = start(second_opts);
    {
        let node = if victim == 1 { &mut first } else { &mut second };
        node.wait_crash();
        assert!(node.log_text().contains("TESSERA_HANDOFF_FAULT: aborting"), "{}", node.log_text());
        node.set_env(Vec::new());
        node.start_again();
    }
    let per_node = wait_settled(&[&first, &second], &[2, 2]).await;
    check_documents(&[&first, &second], &per_node, &loaded, &BTreeSet::new()).await;
    let stored: u64 = per_node.iter().flat_map(|m| m.values()).sum();
    assert_eq!(stored, loaded.len() as u64);
    // No fence outlives its handoff: each owner takes a write to each of its fragments.
    let shards_per_fragment = (1u32 << 20) / FRAGMENTS;
    for (node, own) in [&first, &second].iter().zip(&per_node) {
        for f in own.keys() {
            let n: u32 = f.trim_start_matches('$').parse().unwrap();
            let id = format!("after{n}$@{}", n * shards_per_fragment + 1);
            let sql = format!("INSERT INTO notes VALUES ('{id}', '{{\"n\": 0}}')");
            if let Err(e) = query(&node.conn_str(), &sql).await {
                panic!("write to {f} on its owner: {e}\nlog:\n{}", node.log_text());
            }
        }
    }
    second.stop();
    first.stop();
}

// Checks a crash of the source (also the coordinator here) after its first acknowledged
// chunk: the handoff is aborted after the restart, the destination's partial copy discarded,
// and the moves then complete with every document once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_handoff_crash_source_mid_stream() {
    crash_during_handoff("source-after-chunk:1", 1).await;
}

// Checks a crash of the destination with a durable but unacknowledged chunk: the source's
// stream fails, the coordinator aborts, the source unfences, and after the destination
// restarts the moves complete with every document once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_handoff_crash_destination_mid_stream() {
    crash_during_handoff("destination-after-chunk:2", 2).await;
}

// Checks a crash of the coordinator (the raft leader) after the source reported the stream
// durable and before the commit was proposed: nothing committed, so the restarted coordinator
// aborts the orphan handoff and starts over; every document is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_handoff_crash_coordinator_before_commit() {
    crash_during_handoff("coordinator-after-done", 1).await;
}

// Checks a crash of the source after the commit was applied and before it deleted its copy:
// at restart it does not serve the fragment it gave away and deletes the leftover copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_handoff_crash_source_before_delete() {
    crash_during_handoff("source-before-delete", 1).await;
}

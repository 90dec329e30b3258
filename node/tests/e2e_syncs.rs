//! `--max-syncs-per-executor` (the executor-wide gate on group commits in flight across its
//! fragments): the flag and the environment variable are accepted, the start-up line shows the
//! setting, concurrent writes from many clients over every fragment are all acknowledged and
//! all there after a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::{Node, NodeOptions};

const CLIENTS: usize = 16;
const PER_CLIENT: usize = 25;

fn ready_line(node: &Node) -> String {
    node.log_lines()
        .into_iter()
        .find(|l| l.contains("ready: listening on"))
        .unwrap_or_else(|| panic!("no ready line:\n{}", node.log_text()))
}

/// `CLIENTS` connections each inserting `PER_CLIENT` documents, one statement at a time, all
/// at once; then the count.
async fn write_concurrently(node: &Node) -> i64 {
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = node.connect().await;
        tasks.push(tokio::spawn(async move {
            for n in 0..PER_CLIENT {
                let sql = format!(r#"INSERT INTO c VALUES ('c{c}-{n}', '{{"c": {c}, "n": {n}}}')"#);
                client.simple_query(&sql).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let client = node.connect().await;
    let row = client.query_one("SELECT count(*) FROM c", &[]).await.unwrap();
    row.get::<_, i64>(0)
}

// Checks the flag: shown on the start-up line, concurrent writes over all eight fragments all
// acknowledged and present, also after a restart.
#[tokio::test]
async fn flag_is_shown_and_writes_work() {
    let mut node = Node::start_with(NodeOptions {
        extra_args: vec!["--max-syncs-per-executor".into(), "1".into()],
        ..NodeOptions::default()
    });
    let line = ready_line(&node);
    assert!(line.contains(", max-syncs-per-executor 1, "), "{line}");
    assert_eq!(write_concurrently(&node).await, (CLIENTS * PER_CLIENT) as i64);
    node.restart();
    let client = node.connect().await;
    let row = client.query_one("SELECT count(*) FROM c", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), (CLIENTS * PER_CLIENT) as i64);
    let rows = client.simple_query("SELECT n FROM c WHERE id() = 'c7-24'").await.unwrap();
    assert_eq!(support::simple_rows(&rows), vec![vec![Some("24".to_owned())]]);
    node.stop();
}

// Checks the defaults (a gate of 2 over several fragments per executor, 1 over one each)
// and the environment variable turning the gate off (0).
#[tokio::test]
async fn default_and_environment() {
    let mut node = Node::start();
    let line = ready_line(&node);
    assert!(line.contains(", max-syncs-per-executor 2, "), "{line}");
    assert_eq!(write_concurrently(&node).await, (CLIENTS * PER_CLIENT) as i64);
    node.stop();
    let mut node = Node::start_with(NodeOptions { fragments: 2, ..NodeOptions::default() });
    let line = ready_line(&node);
    assert!(line.contains(", 2 fragments, max-syncs-per-executor 1, "), "{line}");
    assert_eq!(write_concurrently(&node).await, (CLIENTS * PER_CLIENT) as i64);
    node.stop();
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_MAX_SYNCS_PER_EXECUTOR".into(), "0".into())],
        ..NodeOptions::default()
    });
    let line = ready_line(&node);
    assert!(line.contains(", max-syncs-per-executor 0 (no limit), "), "{line}");
    assert_eq!(write_concurrently(&node).await, (CLIENTS * PER_CLIENT) as i64);
    node.stop();
}

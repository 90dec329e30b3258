//! Peer authentication (`--cluster-secret-file`) across processes: a node with the cluster's
//! secret joins; a node with another secret and a node without one are refused, each with
//! the reason in both logs, and never become members. A world-readable secret file stops the
//! node at start. Every wait polls until a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use support::cluster::{CLUSTER_DEADLINE, POLL_EVERY, cluster_args};
use support::{Node, NodeOptions, free_loopback_port, simple_rows};

fn secret_file(name: &str, text: &str, mode: u32) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn options(id: u32, peer: u16, join: Option<u16>, secret: Option<&Path>) -> NodeOptions {
    let mut extra_args = cluster_args("auth", id, peer, join, &[]);
    if let Some(s) = secret {
        extra_args.extend(["--cluster-secret-file".to_owned(), s.display().to_string()]);
    }
    NodeOptions { executors: 1, fragments: 4, extra_args, ..NodeOptions::default() }
}

/// The member ids `node` shows.
async fn members(node: &Node) -> Vec<u32> {
    let Ok((client, conn)) = tokio_postgres::connect(&node.conn_str(), tokio_postgres::NoTls).await
    else {
        return Vec::new();
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    match client.simple_query("SHOW CLUSTER").await {
        Ok(m) => {
            simple_rows(&m).iter().map(|r| r[0].as_deref().unwrap().parse().unwrap()).collect()
        }
        Err(_) => Vec::new(),
    }
}

/// Polls until `node`'s log contains `needle`.
async fn wait_log(node: &Node, needle: &str) {
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    while !node.log_text().contains(needle) {
        assert!(Instant::now() < deadline, "no {needle:?} in:\n{}", node.log_text());
        tokio::time::sleep(POLL_EVERY).await;
    }
}

// Checks the right secret joins, a wrong or missing one is refused on both sides.
#[tokio::test]
async fn cluster_secret_admits_members_and_refuses_others() {
    let good = secret_file("good", "the-cluster-secret-0123456789\n", 0o600);
    let wrong = secret_file("wrong", "not-the-cluster-secret-98765\n", 0o600);
    let ports: Vec<u16> = (0..4).map(|_| free_loopback_port()).collect();
    let mut seed = Node::start_with(options(1, ports[0], None, Some(&good)));
    seed.expect_log("refused a peer");
    seed.expect_log("is unreachable");
    let mut member = Node::start_with(options(2, ports[1], Some(ports[0]), Some(&good)));
    member.expect_log("is unreachable");
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    while members(&seed).await != [1, 2] {
        assert!(Instant::now() < deadline, "node 2 never joined:\n{}", seed.log_text());
        tokio::time::sleep(POLL_EVERY).await;
    }
    wait_log(&seed, "authenticated with the cluster secret").await;

    let mut intruder = Node::start_with(options(3, ports[2], Some(ports[0]), Some(&wrong)));
    intruder.expect_log("cannot join");
    let mut open = Node::start_with(options(4, ports[3], Some(ports[0]), None));
    open.expect_log("cannot join");
    wait_log(&intruder, "node 3 failed authentication").await;
    wait_log(&open, "requires a cluster secret").await;
    wait_log(&seed, "peer node 3 failed authentication").await;
    wait_log(&seed, "peer node 4 did not answer the authentication challenge").await;
    assert_eq!(members(&seed).await, [1, 2], "refused nodes are no members");
    assert_eq!(members(&member).await, [1, 2]);
    intruder.stop();
    open.stop();
}

// Checks a secret file other users can read stops the node at start, naming the setting.
#[test]
fn world_readable_secret_file_is_refused() {
    let loose = secret_file("loose", "the-cluster-secret-0123456789\n", 0o644);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--cluster-name", "auth", "--node-id", "1"])
        .args(["--peer-listen", "127.0.0.1:1", "--cluster-secret-file"])
        .arg(&loose)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cluster-secret-file") && stderr.contains("readable by other users"),
        "{stderr}"
    );
}

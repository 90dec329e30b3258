//! Backup and restore seen by an operator: `tessera backup` against a running,
//! password-protected node while clients write, `tessera restore` into a new data directory,
//! and a node started on it serves exactly the backed-up state; a damaged backup is refused
//! naming the file and offset.
//!
//! The workload until cross-fragment transactions land: each client increments its own
//! counter document and records every acknowledged value. A consistent backup holds, for each
//! counter, a value at least what was acknowledged before the backup started and at most what
//! was acknowledged by the time it finished.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use support::{Node, NodeOptions, run_client, simple_rows};

const PASSWORD: &str = "backup-pass";
const CLIENTS: usize = 4;

fn tessera() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TESSERA_") {
            c.env_remove(key);
        }
    }
    c
}

fn backup(node: &Node, to: &Path, password: Option<&str>) -> std::process::Output {
    let mut c = tessera();
    c.arg("backup").arg("--to").arg(to).arg("--addr").arg(node.addr().to_string());
    if let Some(p) = password {
        c.arg("--password").arg(p);
    }
    run_client(c)
}

fn restore(from: &Path, to: &Path) -> std::process::Output {
    let mut c = tessera();
    c.arg("restore").arg("--from").arg(from).arg("--data-dir").arg(to);
    run_client(c)
}

fn scratch(node: &Node, name: &str) -> PathBuf {
    let dir = node
        .data_dir()
        .parent()
        .unwrap()
        .join(format!("{}-{name}", node.data_dir().file_name().unwrap().to_string_lossy()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn counters(client: &tokio_postgres::Client) -> Vec<i64> {
    let rows = simple_rows(
        &client.simple_query("SELECT id(), n FROM counters ORDER BY id()").await.unwrap(),
    );
    rows.iter().map(|r| r[1].as_deref().unwrap().parse().unwrap()).collect()
}

// Checks a backup under a concurrent write load against a password-protected node: the
// restored node's counters lie between what was acknowledged before the backup and after it,
// it accepts new writes, and a second backup into the same directory is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_under_load_restores_a_consistent_state() {
    let mut node = Node::start_with(NodeOptions {
        password: Some(PASSWORD.to_owned()),
        ..NodeOptions::default()
    });
    let setup = node.connect().await;
    for i in 0..CLIENTS {
        setup
            .simple_query(&format!(r#"INSERT INTO counters VALUES ('c{i}', '{{"n": 0}}')"#))
            .await
            .unwrap();
    }
    // A configured collection: the catalog travels with the backup.
    setup
        .simple_query(
            r#"CREATE TABLE orders () WITH (sharding = '{"Fields": ["Customer"], "Range": 1000}')"#,
        )
        .await
        .unwrap();
    // Filler so the backup has several documents per fragment.
    let filler: Vec<String> =
        (0..200).map(|i| format!(r#"('f{i}', '{{"pad": "{}"}}')"#, "x".repeat(100))).collect();
    setup.simple_query(&format!("INSERT INTO filler VALUES {}", filler.join(", "))).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Vec<AtomicI64>> = Arc::new((0..CLIENTS).map(|_| AtomicI64::new(0)).collect());
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let client = node.connect().await;
        let (stop, acked) = (Arc::clone(&stop), Arc::clone(&acked));
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            // At least a few increments each, then until told to stop.
            while done < 20 || !stop.load(Ordering::SeqCst) {
                let rows = client
                    .simple_query(&format!(
                        "UPDATE counters SET n = n + 1 WHERE id() = 'c{i}' RETURNING n"
                    ))
                    .await
                    .unwrap();
                let n: i64 = simple_rows(&rows)[0][0].as_deref().unwrap().parse().unwrap();
                acked[i].store(n, Ordering::SeqCst);
                done += 1;
            }
        }));
    }
    // Let every client get some writes acknowledged first (no sleeping: wait on the values).
    while acked.iter().any(|a| a.load(Ordering::SeqCst) < 5) {
        tokio::task::yield_now().await;
    }
    let before: Vec<i64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
    let to = scratch(&node, "backup");
    // Blocks this worker thread; the clients run on the other one meanwhile.
    let output = backup(&node, &to, Some(PASSWORD));
    let after: Vec<i64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "backup failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("backup complete:") && stdout.contains("files"), "{stdout}");
    assert!(to.join("manifest.json").exists());

    // Into a non-empty directory: refused.
    let again = backup(&node, &to, Some(PASSWORD));
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
    // Without the password: refused at login.
    let nopass = backup(&node, &scratch(&node, "nopass"), None);
    assert!(!nopass.status.success());
    let live = counters(&setup).await;
    drop(setup);

    // Restore into the node's own (emptied) data directory and start it there.
    node.stop();
    std::fs::remove_dir_all(node.data_dir()).unwrap();
    let restored = restore(&to, node.data_dir());
    assert!(restored.status.success(), "{}", String::from_utf8_lossy(&restored.stderr));
    node.start_again();
    let client = node.connect().await;
    let values = counters(&client).await;
    assert_eq!(values.len(), CLIENTS);
    for i in 0..CLIENTS {
        assert!(
            before[i] <= values[i] && values[i] <= after[i],
            "counter c{i}: restored {} not within [{}, {}] (live {})",
            values[i],
            before[i],
            after[i],
            live[i]
        );
    }
    let sharding = simple_rows(&client.simple_query("SHOW SHARDING orders").await.unwrap());
    assert_eq!(sharding.len(), 1, "the catalog was restored");
    assert!(sharding[0][1].as_deref().unwrap().contains("Customer"));
    let n = simple_rows(&client.simple_query("SELECT count(*) FROM filler").await.unwrap());
    assert_eq!(n[0][0].as_deref(), Some("200"));
    client.simple_query("UPDATE counters SET n = n + 1 WHERE id() = 'c0'").await.unwrap();
    drop(client);
    node.stop();
    let _ = std::fs::remove_dir_all(&to);
}

// Checks that restore refuses a backup with one flipped byte, naming the file and the offset
// of its damaged block, and leaves the destination untouched; an intact copy restores.
#[test]
fn flipped_byte_in_a_backup_is_refused() {
    let node = Node::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = node.connect().await;
        let docs: Vec<String> = (0..300).map(|i| format!(r#"('d{i}', '{{"i": {i}}}')"#)).collect();
        client.simple_query(&format!("INSERT INTO c VALUES {}", docs.join(", "))).await.unwrap();
    });
    let to = scratch(&node, "flip");
    let out = backup(&node, &to, None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The largest segment file, flipped in its second block.
    let mut segments: Vec<PathBuf> = std::fs::read_dir(to.join("fragments"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    segments.sort_by_key(|p| std::fs::metadata(p).unwrap().len());
    let victim = segments.last().unwrap().clone();
    let mut bytes = std::fs::read(&victim).unwrap();
    assert!(bytes.len() > 4200, "a segment with data");
    bytes[4100] ^= 0x01;
    std::fs::write(&victim, &bytes).unwrap();
    let target = scratch(&node, "flip-restore");
    let out = restore(&to, &target);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let name = victim.file_name().unwrap().to_string_lossy().into_owned();
    assert!(stderr.contains(&name), "names the file: {stderr}");
    assert!(stderr.contains("offset 0"), "names the block's offset: {stderr}");
    assert!(!target.exists(), "nothing restored");
    bytes[4100] ^= 0x01;
    std::fs::write(&victim, &bytes).unwrap();
    let out = restore(&to, &target);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&to);
    let _ = std::fs::remove_dir_all(&target);
}

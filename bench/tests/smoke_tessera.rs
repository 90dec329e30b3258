//! Smoke test against a real Tessera node: starts `tessera serve` on a free loopback port with
//! a temporary data directory, waits for its ready line on stderr, runs every workload for one
//! second with tiny sizes (closed loop), checks that every workload completed operations
//! without a single error (none is skipped since transactions landed), then stops the node
//! with SIGTERM and checks that it exits 0.
//!
//! bench depends on no other Tessera crate, so the binary is not built as a dependency: it is
//! `$TESSERA_BIN`, else `<target dir>/debug/tessera` or `<target dir>/release/tessera`
//! (the newer of the two), else this test runs `cargo build -p node` (bounded) first.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{read_json, repo_root, run_bench, short_run, unique_dir};

/// How long building the node may take when its binary is missing (a cold debug build on a
/// shared two-core machine takes minutes).
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long the node may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the node may take to exit after SIGTERM.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at a free port (another process can take a probed port before the node binds it).
const PORT_ATTEMPTS: usize = 5;

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| if d.is_absolute() { d } else { repo_root().join(d) })
        .unwrap_or_else(|| repo_root().join("target"))
}

fn newest_existing(paths: &[PathBuf]) -> Option<PathBuf> {
    paths
        .iter()
        .filter_map(|p| {
            let modified = std::fs::metadata(p).ok()?.modified().ok()?;
            Some((modified, p.clone()))
        })
        .max()
        .map(|(_, p)| p)
}

/// The tessera binary: `$TESSERA_BIN`, an existing build, or a fresh `cargo build -p node`.
fn tessera_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("TESSERA_BIN") {
        let bin = PathBuf::from(bin);
        assert!(bin.is_file(), "TESSERA_BIN={} is not a file", bin.display());
        return bin;
    }
    let dir = target_dir();
    let candidates = [dir.join("debug/tessera"), dir.join("release/tessera")];
    if let Some(bin) = newest_existing(&candidates) {
        return bin;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("smoke_tessera: no tessera binary in {}; running cargo build -p node", dir.display());
    let status = Command::new("timeout")
        .arg(BUILD_TIMEOUT.as_secs().to_string())
        .arg(cargo)
        .args(["build", "-p", "node"])
        .current_dir(repo_root())
        .status()
        .expect("running timeout(1) and cargo");
    assert!(status.success(), "cargo build -p node failed or took over {BUILD_TIMEOUT:?}");
    let bin = dir.join("debug/tessera");
    assert!(bin.is_file(), "cargo build -p node produced no {}", bin.display());
    bin
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Waits for a child for at most `limit`, from a helper thread; `None` when it did not exit.
fn wait_bounded(mut child: Child, limit: Duration) -> Option<ExitStatus> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    rx.recv_timeout(limit).ok().map(|status| status.unwrap())
}

/// A running node; killed (SIGKILL) and its data directory removed if the test fails early.
struct Node {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// Everything the node wrote to stderr, collected by a reader thread.
    log: mpsc::Receiver<String>,
}

impl Node {
    fn start(bin: &Path) -> Node {
        let dir = unique_dir("bench-tessera");
        let mut last_log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let mut child = Command::new(bin)
                .args(["serve", "--data-dir"])
                .arg(dir.join("data"))
                .args(["--listen", &format!("127.0.0.1:{port}"), "--executors", "2"])
                // No metrics endpoint: the default port would be shared by parallel runs.
                .args(["--metrics-listen", ""])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            let stderr = child.stderr.take().unwrap();
            let (ready_tx, ready_rx) = mpsc::channel();
            let (log_tx, log_rx) = mpsc::channel();
            // Reads every line until the node closes stderr (it exits), so the pipe never fills.
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if line.contains("ready: listening on") {
                        let _ = ready_tx.send(true);
                    }
                    let _ = log_tx.send(line);
                }
                let _ = ready_tx.send(false);
            });
            match ready_rx.recv_timeout(READY_TIMEOUT) {
                Ok(true) => return Node { child: Some(child), port, dir, log: log_rx },
                Ok(false) => {
                    // It exited before becoming ready (most likely: the port was taken).
                    let _ = child.wait();
                    last_log = log_rx.try_iter().collect::<Vec<_>>().join("\n");
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = log_rx.try_iter().collect::<Vec<_>>().join("\n");
                    panic!("tessera printed no ready line within {READY_TIMEOUT:?}:\n{log}");
                }
            }
        }
        panic!("tessera did not start in {PORT_ATTEMPTS} attempts; last stderr:\n{last_log}");
    }

    /// SIGTERM, then the exit status (bounded).
    fn stop(&mut self) -> ExitStatus {
        let child = self.child.take().expect("running");
        let term = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("running kill(1)");
        assert!(term.success(), "kill -TERM failed");
        let pid = child.id();
        match wait_bounded(child, EXIT_TIMEOUT) {
            Some(status) => status,
            None => {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
                panic!("tessera did not exit within {EXIT_TIMEOUT:?} of SIGTERM");
            }
        }
    }

    fn stderr(&self) -> String {
        self.log.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn smoke_every_supported_workload_against_a_tessera_node() {
    let bin = tessera_binary();
    let mut node = Node::start(&bin);
    let target = format!("tessera=postgres://bench@127.0.0.1:{}/bench", node.port);
    let out_dir = node.dir.join("closed");
    // One request in flight at a time: concurrent writes of one document can exhaust Tessera's
    // autocommit retries (40001 after 16 attempts) on a data set this small, which would make
    // "zero errors" depend on timing. Concurrency is exercised by the read-only run below.
    run_bench(&short_run(
        &target,
        &out_dir,
        &[
            "--workloads",
            "all",
            "--docs",
            "200",
            "--duration",
            "1s",
            "--connections",
            "1",
            "--depth",
            "1",
            "--seed",
            "7",
        ],
    ));

    let run = read_json(&out_dir.join("run.json"));
    assert_eq!(run["load"][0]["docs"], 200);
    let results = run["results"].as_array().unwrap();
    let skipped = run["skipped"].as_array().unwrap();
    // Seventeen workloads, all measured: nothing is skipped.
    assert_eq!(results.len(), 17, "{results:?}");
    assert!(skipped.is_empty(), "{skipped:?}");
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    for r in results {
        let workload = r["workload"].as_str().unwrap();
        assert!(r["ops"].as_u64().unwrap() > 0, "{workload}: no operations completed");
        assert_eq!(r["error_count"], 0, "{workload}: errors {}", r["errors"]);
        assert_eq!(r["target"], "tessera");
        assert!(r["rows"].as_u64().unwrap() > 0, "{workload}: no rows");
        assert!(summary.contains(&format!("| {workload} | tessera |")), "{workload}");
    }
    // Every point read of a loaded id finds exactly its document.
    let point = results.iter().find(|r| r["workload"] == "point-read").unwrap();
    assert_eq!(point["rows"], point["ops"]);
    // A content query returns at least the customer's 8 loaded documents (the insert
    // workload before it added more).
    let content = results.iter().find(|r| r["workload"] == "content-query").unwrap();
    assert!(content["rows"].as_u64().unwrap() >= 8 * content["ops"].as_u64().unwrap());

    // Reads from several connections with several requests in flight each, on the data above.
    let reads = node.dir.join("reads");
    run_bench(&short_run(
        &target,
        &reads,
        &[
            "--workloads",
            "point-read,content-query,scatter-query,ycsb-c",
            "--docs",
            "200",
            "--skip-load",
            "--duration",
            "1s",
            "--connections",
            "3",
            "--depth",
            "4",
        ],
    ));
    let run = read_json(&reads.join("run.json"));
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for r in results {
        assert!(r["ops"].as_u64().unwrap() > 0, "{}: no operations", r["workload"]);
        assert_eq!(r["error_count"], 0, "{}: errors {}", r["workload"], r["errors"]);
    }
    assert!(run["skipped"].as_array().unwrap().is_empty());

    // Loading again empties the collection first (no DROP TABLE in Tessera): 200 docs again,
    // without the inserted ones, so a content query finds exactly 8 per customer.
    let again = node.dir.join("again");
    run_bench(&short_run(
        &target,
        &again,
        &[
            "--workloads",
            "content-query",
            "--docs",
            "200",
            "--duration",
            "1s",
            "--connections",
            "1",
        ],
    ));
    let run = read_json(&again.join("run.json"));
    let r = &run["results"][0];
    assert_eq!(r["error_count"], 0, "{}", r["errors"]);
    assert_eq!(r["rows"].as_u64().unwrap(), 8 * r["ops"].as_u64().unwrap());

    let status = node.stop();
    assert!(status.success(), "tessera exited with {status:?}:\n{}", node.stderr());
}

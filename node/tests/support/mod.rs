//! Shared by the `e2e_*` tests: runs the real `tessera serve` binary on a loopback port with a
//! fresh data directory, and talks to it the way clients do.
//!
//! - [`Node::start`] binds a std listener on port 0, reads the port, drops it and starts the
//!   binary with `--listen 127.0.0.1:PORT --executors 2 --fragments 8`. It waits for the ready
//!   line by reading stderr line by line (no sleeps); if the process exits first the test
//!   fails with its log, unless the log says the port was taken in between, in which case it
//!   tries another port.
//! - Every stderr line is kept; a failing test prints them (and the data directory is kept).
//! - [`Node::stop`] sends SIGTERM and asserts exit status 0; Drop does the same when the test
//!   did not. [`Node::restart`] stops and starts again on the same data directory;
//!   [`Node::kill9`] + [`Node::start_again`] crash it instead.
//! - Any `WARN` or `ERROR` log line, or a panic message, fails the test at stop unless the
//!   test declared it with [`Node::expect_log`].
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

pub mod cluster;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a node may take to print its ready line. A bound that turns a hang into a failure
/// with the log, not a synchronisation delay: the wait ends at the line itself.
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a node may take to exit after SIGTERM before the test kills it and fails.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an external client (psql, pgbench, python3) may run before it is killed and the
/// test fails.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// Times a start is retried when the free port was taken between probing and binding.
const START_ATTEMPTS_MAX: u32 = 8;
/// Substring of the node's log line announcing it serves clients.
const READY_LINE: &str = "ready: listening on";

/// The root of the repository (node's parent), for scripts under `node/tests/`.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned()
}

/// A file under `node/tests/`.
pub fn test_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(relative)
}

/// How a node is started.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// `--executors`.
    pub executors: u32,
    /// `--fragments`.
    pub fragments: u32,
    /// `--password`; `None` for trust authentication.
    pub password: Option<String>,
    /// Extra environment of the process (test-only switches such as `TESSERA_FAULT`); every
    /// other `TESSERA_*` variable of the test's environment is removed.
    pub env: Vec<(String, String)>,
    /// Serve metrics on a free loopback port (`--metrics-listen`); off by default, so test
    /// nodes never compete for the default port.
    pub metrics: bool,
    /// More `serve` arguments (e.g. `--slow-statement-ms 0`).
    pub extra_args: Vec<String>,
    /// The process's open-file limit (`RLIMIT_NOFILE`), soft and hard; `None` inherits the
    /// test's.
    pub open_files: Option<(u64, u64)>,
}

impl Default for NodeOptions {
    fn default() -> NodeOptions {
        NodeOptions {
            executors: 2,
            fragments: 8,
            password: None,
            env: Vec::new(),
            metrics: false,
            extra_args: Vec::new(),
            open_files: None,
        }
    }
}

/// A running `tessera serve` process and its data directory.
pub struct Node {
    options: NodeOptions,
    data_dir: PathBuf,
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
    expected: Vec<String>,
    /// Log lines of earlier runs (before a restart) already checked.
    checked: usize,
}

/// A fresh directory under cargo's per-target temp dir, unique per process and call.
fn fresh_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-{}-{n}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("remove a stale temp dir");
    }
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// `--segment-bytes` of every test node: 1 MiB, or `TESSERA_TEST_SEGMENT_BYTES` (a soak's
/// knob: small segments make the nodes roll and fill spare segments often).
fn test_segment_bytes() -> String {
    std::env::var("TESSERA_TEST_SEGMENT_BYTES").unwrap_or_else(|_| "1048576".to_owned())
}

/// Ports this test process handed out. Binding port 0 and closing can give the same port
/// twice in a row, so a test that takes several ports before starting its nodes (peer
/// addresses) could give two nodes one port (seen in CI: "Address already in use").
static HANDED_OUT: Mutex<std::collections::BTreeSet<u16>> =
    Mutex::new(std::collections::BTreeSet::new());

/// A loopback port that was free a moment ago and that no test of this run handed out before.
fn free_port() -> u16 {
    loop {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind a probe listener");
        let port = probe.local_addr().expect("probe address").port();
        if claim(port) {
            return port;
        }
    }
}

/// Claims `port` for this test run, once. `cargo test` runs one test binary at a time, so
/// the set of this process is the run's. Under cargo-nextest every test is a process of its
/// own and several run at once: the claim is a file in a directory of the run
/// (`NEXTEST_RUN_ID`), created only if absent, so exactly one process gets it.
fn claim(port: u16) -> bool {
    let Ok(run) = std::env::var("NEXTEST_RUN_ID") else {
        return HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(port);
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ports-{run}"));
    std::fs::create_dir_all(&dir).expect("create the run's port directory");
    match std::fs::OpenOptions::new().write(true).create_new(true).open(dir.join(port.to_string()))
    {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => panic!("claim port {port} in {}: {e}", dir.display()),
    }
}

/// A loopback port that was free a moment ago, for addresses a test must know before the node
/// starts (a cluster node's peer address).
pub fn free_loopback_port() -> u16 {
    free_port()
}

/// Removes terminal colour sequences (`ESC [ ... m`) from a log line.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The level word of a tracing line (`2026-…Z  WARN message`), if the line has one.
fn level_of(line: &str) -> Option<&str> {
    line.split_whitespace()
        .nth(1)
        .filter(|w| matches!(*w, "TRACE" | "DEBUG" | "INFO" | "WARN" | "ERROR"))
}

/// Whether a log line must fail the test unless expected: a WARN or ERROR line, or a panic.
fn is_alarming(line: &str) -> bool {
    matches!(level_of(line), Some("WARN" | "ERROR")) || line.contains("panicked at")
}

/// Waits for `child` to exit; kills it (SIGKILL) and reports `None` when it takes longer
/// than `limit`. The watchdog thread only turns a hang into a failure.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
            // The child is not reaped yet (wait() below has not returned), so the pid is
            // still ours.
            // SAFETY: kill(2) with a pid and a signal number has no memory-safety conditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    let status = child.wait().expect("wait for child");
    let _ = done_tx.send(());
    let killed = watchdog.join().expect("watchdog thread");
    if killed { None } else { Some(status) }
}

/// Makes `command`'s process start with an open-file limit (`RLIMIT_NOFILE`) of `soft` and
/// `hard`.
pub fn limit_open_files(command: &mut Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: the closure runs in the forked child before exec and calls only setrlimit(2),
    // which is async-signal-safe, on a value copied into the closure.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Runs an external client with its output captured; kills it and fails when it runs past
/// [`CLIENT_TIMEOUT`].
pub fn run_client(mut command: Command) -> Output {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {shown}: {e} (scripts/install-deps.sh installs it)")
        });
    // Read both pipes on threads so a chatty client cannot block on a full pipe.
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out_pipe, &mut v).expect("read stdout");
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err_pipe, &mut v).expect("read stderr");
        v
    });
    let status = wait_bounded(&mut child, CLIENT_TIMEOUT);
    let stdout = out.join().expect("stdout thread");
    let stderr = err.join().expect("stderr thread");
    let Some(status) = status else {
        panic!(
            "{shown} ran longer than {CLIENT_TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    Output { status, stdout, stderr }
}

impl Node {
    /// Starts a node with the default options (2 executors, 8 fragments, trust).
    pub fn start() -> Node {
        Node::start_with(NodeOptions::default())
    }

    /// Starts a node with `options` on a fresh data directory.
    pub fn start_with(options: NodeOptions) -> Node {
        let mut node = Node {
            options,
            data_dir: fresh_dir(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics_addr: None,
            child: None,
            log: Arc::default(),
            reader: None,
            expected: Vec::new(),
            checked: 0,
        };
        node.launch();
        node
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics endpoint's address, when started with `metrics: true`.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The running node's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("node is running").id()
    }

    /// The node's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// A libpq-style connection string (tokio-postgres and psql accept it).
    pub fn conn_str(&self) -> String {
        let mut s = format!(
            "host=127.0.0.1 port={} user=tester dbname=tessera sslmode=disable",
            self.addr.port()
        );
        if let Some(p) = &self.options.password {
            s.push_str(&format!(" password={p}"));
        }
        s
    }

    /// Declares that log lines containing `needle` are expected, WARN or ERROR ones included.
    pub fn expect_log(&mut self, needle: &str) {
        self.expected.push(needle.to_owned());
    }

    /// Every log line so far (all runs), colour removed.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The log as one text, for failure messages.
    pub fn log_text(&self) -> String {
        self.log_lines().join("\n")
    }

    /// Connects with tokio-postgres (simple and extended protocol) and drives the connection
    /// on the test's runtime.
    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = self.open().await;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// [`Node::connect`], with the server's notices (their messages, in order) on the
    /// returned channel: each is sent before the reply of the statement that raised it.
    pub async fn connect_with_notices(
        &self,
    ) -> (tokio_postgres::Client, std::sync::mpsc::Receiver<String>) {
        let (client, mut connection) = self.open().await;
        let (tx, rx) = std::sync::mpsc::channel();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(|cx| connection.poll_message(cx));
            while let Some(Ok(message)) = futures_util::StreamExt::next(&mut messages).await {
                if let tokio_postgres::AsyncMessage::Notice(notice) = message {
                    let _ = tx.send(notice.message().to_owned());
                }
            }
        });
        (client, rx)
    }

    async fn open(
        &self,
    ) -> (
        tokio_postgres::Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ) {
        match tokio_postgres::connect(&self.conn_str(), tokio_postgres::NoTls).await {
            Ok(pair) => pair,
            Err(e) => panic!("connect to {}: {e}\nnode log:\n{}", self.addr, self.log_text()),
        }
    }

    fn launch(&mut self) {
        for attempt in 1..=START_ATTEMPTS_MAX {
            let port = free_port();
            self.addr = SocketAddr::from(([127, 0, 0, 1], port));
            let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
            command
                .arg("serve")
                .arg("--data-dir")
                .arg(&self.data_dir)
                .arg("--listen")
                .arg(self.addr.to_string())
                .arg("--executors")
                .arg(self.options.executors.to_string())
                .arg("--fragments")
                .arg(self.options.fragments.to_string())
                // Small segments: each is zero-filled at creation, and 64 MiB ones would make
                // every test node write 512 MiB before it serves. A soak may ask for smaller
                // ones (many rolls and spare fills): `TESSERA_TEST_SEGMENT_BYTES`.
                .arg("--segment-bytes")
                .arg(test_segment_bytes())
                .arg("--log")
                .arg("info");
            if let Some(p) = &self.options.password {
                command.arg("--password").arg(p);
            }
            self.metrics_addr =
                self.options.metrics.then(|| SocketAddr::from(([127, 0, 0, 1], free_port())));
            let metrics = self.metrics_addr.map(|a| a.to_string()).unwrap_or_default();
            command.arg("--metrics-listen").arg(metrics).args(&self.options.extra_args);
            for (key, _) in std::env::vars_os() {
                // The commit protocol under test passes through (the transaction suites run
                // with one-round commits, the default, and again without).
                if key.to_string_lossy().starts_with("TESSERA_")
                    && key != "TESSERA_ONE_ROUND_COMMITS"
                {
                    command.env_remove(key);
                }
            }
            for (key, value) in &self.options.env {
                command.env(key, value);
            }
            if let Some((soft, hard)) = self.options.open_files {
                limit_open_files(&mut command, soft, hard);
            }
            let mut child = command
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn tessera serve");
            let stderr = child.stderr.take().expect("stderr pipe");
            let (line_tx, line_rx) = mpsc::channel::<String>();
            let log = Arc::clone(&self.log);
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(stderr).split(b'\n') {
                    let Ok(line) = line else { break };
                    let line = strip_ansi(&String::from_utf8_lossy(&line));
                    log.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(line.clone());
                    // The receiver goes away once the node is ready; later lines only go to the log.
                    let _ = line_tx.send(line);
                }
            });
            let started_at = self.log_lines().len();
            loop {
                match line_rx.recv_timeout(READY_TIMEOUT) {
                    Ok(line) if line.contains(READY_LINE) => {
                        self.child = Some(child);
                        self.reader = Some(reader);
                        return;
                    }
                    Ok(_) => {}
                    Err(RecvTimeoutError::Timeout) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        panic!("node not ready after {READY_TIMEOUT:?}; log:\n{}", self.log_text());
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            // stderr closed before the ready line: the process is exiting.
            let status = wait_bounded(&mut child, STOP_TIMEOUT);
            reader.join().expect("stderr reader");
            let this_run = self.log_lines()[started_at..].join("\n");
            let port_taken = this_run.contains("cannot listen") && this_run.contains("in use");
            if port_taken && attempt < START_ATTEMPTS_MAX {
                // Forget the failed run's lines: they are not the test's business.
                self.log
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .truncate(started_at);
                continue;
            }
            panic!("node exited before it was ready ({status:?}); log:\n{}", self.log_text());
        }
    }

    /// Sends `signal` to the running node.
    fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("node is running");
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) with a pid and a signal number has no memory-safety conditions; the
        // child is not reaped yet, so the pid is still ours.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    /// Waits for the process and the stderr reader to finish; the exit status, or `None` when
    /// the node did not exit in time and was killed.
    fn reap(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take().expect("node is running");
        let status = wait_bounded(&mut child, STOP_TIMEOUT);
        if let Some(reader) = self.reader.take() {
            reader.join().expect("stderr reader");
        }
        status
    }

    /// The WARN/ERROR/panic lines since the last check that no expectation covers.
    fn unexpected_lines(&mut self) -> Vec<String> {
        let lines = self.log_lines();
        let fresh = lines.get(self.checked..).unwrap_or_default();
        let bad = fresh
            .iter()
            .filter(|l| is_alarming(l))
            .filter(|l| !self.expected.iter().any(|e| l.contains(e.as_str())))
            .cloned()
            .collect();
        self.checked = lines.len();
        bad
    }

    /// SIGTERM, then asserts a clean exit (status 0) and a log without unexpected WARN/ERROR.
    pub fn stop(&mut self) {
        self.signal(libc::SIGTERM);
        let status = self.reap();
        match status {
            Some(s) if s.success() => {}
            other => panic!("node did not stop cleanly ({other:?}); log:\n{}", self.log_text()),
        }
        let bad = self.unexpected_lines();
        assert!(
            bad.is_empty(),
            "unexpected log lines:\n{}\nfull log:\n{}",
            bad.join("\n"),
            self.log_text()
        );
    }

    /// SIGKILL: the process dies at once, like a power cut for everything not yet fsynced.
    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        let status = self.reap().expect("a SIGKILLed node exits");
        assert!(!status.success(), "SIGKILL must not look like a clean exit");
        let bad = self.unexpected_lines();
        assert!(
            bad.is_empty(),
            "unexpected log lines:\n{}\nfull log:\n{}",
            bad.join("\n"),
            self.log_text()
        );
        // A kill in the middle of a chunk write leaves a torn tail of unacknowledged records:
        // the next start truncates it and says so at WARN, an expected outcome of a kill.
        self.expect_log("torn tail truncated");
    }

    /// Waits (bounded) for a node that crashes on its own (an armed `TESSERA_FAULT` or
    /// `TESSERA_HANDOFF_FAULT` aborts it), asserting it did not exit cleanly and logged
    /// nothing unexpected.
    pub fn wait_crash(&mut self) {
        let status = self.reap().expect("the node crashed within the stop timeout");
        assert!(!status.success(), "a crash must not look like a clean exit");
        let bad = self.unexpected_lines();
        assert!(
            bad.is_empty(),
            "unexpected log lines:\n{}\nfull log:\n{}",
            bad.join("\n"),
            self.log_text()
        );
    }

    /// Starts the node again on the same data directory (after [`Node::stop`] or
    /// [`Node::kill9`]), possibly on another port.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "stop the node first");
        self.launch();
    }

    /// A clean stop (asserting exit 0) and a start on the same data directory.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// The extra environment of the next start (see [`NodeOptions::env`]).
    pub fn set_env(&mut self, env: Vec<(String, String)>) {
        self.options.env = env;
    }

    /// The extra `serve` arguments of the next start (`NodeOptions::extra_args`).
    pub fn set_extra_args(&mut self, extra_args: Vec<String>) {
        self.options.extra_args = extra_args;
    }

    /// The `--fragments` of the next start (an existing data directory keeps its own).
    pub fn set_fragments(&mut self, fragments: u32) {
        self.options.fragments = fragments;
    }

    /// The `--executors` of the next start (fragments are dealt to them round-robin).
    pub fn set_executors(&mut self, executors: u32) {
        self.options.executors = executors;
    }

    /// Whether the process is still running (it has not exited on its own).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().expect("try_wait").is_none(),
            None => false,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if self.child.is_some() {
                self.signal(libc::SIGKILL);
                let _ = self.reap();
            }
            eprintln!(
                "--- tessera log (data directory kept at {}) ---\n{}\n--- end of log ---",
                self.data_dir.display(),
                self.log_text()
            );
            return;
        }
        if self.child.is_some() {
            self.stop();
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// Whether the test nodes commit transactions of one node in one round: the node's default,
/// unless `TESSERA_ONE_ROUND_COMMITS` (passed through to every test node) turns it off, as
/// `scripts/test.sh`'s second pass over the transaction suites does.
/// Read as the node reads it (clap's boolish values).
pub fn one_round_commits() -> bool {
    use clap::builder::TypedValueParser;
    let Some(v) = std::env::var_os("TESSERA_ONE_ROUND_COMMITS") else { return true };
    clap::builder::BoolishValueParser::new()
        .parse_ref(&clap::Command::new("tessera"), None, &v)
        .unwrap_or_else(|e| panic!("TESSERA_ONE_ROUND_COMMITS={v:?}: {e}"))
}

/// The SQLSTATE code of a tokio-postgres error, or a failure naming the error.
pub fn sqlstate(error: &tokio_postgres::Error) -> String {
    match error.code() {
        Some(code) => code.code().to_owned(),
        None => panic!("error without SQLSTATE: {error:?}"),
    }
}

/// `SHOW fragment_counters` as (fragment, statements, rows_scanned) rows.
pub async fn fragment_counters(client: &tokio_postgres::Client) -> Vec<(String, i64, i64)> {
    client
        .query("SHOW fragment_counters", &[])
        .await
        .expect("SHOW fragment_counters")
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1), r.get::<_, i64>(2)))
        .collect()
}

/// The fragments whose `statements` counter grew between two snapshots.
pub fn fragments_touched(
    before: &[(String, i64, i64)],
    after: &[(String, i64, i64)],
) -> Vec<String> {
    assert_eq!(before.len(), after.len(), "fragment sets differ");
    before
        .iter()
        .zip(after)
        .filter(|(b, a)| {
            assert_eq!(b.0, a.0, "fragments in the same order");
            a.1 > b.1
        })
        .map(|(_, a)| a.0.clone())
        .collect()
}

/// The values of a simple-query result's rows, as text (`None` for NULL).
pub fn simple_rows(messages: &[tokio_postgres::SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => {
                Some((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect())
            }
            _ => None,
        })
        .collect()
}

/// Field `v` (as int8) of document `id` in collection `t`, the transaction tests' documents.
pub async fn t_value(client: &tokio_postgres::Client, id: &str) -> Option<i64> {
    client
        .query_opt("SELECT v::int8 FROM t WHERE id() = $1", &[&id])
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// The counter `name` of `SHOW transaction_counters`.
pub async fn tx_counter(client: &tokio_postgres::Client, name: &str) -> i64 {
    let rows = client.query("SHOW transaction_counters", &[]).await.unwrap();
    rows.iter().find(|r| r.get::<_, String>(0) == name).map(|r| r.get(1)).unwrap()
}

/// Cross-executor hops the node has made so far (`tessera_mesh_calls_total` of SHOW STATS,
/// summed over executors).
pub async fn mesh_calls(client: &tokio_postgres::Client) -> i64 {
    let rows = simple_rows(&client.simple_query("SHOW STATS").await.unwrap());
    rows.iter()
        .filter(|r| r[0].as_deref() == Some("tessera_mesh_calls_total"))
        .map(|r| r[2].as_deref().unwrap().parse::<i64>().unwrap())
        .sum()
}

/// Whether `client`'s session runs on executor 1 of a node with the default layout (fragment
/// 0 on executor 0): a one-Query block writing a document of fragment 0 is shipped from
/// executor 1 (one hop) and runs in place on executor 0 (none). Counted with the node's own
/// hop counter, net of what reading it costs; writes nothing (the document does not exist).
pub async fn session_on_executor_1(client: &tokio_postgres::Client) -> bool {
    let a = mesh_calls(client).await;
    let show = mesh_calls(client).await - a;
    let before = mesh_calls(client).await;
    client.simple_query("BEGIN; UPDATE t SET v = 0 WHERE id() = 'probe$@0'; COMMIT").await.unwrap();
    match mesh_calls(client).await - before - show {
        0 => false,
        1 => true,
        other => panic!("a one-Query block on fragment 0 cost {other} hops"),
    }
}

/// A connection whose session runs on executor 1 (`on_1`) or 0, trying up to 64 connections
/// (the kernel spreads them over the executors' listening sockets).
pub async fn connect_on_executor(node: &Node, on_1: bool) -> tokio_postgres::Client {
    for _ in 0..64 {
        let client = node.connect().await;
        if session_on_executor_1(&client).await == on_1 {
            return client;
        }
    }
    panic!("no session on executor {} in 64 connections", u8::from(on_1));
}

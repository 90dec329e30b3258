//! Helpers shared by the integration tests: a private PostgreSQL and running the binary.

#![allow(dead_code)] // Each test file uses a different subset.

pub mod fake_pg;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench sits inside the workspace")
        .to_owned()
}

/// A new directory under the system's temp dir, named `{prefix}-{pid}-{n}-{nanos}`: the
/// counter keeps two tests of one process apart (the clock alone did not: two tests starting
/// PostgreSQL at once got one directory, and one's initdb failed on the other's files).
pub fn unique_dir(prefix: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Stops the server and removes its directory however the test ends.
pub struct PrivatePostgres {
    pub dir: PathBuf,
    pub url: String,
}

impl PrivatePostgres {
    pub fn start() -> Self {
        let have_binaries = std::env::var_os("PG_BINDIR").is_some()
            || std::fs::read_dir("/usr/lib/postgresql")
                .map(|versions| versions.flatten().any(|v| v.path().join("bin/postgres").exists()))
                .unwrap_or(false);
        assert!(
            have_binaries,
            "PostgreSQL server binaries are missing: run scripts/install-deps.sh postgres \
             (or set PG_BINDIR) before this test"
        );
        let dir = unique_dir("bench-smoke");
        // As root the server runs as the postgres user, which must be able to enter the dir.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut guard = PrivatePostgres { dir, url: String::new() };
        let out = Command::new(repo_root().join("scripts/pg-local.sh"))
            .arg("start")
            .arg(guard.dir.join("pg"))
            .output()
            .expect("running scripts/pg-local.sh");
        assert!(
            out.status.success(),
            "scripts/pg-local.sh start failed (run scripts/install-deps.sh postgres if \
             PostgreSQL is missing):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        guard.url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(guard.url.starts_with("postgres://"), "{}", guard.url);
        guard
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/pg-local.sh"))
            .arg("stop")
            .arg(self.dir.join("pg"))
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn run_bench<S: AsRef<OsStr>>(args: &[S]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .output()
        .expect("running the bench binary");
    assert!(
        out.status.success(),
        "bench failed ({:?}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs bench with `args` and returns its output without judging the exit status.
pub fn run_bench_raw<S: AsRef<OsStr>>(args: &[S]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bench")).args(args).output().expect("running the bench binary")
}

impl PrivatePostgres {
    /// Runs one SQL statement with psql (from the same PostgreSQL installation).
    pub fn psql(&self, sql: &str) {
        let bindir = std::env::var_os("PG_BINDIR")
            .map(PathBuf::from)
            .or_else(|| {
                let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
                    .ok()?
                    .flatten()
                    .map(|v| v.path().join("bin"))
                    .filter(|b| b.join("psql").exists())
                    .collect();
                dirs.sort();
                dirs.pop()
            })
            .expect("psql not found: run scripts/install-deps.sh postgres");
        let out = Command::new(bindir.join("psql"))
            .args([self.url.as_str(), "-v", "ON_ERROR_STOP=1", "-qAtc", sql])
            .output()
            .expect("running psql");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The options every short test run shares (one target, no warm-up, one round, no progress
/// bars, results in `out`) followed by the run's own `rest`.
pub fn short_run(target: &str, out: &Path, rest: &[&str]) -> Vec<String> {
    let mut args: Vec<String> =
        ["--target", target, "--warmup", "0s", "--rounds", "1", "--no-progress", "--out"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
    args.push(out.to_str().expect("temporary paths are UTF-8").to_owned());
    args.extend(rest.iter().map(|s| (*s).to_owned()));
    args
}

/// Parses a JSON file.
pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

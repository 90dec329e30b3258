//! The bank workload of `e2e_bank.rs` against a real PostgreSQL (a private instance from
//! `scripts/pg-local.sh`, SERIALIZABLE transactions, fsync on): proves on a server known to be
//! correct that the workload, the history it records and the checker agree, crashes included
//! (PostgreSQL's immediate shutdown: no checkpoint, WAL recovery at the next start), so a
//! violation reported against Tessera is Tessera's. Seeds as in `e2e_bank.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[path = "support/bank.rs"]
mod bank;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use bank::checker::{self, Ledger};
use bank::{Bank, Flavor, Load, PHASE_TIMEOUT, Phase, Rng, Shared};
use support::{repo_root, run_client};

const ACCOUNTS: usize = 32;
const INITIAL: i64 = 100;
const LOAD: Load = Load { transfer_clients: 6, read_clients: 2, amount_max: 20 };
/// Crashes, and acknowledged transfers before each (`MIN + rng.below(SPREAD)`).
const CRASHES: u64 = 2;
const CRASH_AFTER_MIN: u64 = 10;
const CRASH_AFTER_SPREAD: u64 = 60;
/// Acknowledged transfers of the last phase, which ends with a clean stop of the clients.
const TRANSFERS_LAST: u64 = 100;
const SEED_DEFAULT: u64 = 0x5EED_BA4C;

/// A private PostgreSQL in a directory under cargo's temp dir.
struct Postgres {
    dir: PathBuf,
    url: String,
}

impl Postgres {
    fn start(dir: &Path) -> Postgres {
        std::fs::create_dir_all(dir).unwrap();
        let mut pg = Postgres { dir: dir.to_owned(), url: String::new() };
        pg.start_again();
        pg
    }

    fn start_again(&mut self) {
        let mut command = Command::new(repo_root().join("scripts/pg-local.sh"));
        command.arg("start").arg(&self.dir);
        let out = run_client(command);
        assert!(out.status.success(), "pg-local.sh start: {out:?}");
        self.url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    }

    /// Immediate shutdown: every backend quits at once, nothing is checkpointed, the next
    /// start replays the WAL, as after a crash.
    fn crash(&self) {
        let bindir = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL binaries (scripts/install-deps.sh postgres)")
            .map(|e| e.unwrap().path().join("bin"))
            .filter(|p| p.join("pg_ctl").exists())
            .max()
            .expect("a PostgreSQL bin directory");
        // SAFETY: geteuid(2) has no memory-safety conditions.
        let root = unsafe { libc::geteuid() } == 0;
        let mut command = if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bindir.join("pg_ctl"));
            c
        } else {
            Command::new(bindir.join("pg_ctl"))
        };
        command.arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "-w", "stop"]);
        let out = run_client(command);
        assert!(out.status.success(), "pg_ctl stop -m immediate: {out:?}");
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let mut command = Command::new(repo_root().join("scripts/pg-local.sh"));
        command.arg("stop").arg(&self.dir);
        let _ = run_client(command);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn check(bank: &Bank, shared: &Shared, state: &checker::State, seed: u64, when: &str) {
    eprintln!("bank on PostgreSQL {when}: {}", shared.summary());
    let violations = checker::check(&bank.ledger, &shared.history(), state);
    assert!(
        violations.is_empty(),
        "PostgreSQL violated the bank {when} (TESSERA_BANK_SEED={seed}):\n{}",
        bank::report(&violations)
    );
    assert!(shared.unexpected().is_empty(), "unexpected errors: {:?}", shared.unexpected());
}

// Checks the workload and checker against PostgreSQL: two immediate shutdowns at seeded counts
// of acknowledged transfers, each followed by a restart and a check, then a phase to a clean
// stop of the clients and a last check; and that conflicts (40001) really happened and were
// retried, so the retry path is exercised.
#[tokio::test]
async fn e2e_bank_postgres_agrees_with_the_checker() {
    let seed = std::env::var("TESSERA_BANK_SEED").map_or(SEED_DEFAULT, |s| s.parse().unwrap());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bank-postgres-{}", std::process::id()));
    let mut pg = Postgres::start(&dir);
    let accounts: Vec<String> = (0..ACCOUNTS).map(|i| format!("a/{i}")).collect();
    let bank = Arc::new(Bank {
        flavor: Flavor::Postgres,
        record_suffix: vec![String::new(); ACCOUNTS],
        ledger: Ledger { accounts, initial: INITIAL },
    });
    bank.open(&bank::connect(&pg.url).await).await;
    let shared = Arc::new(Shared::default());
    let mut rng = Rng::new(seed, u64::MAX);
    for crash in 0..=CRASHES {
        let last = crash == CRASHES;
        let target = shared.acked()
            + if last { TRANSFERS_LAST } else { CRASH_AFTER_MIN + rng.below(CRASH_AFTER_SPREAD) };
        let phase = Phase::start(&pg.url, &bank, LOAD, &shared, seed, crash).await;
        tokio::time::timeout(PHASE_TIMEOUT, bank::run_until(&shared, &phase, target))
            .await
            .expect("phase bound");
        assert!(shared.acked() >= target, "clients ended early: {:?}", shared.unexpected());
        if !last {
            pg.crash();
        }
        shared.stop();
        tokio::time::timeout(PHASE_TIMEOUT, phase.join()).await.expect("clients end");
        if !last {
            pg.start_again();
        }
        let state = bank.state(&bank::connect(&pg.url).await).await;
        check(&bank, &shared, &state, seed, &format!("after phase {crash}"));
        shared.settle(&state);
    }
    assert!(shared.reads() > 0, "readers committed no read");
    assert!(shared.conflicts() > 0, "no 40001 was retried");
}

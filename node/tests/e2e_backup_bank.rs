//! A backup taken while the bank workload runs restores with the bank intact (issue 8, item 5).
//!
//! A node (2 executors, 8 fragments) holds 32 accounts spread over every fragment, so
//! transfers stay in one fragment (fast path), cross fragments of one executor, or cross
//! executors (two-phase commit). Transfer and reader clients of `support/bank.rs` run; once
//! some transfers are acknowledged, `tessera backup --to DIR` runs against the live node, one
//! backup after the other, at least twice and until one backup overlapped acknowledged
//! two-phase commits (`SHOW transaction_counters` moved between the moment the backup was
//! started and the moment it returned). Then the load stops,
//! the live node is checked, and every backup taken is restored with `tessera restore`,
//! checked with `tessera verify`, served by a fresh node and checked with the bank checker:
//! the total holds (a cross-fragment transfer is whole or absent), each balance equals the
//! opening balance plus what the records present moved, no record belongs to a refused
//! attempt, and every transfer acknowledged before the backup started is present. Transfers
//! acknowledged after the backup started may be present or not. A later backup holds every
//! record of an earlier one (a transfer in a restore was committed before that backup's cut),
//! and a restart of a restored node keeps its records. Last, the bank goes on on the node
//! restored from the last backup (two-phase commits included) and stays whole there.
//!
//! A deterministic companion stalls one cross-fragment transfer between its durable PREPAREs
//! and its decision (`TESSERA_FAULT=2pc-stall-before-decision`), backs the node up meanwhile
//! and checks that the restored node aborts it on both fragments and holds the bank without it.
//!
//! `TESSERA_BANK_SEED` replays a run's draws (the seed is printed with every failure; client
//! interleaving is the scheduler's, so a replay repeats the draws, not the exact history).
//! `TESSERA_BACKUP_BANK_BACKUPS` sets how many backups are taken (default 2) for longer runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[path = "support/bank.rs"]
mod bank;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use bank::checker::{self, History, Ledger, Outcome, State, Violation};
use bank::{Bank, Flavor, Load, PHASE_TIMEOUT, Phase, Shared};
use support::{Node, NodeOptions, run_client, simple_rows};

/// Accounts: 4 on each of the 8 fragments.
const ACCOUNTS: usize = 32;
/// Every account's opening balance.
const INITIAL: i64 = 100;
/// Clients and the largest transfer (as in `e2e_bank.rs`).
const LOAD: Load = Load { transfer_clients: 6, read_clients: 2, amount_max: 20 };
/// Acknowledged transfers before the first backup starts.
const WARMUP_TRANSFERS: u64 = 40;
/// Backups taken at least (each later one holds more history) unless
/// `TESSERA_BACKUP_BANK_BACKUPS` says otherwise, and at most [`BACKUPS_EXTRA`] more while
/// waiting for one that overlaps a two-phase commit; each is restored and checked. (The first
/// normally overlaps: the load commits continuously.)
const BACKUPS_DEFAULT: usize = 2;
const BACKUPS_EXTRA: usize = 3;
/// Acknowledged transfers on the node restored from the last backup.
const RESTORED_TRANSFERS: u64 = 30;
/// The default seed.
const SEED_DEFAULT: u64 = 0xBAC4_BA4C;

fn backups_min() -> usize {
    match std::env::var("TESSERA_BACKUP_BANK_BACKUPS") {
        Ok(s) => match s.parse() {
            Ok(n) if n > 0 => n,
            _ => panic!("TESSERA_BACKUP_BANK_BACKUPS={s} is not a positive number"),
        },
        Err(_) => BACKUPS_DEFAULT,
    }
}

fn seed() -> u64 {
    match std::env::var("TESSERA_BANK_SEED") {
        Ok(s) => s.parse().unwrap_or_else(|_| panic!("TESSERA_BANK_SEED={s} is not a number")),
        Err(_) => SEED_DEFAULT,
    }
}

/// The restore check: `history` is everything the clients did (to the end of the load),
/// `acked_before` the ids of the transfers acknowledged before the backup started, `state`
/// what the restored node holds. A transfer acknowledged later was in flight or after the
/// cut, so the backup may hold it or not: it is held to "whole or absent" (unknown), while
/// refused attempts must be absent and transfers acknowledged before must be present. The
/// clients' live reads are not part of it (the live check covers them).
fn check_restore(
    ledger: &Ledger,
    history: &History,
    acked_before: &BTreeSet<String>,
    state: &State,
) -> Vec<Violation> {
    checker::check(ledger, &as_of_backup(history, acked_before), state)
}

/// `history` as a backup started after `acked_before` were acknowledged sees it: later
/// acknowledgements become unknown outcomes, and the clients' reads are left out.
fn as_of_backup(history: &History, acked_before: &BTreeSet<String>) -> History {
    // An outcome never goes back from committed: every id acknowledged before is committed.
    for id in acked_before {
        assert!(
            history.transfers.iter().any(|t| &t.id == id && t.outcome == Outcome::Committed),
            "transfer {id} was acknowledged before the backup but is not committed in the history"
        );
    }
    let mut out = History { transfers: history.transfers.clone(), reads: Vec::new() };
    for t in &mut out.transfers {
        if t.outcome == Outcome::Committed && !acked_before.contains(&t.id) {
            t.outcome = Outcome::Unknown;
        }
    }
    out
}

fn tessera() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TESSERA_") {
            c.env_remove(key);
        }
    }
    c
}

/// A fresh path beside `node`'s data directory.
fn scratch(node: &Node, name: &str) -> PathBuf {
    let dir = node
        .data_dir()
        .parent()
        .unwrap()
        .join(format!("{}-{name}", node.data_dir().file_name().unwrap().to_string_lossy()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn show(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The node's `two_phase_commits` from `SHOW transaction_counters`.
async fn two_phase_commits(client: &tokio_postgres::Client) -> i64 {
    let rows = simple_rows(&client.simple_query("SHOW transaction_counters").await.unwrap());
    let row = rows
        .iter()
        .find(|r| r[0].as_deref() == Some("two_phase_commits"))
        .expect("SHOW transaction_counters has two_phase_commits");
    row[1].as_deref().unwrap().parse().unwrap()
}

/// One line of SHOW FRAGMENTS: shard range, executor, documents.
struct FragmentLine {
    start: u32,
    end: u32,
    executor: String,
    documents: i64,
}

async fn fragments(client: &tokio_postgres::Client) -> Vec<FragmentLine> {
    let rows = simple_rows(&client.simple_query("SHOW FRAGMENTS").await.unwrap());
    rows.into_iter()
        .map(|r| {
            let range = r[1].clone().unwrap();
            let (start, end) =
                range.trim_matches(|c| c == '[' || c == ')').split_once(", ").expect("range");
            FragmentLine {
                start: start.parse().unwrap(),
                end: end.parse().unwrap(),
                executor: r[2].clone().unwrap(),
                documents: r[3].clone().unwrap().parse().unwrap(),
            }
        })
        .collect()
}

/// Where an account lives: its fragment's first shard and its executor.
type Placement = BTreeMap<String, (u32, String)>;

/// Opens a bank whose accounts cover every fragment (account `i` on an explicit shard of
/// fragment `i mod F`, its records on the same shard), asserting the coverage.
async fn open_bank(node: &Node) -> (Arc<Bank>, Placement) {
    let client = node.connect().await;
    let layout = fragments(&client).await;
    assert_eq!(ACCOUNTS % layout.len(), 0, "accounts spread evenly over the fragments");
    let mut accounts = Vec::new();
    let mut record_suffix = Vec::new();
    let mut placement = Placement::new();
    for i in 0..ACCOUNTS {
        let f = &layout[i % layout.len()];
        let shard = f.start + u32::try_from(i).unwrap();
        assert!(shard < f.end, "fragment [{}, {}) is too small", f.start, f.end);
        accounts.push(format!("a/{i}$@{shard}"));
        placement.insert(format!("a/{i}$@{shard}"), (f.start, f.executor.clone()));
        record_suffix.push(format!("$@{shard}"));
    }
    let bank = Bank {
        flavor: Flavor::Tessera,
        ledger: Ledger { accounts, initial: INITIAL },
        record_suffix,
    };
    bank.open(&client).await;
    let after = fragments(&client).await;
    let per_fragment = i64::try_from(ACCOUNTS / layout.len()).unwrap();
    assert!(after.iter().all(|f| f.documents == per_fragment), "every fragment holds accounts");
    let executors: BTreeSet<&str> = after.iter().map(|f| f.executor.as_str()).collect();
    assert_eq!(executors.len(), 2, "accounts on both executors: {executors:?}");
    (Arc::new(bank), placement)
}

/// Committed transfers among `ids` by kind: within a fragment, across fragments of one
/// executor, across executors.
fn kinds(history: &History, placement: &Placement, ids: &BTreeSet<String>) -> [usize; 3] {
    let mut out = [0; 3];
    for t in history.transfers.iter().filter(|t| ids.contains(&t.id)) {
        let (from, to) = (&placement[&t.from], &placement[&t.to]);
        out[if from.1 != to.1 {
            2
        } else if from.0 != to.0 {
            1
        } else {
            0
        }] += 1;
    }
    out
}

/// One backup taken under load.
struct Taken {
    dir: PathBuf,
    /// Transfers acknowledged before it started.
    acked_before: BTreeSet<String>,
    /// `two_phase_commits` before it started and after it returned.
    two_phase: (i64, i64),
}

/// Fails with the seed, the violations and a dump of history and state when `violations`
/// is not empty.
fn assert_clean(
    node: &Node,
    history: &History,
    state: &State,
    violations: &[Violation],
    seed: u64,
    when: &str,
) {
    if violations.is_empty() {
        return;
    }
    let name = format!("bank-backup-{seed}-{}.txt", when.replace(' ', "-"));
    let path = bank::dump(node.data_dir().parent().unwrap(), &name, history, state);
    panic!(
        "bank violated {when} (TESSERA_BANK_SEED={seed}; {} attempts; history and state in \
         {}):\n{}",
        history.transfers.len(),
        path.display(),
        bank::report(violations)
    );
}

// Checks the backup of a node under the bank workload: a backup overlapping acknowledged
// two-phase transfers restores (after `tessera verify` passes on the restored directory) to a
// state with the total intact, every record's transfer applied to both accounts, no refused
// transfer, and every transfer acknowledged before the backup started; a restart of the
// restored node keeps that state, a later backup holds every record of an earlier one, and the
// bank goes on on the restored node without a violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_backup_under_bank_load_restores_the_total() {
    let seed = seed();
    eprintln!("TESSERA_BANK_SEED={seed}");
    let node = Node::start();
    let (bank, placement) = open_bank(&node).await;
    let shared = Arc::new(Shared::default());
    let phase = Phase::start(&node.conn_str(), &bank, LOAD, &shared, seed, 0).await;
    let warm =
        tokio::time::timeout(PHASE_TIMEOUT, bank::run_until(&shared, &phase, WARMUP_TRANSFERS))
            .await;
    assert!(
        warm.is_ok() && shared.acked() >= WARMUP_TRANSFERS,
        "{} of {WARMUP_TRANSFERS} transfers acknowledged before the backup (TESSERA_BANK_SEED=\
         {seed}; unexpected errors: {:?}); log:\n{}",
        shared.acked(),
        shared.unexpected(),
        node.log_text()
    );

    let admin = node.connect().await;
    let mut taken: Vec<Taken> = Vec::new();
    let backups_min = backups_min();
    for n in 0..backups_min + BACKUPS_EXTRA {
        let two_phase_before = two_phase_commits(&admin).await;
        let acked_before: BTreeSet<String> = shared
            .history()
            .transfers
            .into_iter()
            .filter(|t| t.outcome == Outcome::Committed)
            .map(|t| t.id)
            .collect();
        let dir = scratch(&node, &format!("bank-backup-{n}"));
        let mut command = tessera();
        command.arg("backup").arg("--to").arg(&dir).arg("--addr").arg(node.addr().to_string());
        // On a blocking thread: the clients go on meanwhile.
        let output = tokio::task::spawn_blocking(move || run_client(command)).await.unwrap();
        let two_phase_after = two_phase_commits(&admin).await;
        let history_after = shared.history();
        let during: BTreeSet<String> = history_after
            .transfers
            .iter()
            .filter(|t| t.outcome == Outcome::Committed && !acked_before.contains(&t.id))
            .map(|t| t.id.clone())
            .collect();
        assert!(output.status.success(), "backup {n} failed: {}", show(&output));
        assert!(dir.join("manifest.json").exists(), "backup {n} has a manifest");
        eprintln!(
            "backup {n}: {} transfers acknowledged before it; two-phase commits {} -> {}; \
             acknowledged during it (within a fragment, across fragments, across executors): \
             {:?}",
            acked_before.len(),
            two_phase_before,
            two_phase_after,
            kinds(&history_after, &placement, &during)
        );
        taken.push(Taken { dir, acked_before, two_phase: (two_phase_before, two_phase_after) });
        if taken.len() >= backups_min && taken.iter().any(|t| t.two_phase.1 > t.two_phase.0) {
            break;
        }
        assert!(
            shared.unexpected().is_empty()
                && phase.left.load(std::sync::atomic::Ordering::SeqCst) > 0,
            "clients ended during backup {n} (TESSERA_BANK_SEED={seed}): {:?}",
            shared.unexpected()
        );
    }
    shared.stop();
    let joined = tokio::time::timeout(PHASE_TIMEOUT, phase.join()).await;
    assert!(joined.is_ok(), "clients did not stop (TESSERA_BANK_SEED={seed})");
    assert!(
        taken.iter().any(|t| t.two_phase.1 > t.two_phase.0),
        "no backup of {} overlapped a two-phase commit (TESSERA_BANK_SEED={seed}): {:?}",
        taken.len(),
        taken.iter().map(|t| t.two_phase).collect::<Vec<_>>()
    );
    let unexpected = shared.unexpected();
    assert!(unexpected.is_empty(), "unexpected errors (TESSERA_BANK_SEED={seed}):\n{unexpected:?}");
    eprintln!("bank after the load: {}", shared.summary());
    let history = shared.history();
    let committed: BTreeSet<String> = history
        .transfers
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .map(|t| t.id.clone())
        .collect();
    let [local, across, executors] = kinds(&history, &placement, &committed);
    eprintln!(
        "committed transfers: {local} within a fragment, {across} across fragments of one \
         executor, {executors} across executors"
    );
    assert!(
        executors > 0 && across > 0,
        "the load crossed fragments ({across}) and executors ({executors}) \
         (TESSERA_BANK_SEED={seed})"
    );

    // The live node first: a violation here is the workload's, not the backup's.
    let live = bank.state(&admin).await;
    let violations = checker::check(&bank.ledger, &history, &live);
    assert_clean(&node, &history, &live, &violations, seed, "live after the load");
    drop(admin);

    // Every backup into the data directory of a second node, verified, served and checked.
    let mut restored = Node::start();
    let mut earlier: BTreeSet<String> = BTreeSet::new();
    for (n, t) in taken.iter().enumerate() {
        restored.stop();
        std::fs::remove_dir_all(restored.data_dir()).unwrap();
        let mut command = tessera();
        command.arg("restore").arg("--from").arg(&t.dir).arg("--data-dir").arg(restored.data_dir());
        let output = run_client(command);
        assert!(output.status.success(), "restore of backup {n} failed: {}", show(&output));
        let mut command = tessera();
        command.arg("verify").arg("--data-dir").arg(restored.data_dir());
        let output = run_client(command);
        assert_eq!(output.status.code(), Some(0), "verify of restore {n}: {}", show(&output));
        let dumped = bank::dump_data_dir(restored.data_dir());

        restored.start_again();
        let mut first: Option<BTreeSet<String>> = None;
        for when in ["restored", "restored and restarted"] {
            if first.is_some() {
                restored.restart();
            }
            let client = restored.connect().await;
            let state = bank.state(&client).await;
            let violations = check_restore(&bank.ledger, &history, &t.acked_before, &state);
            let when = format!("backup {n} {when}");
            assert_clean(&restored, &history, &state, &violations, seed, &when);
            let records: BTreeSet<String> = state.records.iter().map(|r| r.id.clone()).collect();
            let missing: Vec<&String> = earlier.difference(&records).collect();
            assert!(
                missing.is_empty(),
                "{when} lacks records an earlier backup holds (TESSERA_BANK_SEED={seed}): \
                 {missing:?}"
            );
            eprintln!(
                "{when}: {} records ({} acknowledged before the backup), total {}",
                records.len(),
                t.acked_before.len(),
                state.balances.iter().map(|(_, b)| b).sum::<i64>()
            );
            if first.is_none() {
                // `tessera dump` of the restored directory (before the node recovered it)
                // shows what the node serves: a transfer whose Commit record one fragment
                // lacked at the cut is whole in both, by the coordinator's decision.
                assert_eq!(
                    dumped,
                    bank::seen(&state),
                    "{when}: the dump differs from what the node serves (TESSERA_BANK_SEED={seed})"
                );
            }
            match &first {
                None => first = Some(records),
                Some(first) => {
                    assert_eq!(first, &records, "{when}: a restart keeps the restored records")
                }
            }
        }
        earlier = first.unwrap();
        let _ = std::fs::remove_dir_all(&t.dir);
    }

    // The node restored from the last backup goes on: the bank runs there (two-phase commits
    // with the transaction ids the restored node hands out) and stays whole, checked over the
    // history before the backup (settled by what the restore holds) and the new one.
    let client = restored.connect().await;
    let at_restore = bank.state(&client).await;
    let mut combined = as_of_backup(&history, &taken.last().unwrap().acked_before);
    checker::settle(&mut combined, &at_restore);
    let two_phase_before = two_phase_commits(&client).await;
    let after = Arc::new(Shared::default());
    let phase = Phase::start(&restored.conn_str(), &bank, LOAD, &after, seed, 1).await;
    let ran =
        tokio::time::timeout(PHASE_TIMEOUT, bank::run_until(&after, &phase, RESTORED_TRANSFERS))
            .await;
    after.stop();
    let joined = tokio::time::timeout(PHASE_TIMEOUT, phase.join()).await;
    assert!(
        ran.is_ok() && joined.is_ok() && after.acked() >= RESTORED_TRANSFERS,
        "{} of {RESTORED_TRANSFERS} transfers acknowledged on the restored node \
         (TESSERA_BANK_SEED={seed}; unexpected errors: {:?}); log:\n{}",
        after.acked(),
        after.unexpected(),
        restored.log_text()
    );
    let unexpected = after.unexpected();
    assert!(unexpected.is_empty(), "unexpected errors (TESSERA_BANK_SEED={seed}):\n{unexpected:?}");
    assert!(
        two_phase_commits(&client).await > two_phase_before,
        "the restored node ran no two-phase commit (TESSERA_BANK_SEED={seed})"
    );
    eprintln!("bank on the restored node: {}", after.summary());
    let more = after.history();
    combined.transfers.extend(more.transfers);
    combined.reads = more.reads;
    let state = bank.state(&client).await;
    let violations = checker::check(&bank.ledger, &combined, &state);
    assert_clean(&restored, &combined, &state, &violations, seed, "on the restored node");
}

/// A small bank for the checks of [`check_restore`] itself.
mod doctored {
    use super::*;
    use checker::{Record, Transfer};

    pub fn ledger() -> Ledger {
        Ledger { accounts: vec!["a".into(), "b".into(), "c".into()], initial: 100 }
    }

    pub fn transfer(id: &str, from: &str, to: &str, amount: i64, outcome: Outcome) -> Transfer {
        Transfer { id: id.into(), from: from.into(), to: to.into(), amount, outcome, seen: None }
    }

    pub fn record(t: &Transfer) -> Record {
        Record { id: t.id.clone(), from: t.from.clone(), to: t.to.clone(), amount: t.amount }
    }

    /// t1 (a -> b, 10) acknowledged before the backup, t2 (b -> c, 5) after it, t3 refused.
    pub fn history() -> History {
        History {
            transfers: vec![
                transfer("t1", "a", "b", 10, Outcome::Committed),
                transfer("t2", "b", "c", 5, Outcome::Committed),
                transfer("t3", "c", "a", 7, Outcome::Aborted),
            ],
            reads: Vec::new(),
        }
    }

    pub fn before() -> BTreeSet<String> {
        ["t1".to_owned()].into_iter().collect()
    }

    pub fn state(balances: [i64; 3], records: &[&Transfer]) -> State {
        State {
            balances: ["a", "b", "c"].iter().map(|a| (*a).to_owned()).zip(balances).collect(),
            records: records.iter().map(|t| record(t)).collect(),
        }
    }
}

// Checks that the restore check accepts the two consistent restores: with the transfer
// acknowledged after the backup started, and without it.
#[test]
fn check_restore_accepts_a_cut_with_or_without_later_transfers() {
    let (ledger, history, before) = (doctored::ledger(), doctored::history(), doctored::before());
    let (t1, t2) = (&history.transfers[0], &history.transfers[1]);
    let with = doctored::state([90, 105, 105], &[t1, t2]);
    assert_eq!(check_restore(&ledger, &history, &before, &with), vec![]);
    let without = doctored::state([90, 110, 100], &[t1]);
    assert_eq!(check_restore(&ledger, &history, &before, &without), vec![]);
}

// Checks that a restore holding half a cross-account transfer (its record and the debit, not
// the credit) is reported: the credited balance and the total are off.
#[test]
fn check_restore_reports_half_a_transfer() {
    let (ledger, history, before) = (doctored::ledger(), doctored::history(), doctored::before());
    let (t1, t2) = (&history.transfers[0], &history.transfers[1]);
    let half = doctored::state([90, 105, 100], &[t1, t2]);
    let v = check_restore(&ledger, &history, &before, &half);
    assert!(
        v.contains(&Violation::Balance { account: "c".into(), expected: 105, actual: 100 }),
        "{v:?}"
    );
    assert!(v.contains(&Violation::Total { expected: 300, actual: 295 }), "{v:?}");
    // The balances of a transfer without its record: the total holds, the balances do not.
    let unrecorded = doctored::state([90, 105, 105], &[t1]);
    let v = check_restore(&ledger, &history, &before, &unrecorded);
    assert!(v.iter().any(|v| matches!(v, Violation::Balance { .. })), "{v:?}");
}

// Checks that a restore missing a transfer acknowledged before the backup started is reported
// as lost even though its balances are consistent, and that a refused transfer's record is
// reported.
#[test]
fn check_restore_reports_a_lost_or_a_refused_transfer() {
    let (ledger, history, before) = (doctored::ledger(), doctored::history(), doctored::before());
    let empty = doctored::state([100, 100, 100], &[]);
    assert_eq!(
        check_restore(&ledger, &history, &before, &empty),
        vec![Violation::Lost { id: "t1".into() }]
    );
    let (t1, t3) = (&history.transfers[0], &history.transfers[2]);
    let refused = doctored::state([97, 110, 93], &[t1, t3]);
    assert_eq!(
        check_restore(&ledger, &history, &before, &refused),
        vec![Violation::AbortedApplied { id: "t3".into() }]
    );
}

/// The log line of the test-only stall between a transaction's prepares and its decision.
const STALL_LINE: &str = "stalling before the decision";

// Checks, deterministically, the cut of a cross-fragment transfer whose PREPAREs are durable
// but whose decision is not taken (the node stalls it there, `TESSERA_FAULT=
// 2pc-stall-before-decision`): the backup holds the prepares without a decision, so the
// restored node resolves the transfer as aborted on both fragments during recovery, and the
// restore holds the bank without it: total intact, an acknowledged fast-path transfer present.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_backup_of_an_undecided_transfer_restores_without_it() {
    let mut node = Node::start_with(NodeOptions {
        env: vec![("TESSERA_FAULT".to_owned(), "2pc-stall-before-decision".to_owned())],
        ..NodeOptions::default()
    });
    node.expect_log("TESSERA_FAULT");
    let (bank, _) = open_bank(&node).await;
    let accounts = &bank.ledger.accounts;
    let fragments = fragments(&node.connect().await).await.len();
    // Accounts i and i + fragments share a fragment: this transfer takes the fast path.
    let fast_id = format!("x/fast{}", bank.record_suffix[0]);
    let fast =
        doctored::transfer(&fast_id, &accounts[0], &accounts[fragments], 10, Outcome::Committed);
    // Accounts 1 and 2 are on two fragments: two-phase commit, stalled before the decision.
    let stalled_id = format!("x/stalled{}", bank.record_suffix[1]);
    let stalled = doctored::transfer(&stalled_id, &accounts[1], &accounts[2], 7, Outcome::Unknown);
    let transfer_sql = |t: &checker::Transfer| {
        let checker::Transfer { id, from, to, amount, .. } = t;
        vec![
            "BEGIN".to_owned(),
            format!("UPDATE accounts SET balance = {} WHERE id() = '{from}'", INITIAL - amount),
            format!("UPDATE accounts SET balance = {} WHERE id() = '{to}'", INITIAL + amount),
            format!(
                r#"INSERT INTO transfers VALUES ('{id}', '{{"src":"{from}","dst":"{to}","amount":{amount}}}')"#
            ),
            "COMMIT".to_owned(),
        ]
    };
    let client = node.connect().await;
    for s in transfer_sql(&fast) {
        client.simple_query(&s).await.unwrap_or_else(|e| panic!("{s}: {e:?}"));
    }
    let statements = transfer_sql(&stalled);
    let session = node.connect().await;
    let in_flight = tokio::spawn(async move {
        for s in statements {
            // The COMMIT never answers: the node is killed during the stall.
            if session.simple_query(&s).await.is_err() {
                return false;
            }
        }
        true
    });
    // Every PREPARE is durable once the session reaches the stall (it logs it).
    let reached = tokio::time::timeout(PHASE_TIMEOUT, async {
        while !node.log_text().contains(STALL_LINE) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(reached.is_ok(), "the transfer never reached its decision; log:\n{}", node.log_text());
    let prepared = simple_rows(&client.simple_query("SHOW TRANSACTIONS").await.unwrap());
    assert!(
        prepared.iter().any(|r| r[1].as_deref() == Some("prepared")),
        "the transfer is prepared: {prepared:?}"
    );

    let dir = scratch(&node, "bank-undecided");
    let mut command = tessera();
    command.arg("backup").arg("--to").arg(&dir).arg("--addr").arg(node.addr().to_string());
    let output = tokio::task::spawn_blocking(move || run_client(command)).await.unwrap();
    assert!(output.status.success(), "backup failed: {}", show(&output));
    drop(client);
    node.kill9();
    assert!(!in_flight.await.unwrap(), "the stalled COMMIT was answered");

    let mut restored = Node::start();
    restored.stop();
    std::fs::remove_dir_all(restored.data_dir()).unwrap();
    let mut command = tessera();
    command.arg("restore").arg("--from").arg(&dir).arg("--data-dir").arg(restored.data_dir());
    let output = run_client(command);
    assert!(output.status.success(), "restore failed: {}", show(&output));
    let mut command = tessera();
    command.arg("verify").arg("--data-dir").arg(restored.data_dir());
    let output = run_client(command);
    assert_eq!(output.status.code(), Some(0), "verify of the restore: {}", show(&output));
    restored.start_again();
    let resolved: Vec<String> = restored
        .log_lines()
        .into_iter()
        .filter(|l| l.contains("in-doubt transaction resolved"))
        .collect();
    // With one-round commits (the default) every PREPARE durable is the commit: recovery
    // commits the transfer on both fragments instead (its outcome is unknown to the checker).
    let one_round = support::one_round_commits();
    let outcome = if one_round { "commit=true" } else { "commit=false" };
    assert!(
        resolved.len() == 2 && resolved.iter().all(|l| l.contains(outcome)),
        "recovery resolves the prepared transfer on both fragments ({outcome}): {resolved:?}"
    );
    let state = bank.state(&restored.connect().await).await;
    let history = History { transfers: vec![fast.clone(), stalled.clone()], reads: Vec::new() };
    let before: BTreeSet<String> = [fast.id.clone()].into_iter().collect();
    let violations = check_restore(&bank.ledger, &history, &before, &state);
    assert_clean(&restored, &history, &state, &violations, 0, "undecided transfer restored");
    assert_eq!(
        state.records.iter().any(|r| r.id == stalled.id),
        one_round,
        "the stalled transfer is in the restore exactly when committed: {:?}",
        state.records
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! The bank workload of `e2e_bank*.rs`, in the spirit of Jepsen's bank test, and its checker.
//!
//! Accounts hold balances; clients move random amounts between random accounts in
//! `BEGIN; read both; UPDATE; UPDATE; INSERT transfer record; COMMIT`, retrying on 40001, while
//! readers read every balance in one transaction. Every attempt is an event of the
//! [`checker::History`] with its outcome as the client saw it: committed (COMMIT answered),
//! aborted (a serialization failure, or declined for lack of funds), or unknown (the
//! connection died, e.g. the node was killed). The checker compares a history with the
//! state read afterwards; it is pure, so `e2e_bank.rs` also feeds it broken histories and checks
//! that it notices.
//!
//! The SQL is written for two flavors (Tessera, PostgreSQL) with literals only (simple query
//! protocol), so the same workload proves the checker on PostgreSQL and tests Tessera.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::SimpleQueryMessage;

/// Most attempts of one logical transfer before the client gives up on it (each conflict is
/// a 40001 answer, so a transfer between hot accounts may need several).
pub const TRANSFER_ATTEMPTS_MAX: u32 = 64;
/// Longest a phase may take before the test fails with the node's log: a bound that turns a
/// hang into a failure, not a timing assertion (a phase normally takes a few seconds).
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(180);

/// How many times the final read of every balance and record is run before a retryable
/// failure fails the test, and how long it waits before running it again (about a minute in
/// all).
const READ_ATTEMPTS_MAX: u32 = 600;
const READ_RETRY_EVERY: Duration = Duration::from_millis(100);

/// A small deterministic random generator (SplitMix64): the test needs reproducible draws,
/// not statistical quality, and no dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`, stream `stream` (clients get distinct streams of one seed).
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut r = Rng(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The pure checker: histories, the state read back, and what can be wrong with them.
pub mod checker {
    use std::collections::{BTreeMap, BTreeSet};
    use std::fmt;

    /// What the client knows about one transfer attempt.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Outcome {
        /// COMMIT was acknowledged: the transfer must be applied, exactly once.
        Committed,
        /// The server refused it (40001, or the client rolled back): it must not be applied.
        Aborted,
        /// The answer never came (connection lost): applied entirely or not at all.
        Unknown,
    }

    /// One transfer attempt: its record id, the accounts and the amount.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Transfer {
        /// The id of the record the transaction inserts (unique per attempt).
        pub id: String,
        /// Debited account.
        pub from: String,
        /// Credited account.
        pub to: String,
        /// Amount moved (positive).
        pub amount: i64,
        /// What the client saw.
        pub outcome: Outcome,
        /// The balances of `from` and `to` the transaction read, when it got that far (for
        /// diagnosis: two committed transfers that read one balance and both wrote it show a
        /// lost update; the checker itself does not use it, balances may repeat).
        pub seen: Option<(i64, i64)>,
    }

    /// The balances one committed read-only transaction saw.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Read {
        /// Account id to balance.
        pub balances: BTreeMap<String, i64>,
    }

    /// Everything the clients did, in no particular order.
    #[derive(Clone, Debug, Default)]
    pub struct History {
        /// Every transfer attempt.
        pub transfers: Vec<Transfer>,
        /// Every committed read of all balances.
        pub reads: Vec<Read>,
    }

    /// A transfer record as read back from the store.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Record {
        /// Record id.
        pub id: String,
        /// Debited account.
        pub from: String,
        /// Credited account.
        pub to: String,
        /// Amount.
        pub amount: i64,
    }

    /// The store's state after the clients stopped: balances and transfer records.
    #[derive(Clone, Debug, Default)]
    pub struct State {
        /// Every account row read (an account may appear twice if the store is broken).
        pub balances: Vec<(String, i64)>,
        /// Every transfer record read.
        pub records: Vec<Record>,
    }

    /// The bank's fixed facts.
    #[derive(Clone, Debug)]
    pub struct Ledger {
        /// Every account id.
        pub accounts: Vec<String>,
        /// Every account's opening balance.
        pub initial: i64,
    }

    impl Ledger {
        /// The sum of all balances, which no transfer changes.
        pub fn total(&self) -> i64 {
            self.initial * i64::try_from(self.accounts.len()).unwrap()
        }
    }

    /// One broken property.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Violation {
        /// An acknowledged transfer has no record.
        Lost { id: String },
        /// A transfer the server refused has a record.
        AbortedApplied { id: String },
        /// A record no client attempted.
        Phantom { id: String },
        /// A record whose accounts or amount differ from the attempt.
        Altered { id: String },
        /// The same record id read more than once.
        DuplicateRecord { id: String },
        /// An account missing, unknown, or read more than once in the final state.
        AccountSet { detail: String },
        /// A balance differs from initial + received - sent over the records present.
        Balance { account: String, expected: i64, actual: i64 },
        /// The final balances do not sum to the bank's total.
        Total { expected: i64, actual: i64 },
        /// A final balance below zero (transfers check funds first).
        Negative { account: String, balance: i64 },
        /// A committed read saw a total other than the bank's.
        ReadTotal { read: usize, actual: i64 },
        /// A committed read saw a negative balance.
        ReadNegative { read: usize, account: String, balance: i64 },
        /// A committed read did not see exactly the bank's accounts.
        ReadAccounts { read: usize, seen: usize },
    }

    impl fmt::Display for Violation {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Violation::Lost { id } => write!(f, "acknowledged transfer {id} has no record"),
                Violation::AbortedApplied { id } => {
                    write!(f, "transfer {id} was refused but its record exists")
                }
                Violation::Phantom { id } => write!(f, "record {id} was never attempted"),
                Violation::Altered { id } => write!(f, "record {id} differs from its attempt"),
                Violation::DuplicateRecord { id } => write!(f, "record {id} read twice"),
                Violation::AccountSet { detail } => write!(f, "account set: {detail}"),
                Violation::Balance { account, expected, actual } => write!(
                    f,
                    "{account}: balance {actual}, but the records present give {expected}"
                ),
                Violation::Total { expected, actual } => {
                    write!(f, "final total {actual}, expected {expected}")
                }
                Violation::Negative { account, balance } => {
                    write!(f, "{account}: negative final balance {balance}")
                }
                Violation::ReadTotal { read, actual } => {
                    write!(f, "read #{read} saw total {actual}")
                }
                Violation::ReadNegative { read, account, balance } => {
                    write!(f, "read #{read} saw {account} at {balance}")
                }
                Violation::ReadAccounts { read, seen } => {
                    write!(f, "read #{read} saw {seen} accounts")
                }
            }
        }
    }

    /// Every violation of the bank's properties by `history` and the final `state`:
    /// acknowledged transfers are applied (their record exists), refused ones are not,
    /// every record belongs to an attempt and matches it, each account's balance is its
    /// opening balance plus what the records present moved (so each transfer is applied
    /// exactly once, and atomically with its record), the total holds and nothing is
    /// negative, in the final state and in every committed read.
    pub fn check(ledger: &Ledger, history: &History, state: &State) -> Vec<Violation> {
        let mut out = Vec::new();
        let total = ledger.total();

        for (i, read) in history.reads.iter().enumerate() {
            let known = read.balances.keys().filter(|a| ledger.accounts.contains(a)).count();
            if known != ledger.accounts.len() || read.balances.len() != ledger.accounts.len() {
                out.push(Violation::ReadAccounts { read: i, seen: read.balances.len() });
            }
            let sum: i64 = read.balances.values().sum();
            if sum != total {
                out.push(Violation::ReadTotal { read: i, actual: sum });
            }
            for (account, &balance) in &read.balances {
                if balance < 0 {
                    out.push(Violation::ReadNegative {
                        read: i,
                        account: account.clone(),
                        balance,
                    });
                }
            }
        }

        let attempts: BTreeMap<&str, &super::checker::Transfer> =
            history.transfers.iter().map(|t| (t.id.as_str(), t)).collect();
        assert_eq!(attempts.len(), history.transfers.len(), "transfer ids are unique per attempt");
        let mut present: BTreeMap<&str, &Record> = BTreeMap::new();
        for r in &state.records {
            if present.insert(r.id.as_str(), r).is_some() {
                out.push(Violation::DuplicateRecord { id: r.id.clone() });
            }
        }
        for t in &history.transfers {
            match (t.outcome, present.contains_key(t.id.as_str())) {
                (Outcome::Committed, false) => out.push(Violation::Lost { id: t.id.clone() }),
                (Outcome::Aborted, true) => {
                    out.push(Violation::AbortedApplied { id: t.id.clone() })
                }
                _ => {}
            }
        }
        for (id, r) in &present {
            match attempts.get(id) {
                None => out.push(Violation::Phantom { id: (*id).to_owned() }),
                Some(t) if t.from != r.from || t.to != r.to || t.amount != r.amount => {
                    out.push(Violation::Altered { id: (*id).to_owned() })
                }
                Some(_) => {}
            }
        }

        let mut expected: BTreeMap<&str, i64> =
            ledger.accounts.iter().map(|a| (a.as_str(), ledger.initial)).collect();
        for r in state.records.iter() {
            if let Some(b) = expected.get_mut(r.from.as_str()) {
                *b -= r.amount;
            }
            if let Some(b) = expected.get_mut(r.to.as_str()) {
                *b += r.amount;
            }
        }
        let mut seen = BTreeSet::new();
        for (account, balance) in &state.balances {
            if !seen.insert(account.as_str()) {
                out.push(Violation::AccountSet { detail: format!("{account} read twice") });
            }
            match expected.get(account.as_str()) {
                None => out.push(Violation::AccountSet { detail: format!("unknown {account}") }),
                Some(&e) if e != *balance => out.push(Violation::Balance {
                    account: account.clone(),
                    expected: e,
                    actual: *balance,
                }),
                Some(_) => {}
            }
            if *balance < 0 {
                out.push(Violation::Negative { account: account.clone(), balance: *balance });
            }
        }
        for account in &ledger.accounts {
            if !seen.contains(account.as_str()) {
                out.push(Violation::AccountSet { detail: format!("{account} missing") });
            }
        }
        let sum: i64 = state.balances.iter().map(|(_, b)| b).sum();
        if sum != total {
            out.push(Violation::Total { expected: total, actual: sum });
        }
        out
    }

    /// After a clean check, every unknown outcome is settled by what the store holds: a
    /// present record means committed, an absent one aborted. Later checks then hold the
    /// store to it (a transfer seen after one recovery must survive the next).
    pub fn settle(history: &mut History, state: &State) {
        let present: BTreeSet<&str> = state.records.iter().map(|r| r.id.as_str()).collect();
        for t in &mut history.transfers {
            if t.outcome == Outcome::Unknown {
                t.outcome = if present.contains(t.id.as_str()) {
                    Outcome::Committed
                } else {
                    Outcome::Aborted
                };
            }
        }
    }
}

use checker::{History, Ledger, Outcome, Read, Record, State, Transfer};

/// The SQL dialect of the server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// A Tessera node: collections `accounts` and `transfers` of JSON documents.
    Tessera,
    /// PostgreSQL: tables `accounts (id, balance)` and `transfers (id, src, dst, amount)`.
    Postgres,
}

impl Flavor {
    /// Statements creating empty collections.
    fn setup(self) -> &'static [&'static str] {
        match self {
            // Tessera creates a collection on its first write.
            Flavor::Tessera => &[],
            Flavor::Postgres => &[
                "DROP TABLE IF EXISTS accounts",
                "DROP TABLE IF EXISTS transfers",
                "CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)",
                "CREATE TABLE transfers (id text PRIMARY KEY, src text NOT NULL, \
                 dst text NOT NULL, amount bigint NOT NULL)",
            ],
        }
    }

    fn begin(self) -> &'static str {
        match self {
            Flavor::Tessera => "BEGIN",
            Flavor::Postgres => "BEGIN ISOLATION LEVEL SERIALIZABLE",
        }
    }

    fn insert_account(self, id: &str, balance: i64) -> String {
        match self {
            Flavor::Tessera => {
                format!(r#"INSERT INTO accounts VALUES ('{id}', '{{"balance":{balance}}}')"#)
            }
            Flavor::Postgres => format!("INSERT INTO accounts VALUES ('{id}', {balance})"),
        }
    }

    fn read_balance(self, id: &str) -> String {
        match self {
            Flavor::Tessera => format!("SELECT balance::int8 FROM accounts WHERE id() = '{id}'"),
            Flavor::Postgres => format!("SELECT balance FROM accounts WHERE id = '{id}'"),
        }
    }

    fn set_balance(self, id: &str, balance: i64) -> String {
        match self {
            Flavor::Tessera => {
                format!("UPDATE accounts SET balance = {balance} WHERE id() = '{id}'")
            }
            Flavor::Postgres => {
                format!("UPDATE accounts SET balance = {balance} WHERE id = '{id}'")
            }
        }
    }

    fn insert_record(self, t: &Transfer) -> String {
        let Transfer { id, from, to, amount, .. } = t;
        match self {
            Flavor::Tessera => format!(
                r#"INSERT INTO transfers VALUES ('{id}', '{{"src":"{from}","dst":"{to}","amount":{amount}}}')"#
            ),
            Flavor::Postgres => {
                format!("INSERT INTO transfers VALUES ('{id}', '{from}', '{to}', {amount})")
            }
        }
    }

    fn read_all_balances(self) -> &'static str {
        match self {
            Flavor::Tessera => "SELECT id(), balance::int8 FROM accounts",
            Flavor::Postgres => "SELECT id, balance FROM accounts",
        }
    }

    fn read_all_records(self) -> &'static str {
        match self {
            Flavor::Tessera => "SELECT id(), src::text, dst::text, amount::int8 FROM transfers",
            Flavor::Postgres => "SELECT id, src, dst, amount FROM transfers",
        }
    }

    /// SQLSTATEs after which the transaction is known not to have committed and may be
    /// retried.
    fn retryable(self, code: &str) -> bool {
        match self {
            Flavor::Tessera => code == "40001",
            // PostgreSQL also breaks deadlocks between the two row updates with 40P01.
            Flavor::Postgres => code == "40001" || code == "40P01",
        }
    }
}

/// The rows of a simple query, as text.
fn rows(messages: &[SimpleQueryMessage]) -> Vec<Vec<String>> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => {
                Some((0..row.len()).map(|i| row.get(i).unwrap_or("NULL").to_owned()).collect())
            }
            _ => None,
        })
        .collect()
}

/// The bank under test: where it lives and what it holds.
#[derive(Clone, Debug)]
pub struct Bank {
    /// The SQL dialect.
    pub flavor: Flavor,
    /// Accounts and opening balance.
    pub ledger: Ledger,
    /// A record's id suffix per debited account (Tessera: `$@<shard of the account>`, so a
    /// transfer between two accounts of one fragment stays in that fragment).
    pub record_suffix: Vec<String>,
}

impl Bank {
    /// Creates the collections and the accounts with their opening balances.
    pub async fn open(&self, client: &tokio_postgres::Client) {
        for s in self.flavor.setup() {
            client.simple_query(s).await.unwrap_or_else(|e| panic!("setup `{s}`: {e:?}"));
        }
        for a in &self.ledger.accounts {
            let s = self.flavor.insert_account(a, self.ledger.initial);
            client.simple_query(&s).await.unwrap_or_else(|e| panic!("`{s}`: {e:?}"));
        }
    }

    /// Reads every balance and every transfer record (after the clients stopped). A read that
    /// fails with a retryable SQLSTATE is run again: a cluster may still be moving fragments
    /// (a fragment that moves while its rows are sent fails the read with 40001).
    pub async fn state(&self, client: &tokio_postgres::Client) -> State {
        let balances = self
            .read_retrying(client, self.flavor.read_all_balances())
            .await
            .into_iter()
            .map(|r| (r[0].clone(), r[1].parse().unwrap()))
            .collect();
        let records = self
            .read_retrying(client, self.flavor.read_all_records())
            .await
            .into_iter()
            .map(|r| Record {
                id: r[0].clone(),
                from: r[1].clone(),
                to: r[2].clone(),
                amount: r[3].parse().unwrap(),
            })
            .collect();
        State { balances, records }
    }

    /// The rows of `q`, run again after a retryable failure, at most [`READ_ATTEMPTS_MAX`]
    /// times.
    async fn read_retrying(&self, client: &tokio_postgres::Client, q: &str) -> Vec<Vec<String>> {
        let mut attempt = 1;
        loop {
            match client.simple_query(q).await {
                Ok(messages) => return rows(&messages),
                Err(e)
                    if attempt < READ_ATTEMPTS_MAX
                        && e.code().is_some_and(|c| self.flavor.retryable(c.code())) =>
                {
                    attempt += 1;
                    tokio::time::sleep(READ_RETRY_EVERY).await;
                }
                Err(e) => panic!("{q} (attempt {attempt}): {e:?}"),
            }
        }
    }
}

/// How many clients of each kind, and how big a transfer can be.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Clients transferring.
    pub transfer_clients: usize,
    /// Clients reading every balance in one transaction.
    pub read_clients: usize,
    /// Largest amount of one transfer.
    pub amount_max: i64,
}

/// What all clients share during a run: the history, counters and the stop signal.
#[derive(Default)]
pub struct Shared {
    history: Mutex<History>,
    /// Committed transfers so far (all phases).
    acked: AtomicU64,
    /// Transfers refused with a retryable SQLSTATE (all phases).
    conflicts: AtomicU64,
    /// Committed reads so far (all phases).
    reads: AtomicU64,
    /// Unexpected errors (a SQLSTATE neither retryable nor connection loss), for the report.
    unexpected: Mutex<Vec<String>>,
    stop: AtomicBool,
    progress: Notify,
}

impl Shared {
    /// Committed transfers so far.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }
    /// Retryable refusals so far.
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::SeqCst)
    }
    /// Committed full reads so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
    /// Unexpected errors seen by clients.
    pub fn unexpected(&self) -> Vec<String> {
        self.unexpected.lock().unwrap().clone()
    }
    /// One line of counts for the test's output.
    pub fn summary(&self) -> String {
        let h = self.history.lock().unwrap();
        let count = |o: Outcome| h.transfers.iter().filter(|t| t.outcome == o).count();
        format!(
            "{} attempts: {} committed, {} refused or declined, {} unknown; {} retried \
             conflicts; {} committed full reads",
            h.transfers.len(),
            count(Outcome::Committed),
            count(Outcome::Aborted),
            count(Outcome::Unknown),
            self.conflicts(),
            self.reads()
        )
    }
    /// A copy of the history.
    pub fn history(&self) -> History {
        self.history.lock().unwrap().clone()
    }
    /// Settles unknown outcomes against `state` (see [`checker::settle`]).
    pub fn settle(&self, state: &State) {
        checker::settle(&mut self.history.lock().unwrap(), state);
    }
    /// Tells every client to finish its current operation and return.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
    /// Waits until at least `count` transfers are committed in total, or every client of the
    /// phase is gone (`clients_left` reaches zero).
    pub async fn wait_acked(&self, count: u64, clients_left: &AtomicU64) {
        loop {
            let notified = self.progress.notified();
            if self.acked() >= count || clients_left.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
    fn record(&self, t: Transfer) -> usize {
        let mut h = self.history.lock().unwrap();
        h.transfers.push(t);
        h.transfers.len() - 1
    }
    fn set_outcome(&self, index: usize, outcome: Outcome) {
        self.history.lock().unwrap().transfers[index].outcome = outcome;
    }
}

/// Why one transaction did not commit.
enum Failure {
    Retry,
    Lost,
    Unexpected(String),
}

fn classify(flavor: Flavor, e: &tokio_postgres::Error) -> Failure {
    match e.code() {
        Some(code) if flavor.retryable(code.code()) => Failure::Retry,
        // Operator intervention (a server shutting down or crashing: PostgreSQL's immediate
        // shutdown says so before it closes the connection): the answer is lost.
        Some(code) if code.code().starts_with("57P0") => Failure::Lost,
        // A cluster node the statement needed went away (killed): the answer is lost too.
        Some(code) if code.code() == "08006" => Failure::Lost,
        Some(code) => Failure::Unexpected(match e.as_db_error() {
            Some(db) => format!("{}: {}", code.code(), db.message()),
            None => format!("{}: {e}", code.code()),
        }),
        None => Failure::Lost,
    }
}

/// One transfer attempt: `Ok(true)` committed, `Ok(false)` declined for lack of funds. The
/// balances read are noted in the history entry `index` as soon as they are known.
async fn transfer_once(
    client: &tokio_postgres::Client,
    flavor: Flavor,
    t: &Transfer,
    shared: &Shared,
    index: usize,
) -> Result<bool, tokio_postgres::Error> {
    client.simple_query(flavor.begin()).await?;
    let balance = |m: Vec<SimpleQueryMessage>| -> i64 {
        let r = rows(&m);
        assert_eq!(r.len(), 1, "one row per account read");
        r[0][0].parse().unwrap()
    };
    let from = balance(client.simple_query(&flavor.read_balance(&t.from)).await?);
    let to = balance(client.simple_query(&flavor.read_balance(&t.to)).await?);
    shared.history.lock().unwrap().transfers[index].seen = Some((from, to));
    if from < t.amount {
        client.simple_query("ROLLBACK").await?;
        return Ok(false);
    }
    client.simple_query(&flavor.set_balance(&t.from, from - t.amount)).await?;
    client.simple_query(&flavor.set_balance(&t.to, to + t.amount)).await?;
    client.simple_query(&flavor.insert_record(t)).await?;
    client.simple_query("COMMIT").await?;
    Ok(true)
}

/// A transferring client: random pairs, random amounts, retries on conflicts, until told to
/// stop or its connection dies.
pub async fn transfer_client(
    client: tokio_postgres::Client,
    bank: Arc<Bank>,
    load: Load,
    shared: Arc<Shared>,
    mut rng: Rng,
    name: String,
) {
    let accounts = &bank.ledger.accounts;
    let n = accounts.len() as u64;
    let mut seq = 0u64;
    'transfers: while !shared.stopping() {
        let a = usize::try_from(rng.below(n)).unwrap();
        let b = usize::try_from((a as u64 + 1 + rng.below(n - 1)) % n).unwrap();
        let amount = 1 + i64::try_from(rng.below(u64::try_from(load.amount_max).unwrap())).unwrap();
        for _ in 0..TRANSFER_ATTEMPTS_MAX {
            let t = Transfer {
                id: format!("x/{name}-{seq}{}", bank.record_suffix[a]),
                from: accounts[a].clone(),
                to: accounts[b].clone(),
                amount,
                outcome: Outcome::Unknown,
                seen: None,
            };
            seq += 1;
            // Recorded before it is sent: if the node dies mid-transaction it stays unknown.
            let index = shared.record(t.clone());
            match transfer_once(&client, bank.flavor, &t, &shared, index).await {
                Ok(committed) => {
                    if committed {
                        shared.set_outcome(index, Outcome::Committed);
                        shared.acked.fetch_add(1, Ordering::SeqCst);
                        shared.progress.notify_waiters();
                    } else {
                        shared.set_outcome(index, Outcome::Aborted);
                    }
                    continue 'transfers;
                }
                Err(e) => match classify(bank.flavor, &e) {
                    Failure::Retry => {
                        shared.set_outcome(index, Outcome::Aborted);
                        shared.conflicts.fetch_add(1, Ordering::SeqCst);
                        if client.simple_query("ROLLBACK").await.is_err() {
                            return;
                        }
                        if shared.stopping() {
                            return;
                        }
                    }
                    Failure::Lost => return,
                    Failure::Unexpected(e) => {
                        // The outcome stays unknown: the error says nothing certain. The
                        // client ends, so a server refusing everything ends the phase early
                        // (the test then fails with this error).
                        shared.unexpected.lock().unwrap().push(format!("{name} {}: {e}", t.id));
                        return;
                    }
                },
            }
        }
    }
}

/// A reading client: every balance in one transaction, again and again.
pub async fn read_client(
    client: tokio_postgres::Client,
    bank: Arc<Bank>,
    shared: Arc<Shared>,
    name: String,
) {
    let flavor = bank.flavor;
    while !shared.stopping() {
        let result = async {
            client.simple_query(flavor.begin()).await?;
            let m = client.simple_query(flavor.read_all_balances()).await?;
            client.simple_query("COMMIT").await?;
            Ok::<_, tokio_postgres::Error>(m)
        }
        .await;
        match result {
            Ok(m) => {
                let balances = rows(&m).into_iter().map(|r| (r[0].clone(), r[1].parse().unwrap()));
                shared.history.lock().unwrap().reads.push(Read { balances: balances.collect() });
                shared.reads.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => match classify(flavor, &e) {
                Failure::Retry => {
                    if client.simple_query("ROLLBACK").await.is_err() {
                        return;
                    }
                }
                Failure::Lost => return,
                Failure::Unexpected(e) => {
                    shared.unexpected.lock().unwrap().push(format!("{name} read: {e}"));
                    return;
                }
            },
        }
    }
}

/// Connects `conn_str` with tokio-postgres, driving the connection on the current runtime.
pub async fn connect(conn_str: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(conn_str, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {conn_str}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// The clients of one phase, running.
pub struct Phase {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Clients still running.
    pub left: Arc<AtomicU64>,
}

impl Phase {
    /// Connects and starts `load`'s clients against `conn_str`; client `i` of phase `phase`
    /// draws from stream `phase * 1000 + i` of `seed`.
    pub async fn start(
        conn_str: &str,
        bank: &Arc<Bank>,
        load: Load,
        shared: &Arc<Shared>,
        seed: u64,
        phase: u64,
    ) -> Phase {
        shared.stop.store(false, Ordering::SeqCst);
        let left = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..load.transfer_clients + load.read_clients {
            let client = connect(conn_str).await;
            let (bank, shared, left) = (Arc::clone(bank), Arc::clone(shared), Arc::clone(&left));
            left.fetch_add(1, Ordering::SeqCst);
            let rng = Rng::new(seed, phase * 1000 + i as u64);
            let name = format!("p{phase}c{i}");
            tasks.push(tokio::spawn(async move {
                if i < load.transfer_clients {
                    transfer_client(client, bank, load, Arc::clone(&shared), rng, name).await;
                } else {
                    read_client(client, bank, Arc::clone(&shared), name).await;
                }
                left.fetch_sub(1, Ordering::SeqCst);
                shared.progress.notify_waiters();
            }));
        }
        Phase { tasks, left }
    }

    /// Waits for every client of the phase to return (after [`Shared::stop`] or a kill).
    pub async fn join(self) {
        for t in self.tasks {
            t.await.expect("client task panicked");
        }
    }
}

/// Whether a phase may stop: `acked` transfers committed, or no clients left.
pub async fn run_until(shared: &Shared, phase: &Phase, acked: u64) {
    shared.wait_acked(acked, &phase.left).await;
}

/// The violations of the current history against the state read now, each on its own line,
/// or an empty string.
pub fn report(violations: &[checker::Violation]) -> String {
    violations.iter().map(|v| format!("  {v}\n")).collect()
}

/// The bank as `tessera dump` shows the data directory `dir` (of a stopped node, or a
/// backup): the balances sorted by account, and the transfer record ids. Compare with
/// [`seen`] of what the node serves once it recovered `dir`.
pub fn dump_data_dir(dir: &std::path::Path) -> (Vec<(String, i64)>, BTreeSet<String>) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("dump")
        .arg("--data-dir")
        .arg(dir)
        .output()
        .expect("run tessera dump");
    assert!(output.status.success(), "dump failed: {}", String::from_utf8_lossy(&output.stderr));
    let mut balances = Vec::new();
    let mut records = BTreeSet::new();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = v["id"].as_str().unwrap().to_owned();
        match v["collection"].as_str().unwrap() {
            "accounts" => balances.push((id, v["doc"]["balance"].as_i64().unwrap())),
            "transfers" => {
                records.insert(id);
            }
            other => panic!("unexpected collection {other} in the dump"),
        }
    }
    balances.sort();
    (balances, records)
}

/// A state read from a node in the shape of [`dump_data_dir`].
pub fn seen(state: &State) -> (Vec<(String, i64)>, BTreeSet<String>) {
    let mut balances = state.balances.clone();
    balances.sort();
    (balances, state.records.iter().map(|r| r.id.clone()).collect())
}

/// Writes a history and a state as text, one line per attempt (with whether its record is
/// present), read and balance, for diagnosing a failure; returns the text's path.
pub fn dump(
    dir: &std::path::Path,
    name: &str,
    history: &History,
    state: &State,
) -> std::path::PathBuf {
    use std::fmt::Write as _;
    let present: std::collections::BTreeSet<&str> =
        state.records.iter().map(|r| r.id.as_str()).collect();
    let mut text = String::new();
    for t in &history.transfers {
        let _ = writeln!(
            text,
            "attempt {} {} -> {} amount {} read {:?} outcome {:?} record {}",
            t.id,
            t.from,
            t.to,
            t.amount,
            t.seen,
            t.outcome,
            if present.contains(t.id.as_str()) { "present" } else { "absent" }
        );
    }
    for (i, r) in history.reads.iter().enumerate() {
        let _ = writeln!(text, "read #{i} {:?}", r.balances);
    }
    for (a, b) in &state.balances {
        let _ = writeln!(text, "balance {a} {b}");
    }
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the bank dump");
    path
}

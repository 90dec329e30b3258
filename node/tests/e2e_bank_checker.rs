//! The bank checker's own tests: it must be able to fail. Each test plants one defect in a
//! small consistent history (a lost, a duplicated, a torn, a refused-but-applied, a phantom
//! or an altered transfer; a read with a wrong total, a negative balance or a missing
//! account) and checks that the checker of `support/bank.rs` reports exactly that.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

#[path = "support/bank.rs"]
mod bank;

use std::collections::BTreeMap;

use bank::checker::{self, History, Ledger, Outcome, Read, Record, State, Transfer, Violation};

fn ledger() -> Ledger {
    Ledger { accounts: vec!["a".into(), "b".into(), "c".into()], initial: 10 }
}

fn transfer(id: &str, from: &str, to: &str, amount: i64, outcome: Outcome) -> Transfer {
    Transfer { id: id.into(), from: from.into(), to: to.into(), amount, outcome, seen: None }
}

fn record_of(t: &Transfer) -> Record {
    Record { id: t.id.clone(), from: t.from.clone(), to: t.to.clone(), amount: t.amount }
}

/// A consistent history: t1 (a→b 4) committed, t2 (b→c 3) refused, t3 (c→a 5) unknown and
/// applied, t4 (a→c 1) unknown and not applied; one read in the middle.
fn consistent() -> (History, State) {
    let transfers = vec![
        transfer("t1", "a", "b", 4, Outcome::Committed),
        transfer("t2", "b", "c", 3, Outcome::Aborted),
        transfer("t3", "c", "a", 5, Outcome::Unknown),
        transfer("t4", "a", "c", 1, Outcome::Unknown),
    ];
    let read =
        Read { balances: BTreeMap::from([("a".into(), 6), ("b".into(), 14), ("c".into(), 10)]) };
    let state = State {
        balances: vec![("a".into(), 11), ("b".into(), 14), ("c".into(), 5)],
        records: vec![record_of(&transfers[0]), record_of(&transfers[2])],
    };
    (History { transfers, reads: vec![read] }, state)
}

// Checks that the consistent history passes, so the failures below come from the defects
// each one plants.
#[test]
fn checker_accepts_a_consistent_history() {
    let (history, state) = consistent();
    assert_eq!(checker::check(&ledger(), &history, &state), vec![]);
}

// Checks a lost transfer: t1 was acknowledged, but neither its record nor its effect is there.
#[test]
fn checker_reports_a_lost_transfer() {
    let (history, mut state) = consistent();
    state.records.retain(|r| r.id != "t1");
    state.balances = vec![("a".into(), 15), ("b".into(), 10), ("c".into(), 5)];
    let v = checker::check(&ledger(), &history, &state);
    assert!(v.contains(&Violation::Lost { id: "t1".into() }), "{v:?}");
}

// Checks a duplicated transfer: t1's record exists once, but its amount moved twice.
#[test]
fn checker_reports_a_duplicated_transfer() {
    let (history, mut state) = consistent();
    state.balances = vec![("a".into(), 7), ("b".into(), 18), ("c".into(), 5)];
    let v = checker::check(&ledger(), &history, &state);
    assert!(
        v.contains(&Violation::Balance { account: "a".into(), expected: 11, actual: 7 }),
        "{v:?}"
    );
    assert!(
        v.contains(&Violation::Balance { account: "b".into(), expected: 14, actual: 18 }),
        "{v:?}"
    );
    // A duplicated record (the same id twice) is reported as such.
    let (history, mut state) = consistent();
    state.records.push(state.records[0].clone());
    let v = checker::check(&ledger(), &history, &state);
    assert!(v.contains(&Violation::DuplicateRecord { id: "t1".into() }), "{v:?}");
}

// Checks a torn transfer: t3's record is there but only its debit was applied, so money
// vanished; both the balance and the total are reported.
#[test]
fn checker_reports_a_torn_transfer() {
    let (history, mut state) = consistent();
    state.balances = vec![("a".into(), 6), ("b".into(), 14), ("c".into(), 5)];
    let v = checker::check(&ledger(), &history, &state);
    assert!(
        v.contains(&Violation::Balance { account: "a".into(), expected: 11, actual: 6 }),
        "{v:?}"
    );
    assert!(v.contains(&Violation::Total { expected: 30, actual: 25 }), "{v:?}");
}

// Checks a refused transfer that was applied anyway, a record nobody attempted, and a record
// whose amount differs from its attempt.
#[test]
fn checker_reports_refused_phantom_and_altered_records() {
    let (history, mut state) = consistent();
    state.records.push(record_of(&history.transfers[1]));
    state.balances = vec![("a".into(), 11), ("b".into(), 11), ("c".into(), 8)];
    let v = checker::check(&ledger(), &history, &state);
    assert_eq!(v, vec![Violation::AbortedApplied { id: "t2".into() }]);

    let (history, mut state) = consistent();
    state.records.push(Record { id: "zz".into(), from: "a".into(), to: "b".into(), amount: 0 });
    state.records[0].amount = 5;
    let v = checker::check(&ledger(), &history, &state);
    assert!(v.contains(&Violation::Phantom { id: "zz".into() }), "{v:?}");
    assert!(v.contains(&Violation::Altered { id: "t1".into() }), "{v:?}");
}

// Checks reads: a committed read whose total is off, one with a negative balance, one missing
// an account; and a final state with a missing account and a negative balance.
#[test]
fn checker_reports_bad_reads_and_account_sets() {
    let (mut history, state) = consistent();
    history.reads.push(Read {
        balances: BTreeMap::from([("a".into(), 6), ("b".into(), 10), ("c".into(), 10)]),
    });
    history.reads.push(Read {
        balances: BTreeMap::from([("a".into(), -1), ("b".into(), 21), ("c".into(), 10)]),
    });
    history.reads.push(Read { balances: BTreeMap::from([("a".into(), 20), ("b".into(), 10)]) });
    let v = checker::check(&ledger(), &history, &state);
    assert_eq!(
        v,
        vec![
            Violation::ReadTotal { read: 1, actual: 26 },
            Violation::ReadNegative { read: 2, account: "a".into(), balance: -1 },
            Violation::ReadAccounts { read: 3, seen: 2 },
        ]
    );

    let (history, mut state) = consistent();
    state.balances = vec![("a".into(), -4), ("b".into(), 14)];
    state.records.push(Record { id: "t4".into(), from: "a".into(), to: "c".into(), amount: 1 });
    let v = checker::check(&ledger(), &history, &state);
    assert!(v.contains(&Violation::Negative { account: "a".into(), balance: -4 }), "{v:?}");
    assert!(v.contains(&Violation::AccountSet { detail: "c missing".into() }), "{v:?}");
}

// Checks settling: after a check, an unknown transfer found applied counts as committed, one
// not found as refused, so a later state that drops t3 or brings back t4 is reported.
#[test]
fn checker_holds_settled_transfers_to_their_first_state() {
    let (mut history, state) = consistent();
    checker::settle(&mut history, &state);
    assert_eq!(history.transfers[2].outcome, Outcome::Committed);
    assert_eq!(history.transfers[3].outcome, Outcome::Aborted);
    let mut later = state.clone();
    later.records.retain(|r| r.id != "t3");
    later.balances = vec![("a".into(), 6), ("b".into(), 14), ("c".into(), 10)];
    assert_eq!(
        checker::check(&ledger(), &history, &later),
        vec![Violation::Lost { id: "t3".into() }]
    );
    let mut later = state;
    later.records.push(record_of(&history.transfers[3]));
    later.balances = vec![("a".into(), 10), ("b".into(), 14), ("c".into(), 6)];
    assert_eq!(
        checker::check(&ledger(), &history, &later),
        vec![Violation::AbortedApplied { id: "t4".into() }]
    );
}

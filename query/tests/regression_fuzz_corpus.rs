//! Replays every file of the `sql_frontend` and `copy_data` fuzz corpora
//! (`fuzz/corpus/<target>/`, the committed `seed-*` files plus anything a local fuzz run
//! added) through the exact function the target calls, so the normal test suite re-checks
//! every input the fuzzer ever kept.

use std::fs;
use std::path::PathBuf;

/// Runs `body` over every file of `target`'s corpus; at least one committed seed must exist.
fn replay(target: &str, body: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut seeds = 0;
    for entry in entries {
        let path = entry.expect("corpus directory entry").path();
        if !path.is_file() {
            continue;
        }
        let data = fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("seed-")) {
            seeds += 1;
        }
        body(&data);
    }
    assert!(seeds > 0, "no committed seed-* files in {}", dir.display());
}

// Checks every sql_frontend corpus input still runs through the front end without a panic.
#[test]
fn corpus_sql_frontend() {
    replay("sql_frontend", query::fuzzing::sql_frontend);
}

// Checks every copy_data corpus input still decodes (or is refused) without a panic and
// with the target's properties.
#[test]
fn corpus_copy_data() {
    replay("copy_data", query::fuzzing::copy_data);
}

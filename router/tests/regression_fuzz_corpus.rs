//! Replays every file of each fuzz target's corpus (`fuzz/corpus/<target>/`, the committed
//! `seed-*` files plus anything a local fuzz run added) through the exact function the target
//! calls, so the normal test suite re-checks every input the fuzzer ever kept.

use std::fs;
use std::path::PathBuf;

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

// Checks every shard_of corpus input still satisfies the target's assertions.
#[test]
fn corpus_shard_of() {
    replay("shard_of", router::fuzzing::shard_of_bytes);
}

// Checks every sharding_config corpus input still satisfies the target's assertions.
#[test]
fn corpus_sharding_config() {
    replay("sharding_config", router::fuzzing::sharding_config);
}

// Checks every assign corpus input still satisfies the target's assertions.
#[test]
fn corpus_assign() {
    replay("assign", router::fuzzing::assign);
}

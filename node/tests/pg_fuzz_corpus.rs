//! Replays the `pg_frontend` fuzz corpus (fuzz/corpus/pg_frontend/seed-*, plus anything the
//! fuzzer added there) through the same entry point the fuzz target calls, so every input that
//! ever mattered stays a regression test without cargo-fuzz.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;

// Checks every corpus file decodes without panicking, and that the seeds still reach the
// decoders (a well-formed seed decodes at least its startup packet).
#[test]
fn regression_pg_frontend_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pg_frontend");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let decoded = node::pg::fuzz::frontend_bytes(&data);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("seed-") {
            seeds += 1;
            assert!(decoded > 0, "{name} decoded nothing");
        }
    }
    assert!(seeds >= 10, "expected the checked-in seeds, found {seeds}");
}

// Checks the extended-protocol seed decodes every one of its messages (startup, Parse, Bind,
// two Describes, Execute, Flush, Execute, two Closes, Sync, Terminate).
#[test]
fn regression_pg_frontend_extended_seed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pg_frontend");
    let data = std::fs::read(dir.join("seed-extended")).unwrap();
    assert_eq!(node::pg::fuzz::frontend_bytes(&data), 12);
}

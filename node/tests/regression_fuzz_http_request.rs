//! Replays the `http_request` fuzz corpus (fuzz/corpus/http_request/seed-*, plus anything the
//! fuzzer added there) through the fuzz target's entry point, so every input that ever
//! mattered stays a regression test without cargo-fuzz.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;

// Checks every corpus file is answered without panicking, and each seed gets the status its
// name promises.
#[test]
fn regression_http_request_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/http_request");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let status = node::metrics::fuzz_http_request(&data);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let expected = match name.as_str() {
            "seed-scrape" | "seed-head" => Some(200),
            "seed-post" => Some(405),
            "seed-not-found" => Some(404),
            "seed-bad-header" | "seed-binary" => Some(400),
            "seed-bad-version" => Some(505),
            "seed-partial" => Some(0),
            _ => None,
        };
        if let Some(expected) = expected {
            seeds += 1;
            assert_eq!(status, expected, "{name}");
        }
    }
    assert_eq!(seeds, 8, "the checked-in seeds");
}

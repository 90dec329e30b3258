//! Replays the `data_frame` fuzz corpus (fuzz/corpus/data_frame/seed-*, plus anything the
//! fuzzer added there) through the same entry point the fuzz target calls.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;

// Checks every corpus file decodes without panicking, that the good seeds decode all their
// frames and the bad ones (seed-bad-*: checksum, length over the limit, garbage) none.
#[test]
fn regression_data_frame_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/data_frame");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let decoded = node::cluster::forward::fuzz_data_frames(&data);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("seed-bad-") {
            seeds += 1;
            assert_eq!(decoded, 0, "{name} decoded a frame");
        } else if name == "seed-stream" {
            seeds += 1;
            assert_eq!(decoded, 11, "{name}");
        } else if name.starts_with("seed-") {
            seeds += 1;
            assert_eq!(decoded, 1, "{name}");
        }
    }
    assert!(seeds >= 15, "expected the checked-in seeds, found {seeds}");
}

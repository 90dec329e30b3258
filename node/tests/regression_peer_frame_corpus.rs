//! Replays the `peer_frame` fuzz corpus (fuzz/corpus/peer_frame/seed-*, plus anything the
//! fuzzer added there) through the same entry point the fuzz target calls.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;

// Checks every corpus file decodes without panicking, that the good seeds decode all their
// frames and the bad ones (seed-bad-*) none.
#[test]
fn regression_peer_frame_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/peer_frame");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let decoded = node::cluster::wire::fuzz_frames(&data);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("seed-bad-") {
            seeds += 1;
            assert_eq!(decoded, 0, "{name} decoded a frame");
        } else if name.starts_with("seed-") {
            seeds += 1;
            assert!(decoded > 0, "{name} decoded nothing");
        }
    }
    assert!(seeds >= 8, "expected the checked-in seeds, found {seeds}");
}

// Checks the join seed decodes all four of its frames (join, joined, not-leader, join-failed).
#[test]
fn regression_peer_frame_join_seed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/peer_frame");
    let data = std::fs::read(dir.join("seed-join")).unwrap();
    assert_eq!(node::cluster::wire::fuzz_frames(&data), 4);
}

// Checks the handoff seed decodes all nine of its frames (handoff-start, import-begin, ack,
// import-chunk, ack, import-end, import-refused, handoff-done, handoff-failed).
#[test]
fn regression_peer_frame_handoff_seed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/peer_frame");
    let data = std::fs::read(dir.join("seed-handoff")).unwrap();
    assert_eq!(node::cluster::wire::fuzz_frames(&data), 9);
}

// Checks the session-3 seeds decode every frame: authentication (challenge, proof, refused)
// and operations (plan-move, its two answers, load, load-answer).
#[test]
fn regression_peer_frame_auth_and_ops_seeds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/peer_frame");
    let auth = std::fs::read(dir.join("seed-auth")).unwrap();
    assert_eq!(node::cluster::wire::fuzz_frames(&auth), 3);
    let ops = std::fs::read(dir.join("seed-ops")).unwrap();
    assert_eq!(node::cluster::wire::fuzz_frames(&ops), 5);
}

// Checks the remove-node request (ALTER CLUSTER REMOVE NODE 3) decodes, and that its seed
// is exactly one frame: the new variant is the last, so older seeds decode as before.
#[test]
fn regression_peer_frame_remove_node_seed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/peer_frame");
    let data = std::fs::read(dir.join("seed-remove-node")).unwrap();
    assert_eq!(node::cluster::wire::fuzz_frames(&data), 1);
    let frame =
        node::cluster::wire::encode_frame(&node::cluster::wire::Message::RemoveNode { node: 3 })
            .unwrap();
    assert_eq!(frame, data, "the seed is the frame this build encodes");
}

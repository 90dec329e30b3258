//! Arbitrary bytes through the peer protocol's frame decoder and handshake check
//! (`node::cluster::wire`). Must never panic or allocate beyond the frame limit. The seed
//! corpus is replayed by node/tests/regression_peer_frame_corpus.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = node::cluster::wire::fuzz_frames(data);
});

//! Arbitrary bytes through the cluster data connection's frame decoder, its joining of
//! pieces, and the conversions of what it carries (`node::cluster::forward`). Must never
//! panic, or allocate beyond the frame limit per frame and the bytes given for pieces. The seed corpus is replayed by node/tests/regression_data_frame_corpus.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = node::cluster::forward::fuzz_data_frames(data);
});

//! Arbitrary bytes as a segment image: header decoding, chunk and frame parsing, CRC checks and
//! rkyv validation must return a result or a typed damage, never panic or read out of bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = storage::format::read_segment_unaligned(data);
});

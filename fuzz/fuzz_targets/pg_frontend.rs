//! Arbitrary bytes through the PostgreSQL frontend decoders (startup packets, frame splitter,
//! message bodies, SASL/SCRAM messages). Must never panic. The seed corpus is replayed by
//! node/tests/pg_fuzz_corpus.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = node::pg::fuzz::frontend_bytes(data);
});

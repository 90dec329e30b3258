//! Fuzz target: arbitrary bytes as COPY FROM STDIN input, in text or CSV. The body lives in
//! `query::fuzzing::copy_data` so the corpus replay test runs the same checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| query::fuzzing::copy_data(data));

//! Fuzz target: `config \0 id \0 document` -> content-based assignment and validation
//! (SHARDING.md §3). The body lives in `router::fuzzing::assign` so the corpus replay test
//! runs the same checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| router::fuzzing::assign(data));

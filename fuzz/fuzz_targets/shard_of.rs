//! Fuzz target: document id bytes -> shard (SHARDING.md §2). The body lives in
//! `router::fuzzing::shard_of_bytes` so the corpus replay test runs the same checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| router::fuzzing::shard_of_bytes(data));

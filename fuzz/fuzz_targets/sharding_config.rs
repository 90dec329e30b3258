//! Fuzz target: sharding configuration text -> `ShardingConfig` (SHARDING.md §3). The body
//! lives in `router::fuzzing::sharding_config` so the corpus replay test runs the same checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| router::fuzzing::sharding_config(data));

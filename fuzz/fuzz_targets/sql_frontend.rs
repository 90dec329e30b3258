//! Fuzz target: arbitrary text -> parse, plan, bind, route, EXPLAIN, execute and merge over
//! fixed documents. The body lives in `query::fuzzing::sql_frontend` so the corpus replay
//! test runs the same checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| query::fuzzing::sql_frontend(data));

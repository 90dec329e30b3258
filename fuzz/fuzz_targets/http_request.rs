//! Arbitrary bytes through the metrics endpoint's HTTP request parser and answer choice. Must
//! never panic. The seed corpus is replayed by node/tests/regression_fuzz_http_request.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = node::metrics::fuzz_http_request(data);
});

//! Shared test setup: deterministic proptest configuration.
// Each test file compiles this module on its own and uses a different subset of it.
#![allow(dead_code)]

use proptest::test_runner::{Config, RngSeed};

/// The seed used unless `PROPTEST_RNG_SEED` overrides it, so every run is reproducible.
pub const DEFAULT_SEED: u64 = 0x7e55_e4a0_0002;

/// Proptest configuration: case count from `PROPTEST_CASES` (default 256), seed from
/// `PROPTEST_RNG_SEED` or [`DEFAULT_SEED`]. Failures print the minimal input; rerun with the
/// same seed to reproduce.
pub fn config() -> Config {
    config_with_cases(256)
}

/// [`config`], with `cases` as the default when `PROPTEST_CASES` is unset.
pub fn config_with_cases(cases: u32) -> Config {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(DEFAULT_SEED);
    }
    config.failure_persistence = None;
    config
}

#!/usr/bin/env bash
# The developer's gate before every commit: formatting, lints as errors, every test.
# Tests run under cargo-nextest when it is installed (every test its own process, two per
# core at a time across all binaries: .config/nextest.toml), else under `cargo test`; both run
# the same tests. TESSERA_NEXTEST=0 asks for `cargo test`, TESSERA_TEST_THREADS=n sets how
# many nextest runs at once.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
if [ "${TESSERA_NEXTEST:-1}" != 0 ] && cargo nextest --version >/dev/null 2>&1; then
  # Port claims of earlier runs (node/tests/support: one directory per nextest run).
  find target/tmp -maxdepth 1 -name 'ports-*' -mmin +60 -exec rm -rf {} + 2>/dev/null || true
  # Twice as many tests at once as cores: many tests wait (timeouts, nodes restarting), and
  # with one per core the machine was 36% idle (BENCHMARKS.md, session 24).
  cargo nextest run --workspace --lib --bins --tests --examples \
    --test-threads "${TESSERA_TEST_THREADS:-$(( $(nproc) * 2 ))}"
  # The benches have their own main (harness = false), which nextest cannot list; `cargo
  # test` runs them in their short smoke mode.
  cargo test --workspace --bench '*'
else
  cargo test --workspace --all-targets
fi

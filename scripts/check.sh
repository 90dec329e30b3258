#!/usr/bin/env bash
# The developer's gate before every commit: formatting, lints as errors, every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --all-targets

#!/usr/bin/env bash
# The whole test suite, as a newcomer and CI run it: installs what the tests need (idempotent),
# checks formatting and lints, runs every test (the fuzz corpora are replayed as unit tests),
# then gives every fuzz target a short bounded run. Each phase prints its wall time, so a slow
# phase shows in the CI log (CI's budget is 20 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
phase() {
  local began=$SECONDS
  "$@"
  echo "test.sh: '$*' took $((SECONDS - began)) s (total $SECONDS s)"
}
phase scripts/install-deps.sh
phase scripts/check.sh
# The short fuzz runs (10 s per target: they check that every target builds, runs under the
# sanitizer and finds nothing quickly; long runs are `scripts/fuzz.sh 600`) build with
# fuzz/Cargo.toml's dev profile: the optimized sanitizer build of every crate took 12 minutes
# here, more than the runs it serves.
export TESSERA_FUZZ_BUILD="${TESSERA_FUZZ_BUILD:-dev}"
phase scripts/fuzz.sh "${TESSERA_FUZZ_SECONDS:-10}"

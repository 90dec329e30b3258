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
# The transaction suites again with one-round commits off (`--one-round-commits false`, read
# from the environment by every test node), so the journal's decision round, the protocol of
# cluster transactions, stays tested on one node too: their crash, timeout, backup and bank
# tests expect that protocol's outcomes where they differ.
journal_decisions() {
  local suites=(e2e_txn e2e_txn_crash e2e_txn_held e2e_txn_hops e2e_txn_implicit e2e_txn_limits
    e2e_txn_phantoms e2e_txn_readonly e2e_bank e2e_backup_bank e2e_dump)
  # --workspace as check.sh builds, so the test binaries it built are reused (with -p node
  # cargo unifies features differently and rebuilds: 2.5 minutes of CI).
  if [ "${TESSERA_NEXTEST:-1}" != 0 ] && cargo nextest --version >/dev/null 2>&1; then
    local filter
    filter=$(printf 'binary(%s) | ' "${suites[@]}")
    TESSERA_ONE_ROUND_COMMITS=0 cargo nextest run --workspace --lib --bins --tests --examples \
      --no-fail-fast --test-threads "${TESSERA_TEST_THREADS:-$(( $(nproc) * 2 ))}" \
      -E "package(node) & (${filter% | })"
  else
    TESSERA_ONE_ROUND_COMMITS=0 cargo test --workspace $(printf -- '--test %s ' "${suites[@]}")
  fi
}
phase journal_decisions
# The short fuzz runs (10 s per target: they check that every target builds, runs under the
# sanitizer and finds nothing quickly; long runs are `scripts/fuzz.sh 600`) build with
# fuzz/Cargo.toml's dev profile: the optimized sanitizer build of every crate took 12 minutes
# here, more than the runs it serves.
export TESSERA_FUZZ_BUILD="${TESSERA_FUZZ_BUILD:-dev}"
phase scripts/fuzz.sh "${TESSERA_FUZZ_SECONDS:-10}"

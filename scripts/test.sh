#!/usr/bin/env bash
# The whole test suite, as a newcomer and CI run it: installs what the tests need (idempotent),
# checks formatting and lints, runs every test (the fuzz corpora are replayed as unit tests),
# then gives every fuzz target a short bounded run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/check.sh
scripts/fuzz.sh "${TESSERA_FUZZ_SECONDS:-20}"

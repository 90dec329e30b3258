#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time on the stable toolchain.
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]
# Installs cargo-fuzz when missing. Findings land in fuzz/artifacts/<target>/ and fail the run;
# turn each into a regression test before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"; shift || true
scripts/install-deps.sh fuzz
export RUSTC_BOOTSTRAP=1   # cargo-fuzz needs -Z flags; we have only the stable toolchain.
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then mapfile -t targets < <(cd fuzz && cargo fuzz list); fi
if [ ${#targets[@]} -eq 0 ]; then echo "fuzz: no targets"; exit 0; fi
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  echo "fuzz: $t for ${seconds}s"
  # -max_total_time bounds the run; -rss_limit_mb keeps a leak from taking the machine.
  log="fuzz/target/fuzz-$t.log"; mkdir -p fuzz/target
  status=0
  (cd fuzz && cargo fuzz run "$t" -- -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1) >"$log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::new_units_added|SUMMARY)' "$log" || true
  if [ $status -ne 0 ]; then
    tail -n 40 "$log" >&2
    echo "fuzz: $t failed (exit $status); artifacts in fuzz/artifacts/$t, log in $log" >&2; exit 1
  fi
done

#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time on the stable toolchain.
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]
# TESSERA_FUZZ_BUILD=dev builds with `cargo fuzz --dev` (fuzz/Cargo.toml's dev profile,
# unoptimized: CI's short runs); the default is cargo-fuzz's release build, every crate
# optimized, for long runs.
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
build=()
case "${TESSERA_FUZZ_BUILD:-release}" in
  dev) build=(--dev) ;;
  release) ;;
  *) echo "fuzz: TESSERA_FUZZ_BUILD must be dev or release" >&2; exit 2 ;;
esac
# One build of every target first: cargo links them in parallel, and a compile error shows
# once instead of under the first target.
(cd fuzz && cargo fuzz build "${build[@]}")
# Targets run side by side, one per core (TESSERA_FUZZ_JOBS to change): libFuzzer uses one.
jobs="${TESSERA_FUZZ_JOBS:-$(nproc)}"
mkdir -p fuzz/target
# Waits for the runs started (pids[i] running names[i]), reports each, fails on the first
# that failed.
finish() {
  local i status
  for i in "${!pids[@]}"; do
    status=0; wait "${pids[$i]}" || status=$?
    local t="${names[$i]}" log="fuzz/target/fuzz-${names[$i]}.log"
    echo "fuzz: $t"
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|SUMMARY)' "$log" || true
    if [ $status -ne 0 ]; then
      tail -n 40 "$log" >&2
      echo "fuzz: $t failed (exit $status); artifacts in fuzz/artifacts/$t, log in $log" >&2
      exit 1
    fi
  done
  pids=(); names=()
}
pids=(); names=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  echo "fuzz: $t for ${seconds}s"
  # -max_total_time bounds the run; -rss_limit_mb keeps a leak from taking the machine.
  (cd fuzz && exec cargo fuzz run "${build[@]}" "$t" -- -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1) >"fuzz/target/fuzz-$t.log" 2>&1 &
  pids+=($!); names+=("$t")
  if [ ${#pids[@]} -ge "$jobs" ]; then finish; fi
done
finish

#!/usr/bin/env bash
# Runs the benchmark suite against a private PostgreSQL and a Tessera node, side by side in one
# bench invocation (targets alternate every round), and writes the results under
# bench/results/<UTC date and time>/.
#
# Usage: scripts/bench-vs-postgres.sh [bench options...]
#   With no options it runs two passes of every workload: closed-loop/ (throughput) and
#   open-loop/ (latency at $BENCH_RATE ops/s per target, default 1000), in under ten
#   minutes. With options, one pass with exactly those options (see `cargo run -p bench --release -- --help`).
# Environment:
#   TESSERA_BIN    the tessera binary (default: target/release/tessera, built here)
#   BENCH_RESULTS  results directory (default: bench/results/<UTC date and time>)
#   BENCH_RATE     open-loop rate of the default open-loop pass, ops/s per target
#
# It installs PostgreSQL from Debian's packages when missing (scripts/install-deps.sh), starts
# a private instance on a random loopback port with fsync on (scripts/pg-local.sh), starts
# Tessera on another random loopback port with a fresh data directory when its binary has a
# `serve` command (waiting for its "ready: listening on" line), and stops both on exit
# (Tessera with SIGTERM), whatever happens. Without a usable tessera binary it says so and
# measures PostgreSQL alone: it never invents the other side.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh postgres

stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out=${BENCH_RESULTS:-bench/results/$stamp}
name=bench-vs-postgres
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh

echo "bench-vs-postgres: building bench and tessera (release)"
cargo build --release -p bench
tessera=${TESSERA_BIN:-target/release/tessera}
if [ -z "${TESSERA_BIN:-}" ]; then
  cargo build --release -p node || echo "bench-vs-postgres: building tessera failed" >&2
fi

pg_url=$(scripts/pg-local.sh start "$work/pg")
echo "bench-vs-postgres: PostgreSQL at ${pg_url}"
targets=(--target "postgres=$pg_url")

if [ -x "$tessera" ] && "$tessera" serve --help >/dev/null 2>&1; then
  start_tessera "$tessera"
  targets+=(--target "tessera=postgres://bench@127.0.0.1:$port/bench")
else
  echo "bench-vs-postgres: NO TESSERA: $tessera is missing or has no 'serve' command yet;" \
       "measuring PostgreSQL ONLY" >&2
fi

mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: scripts/bench-vs-postgres.sh $*"
  echo "targets: ${targets[*]}"
  echo "kernel: $(uname -sr)"
  echo "cpus: $(nproc)"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "uptime at start: $(uptime)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- bench scripts || echo ' (with uncommitted changes)')"
  echo "rustc: $(rustc --version)"
  echo "postgres: $("$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)/postgres" --version)"
  [ -n "$tessera_pid" ] && echo "tessera: $tessera" || echo "tessera: not run (no binary with 'serve')"
} >"$out/machine.txt"

status=0
run() {
  local dir=$1; shift
  echo "bench-vs-postgres: bench $* -> $dir"
  target/release/bench "${targets[@]}" --out "$dir" "$@" || status=$?
}
if [ $# -gt 0 ]; then
  run "$out" "$@"
else
  # Sized to finish in under ten minutes with both targets (Tessera skips the two
  # transaction workloads until it supports transaction blocks).
  common=(--docs 50000 --duration 10s --warmup 2s --connections 8 --rounds 2)
  run "$out/closed-loop" "${common[@]}"
  run "$out/open-loop" "${common[@]}" --skip-load --rate "${BENCH_RATE:-1000}"
fi
echo "uptime at end: $(uptime)" >>"$out/machine.txt"
echo "bench-vs-postgres: results in $out (exit $status)"
exit $status

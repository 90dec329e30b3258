#!/usr/bin/env bash
# The transaction benchmarks of issue 5 (item 8), side by side with PostgreSQL in one bench
# invocation per client count: single-fragment-txn (two documents of one customer: one shard),
# cross-fragment-transfer (two documents on fragments of different executors, placed by the
# node's SHOW FRAGMENTS, see bench/src/layout.rs), pipelined-txn (single-fragment-txn with its
# four statements sent together: one round trip) and autocommit-write (one UPDATE), each at 1
# and 32 connections, closed loop. The like-for-like pairs of issue 5's 1.2x goal (session 5):
# single-write-txn (BEGIN; the autocommit-write UPDATE; COMMIT, one at a time) and
# query-write-txn (the same in one simple Query message) against autocommit-write, and
# query-txn (the single-fragment transfer in one Query message) and single-fragment-txn against
# two-write-autocommit (the transfer's two UPDATEs as two autocommit statements). Then it counts the fdatasyncs of cross-fragment commits
# (see below). Results go to bench/results/txn-<UTC date and time>/.
#
# Usage: scripts/bench-txn-vs-postgres.sh
# Environment:
#   TESSERA_BIN     the tessera binary (default: target/release/tessera, built here)
#   BENCH_RESULTS   results directory
#   TXN_CLIENTS     client counts (default: "1 32")
#   TXN_DURATION    measured time per workload per target (default: 10s, in 2 rounds)
#   TXN_DOCS        documents loaded (default: 50000)
#   TXN_SYNC_COMMITS  commits of each kind for the fdatasync count (default: 200)
#   TXN_SYNCS_ONLY  1: only the fdatasync count, no bench passes
#   TXN_WORKLOADS   comma-separated workloads (default: all of the above)
#   TXN_CPU         1 (default): after the side-by-side passes, the server's cost per operation
#                   (see below); 0: skip it
#   TXN_CPU_DURATION  measured time of each CPU pass (default: 5s)
#
# The server's cost per operation (cpu.txt, session 5): for each client count and workload, one
# bench pass against Tessera alone (1 s warm-up, 1 round). Before and after it the script reads
# the tessera process's utime+stime (/proc/<pid>/stat) and the node's tessera_mesh_calls_total
# (SHOW STATS, summed over executors); it divides both by the operations the pass completed,
# warm-up included. CPU time is what the server spent, whatever else ran on the machine, and mesh
# calls are cross-executor hops, so both compare builds on a shared machine (A/B: run the script
# once per binary with TESSERA_BIN).
#
# The fdatasync count: scripts/txn-syncs.py performs, one at a time on one connection, 200
# each of a cross-executor transfer, a single-fragment transfer and an autocommit UPDATE, and
# notes CLOCK_MONOTONIC around each COMMIT (each autocommit statement), while `perf record -k
# mono` on the tessera process records every sync it submits and completes: io_uring
# IORING_OP_FSYNC (glommio issues fdatasync through io_uring, so strace does not see it) and
# fdatasync/fsync calls. It reports the syncs submitted between sending COMMIT and receiving
# its reply, the sequential rounds of those that also completed in that window (parallel syncs
# merged: an upper bound of the fdatasyncs on the critical path), and the syncs after the
# reply. Needs perf and tracepoint access (root); without them it says so and skips the count.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh postgres

stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out=${BENCH_RESULTS:-bench/results/txn-$stamp}
name=bench-txn-vs-postgres
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh

echo "$name: building bench and tessera (release)"
tessera=${TESSERA_BIN:-target/release/tessera}
if [ -z "${TESSERA_BIN:-}" ]; then
  # One invocation for both: built separately, their dependencies resolve to different
  # feature sets and each build recompiles the other's.
  cargo build --release -p bench -p node
else
  cargo build --release -p bench
fi

pg_url=$(scripts/pg-local.sh start "$work/pg")
echo "$name: PostgreSQL at ${pg_url}"
start_tessera "$tessera"
targets=(--target "postgres=$pg_url" --target "tessera=postgres://bench@127.0.0.1:$port/bench")

mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: scripts/bench-txn-vs-postgres.sh $*"
  echo "targets: ${targets[*]}"
  echo "kernel: $(uname -sr)"
  echo "cpus: $(nproc)"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "uptime at start: $(uptime)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- bench scripts node storage || echo ' (with uncommitted changes)')"
  echo "rustc: $(rustc --version)"
  echo "postgres: $("$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)/postgres" --version)"
  echo "tessera: $tessera (pid $tessera_pid)"
} >"$out/machine.txt"

workloads=${TXN_WORKLOADS:-single-fragment-txn,cross-fragment-transfer,pipelined-txn,autocommit-write,single-write-txn,query-write-txn,two-write-autocommit,query-txn}
docs=${TXN_DOCS:-50000}
status=0
load=()
[ "${TXN_SYNCS_ONLY:-0}" = 1 ] && clients=() || read -r -a clients <<<"${TXN_CLIENTS:-1 32}"
for c in "${clients[@]}"; do
  echo "$name: $c client(s)"
  target/release/bench "${targets[@]}" --out "$out/clients-$c" --workloads "$workloads" \
    --docs "$docs" "${load[@]}" --duration "${TXN_DURATION:-10s}" --warmup 2s --rounds 2 \
    --connections "$c" --no-progress || status=$?
  load=(--skip-load)
done

# The server's CPU time and mesh calls per operation (see the header).
tessera_url="postgres://bench@127.0.0.1:$port/bench"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$tessera_pid/stat"; }
mesh_calls() {
  PGSSLMODE=disable psql -X -A -t -F ' ' "$tessera_url" -c 'SHOW STATS' \
    | awk '$1 == "tessera_mesh_calls_total" {s += $NF} END {print s + 0}'
}
if [ "${TXN_CPU:-1}" = 1 ] && [ "${TXN_SYNCS_ONLY:-0}" != 1 ]; then
  echo "$name: server CPU and mesh calls per operation"
  hz=$(getconf CLK_TCK)
  for c in "${clients[@]}"; do
    for w in ${workloads//,/ }; do
      t0=$(cpu_ticks); m0=$(mesh_calls)
      target/release/bench --target "tessera=$tessera_url" --out "$out/cpu-$c-$w" --workloads "$w" \
        --docs "$docs" --skip-load --duration "${TXN_CPU_DURATION:-5s}" --warmup 1s --rounds 1 \
        --connections "$c" --no-progress >/dev/null || status=$?
      t1=$(cpu_ticks); m1=$(mesh_calls)
      python3 - "$out/cpu-$c-$w/run.json" "$w" "$c" "$t0" "$t1" "$hz" "$m0" "$m1" <<'PY' | tee -a "$out/cpu.txt"
import json, sys
path, w, c, t0, t1, hz, m0, m1 = sys.argv[1:]
r = [x for x in json.load(open(path))["results"] if x["workload"] == w][0]
n = r["ops"] + r["warmup_ops"]
cpu_us = (int(t1) - int(t0)) * 1e6 / int(hz)
print(f"{w} clients={c} ops={n} ops/s={r['ops_per_sec']:.0f} server_cpu_us/op={cpu_us / n:.1f} "
      f"mesh_calls/op={(float(m1) - float(m0)) / n:.3f} retries={r['retries']}")
PY
    done
  done
fi

# fdatasyncs on the critical path of a commit (see the header).
if command -v perf >/dev/null && perf stat -e io_uring:io_uring_submit_req -- true >/dev/null 2>&1; then
  echo "$name: counting syncs per commit (perf record on pid $tessera_pid, scripts/txn-syncs.py)"
  # With -p and a command, perf records the process for exactly as long as the command runs.
  # perf opens every thread of the process; a thread that exits meanwhile makes it fail before
  # the command starts ("failed to set filter ... No such process"), so try a few times.
  for attempt in 1 2 3; do
    perf record -k mono -o "$work/syncs.perf" -p "$tessera_pid" \
      -e io_uring:io_uring_submit_req --filter 'opcode == 3' -e io_uring:io_uring_complete \
      -e syscalls:sys_enter_fdatasync -e syscalls:sys_enter_fsync -- \
      python3 scripts/txn-syncs.py run "postgres://bench@127.0.0.1:$port/bench" "${TXN_SYNC_COMMITS:-200}" \
      "$out/syncs-windows.json" || true
    [ -s "$out/syncs-windows.json" ] && break
    echo "$name: perf record attempt $attempt did not run the commits; retrying" >&2
  done
  python3 scripts/txn-syncs.py count "$work/syncs.perf" "$out/syncs-windows.json" \
    | tee "$out/syncs.json" || status=$?
else
  echo "$name: perf with io_uring tracepoints is not available; sync count skipped" | tee "$out/syncs.json"
fi

echo "uptime at end: $(uptime)" >>"$out/machine.txt"
echo "$name: results in $out (exit $status)"
exit $status

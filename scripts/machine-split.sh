#!/usr/bin/env bash
# Where the whole machine's CPU goes per operation, Tessera against PostgreSQL (session 12):
# a fresh node and a private PostgreSQL, 50,000 documents in each, then ROUNDS rounds of one
# 8 s run per target (alternating), 32 connections. Per run: the bench's ops/s line, the
# machine's CPU split over the run (/proc/stat: user, sys, idle, iowait, softirq, ...), and
# per operation the system-wide syscalls, context switches, wake-ups and interprocessor
# interrupts (`perf stat -a` over the middle 6 s, divided by the operations of those 6 s at
# the run's rate). The client runs on the same machine, so both targets' figures include it.
# Usage: scripts/machine-split.sh BIN [workload (cross-fragment-transfer)] [rounds (2)]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1; wl=${2:-cross-fragment-transfer}; rounds=${3:-2}
name=machine-split; out=${SPLIT_RESULTS:-/tmp/machine-split}; mkdir -p "$out"
. scripts/bench-servers.sh
start_tessera "$bin"
pgurl=$(scripts/pg-local.sh start "$work/pg")
trap 'scripts/pg-local.sh stop "$work/pg" >/dev/null 2>&1 || true; cleanup' EXIT
targets=("tessera=postgres://bench@127.0.0.1:$port/bench" "postgres=$pgurl")
common=(--workloads "$wl" --docs 50000 --rounds 1 --connections 32 --no-progress --warmup 0s)
for t in "${targets[@]}"; do
  target/release/bench --target "$t" "${common[@]}" --duration 2s --out "$work/load" >/dev/null 2>&1
done
events=raw_syscalls:sys_enter,context-switches,sched:sched_wakeup,irq_vectors:reschedule_entry
events+=,irq_vectors:call_function_single_entry,irq_vectors:call_function_entry
for round in $(seq 1 "$rounds"); do
  for t in "${targets[@]}"; do
    tname=${t%%=*}
    s0=$(head -1 /proc/stat)
    target/release/bench --target "$t" "${common[@]}" --skip-load --duration 8s \
      --out "$work/run" >"$work/bench.txt" 2>&1 &
    b=$!
    sleep 1   # the middle of the run, not its start
    perf stat -a -x, -o "$out/perf-$tname-$round" -e "$events" -- sleep 6
    wait "$b"
    s1=$(head -1 /proc/stat)
    line=$(grep -E "^ +$wl " "$work/bench.txt" | head -1)
    echo "round $round:$line"
    python3 - "$s0" "$s1" "$line" "$out/perf-$tname-$round" <<'PY'
import sys
s0, s1, line, perf = sys.argv[1:]
a = [int(x) for x in s0.split()[1:9]]
b = [int(x) for x in s1.split()[1:9]]
d = [y - x for x, y in zip(a, b)]
names = ["user", "nice", "sys", "idle", "iowait", "irq", "softirq", "steal"]
print("  machine: " + " ".join(f"{n} {100 * v / sum(d):.1f}%" for n, v in zip(names, d)))
words = line.split()
rate = float(words[words.index("ops/s") - 1])
for row in open(perf):
    f = row.strip().split(",")
    if len(f) > 2 and f[0].replace(".", "").isdigit():
        print(f"  {f[2]}: {float(f[0]) / (rate * 6):.2f} per op")
PY
  done
done

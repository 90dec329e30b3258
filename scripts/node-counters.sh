#!/usr/bin/env bash
# Where a node's CPU and kernel calls go per operation (session 11): a fresh node, 50,000
# documents, then one run of the workload at 32 connections. Prints the run's ops/s, then per
# thread of the node (executors, blocking threads) the CPU and the voluntary and involuntary
# context switches per operation (/proc/<pid>/task/*), then the node's syscalls per operation
# (`perf stat -p` over the middle 6 s of the run, divided by the operations of those 6 s at
# the run's rate), then where the node's group commits spent their time during the run (the
# means of `tessera_group_commit_phase_seconds` from SHOW STATS: waiting for a blocking thread,
# write, fdatasync, and the executor noticing the end; session 12).
# Usage: scripts/node-counters.sh BIN [workload (cross-fragment-transfer)]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1; wl=${2:-cross-fragment-transfer}
name=node-counters; out=${COUNTERS_RESULTS:-/tmp/node-counters}; mkdir -p "$out"
. scripts/bench-servers.sh
start_tessera "$bin"
target=(--target "t:tessera=postgres://bench@127.0.0.1:$port/bench" --workloads "$wl"
  --docs 50000 --rounds 1 --connections 32 --no-progress)
target/release/bench "${target[@]}" --duration 2s --warmup 0s --out "$work/load" >/dev/null
threads() {
  for t in /proc/$tessera_pid/task/*; do
    echo "$(basename "$t") $(tr ' ' _ <"$t/comm") $(awk '/^voluntary_ctxt/ {v = $2} /^nonvoluntary_ctxt/ {n = $2} END {print v, n}' "$t/status") $(awk '{print $14 + $15}' "$t/stat")"
  done
}
threads >"$work/threads0"
phases() {
  psql -X -A -t -F' ' "postgres://bench@127.0.0.1:$port/bench" -c "SHOW STATS" |
    grep -E '^tessera_group_commit_phase_seconds_(sum|count) '
}
phases >"$work/phases0"
target/release/bench "${target[@]}" --skip-load --duration 8s --warmup 0s --out "$work/run" | grep ' t: ' &
b=$!
sleep 1
perf stat -x, -o "$work/perf" -p "$tessera_pid" -e context-switches,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_membarrier,syscalls:sys_enter_futex,syscalls:sys_enter_pwrite64,syscalls:sys_enter_fdatasync -- sleep 6
wait "$b"
threads >"$work/threads1"
phases >"$work/phases1"
python3 - "$work/threads0" "$work/threads1" "$work/run/run.json" "$work/perf" "$(getconf CLK_TCK)" \
  "$work/phases0" "$work/phases1" <<'PY'
import json, sys
before, after, run, perf, hz, phases0, phases1 = sys.argv[1:]
r = json.load(open(run))["results"][0]
n = r["ops"]
load = lambda p: {l.split()[0]: l.split() for l in open(p)}
a, b = load(before), load(after)
print(f"per operation over {n} operations ({r['ops_per_sec']:.0f}/s):")
for tid, x in b.items():
    y = a.get(tid, [tid, x[1], 0, 0, 0])
    vol, inv = int(x[2]) - int(y[2]), int(x[3]) - int(y[3])
    cpu = (int(x[4]) - int(y[4])) * 1e6 / int(hz)
    if vol + inv > n / 100:
        print(f"  thread {tid} {x[1]}: CPU {cpu / n:.1f} us, voluntary {vol / n:.2f}, involuntary {inv / n:.2f}")
ops6 = r["ops_per_sec"] * 6
for l in open(perf):
    p = l.strip().split(",")
    if len(p) > 3 and p[0].replace(".", "").isdigit():
        print(f"  {p[2]}: {float(p[0]) / ops6:.2f}")
def phases(path):
    out = {}
    for l in open(path):
        name, labels, value = l.split()
        out[(name.rsplit("_", 1)[1], labels.split('"')[1])] = float(value)
    return out
p0, p1 = phases(phases0), phases(phases1)
for phase in ["thread_wait", "write", "fdatasync", "notice"]:
    n = p1[("count", phase)] - p0[("count", phase)]
    took = p1[("sum", phase)] - p0[("sum", phase)]
    print(f"  group commit {phase}: mean {took * 1e6 / max(n, 1):.0f} us over {n:.0f} group commits")
PY

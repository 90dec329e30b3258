#!/usr/bin/env bash
# How busy the machine and one server are while the bench drives it (session 34): runs the
# bench against TARGET for 10 s (32 connections, after a 1 s warm-up) and samples, between its
# 3rd and 9th second, /proc/stat (the whole machine) and the CPU of the processes PIDS_CMD
# prints (a Tessera node: `pgrep -f 'data-dir /x'`; a PostgreSQL server: `pgrep -u postgres`,
# whose backends live as long as the bench's connections). Prints ops/s, the server's and the
# bench's CPU per operation, and the machine's busy share of all its cores. The documents must
# be loaded already (`bench --docs 50000` once).
# Usage: scripts/bench-cpu-window.sh 'NAME:FLAVOR=URL' 'PIDS_CMD' [workload (cross-fragment-transfer)]
set -euo pipefail
cd "$(dirname "$0")/.."
target=$1; pids_cmd=$2; wl=${3:-cross-fragment-transfer}
out=$(mktemp -d /tmp/bench-cpu-window.XXXXXX)
trap 'rm -rf "$out"' EXIT
server_cpu() {
  local s=0 v
  for p in $(eval "$pids_cmd"); do
    v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) && s=$((s + v))
  done
  echo "$s"
}
# Prints "total idle" jiffies of the whole machine.
machine() { head -n 1 /proc/stat | awk '{t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $5 + $6}'; }
target/release/bench --target "$target" --out "$out/run" --workloads "$wl" --docs 50000 \
  --skip-load --duration 10s --warmup 1s --rounds 1 --connections 32 --no-progress >/dev/null 2>&1 &
bench=$!
sleep 3
s0=$(server_cpu); b0=$(awk '{print $14 + $15}' "/proc/$bench/stat"); read -r t0 i0 < <(machine)
sleep 6
s1=$(server_cpu); b1=$(awk '{print $14 + $15}' "/proc/$bench/stat"); read -r t1 i1 < <(machine)
wait "$bench"
python3 - "$out/run/run.json" "$s0" "$s1" "$b0" "$b1" "$t0" "$t1" "$i0" "$i1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
path, s0, s1, b0, b1, t0, t1, i0, i1, hz = sys.argv[1:]
r = json.load(open(path))["results"][0]
ops = 6 * r["ops_per_sec"]
us = lambda a, b: (int(b) - int(a)) * 1e6 / int(hz) / ops
busy = 100 * ((int(t1) - int(t0)) - (int(i1) - int(i0))) / (int(t1) - int(t0))
print(f"{r['target']}: {r['ops_per_sec']:.0f} ops/s, server CPU {us(s0, s1):.0f} us/op, "
      f"bench CPU {us(b0, b1):.0f} us/op, machine busy {busy:.0f}% of its cores")
PY

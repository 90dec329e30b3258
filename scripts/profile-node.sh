#!/usr/bin/env bash
# Where a node's CPU goes under a bench workload (session 9): a fresh node, 50,000 documents,
# then 6 s of the workload at 32 connections while `perf record -g -p` samples the node. Prints
# the run's ops/s and the node's CPU per operation (utime+stime from /proc around the run);
# leaves perf.data in OUT for `perf report -i OUT/perf.data` (by thread: `--sort comm`).
# Usage: scripts/profile-node.sh BIN OUT [workload (cross-fragment-transfer)]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1; out=$2; wl=${3:-cross-fragment-transfer}
mkdir -p "$out"
name=profile-node
. scripts/bench-servers.sh
start_tessera "$bin"
target=(--target "x:tessera=postgres://bench@127.0.0.1:$port/bench" --workloads "$wl"
  --docs 50000 --rounds 1 --connections 32 --no-progress)
target/release/bench "${target[@]}" --duration 2s --warmup 1s --out "$work/load" >/dev/null
cpu() { awk '{print $14 + $15}' "/proc/$tessera_pid/stat"; }
c0=$(cpu)
perf record -q -g -o "$out/perf.data" -p "$tessera_pid" -- sleep 6 &
prec=$!
target/release/bench "${target[@]}" --skip-load --duration 6s --warmup 0s --out "$work/run" 2>&1 | grep ops/s || true
wait $prec || true
c1=$(cpu)
python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))['results'][0]
ops = r['ops_per_sec'] * 6
print('ops/s', round(r['ops_per_sec']), 'node CPU us/op', round((int(sys.argv[3]) - int(sys.argv[2])) * 1e6 / int(sys.argv[4]) / ops, 1))
" "$work/run/run.json" "$c0" "$c1" "$(getconf CLK_TCK)"

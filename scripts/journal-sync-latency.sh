#!/usr/bin/env bash
# The coordinator journal's fdatasync time under 32-client cross-fragment transfers (session 7,
# branch s7-x0): one node of BIN on a free port, loaded, then 6 s of transfers while perf
# records ext4:ext4_sync_file_enter/exit system-wide (as root). Pairs each enter with the next
# exit of the same thread and splits the durations into the coordinator journal's files
# (parent directory = <data-dir>/coordinator) and every other file (fragment segments).
# Prints p50/p90/p99/mean per kind, then the run's transfers/s and retries. Run it for the
# old and the new binary in turn, twice, on the same machine load.
#
# Usage: scripts/journal-sync-latency.sh NAME BIN   (needs target/release/bench)
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1
bin=$2
work=$(mktemp -d /tmp/journal-sync.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
"$bin" serve --listen "127.0.0.1:$port" --metrics-listen "" --data-dir "$work/data" >/dev/null 2>"$work/log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 600); do grep -q 'ready: listening on' "$work/log" && break; sleep 0.1; done
target=(--target "x:tessera=postgres://bench@127.0.0.1:$port/bench" --workloads cross-fragment-transfer
  --docs 50000 --rounds 1 --connections 32 --no-progress)
target/release/bench "${target[@]}" --duration 2s --warmup 1s --out "$work/load" >/dev/null
coord=$(stat -c %i "$work/data/coordinator")
perf record -q -o "$work/perf.data" -e ext4:ext4_sync_file_enter -e ext4:ext4_sync_file_exit -a -- \
  target/release/bench "${target[@]}" --skip-load --duration 6s --warmup 1s --out "$work/run" >/dev/null 2>&1
perf script -i "$work/perf.data" -F tid,time,event,trace 2>/dev/null | python3 -c "
import re, sys
coord, name = int(sys.argv[1]), sys.argv[2]
start, lat = {}, {'journal': [], 'other': []}
for line in sys.stdin:
    m = re.match(r'\s*(\d+)\s+([\d.]+):\s+ext4:(\S+):\s+(.*)', line)
    if not m:
        continue
    tid, t, ev, rest = m.groups()
    if ev == 'ext4_sync_file_enter':
        p = re.search(r'parent (\d+)', rest)
        start[tid] = (float(t), int(p.group(1)) if p else -1)
    elif tid in start:
        t0, parent = start.pop(tid)
        lat['journal' if parent == coord else 'other'].append((float(t) - t0) * 1e6)
for k, v in lat.items():
    v.sort()
    if v:
        q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
        print(f'{name} {k}: n={len(v)} p50 {q(.5):.0f} us p90 {q(.9):.0f} us p99 {q(.99):.0f} us mean {sum(v)/len(v):.0f} us')
" "$coord" "$name"
python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))['results'][0]
print(sys.argv[2], round(r['ops_per_sec']), 'transfers/s, retries', r['retries'])
" "$work/run/run.json" "$name"

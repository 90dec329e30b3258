#!/usr/bin/env bash
# io_uring submissions and io-wq punts (io_uring:io_uring_queue_async_work) by opcode, for a
# node under 4 s of a bench workload at 32 connections (session 9: chunk writes punted because
# read-around had cached the blocks ahead of the tail). Needs target/release/bench and perf.
# Usage: scripts/io-punts.sh BIN [workload (cross-fragment-transfer)] [connections (32)]
# Environment: PUNTS_RESULTS (where the node's log is kept; default /tmp/io-punts).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1; wl=${2:-cross-fragment-transfer}; conns=${3:-32}
name=io-punts
out=${PUNTS_RESULTS:-/tmp/io-punts}   # bench-servers.sh copies the node's log to $out/raw
. scripts/bench-servers.sh
start_tessera "$bin"
pid=$tessera_pid
target=(--target "x:tessera=postgres://bench@127.0.0.1:$port/bench" --workloads $wl
  --docs 50000 --rounds 1 --connections $conns --no-progress)
target/release/bench "${target[@]}" --duration 2s --warmup 1s --out "$work/load" >/dev/null
perf record -q -o "$work/p.data" -e io_uring:io_uring_submit_req -e io_uring:io_uring_queue_async_work -p $pid -- sleep 4 &
prec=$!
target/release/bench "${target[@]}" --skip-load --duration 4s --warmup 0s --out "$work/run" 2>&1 | grep "ops/s" | head -1
wait $prec || true
perf script -i "$work/p.data" -F event,trace 2>/dev/null | python3 -c "
import re,sys,collections
c=collections.Counter()
for l in sys.stdin:
    ev='punt' if 'queue_async_work' in l else 'submit'
    m=re.search(r'opcode ([A-Z_]+)',l)
    c[(ev,m.group(1) if m else '?')]+=1
for k,v in sorted(c.items()): print(k,v)
"

#!/usr/bin/env bash
# Old vs new tessera binary on the transaction workloads, in one bench invocation per client
# count so the two alternate every round under the same machine load: single-fragment-txn,
# cross-fragment-transfer, pipelined-txn, autocommit-write. Each node's CPU (utime+stime from
# /proc/<pid>/stat) is sampled around each invocation and divided by the operations the
# bench counted for that node (run.json), so CPU per operation is per binary.
#
# Usage: scripts/bench-txn-ab.sh OLD_BIN NEW_BIN
# Environment: TXN_CLIENTS (default "1 32"), TXN_DURATION (default 10s), TXN_DOCS (50000),
#   BENCH_RESULTS (default bench/results/txn-ab-<UTC>).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1
new=$2
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out=${BENCH_RESULTS:-bench/results/txn-ab-$stamp}
work=$(mktemp -d /tmp/bench-txn-ab.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
# start NAME BIN: a node with a fresh data directory on a free port; sets `port` and `pid`.
start() {
  local name=$1 bin=$2
  port=$(free_port)
  mkdir -p "$work/$name"
  "$bin" serve --listen "127.0.0.1:$port" --metrics-listen "" --data-dir "$work/$name/data" \
    >/dev/null 2>"$work/$name/log" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 600); do
    grep -q 'ready: listening on' "$work/$name/log" && break
    sleep 0.1
  done
  grep -q 'ready: listening on' "$work/$name/log" || { tail -n 20 "$work/$name/log" >&2; exit 1; }
}
start old "$old"
old_port=$port
old_pid=$pid
start new "$new"
new_port=$port
new_pid=$pid
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "old: $old, new: $new"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "uptime at start: $(uptime)"
} >"$out/machine.txt"
load=()
read -r -a clients <<<"${TXN_CLIENTS:-1 32}"
for c in "${clients[@]}"; do
  o0=$(cpu "$old_pid"); n0=$(cpu "$new_pid")
  target/release/bench --target "old:tessera=postgres://bench@127.0.0.1:$old_port/bench" \
    --target "new:tessera=postgres://bench@127.0.0.1:$new_port/bench" --out "$out/clients-$c" \
    --workloads single-fragment-txn,cross-fragment-transfer,pipelined-txn,autocommit-write \
    --docs "${TXN_DOCS:-50000}" "${load[@]}" --duration "${TXN_DURATION:-10s}" --warmup 2s \
    --rounds 2 --connections "$c" --no-progress >/dev/null
  o1=$(cpu "$old_pid"); n1=$(cpu "$new_pid")
  load=(--skip-load)
  python3 - "$out/clients-$c/run.json" "$(( (o1 - o0) * 1000000 / hz ))" "$(( (n1 - n0) * 1000000 / hz ))" <<'PY' | tee -a "$out/cpu.txt"
import json, sys
run = json.load(open(sys.argv[1]))
cpu = {"old": int(sys.argv[2]), "new": int(sys.argv[3])}
ops = {}
def walk(x):
    if isinstance(x, dict):
        t, n = x.get("target"), x.get("ops")
        if isinstance(t, str) and isinstance(n, (int, float)) and t in cpu:
            ops[t] = ops.get(t, 0) + n
        for v in x.values():
            walk(v)
    elif isinstance(x, list):
        for v in x:
            walk(v)
walk(run)
for t in ("old", "new"):
    per = cpu[t] / ops[t] if ops.get(t) else float("nan")
    print(f"{sys.argv[1]}: {t}: node CPU {cpu[t] / 1e6:.1f} s over {ops.get(t, 0)} ops (warm-up and load included): {per:.1f} us/op")
PY
  cat "$out/clients-$c/summary.md" | sed -n '1,20p'
done

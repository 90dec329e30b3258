#!/usr/bin/env bash
# Two UPDATEs sent as one simple Query, old binary against new: before session 19 they were
# two autocommit statements, since then one implicit transaction. Each run starts a fresh
# node (default flags: 2 executors, one fragment each), loads 10,000 documents on fragment 0
# (`k<i>$@0`, v = 1000), runs pgbench -M simple at 32 clients for 8 s with
# bench/pgbench/tessera-implicit-transfer.sql (`UPDATE … \; UPDATE …`) and, on the new binary,
# tessera-explicit-transfer.sql (`BEGIN \; UPDATE … \; UPDATE … \; COMMIT`), retrying
# serialization failures (--max-tries=100), then checks the sum of v is unchanged. The three
# alternate in every round. Prints messages/s, latency, retries and the sum per run.
#
# Usage: scripts/bench-implicit.sh OLD_BIN NEW_BIN
# Environment: IMPLICIT_ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1
new=$2
rounds=${IMPLICIT_ROUNDS:-3}
work=$(mktemp -d /tmp/bench-implicit.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$work/load.sql" <<'PY'
import sys
rows = [f"('k{i}$@0', '{{\"v\":1000}}')" for i in range(10000)]
with open(sys.argv[1], "w") as f:
    for j in range(0, len(rows), 2000):
        f.write("INSERT INTO t VALUES " + ", ".join(rows[j:j + 2000]) + ";\n")
PY

run() {
  local bin=$1 script=$2 label=$3 dir port pid out
  dir=$(mktemp -d "$work/data.XXXX")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
  "$bin" serve --data-dir "$dir" --listen "127.0.0.1:$port" >"$dir.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1   # waiting for the node to listen, not synchronising a test
  done
  psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -q -f "$work/load.sql" >/dev/null
  out=$(pgbench -n -M simple -c 32 -j 2 -T 8 --max-tries=100 -h 127.0.0.1 -p "$port" \
    -U postgres -f "$script" postgres 2>&1)
  echo "$label: $(echo "$out" | grep -E '^tps' | grep -oE '[0-9.]+' | head -1) messages/s," \
    "$(echo "$out" | grep -E 'latency average' | grep -oE '[0-9.]+ ms')," \
    "retried $(echo "$out" | grep -E 'transactions retried' | grep -oE '^[^0-9]*[0-9]+' | grep -oE '[0-9]+$' || echo 0)," \
    "sum $(psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atqc 'SELECT sum(v::int8) FROM t')"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for r in $(seq 1 "$rounds"); do
  run "$old" bench/pgbench/tessera-implicit-transfer.sql "round $r old, two statements"
  run "$new" bench/pgbench/tessera-implicit-transfer.sql "round $r new, two statements"
  run "$new" bench/pgbench/tessera-explicit-transfer.sql "round $r new, BEGIN … COMMIT"
done

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
# Environment: IMPLICIT_ROUNDS (default 3), BENCH_RESULTS (the nodes' logs land in its raw/,
#   default bench/results/implicit-<UTC>).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1
new=$2
rounds=${IMPLICIT_ROUNDS:-3}
name=bench-implicit
out=${BENCH_RESULTS:-bench/results/implicit-$(date -u +%Y-%m-%dT%H%M%SZ)}
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh
python3 - "$work/load.sql" <<'PY'
import sys
rows = [f"('k{i}$@0', '{{\"v\":1000}}')" for i in range(10000)]
with open(sys.argv[1], "w") as f:
    for j in range(0, len(rows), 2000):
        f.write("INSERT INTO t VALUES " + ", ".join(rows[j:j + 2000]) + ";\n")
PY

# run BIN SCRIPT LABEL: a fresh node (bench-servers.sh's start_tessera), the load, one pgbench.
run() {
  local bin=$1 script=$2 label=$3 out_pgb
  rm -rf "$work/tessera"
  start_tessera "$bin" >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -q -f "$work/load.sql" >/dev/null
  out_pgb=$(pgbench -n -M simple -c 32 -j 2 -T 8 --max-tries=100 -h 127.0.0.1 -p "$port" \
    -U postgres -f "$script" postgres 2>&1)
  echo "$label: $(echo "$out_pgb" | grep -E '^tps' | grep -oE '[0-9.]+' | head -1) messages/s," \
    "$(echo "$out_pgb" | grep -E 'latency average' | grep -oE '[0-9.]+ ms')," \
    "retried $(echo "$out_pgb" | grep -E 'transactions retried' | grep -oE '^[^0-9]*[0-9]+' | grep -oE '[0-9]+$' || echo 0)," \
    "sum $(psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atqc 'SELECT sum(v::int8) FROM t')"
  kill -TERM "$tessera_pid"
  wait "$tessera_pid" 2>/dev/null || true
  tessera_pid=""
}

for r in $(seq 1 "$rounds"); do
  run "$old" bench/pgbench/tessera-implicit-transfer.sql "round $r old, two statements"
  run "$new" bench/pgbench/tessera-implicit-transfer.sql "round $r new, two statements"
  run "$new" bench/pgbench/tessera-explicit-transfer.sql "round $r new, BEGIN … COMMIT"
done

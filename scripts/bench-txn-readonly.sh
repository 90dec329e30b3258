#!/usr/bin/env bash
# Read-only participants of two-phase commit, A/B: each binary in turn (alternating, ROUNDS
# times) serves a fresh node (2 executors, 8 fragments); pgbench runs, per client, the
# transaction BEGIN; read two documents of fragments 1 and 2 (executors 1 and 0); update one
# document of fragment 0 and one of fragment 3 (executors 0 and 1); COMMIT. That is a
# two-phase commit with two writing and two read-only participants. Reported per run: tx/s,
# node CPU per transaction (utime+stime of the process from /proc/<pid>/stat), and fragment
# fdatasyncs per transaction (sum of tessera_fragment_fdatasyncs_total from /metrics; the
# coordinator journal's are not in it).
#
# Usage: scripts/bench-txn-readonly.sh BIN_A [BIN_B]
# Environment: CLIENTS (default 1), TXNS per client (default 2000), ROUNDS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${CLIENTS:-1}
txns=${TXNS:-2000}
rounds=${ROUNDS:-2}
work=$(mktemp -d /tmp/bench-txn-readonly.XXXXXX)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
fdatasyncs() {
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^tessera_fragment_fdatasyncs_total[{ ]/ {s += $NF} END {printf "%d", s}'
}
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}
cat >"$work/txn.sql" <<'SQL'
BEGIN;
SELECT count(*) FROM t WHERE id() IN ('b:client_id$@131072', 'c:client_id$@262144');
UPDATE t SET v = v - 1 WHERE id() = 'a:client_id$@0';
UPDATE t SET v = v + 1 WHERE id() = 'd:client_id$@393216';
COMMIT;
SQL
run() {
  local bin=$1 port mport
  port=$(free_port)
  mport=$(free_port)
  rm -rf "$work/data"
  "$bin" serve --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" --data-dir "$work/data" \
    --executors 2 --fragments 8 --segment-bytes 16777216 2>"$work/log" &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q 'ready: listening on' "$work/log" && break
    sleep 0.1
  done
  grep -q 'ready: listening on' "$work/log" || { tail -n 20 "$work/log" >&2; exit 1; }
  local rows=""
  for ((i = 0; i < clients; i++)); do
    for p in "a$i\$@0" "b$i\$@131072" "c$i\$@262144" "d$i\$@393216"; do
      rows+="${rows:+, }('$p', '{\"v\":100}')"
    done
  done
  psql -q -h 127.0.0.1 -p "$port" -U bench -d bench -c "INSERT INTO t VALUES $rows" >/dev/null
  local s0 c0 s1 c1 tps
  s0=$(fdatasyncs "$mport")
  c0=$(cpu_ticks "$pid")
  tps=$(pgbench -n -h 127.0.0.1 -p "$port" -U bench -M simple -f "$work/txn.sql" -c "$clients" -j 1 \
    -t "$txns" bench 2>&1 | awk '/^tps/ {print $3}')
  s1=$(fdatasyncs "$mport")
  c1=$(cpu_ticks "$pid")
  local total=$((clients * txns))
  local hz
  hz=$(getconf CLK_TCK)
  echo "$bin clients=$clients txns=$total tps=$tps \
cpu_us_per_txn=$(( (c1 - c0) * 1000000 / hz / total )) fdatasyncs_per_txn=$(awk "BEGIN {printf \"%.2f\", ($s1 - $s0) / $total}")"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}
for ((r = 0; r < rounds; r++)); do
  for bin in "$@"; do
    run "$bin"
  done
done

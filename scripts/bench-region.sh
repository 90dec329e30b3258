#!/usr/bin/env bash
# The region's forwarding overhead (issue #7 item 11, first part): point reads and durable
# upserts through the node that owns every fragment vs through a proxy node that forwards
# each statement to it, in the same run, alternating targets, 8 clients.
#
#   TESSERA_BIN=target/release/tessera scripts/bench-region.sh
#
# Env: TESSERA_BIN (default target/release/tessera), DOCS (default 10000), SECONDS_PER_RUN
# (default 10), ROUNDS (default 2: each target runs ROUNDS times per case, alternating),
# CLIENTS (default 8).
# Node A: data, seed, --min-members 1, so the coordinator gives it every fragment at once;
# node B: proxy (owns nothing, forwards everything to A). Loopback, random free ports.
set -euo pipefail
bin=${TESSERA_BIN:-target/release/tessera}
docs=${DOCS:-10000}
secs=${SECONDS_PER_RUN:-10}
rounds=${ROUNDS:-2}
clients=${CLIENTS:-8}
work=$(mktemp -d /tmp/bench-region.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pa=$(free_port); pb=$(free_port); qa=$(free_port); qb=$(free_port)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$bin" serve --data-dir "$work/a" --listen "127.0.0.1:$pa" --executors 2 --fragments 8 \
  --cluster-name bench --node-id 1 --peer-listen "127.0.0.1:$qa" --min-members 1 >"$work/a.log" 2>&1 &
pids+=($!)
"$bin" serve --data-dir "$work/b" --listen "127.0.0.1:$pb" --executors 2 --fragments 8 \
  --cluster-name bench --node-id 2 --peer-listen "127.0.0.1:$qb" --role proxy \
  --join "127.0.0.1:$qa" >"$work/b.log" 2>&1 &
pids+=($!)
psql_to() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U bench bench "${@:2}"; }
# Both nodes up and the proxy sees the allocated map (bounded wait).
for _ in $(seq 1 300); do
  if psql_to "$pb" -At -c 'SHOW REGION' 2>/dev/null | grep -q 'node 1'; then break; fi
  sleep 0.1
done
psql_to "$pb" -At -c 'SHOW REGION' | grep -q 'node 1' || { cat "$work"/*.log >&2; echo "cluster did not form" >&2; exit 1; }
filler=$(printf 'a%.0s' $(seq 1 100))
python3 - "$docs" "$filler" >"$work/load.sql" <<'PY'
import sys
docs, filler = int(sys.argv[1]), sys.argv[2]
print("CREATE TABLE IF NOT EXISTS pgb_docs ();")
for start in range(0, docs, 256):
    rows = ", ".join(f"""('{k}', '{{"balance":1000,"field0":"{filler}"}}')""" for k in range(start, min(start + 256, docs)))
    print(f"INSERT INTO pgb_docs VALUES {rows};")
PY
psql_to "$pa" -f "$work/load.sql" >/dev/null
# Before timing: through both nodes, the point read's prepared statement finds exactly one
# document (a query that matched nothing would be fast and meaningless).
cat >"$work/check.sql" <<'SQL'
\set k random(0, :docs - 1)
SELECT count(*) AS n FROM pgb_docs WHERE id() = :k \gset
\if :n != 1
SELECT 1 / 0;
\endif
SQL
for port in "$pa" "$pb"; do
  pgbench -h 127.0.0.1 -p "$port" -U bench -n -M prepared -c 2 -j 2 -t 100 -D docs="$docs" \
    -f "$work/check.sql" bench >"$work/check.txt" 2>&1 \
    && grep -q '^number of failed transactions: 0' "$work/check.txt" \
    || { cat "$work/check.txt" >&2; echo "bench-region: point reads find nothing via port $port" >&2; exit 1; }
done
echo "machine: $(nproc) vCPU, $(free -g | awk '/Mem:/{print $2}') GiB; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tessera: $("$bin" --version 2>/dev/null || echo "$bin")  pgbench: $(pgbench --version)"
printf 'case\ttarget\tround\ttps\tavg_ms\n'
for case in point-read upsert; do
  for r in $(seq 1 "$rounds"); do
    for target in owner forwarder; do
      port=$pa; [ "$target" = forwarder ] && port=$pb
      out=$(pgbench -h 127.0.0.1 -p "$port" -U bench -n -M prepared -c "$clients" -j 2 -T "$secs" \
        -D docs="$docs" -f "bench/pgbench/tessera-$case.sql" bench 2>&1) || { echo "$out" >&2; exit 1; }
      tps=$(echo "$out" | awk -F'= ' '/^tps/{split($2,a," "); print a[1]}')
      avg=$(echo "$out" | awk -F'= ' '/latency average/{split($2,a," "); print a[1]}')
      failed=$(echo "$out" | awk '/number of failed transactions/{print $5}')
      printf '%s\t%s\t%s\t%s\t%s\t(failed %s)\n' "$case" "$target" "$r" "$tps" "$avg" "${failed:-0}"
    done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# Throughput of 1 vs 2 vs 3 nodes on ONE machine (issue #7 item 11, last part). A simulation
# of scale, not scale: every node shares this machine's vCPUs, loopback and disk.
#
#   TESSERA_BIN=target/release/tessera scripts/bench-cluster-scale.sh
#
# For N in $NODES: a fresh cluster of N data nodes (one executor each, so N executors in
# all), $FRAGMENTS fragments spread by the coordinator, $DOCS documents loaded through node
# 1; then for each case one pgbench per node at once, $CLIENTS clients split evenly over the
# nodes (each client talks to one node; a statement for another node's fragment is
# forwarded), for $SECONDS_PER_RUN s. Prints the summed tps per case and N.
#
# Env: TESSERA_BIN (default target/release/tessera), NODES (default "1 2 3"), CLIENTS
# (default 24), DOCS (default 10000), FRAGMENTS (default 12), SECONDS_PER_RUN (default 10).
set -euo pipefail
bin=${TESSERA_BIN:-target/release/tessera}
node_counts=${NODES:-1 2 3}
clients=${CLIENTS:-24}
docs=${DOCS:-10000}
fragments=${FRAGMENTS:-12}
secs=${SECONDS_PER_RUN:-10}
[ -x "$bin" ] || { echo "bench-cluster-scale: no tessera binary at $bin" >&2; exit 1; }
work=$(mktemp -d /tmp/bench-cluster-scale.XXXXXX)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
psql_to() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U bench bench "${@:2}"; }
filler=$(printf 'a%.0s' $(seq 1 100))
python3 - "$docs" "$filler" >"$work/load.sql" <<'PY'
import sys
docs, filler = int(sys.argv[1]), sys.argv[2]
print("CREATE TABLE IF NOT EXISTS pgb_docs ();")
for start in range(0, docs, 256):
    rows = ", ".join(f"""('{k}', '{{"balance":1000,"field0":"{filler}"}}')""" for k in range(start, min(start + 256, docs)))
    print(f"INSERT INTO pgb_docs VALUES {rows};")
PY
echo "machine: $(nproc) vCPU, $(free -g | awk '/Mem:/{print $2}') GiB; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tessera: $("$bin" --version 2>/dev/null || echo "$bin")  pgbench: $(pgbench --version)"
printf 'nodes\tcase\ttps\tper-node tps\tfailed\n'
for n in $node_counts; do
  ports=(); peers=()
  for i in $(seq 1 "$n"); do ports+=("$(free_port)"); peers+=("$(free_port)"); done
  for i in $(seq 1 "$n"); do
    join=(); [ "$i" -gt 1 ] && join=(--join "127.0.0.1:${peers[0]}")
    "$bin" serve --data-dir "$work/n$n-$i" --listen "127.0.0.1:${ports[$((i - 1))]}" \
      --metrics-listen '' --executors 1 --fragments "$fragments" --cluster-name scale \
      --node-id "$i" --peer-listen "127.0.0.1:${peers[$((i - 1))]}" --min-members "$n" \
      --handoff-on-shutdown false "${join[@]}" >"$work/n$n-$i.log" 2>&1 &
    pids+=($!)
  done
  # Bounded wait: every node routes by an allocated map with N owners.
  for i in $(seq 1 "$n"); do
    formed=0
    for _ in $(seq 1 600); do
      owners=$(psql_to "${ports[$((i - 1))]}" -At -c 'SHOW REGION' 2>/dev/null | cut -d'|' -f3 | cut -d' ' -f2 | sort -u | wc -l || true)
      if [ "$owners" = "$n" ]; then formed=1; break; fi
      sleep 0.1
    done
    [ "$formed" = 1 ] || { cat "$work"/n"$n"-*.log >&2; echo "bench-cluster-scale: $n nodes did not form" >&2; exit 1; }
  done
  psql_to "${ports[0]}" -f "$work/load.sql" >/dev/null
  count=$(psql_to "${ports[$((n - 1))]}" -At -c 'SELECT count(*) FROM pgb_docs')
  [ "$count" = "$docs" ] || { echo "bench-cluster-scale: $count documents through node $n, not $docs" >&2; exit 1; }
  for case in point-read upsert; do
    runs=()
    for i in $(seq 1 "$n"); do
      c=$((clients / n)); [ "$i" -le $((clients % n)) ] && c=$((c + 1))
      pgbench -h 127.0.0.1 -p "${ports[$((i - 1))]}" -U bench -n -M prepared -c "$c" -j 1 -T "$secs" \
        -D docs="$docs" -f "bench/pgbench/tessera-$case.sql" bench >"$work/run-$n-$case-$i.txt" 2>&1 &
      runs+=($!)
    done
    for r in "${runs[@]}"; do wait "$r" || { cat "$work"/run-"$n"-"$case"-*.txt >&2; exit 1; }; done
    total=0; per=(); failed=0
    for i in $(seq 1 "$n"); do
      t=$(awk -F'= ' '/^tps/{split($2,a," "); printf "%.0f", a[1]}' "$work/run-$n-$case-$i.txt")
      f=$(awk '/number of failed transactions/{print $5}' "$work/run-$n-$case-$i.txt")
      total=$((total + t)); per+=("$t"); failed=$((failed + ${f:-0}))
    done
    printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$case" "$total" "$(IFS=/; echo "${per[*]}")" "$failed"
  done
  stop_all
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

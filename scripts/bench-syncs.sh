#!/usr/bin/env bash
# Durable-insert cost per transaction, PostgreSQL and Tessera configurations in turn, in the
# same load: tps, p99 latency, the whole machine's CPU per tx (/proc/stat), the Tessera
# process's own CPU per tx (/proc/PID/stat: every thread, io_uring workers included),
# Tessera's own fdatasyncs and writes per fdatasync (SHOW STATS), and ext4 fdatasyncs per tx
# machine-wide (perf, ext4:ext4_sync_file_enter; other processes' syncs count too).
#
# usage: scripts/bench-syncs.sh 'BIN [serve args]' ['BIN [serve args]' ...]
#   e.g. scripts/bench-syncs.sh 'target/release/tessera --max-syncs-per-executor 0' \
#                               'target/release/tessera'
# env: C clients (32), T seconds per run (8), ROUNDS (2), DOCS preloaded (20000),
#      CASE pgbench script under bench/pgbench/ (insert).
# One PostgreSQL (scripts/pg-local.sh, fsync on) for the whole run, measured once per round;
# every Tessera run starts a fresh node on a fresh data directory and preloads DOCS documents.
set -euo pipefail
cd "$(dirname "$0")/.."
name=bench-syncs; out=${OUT:-/tmp/bench-syncs-out}; mkdir -p "$out"
. scripts/bench-servers.sh
C=${C:-32}; T=${T:-8}; ROUNDS=${ROUNDS:-2}; DOCS=${DOCS:-20000}; CASE=${CASE:-insert}
export PGSSLMODE=disable
pg_url=$(scripts/pg-local.sh start "$work/pg")
pg_port=$(scripts/pg-local.sh url "$work/pg" | sed -E 's|.*:([0-9]+)/.*|\1|')
filler=$(printf 'a%.0s' $(seq 1 100))
psql -X -q -h 127.0.0.1 -p "$pg_port" -U bench postgres <<SQL
CREATE TABLE pgb_docs (id text PRIMARY KEY, doc jsonb NOT NULL);
INSERT INTO pgb_docs SELECT g::text, jsonb_build_object('customer', (g / 8)::text, 'balance', 1000, 'field0', '$filler') FROM generate_series(0, $DOCS - 1) g;
VACUUM ANALYZE pgb_docs;
SQL
python3 - "$DOCS" "$filler" > "$work/load.sql" <<'PY'
import sys
docs, filler = int(sys.argv[1]), sys.argv[2]
for start in range(0, docs, 256):
    rows = ", ".join(f"""('{k}', '{{"customer":"{k // 8}","balance":1000,"field0":"{filler}"}}')""" for k in range(start, min(start + 256, docs)))
    print(f"INSERT INTO pgb_docs VALUES {rows};")
PY
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
proc_cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
# Tessera's own counters: fdatasyncs and writes synced, summed over fragments.
own_syncs() {
  psql -X -At -F' ' -h 127.0.0.1 -p "$1" -U bench bench -c 'SHOW STATS' |
    awk '$1=="tessera_fragment_fdatasyncs_total"{s+=$NF} $1=="tessera_fragment_writes_synced_total"{w+=$NF} END{print s+0, w+0}'
}
# run LABEL PORT DB SCRIPT PID: one pgbench run, one result line.
run() {
  local label=$1 p=$2 db=$3 script=$4 pid=$5
  rm -f "$work"/lat.*
  local b0 c0=0 s0=(0 0) b1 c1=0 s1=(0 0)
  if [ -n "$pid" ]; then c0=$(proc_cpu "$pid"); read -r -a s0 <<<"$(own_syncs "$p")"; fi
  b0=$(busy)
  perf stat -a -e ext4:ext4_sync_file_enter -x, -o "$work/perf.txt" -- \
    pgbench -h 127.0.0.1 -p "$p" -U bench -n -M prepared -j 2 -c "$C" -T "$T" -D docs="$DOCS" \
      -l --log-prefix="$work/lat" -f "bench/pgbench/$script" "$db" > "$work/pgb.txt" 2>&1
  b1=$(busy)
  if [ -n "$pid" ]; then c1=$(proc_cpu "$pid"); read -r -a s1 <<<"$(own_syncs "$p")"; fi
  local tps n syncs p99
  tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$work/pgb.txt")
  n=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$work/pgb.txt")
  syncs=$(grep ext4_sync_file_enter "$work/perf.txt" | cut -d, -f1)
  p99=$(cat "$work"/lat.* | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END{print a[int(NR*0.99)]/1000}')
  python3 -c "
n=$n; tps=$tps; cpu=($b1-$b0)*1e4/n; proc=($c1-$c0)*1e4/n
own=${s1[0]}-${s0[0]}; w=${s1[1]}-${s0[1]}
line=f'$label: tps={tps:.0f} p99={$p99:.2f}ms machine_cpu/tx={cpu:.1f}us ext4_syncs/tx={$syncs/n:.3f}'
if $c1 > 0: line += f' node_cpu/tx={proc:.1f}us own_fdatasyncs/tx={own/n:.3f} writes/fdatasync={w/max(own,1):.2f}'
print(line)"
}
for r in $(seq 1 "$ROUNDS"); do
  run "round $r postgres" "$pg_port" postgres "postgres-$CASE.sql" ""
  for cfg in "$@"; do
    read -r -a argv <<<"$cfg"
    bin=${argv[0]}
    port=$(free_port)
    rm -rf "$work/tessera"; mkdir -p "$work/tessera"
    "$bin" serve --listen "127.0.0.1:$port" --metrics-listen "" --data-dir "$work/tessera" "${argv[@]:1}" 2>"$work/tessera.log" &
    tessera_pid=$!
    until grep -q 'ready: listening on' "$work/tessera.log"; do
      kill -0 "$tessera_pid" 2>/dev/null || { tail -n 20 "$work/tessera.log" >&2; exit 1; }
      sleep 0.1
    done
    psql -X -q -h 127.0.0.1 -p "$port" -U bench bench -f "$work/load.sql" >/dev/null
    run "round $r tessera $cfg" "$port" bench "tessera-$CASE.sql" "$tessera_pid"
    kill -TERM "$tessera_pid"; wait "$tessera_pid" || { echo "tessera exited with $?" >&2; exit 1; }
    tessera_pid=""
  done
done

#!/usr/bin/env bash
# CPU budget per transaction: pgbench's own CPU, the rest of the machine, fdatasyncs.
# usage: scripts/bench-cpu-split.sh TESSERA_BIN [extra tessera serve args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1; shift
name=bench-cpu-split; out=${CPU_RESULTS:-/tmp/bench-cpu-split}; mkdir -p "$out"
. scripts/bench-servers.sh
pg_url=$(scripts/pg-local.sh start "$work/pg")
pg_port=$(scripts/pg-local.sh url "$work/pg" | sed -E 's|.*:([0-9]+)/.*|\1|')
port=$(free_port); mkdir -p $work/tessera
"$bin" serve --listen "127.0.0.1:$port" --metrics-listen "" --data-dir "$work/tessera" "$@" 2>"$work/tessera.log" &
tessera_pid=$!
until grep -q 'ready: listening on' "$work/tessera.log"; do sleep 0.1; done
export PGSSLMODE=disable
docs=20000
filler=$(printf 'a%.0s' $(seq 1 100))
psql -X -q -h 127.0.0.1 -p $pg_port -U bench postgres <<SQL
CREATE TABLE pgb_docs (id text PRIMARY KEY, doc jsonb NOT NULL);
INSERT INTO pgb_docs SELECT g::text, jsonb_build_object('customer', (g / 8)::text, 'balance', 1000, 'field0', '$filler') FROM generate_series(0, $docs - 1) g;
VACUUM ANALYZE pgb_docs;
SQL
python3 - "$docs" "$filler" > $work/l.sql <<'PY'
import sys
docs, filler = int(sys.argv[1]), sys.argv[2]
for start in range(0, docs, 256):
    rows = ", ".join(f"""('{k}', '{{"customer":"{k // 8}","balance":1000,"field0":"{filler}"}}')""" for k in range(start, min(start+256, docs)))
    print(f"INSERT INTO pgb_docs VALUES {rows};")
PY
psql -X -q -h 127.0.0.1 -p $port -U bench bench -f $work/l.sql >/dev/null
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
for case in ${CASES:-point-read insert}; do for flavor in postgres tessera; do
  if [ $flavor = postgres ]; then p=$pg_port; db=postgres; else p=$port; db=bench; fi
  b0=$(busy)
  perf stat -a -e ext4:ext4_sync_file_enter,context-switches -x, -o $work/perf.txt -- \
   /usr/bin/time -f "%U %S" -o $work/time.txt pgbench -h 127.0.0.1 -p $p -U bench -n -M prepared -j 2 -c ${C:-32} -T ${T:-8} -D docs=$docs -f bench/pgbench/$flavor-$case.sql $db > $work/pgb.txt 2>&1
  b1=$(busy)
  tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' $work/pgb.txt)
  n=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' $work/pgb.txt)
  read u s < $work/time.txt
  syncs=$(grep ext4_sync_file_enter $work/perf.txt | cut -d, -f1)
  cs=$(grep context-switches $work/perf.txt | cut -d, -f1)
  python3 -c "
n=$n; tot=($b1-$b0)*1e4; pg=($u+$s)*1e6
print(f'$case $flavor c=${C:-32}: tps=$tps total_cpu/tx={tot/n:.1f}us pgbench/tx={pg/n:.1f}us (user {$u*1e6/n:.1f}) rest/tx={(tot-pg)/n:.1f}us syncs/tx={$syncs/n:.3f} cs/tx={$cs/n:.1f}')"
done; done

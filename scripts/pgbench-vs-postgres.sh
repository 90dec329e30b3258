#!/usr/bin/env bash
# pgbench against a Tessera node and a private PostgreSQL (fsync on) in the same run, with the
# same pgbench scripts per case (bench/pgbench/<flavor>-<case>.sql: Tessera's SQL and
# PostgreSQL's table SQL): point read by id, durable single-document insert, durable upsert,
# content-routed query; 1, 8 and 32 clients each. Every case runs PostgreSQL and Tessera
# back to back (alternating which goes first), `pgbench -n -M prepared -j 2 -T $PGB_SECONDS`
# with a per-transaction log, from which the p99 latency is computed.
#
# Usage: scripts/pgbench-vs-postgres.sh
# Environment:
#   TESSERA_BIN   the tessera binary (default: target/release/tessera, built here)
#   PGB_SECONDS   seconds per case and target (default 10, at most 10)
#   PGB_DOCS      documents loaded into each collection (default 100000, a multiple of 8)
#   PGB_CLIENTS   client counts (default "1 8 32")
#   PGB_CASES     cases (default "point-read insert upsert content-query")
#   PGB_RESULTS   results directory (default: bench/results/pgbench-<UTC date and time>)
#
# Writes results.md (the table), results.tsv and the raw pgbench output of every run under
# the results directory. Never invents a number: a run that fails shows as failed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${PGB_SECONDS:-10}
docs=${PGB_DOCS:-100000}
clients=${PGB_CLIENTS:-1 8 32}
cases=${PGB_CASES:-point-read insert upsert content-query}
[ "$seconds" -ge 1 ] && [ "$seconds" -le 10 ] || { echo "PGB_SECONDS must be 1..10" >&2; exit 1; }
[ $((docs % 8)) -eq 0 ] && [ "$docs" -ge 8 ] || { echo "PGB_DOCS must be a positive multiple of 8" >&2; exit 1; }

scripts/install-deps.sh postgres
command -v pgbench >/dev/null || { echo "pgbench missing: scripts/install-deps.sh postgres" >&2; exit 1; }

stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out=${PGB_RESULTS:-bench/results/pgbench-$stamp}
name=pgbench-vs-postgres
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh

tessera=${TESSERA_BIN:-target/release/tessera}
if [ -z "${TESSERA_BIN:-}" ]; then
  echo "pgbench-vs-postgres: building tessera (release)"
  cargo build --release -p node
fi
[ -x "$tessera" ] || { echo "pgbench-vs-postgres: no tessera binary at $tessera" >&2; exit 1; }

pg_url=$(scripts/pg-local.sh start "$work/pg")
pg_port=$(scripts/pg-local.sh url "$work/pg" | sed -E 's|.*:([0-9]+)/.*|\1|')
echo "pgbench-vs-postgres: PostgreSQL at $pg_url"

start_tessera "$tessera"

export PGSSLMODE=disable
psql_pg() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U bench postgres "$@"; }
psql_ts() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U bench bench "$@"; }

# The data set, the same in both: pgb_docs holds ids "0".."docs-1" (id-hashed in Tessera);
# pgb_content holds ids "<k>$<c>" with customer "<c>" = k / 8, sharded on customer in Tessera
# (the `$<c>` suffix puts each document on its customer's shard). Documents carry
# balance 1000 and a 100-byte field0.
filler=$(printf 'a%.0s' $(seq 1 100))
echo "pgbench-vs-postgres: loading $docs + $docs documents into PostgreSQL"
load_started=$(date +%s.%N)
psql_pg <<SQL
DROP TABLE IF EXISTS pgb_docs, pgb_content;
CREATE TABLE pgb_docs (id text PRIMARY KEY, doc jsonb NOT NULL);
CREATE TABLE pgb_content (id text PRIMARY KEY, doc jsonb NOT NULL);
INSERT INTO pgb_docs SELECT g::text, jsonb_build_object('customer', (g / 8)::text, 'balance', 1000, 'field0', '$filler') FROM generate_series(0, $docs - 1) g;
INSERT INTO pgb_content SELECT g::text || '\$' || (g / 8)::text, jsonb_build_object('customer', (g / 8)::text, 'balance', 1000, 'field0', '$filler') FROM generate_series(0, $docs - 1) g;
CREATE INDEX pgb_content_customer ON pgb_content ((doc->>'customer'));
VACUUM ANALYZE pgb_docs;
VACUUM ANALYZE pgb_content;
SQL
pg_load_secs=$(echo "$(date +%s.%N) - $load_started" | bc)
echo "pgbench-vs-postgres: loading $docs + $docs documents into Tessera (multi-row INSERTs of 256)"
load_started=$(date +%s.%N)
python3 - "$docs" "$filler" >"$work/tessera-load.sql" <<'PY'
import sys
docs, filler = int(sys.argv[1]), sys.argv[2]
print("""CREATE TABLE IF NOT EXISTS pgb_docs ();""")
print("""CREATE TABLE IF NOT EXISTS pgb_content () WITH (sharding = '{"Fields":["customer"],"Range":1}');""")
for table, ident in (("pgb_docs", lambda k: str(k)), ("pgb_content", lambda k: f"{k}${k // 8}")):
    for start in range(0, docs, 256):
        rows = ", ".join(
            f"""('{ident(k)}', '{{"customer":"{k // 8}","balance":1000,"field0":"{filler}"}}')"""
            for k in range(start, min(start + 256, docs))
        )
        print(f"INSERT INTO {table} VALUES {rows};")
PY
psql_ts -f "$work/tessera-load.sql" >/dev/null
ts_load_secs=$(echo "$(date +%s.%N) - $load_started" | bc)
for t in pgb_docs pgb_content; do
  n_pg=$(psql_pg -At -c "SELECT count(*) FROM $t")
  n_ts=$(psql_ts -At -c "SELECT count(*) FROM $t")
  [ "$n_pg" = "$docs" ] && [ "$n_ts" = "$docs" ] || { echo "pgbench-vs-postgres: $t holds $n_pg (PostgreSQL) and $n_ts (Tessera) documents, not $docs" >&2; exit 1; }
done

mkdir -p "$out/raw"
# Before timing anything: the point read finds exactly one document and the content query
# exactly eight, through the same prepared, untyped parameters as the timed scripts.
for flavor in postgres tessera; do
  if [ "$flavor" = postgres ]; then p=$pg_port; db=postgres; else p=$port; db=bench; fi
  pgbench -h 127.0.0.1 -p "$p" -U bench -n -M prepared -c 2 -j 2 -t 100 -D docs="$docs" \
    -f "bench/pgbench/$flavor-check.sql" "$db" >"$out/raw/check.$flavor.txt" 2>&1 \
    && grep -q '^number of failed transactions: 0' "$out/raw/check.$flavor.txt" \
    || { cat "$out/raw/check.$flavor.txt" >&2; echo "pgbench-vs-postgres: $flavor check failed: its queries do not find the loaded documents" >&2; exit 1; }
done
echo "pgbench-vs-postgres: check passed: point reads find 1 document, content queries 8, on both"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: scripts/pgbench-vs-postgres.sh (PGB_SECONDS=$seconds PGB_DOCS=$docs PGB_CLIENTS='$clients')"
  echo "pgbench: $(pgbench --version)"
  echo "kernel: $(uname -sr)"
  echo "cpus: $(nproc)"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "uptime at start: $(uptime)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- bench scripts || echo ' (with uncommitted changes)')"
  echo "postgres: $("$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)/postgres" --version), fsync=on synchronous_commit=on"
  echo "tessera: $("$tessera" --version 2>/dev/null || echo "$tessera"), $(grep -m1 -o 'ready: listening.*' "$work/tessera.log")"
  echo "load: PostgreSQL ${pg_load_secs}s (INSERT ... SELECT generate_series, then index and VACUUM ANALYZE), Tessera ${ts_load_secs}s (psql -f, multi-row INSERTs of 256)"
} >"$out/machine.txt"

# One pgbench run; prints "tps<TAB>avg_ms<TAB>p99_ms<TAB>failed<TAB>transactions".
run_pgbench() {
  local flavor=$1 case=$2 c=$3 p=$4 db=$5
  local name="$case.$flavor.c$c"
  local logdir="$work/log/$name"
  mkdir -p "$logdir"
  local raw="$out/raw/$name.txt"
  local status=0
  (cd "$logdir" && pgbench -h 127.0.0.1 -p "$p" -U bench -n -M prepared -j 2 -c "$c" -T "$seconds" \
     -D docs="$docs" --log --log-prefix=tx -f "$OLDPWD/bench/pgbench/$flavor-$case.sql" "$db") \
     >"$raw" 2>&1 || status=$?
  local tps avg failed processed p99
  tps=$(sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)/\1/p' "$raw")
  [ -n "$tps" ] && tps=$(printf '%.0f' "$tps")
  # pgbench 15 adds "(including failures)" when some transactions failed.
  avg=$(sed -nE 's/^latency average = ([0-9.]+) ms.*/\1/p' "$raw")
  failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$raw")
  processed=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$raw")
  # Per-transaction log lines: client_id transaction_no time_us script_no epoch_s epoch_us;
  # a failed transaction has a word instead of time_us and is left out of the p99.
  p99=$(cat "$logdir"/tx.* 2>/dev/null | awk '$3 ~ /^[0-9]+$/ {print $3}' | sort -n \
        | awk '{v[NR]=$1} END {if (NR == 0) {print "-"; exit} i=int(NR*0.99); if (i < NR*0.99) i++; if (i < 1) i=1; printf "%.3f", v[i]/1000}')
  if [ "$status" -ne 0 ] || [ -z "$tps" ]; then
    echo "pgbench-vs-postgres: $name failed (exit $status); see $raw" >&2
    printf 'failed\t-\t-\t%s\t%s\n' "${failed:--}" "${processed:--}"
    return
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$tps" "$avg" "$p99" "${failed:-0}" "${processed:-0}"
}

printf 'case\tclients\ttarget\ttps\tavg_ms\tp99_ms\tfailed\ttransactions\n' >"$out/results.tsv"
order=0
for case in $cases; do
  for c in $clients; do
    if [ $((order % 2)) -eq 0 ]; then flavors="postgres tessera"; else flavors="tessera postgres"; fi
    order=$((order + 1))
    for flavor in $flavors; do
      if [ "$flavor" = postgres ]; then p=$pg_port; db=postgres; else p=$port; db=bench; fi
      line=$(run_pgbench "$flavor" "$case" "$c" "$p" "$db")
      printf '%s\t%s\t%s\t%s\n' "$case" "$c" "$flavor" "$line" | tee -a "$out/results.tsv"
    done
  done
done
echo "uptime at end: $(uptime)" >>"$out/machine.txt"

{
  echo "| case | clients | PostgreSQL tps | Tessera tps | PostgreSQL avg ms | Tessera avg ms | PostgreSQL p99 ms | Tessera p99 ms | failed (pg / tessera) |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F'\t' 'NR > 1 { k = $1 "\t" $2; if (!(k in seen)) { seen[k] = 1; keys[++n] = k }
                       tps[k, $3] = $4; avg[k, $3] = $5; p99[k, $3] = $6; f[k, $3] = $7 }
              END { for (i = 1; i <= n; i++) { k = keys[i]; split(k, a, "\t")
                      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |\n", a[1], a[2],
                        tps[k, "postgres"], tps[k, "tessera"], avg[k, "postgres"], avg[k, "tessera"],
                        p99[k, "postgres"], p99[k, "tessera"], f[k, "postgres"], f[k, "tessera"] } }' \
      "$out/results.tsv"
} >"$out/results.md"
cat "$out/machine.txt"
cat "$out/results.md"
echo "pgbench-vs-postgres: results in $out"

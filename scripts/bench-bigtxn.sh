#!/usr/bin/env bash
# One large transaction: BEGIN, N documents of about 1 KiB inserted by multi-row INSERTs of
# 1,000 rows, COMMIT (psql -f, the simple protocol), into a fresh Tessera node and into a
# private PostgreSQL (scripts/pg-local.sh: fsync on, table `docs (id text PRIMARY KEY, doc
# jsonb NOT NULL)`), the two alternating in every round, each round from an empty collection
# or table (TRUNCATE first). Prints the transaction's seconds and documents/s per round and
# target and the median of each; raw timings go to $BENCH_RESULTS/bigtxn.txt. On Tessera the
# transaction spans both fragments (a two-phase commit whose prepares are logged in parts).
#
# Usage: scripts/bench-bigtxn.sh TESSERA_BIN
# Environment: BIGTXN_DOCS (default 50000, at most 65,536: one transaction's write bound),
#   BIGTXN_ROUNDS (3), BENCH_RESULTS (default bench/results/bigtxn-<UTC>).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1
docs=${BIGTXN_DOCS:-50000}
rounds=${BIGTXN_ROUNDS:-3}
out=${BENCH_RESULTS:-bench/results/bigtxn-$(date -u +%Y-%m-%dT%H%M%SZ)}
name=bench-bigtxn
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh
scripts/install-deps.sh postgres >/dev/null
pg_url=$(scripts/pg-local.sh start "$work/pg")
start_tessera "$bin" >/dev/null
tessera_url="postgres://bench@127.0.0.1:$port/tessera?sslmode=disable"

# The transaction, the same text for both.
python3 - "$docs" >"$work/txn.sql" <<'PY'
import json, sys
n = int(sys.argv[1])
print("BEGIN;")
for start in range(0, n, 1000):
    rows = []
    for i in range(start, min(n, start + 1000)):
        doc = {"n": i, "customer": f"customers/{i % 1000}", "pad": "x" * 900}
        rows.append(f"('docs/{i}', '{json.dumps(doc)}')")
    print("INSERT INTO docs VALUES " + ", ".join(rows) + ";")
print("COMMIT;")
PY
psql -X -q -v ON_ERROR_STOP=1 "$pg_url" -c "CREATE TABLE docs (id text PRIMARY KEY, doc jsonb NOT NULL)"
mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD), tessera $bin"
  echo "machine: $(nproc) CPUs, $(uname -r), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "documents: $docs, SQL bytes: $(stat -c %s "$work/txn.sql")"
} >"$out/bigtxn.txt"
seconds() { local a b; a=$(date +%s.%N); "$@" >/dev/null; b=$(date +%s.%N); echo "$b - $a" | bc -l; }
for r in $(seq 1 "$rounds"); do
  for target in tessera postgres; do
    url=$tessera_url; [ "$target" = postgres ] && url=$pg_url
    psql -X -q -v ON_ERROR_STOP=1 "$url" -c "TRUNCATE docs"
    took=$(seconds psql -X -q -v ON_ERROR_STOP=1 "$url" -f "$work/txn.sql")
    n=$(psql -X -q -A -t -v ON_ERROR_STOP=1 "$url" -c "SELECT count(*) FROM docs")
    [ "$n" = "$docs" ] || { echo "$target holds $n documents after the transaction, not $docs" >&2; exit 1; }
    printf 'round %s %-8s %8.3f s %9.0f docs/s\n' "$r" "$target" "$took" \
      "$(echo "$docs / $took" | bc -l)" | tee -a "$out/bigtxn.txt"
  done
done
for target in tessera postgres; do
  med=$(grep -E "^round [0-9]+ $target " "$out/bigtxn.txt" | awk '{print $6}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "median $target: $med docs/s" | tee -a "$out/bigtxn.txt"
done

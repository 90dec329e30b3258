#!/usr/bin/env bash
# Bulk load and export through COPY (psql's \copy, the simple protocol): N documents loaded
# into a fresh Tessera node and into a private PostgreSQL (scripts/pg-local.sh: fsync on,
# table `docs (id text PRIMARY KEY, doc jsonb NOT NULL)`), the two alternating in every round,
# each round from an empty collection or table (TRUNCATE first); then COPY TO a file of what
# was loaded. Prints rows/s per round and target and the median of each; raw timings go to
# $BENCH_RESULTS/copy.txt.
#
# Usage: scripts/bench-copy.sh TESSERA_BIN
# Environment: COPY_DOCS (default 100000), COPY_ROUNDS (3), BENCH_RESULTS
#   (default bench/results/copy-<UTC>).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1
docs=${COPY_DOCS:-100000}
rounds=${COPY_ROUNDS:-3}
out=${BENCH_RESULTS:-bench/results/copy-$(date -u +%Y-%m-%dT%H%M%SZ)}
name=bench-copy
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh
scripts/install-deps.sh postgres >/dev/null
pg_url=$(scripts/pg-local.sh start "$work/pg")
start_tessera "$bin" >/dev/null
tessera_url="postgres://bench@127.0.0.1:$port/tessera?sslmode=disable"

# The input: one line per document, id TAB JSON (about 180 bytes), the same for both.
python3 - "$docs" >"$work/docs.txt" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    doc = {"n": i, "customer": f"customers/{i % 1000}", "balance": 1000 + i % 97,
           "tags": ["a", "b", str(i % 7)], "note": f"document number {i} of the copy bench"}
    print(f"docs/{i}\t{json.dumps(doc)}")
PY
psql -X -q -v ON_ERROR_STOP=1 "$pg_url" -c "CREATE TABLE docs (id text PRIMARY KEY, doc jsonb NOT NULL)"
mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD), tessera $bin"
  echo "machine: $(nproc) CPUs, $(uname -r), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "documents: $docs, input bytes: $(stat -c %s "$work/docs.txt")"
} >"$out/copy.txt"
seconds() { local a b; a=$(date +%s.%N); "$@" >/dev/null; b=$(date +%s.%N); echo "$b - $a" | bc -l; }
for r in $(seq 1 "$rounds"); do
  for target in tessera postgres; do
    url=$tessera_url; [ "$target" = postgres ] && url=$pg_url
    psql -X -q -v ON_ERROR_STOP=1 "$url" -c "TRUNCATE docs"
    load=$(seconds psql -X -q -v ON_ERROR_STOP=1 "$url" -c "\\copy docs from '$work/docs.txt'")
    n=$(psql -X -q -A -t -v ON_ERROR_STOP=1 "$url" -c "SELECT count(*) FROM docs")
    [ "$n" = "$docs" ] || { echo "$target holds $n documents after the load, not $docs" >&2; exit 1; }
    dump=$(seconds psql -X -q -v ON_ERROR_STOP=1 "$url" -c "\\copy docs to '$work/out-$target.txt'")
    lines=$(wc -l <"$work/out-$target.txt")
    [ "$lines" = "$docs" ] || { echo "$target wrote $lines lines, not $docs" >&2; exit 1; }
    printf 'round %s %-8s load %8.3f s %9.0f rows/s   dump %7.3f s %9.0f rows/s\n' "$r" "$target" \
      "$load" "$(echo "$docs / $load" | bc -l)" "$dump" "$(echo "$docs / $dump" | bc -l)" | tee -a "$out/copy.txt"
  done
done
for target in tessera postgres; do
  for what in load dump; do
    col=7; [ "$what" = dump ] && col=12
    med=$(grep -E "^round [0-9]+ $target " "$out/copy.txt" | awk -v c="$col" '{print $c}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "median $target $what: $med rows/s" | tee -a "$out/copy.txt"
  done
done

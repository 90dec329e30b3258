#!/usr/bin/env bash
# What a long read does to the other statements of its executor: a node with one executor
# holds STALL_DOCS documents (about 180 bytes each, loaded with \copy); while a client runs
# `\copy docs to /dev/null` (a streamed SELECT of the whole collection), or the statement
# STALL_SQL when set (an aggregate, say), over and over, pgbench runs a point read
# (`SELECT doc() FROM docs WHERE id() = 'docs/77'`) from one connection and logs every
# latency. Each binary given gets its own fresh node, in turn,
# STALL_ROUNDS times. Prints per round and binary the point reads' count, p50, p99 and max
# latency and the long reads completed; raw lines go to $BENCH_RESULTS/stall.txt.
#
# Usage: scripts/bench-scan-stall.sh TESSERA_BIN [TESSERA_BIN...]
# Environment: STALL_DOCS (default 200000), STALL_SECONDS (10), STALL_ROUNDS (2), STALL_SQL,
#   STALL_FRAGMENTS (1; more puts the documents on several fragments of the one executor, so
#   an autocommit write over all of them is a transaction of one), BENCH_RESULTS (default
#   bench/results/stall-<UTC>).
set -euo pipefail
cd "$(dirname "$0")/.."
docs=${STALL_DOCS:-200000}
secs=${STALL_SECONDS:-10}
rounds=${STALL_ROUNDS:-2}
fragments=${STALL_FRAGMENTS:-1}
out=${BENCH_RESULTS:-bench/results/stall-$(date -u +%Y-%m-%dT%H%M%SZ)}
name=bench-scan-stall
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh
scripts/install-deps.sh postgres >/dev/null   # psql and pgbench

python3 - "$docs" >"$work/docs.txt" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    doc = {"n": i, "customer": f"customers/{i % 1000}", "balance": 1000 + i % 97,
           "tags": ["a", "b", str(i % 7)], "note": f"document number {i} of the stall bench"}
    print(f"docs/{i}\t{json.dumps(doc)}")
PY
echo "SELECT doc() FROM docs WHERE id() = 'docs/77';" >"$work/point.sql"
mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD), binaries: $*"
  echo "machine: $(nproc) CPUs, $(uname -r), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "documents: $docs, seconds per run: $secs, one executor, $fragments fragment(s), long read: ${STALL_SQL:-copy to /dev/null}"
} >"$out/stall.txt"

for r in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    start_tessera "$bin" --executors 1 --fragments "$fragments" >/dev/null
    url="postgres://bench@127.0.0.1:$port/tessera?sslmode=disable"
    psql -X -q -v ON_ERROR_STOP=1 "$url" -c "\\copy docs from '$work/docs.txt'"
    # The exporter: whole-collection streamed SELECTs back to back, counted.
    (
      n=0
      while [ ! -e "$work/stop" ]; do
        if [ -n "${STALL_SQL:-}" ]; then
          psql -X -q -v ON_ERROR_STOP=1 "$url" -c "$STALL_SQL" >/dev/null
        else
          psql -X -q -v ON_ERROR_STOP=1 "$url" -c "\\copy docs to '/dev/null'"
        fi
        n=$((n + 1))
        echo "$n" >"$work/exports"
      done
    ) &
    exporter=$!
    rm -f "$work"/lat*
    pgbench -n -c 1 -j 1 -T "$secs" -f "$work/point.sql" -l --log-prefix="$work/lat" "$url" >/dev/null 2>&1
    touch "$work/stop"
    wait "$exporter"
    rm -f "$work/stop"
    exports=$(cat "$work/exports" 2>/dev/null || echo 0)
    python3 - "$r" "$bin" "$exports" "$work"/lat* <<'PY' | tee -a "$out/stall.txt"
import sys
r, binary, exports, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
lat = sorted(int(l.split()[2]) for f in files for l in open(f))
pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print(f"round {r} {binary}: {len(lat)} point reads, p50 {pick(0.5)} us, p99 {pick(0.99)} us, "
      f"max {lat[-1]} us, {sum(1 for x in lat if x > 10_000)} over 10 ms; {exports} long reads")
PY
    kill -TERM "$tessera_pid"
    wait "$tessera_pid" || true
    tessera_pid=""
  done
done

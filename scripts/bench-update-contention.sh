#!/usr/bin/env bash
# An autocommit UPDATE over every fragment beside a writer that rewrites one of its documents
# back to back: a node with two executors and eight fragments holds CONTEND_DOCS documents;
# for CONTEND_SECONDS pgbench runs, at once, one connection rewriting `docs/77` by id (the
# fast path, one fragment) and CONTEND_CLIENTS connections running
# `UPDATE docs SET touched = touched + 1 WHERE n = 77 OR n = 78` (no id: every fragment, a
# transaction of one, writing docs/77 and docs/78), with PostgreSQL's per-statement
# retry off (--max-tries 1): a statement Tessera refuses after its own 16 attempts counts as
# failed. Each binary given gets its own fresh node, in turn, CONTEND_ROUNDS times. Prints
# per round and binary the scatter UPDATEs completed and failed, their latency p50 / p99 / max,
# the rewrites completed and failed (--max-tries 1 too), and the node's conflict counters;
# raw lines go to $BENCH_RESULTS/contention.txt.
#
# Usage: scripts/bench-update-contention.sh TESSERA_BIN [TESSERA_BIN...]
# Environment: CONTEND_DOCS (default 20000), CONTEND_SECONDS (10), CONTEND_ROUNDS (2),
#   CONTEND_CLIENTS (1), BENCH_RESULTS (default bench/results/contention-<UTC>).
set -euo pipefail
cd "$(dirname "$0")/.."
docs=${CONTEND_DOCS:-20000}
secs=${CONTEND_SECONDS:-10}
rounds=${CONTEND_ROUNDS:-2}
clients=${CONTEND_CLIENTS:-1}
out=${BENCH_RESULTS:-bench/results/contention-$(date -u +%Y-%m-%dT%H%M%SZ)}
name=bench-update-contention
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh
scripts/install-deps.sh postgres >/dev/null   # psql and pgbench

python3 - "$docs" >"$work/docs.txt" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(f"docs/{i}\t{json.dumps({'n': i, 'touched': 0, 'balance': 1000})}")
PY
echo "UPDATE docs SET balance = balance + 1 WHERE id() = 'docs/77';" >"$work/rewrite.sql"
echo "UPDATE docs SET touched = touched + 1 WHERE n = 77 OR n = 78;" >"$work/scatter.sql"
mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD), binaries: $*"
  echo "machine: $(nproc) CPUs, $(uname -r), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "documents: $docs, seconds per run: $secs, two executors, eight fragments, $clients scatter client(s)"
} >"$out/contention.txt"

counter() {
  psql -X -qtA "$url" -c "SHOW transaction_counters" | awk -F'|' -v k="$1" '$1 == k {print $2}'
}

for r in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    start_tessera "$bin" --executors 2 --fragments 8 >/dev/null
    url="postgres://bench@127.0.0.1:$port/tessera?sslmode=disable"
    psql -X -q -v ON_ERROR_STOP=1 "$url" -c "\\copy docs from '$work/docs.txt'"
    conflicts0=$(counter conflicts)
    rm -f "$work"/lat*
    pgbench -n -c 1 -j 1 -T "$secs" --max-tries 1 -f "$work/rewrite.sql" "$url" >"$work/rewrite.out" 2>&1 &
    rewriter=$!
    pgbench -n -c "$clients" -j 1 -T "$secs" --max-tries 1 -f "$work/scatter.sql" -l \
      --log-prefix="$work/lat" "$url" >"$work/scatter.out" 2>&1 || true
    wait "$rewriter" || true
    rewrites=$(awk '/number of transactions actually processed/ {print $NF}' "$work/rewrite.out" | cut -d/ -f1)
    rewrites_failed=$(awk '/number of failed transactions/ {print $5}' "$work/rewrite.out")
    rewriter_aborted=$(grep -c 'aborted' "$work/rewrite.out" || true)
    conflicts=$(( $(counter conflicts) - conflicts0 ))
    retries=$(counter prepared_attempts || true)
    rewrites="${rewrites:-0} (${rewrites_failed:-0} failed, rewriter aborted: $rewriter_aborted)"
    python3 - "$r" "$bin" "$rewrites" "$conflicts" "${retries:-n/a}" "$work"/lat* <<'PY' | tee -a "$out/contention.txt"
import sys
r, binary, rewrites, conflicts, retries, files = sys.argv[1:6] + [sys.argv[6:]]
rows = [l.split() for f in files for l in open(f)]
# pgbench's log: client, transaction, latency in us (or "failed"), script, time, us.
ok = sorted(int(x[2]) for x in rows if x[2].isdigit())
failed = sum(1 for x in rows if not x[2].isdigit())
pick = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))] if ok else 0
print(f"round {r} {binary}: {len(ok)} scatter UPDATEs, {failed} failed (40001 after 16 attempts), "
      f"p50 {pick(0.5)} us, p99 {pick(0.99)} us, max {ok[-1] if ok else 0} us; "
      f"{rewrites} rewrites; node conflicts {conflicts}, prepared_attempts {retries}")
PY
    kill -TERM "$tessera_pid"
    wait "$tessera_pid" || true
    tessera_pid=""
  done
done

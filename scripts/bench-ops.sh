#!/usr/bin/env bash
# Operability costs on a release node (BENCHMARKS.md, "node: operability"): load 200,000
# documents, then time tessera backup, 100 metrics scrapes, verify, restore and dump.
# Usage: cargo build --release -p node && scripts/bench-ops.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BIN:-target/release/tessera}
W=$(mktemp -d /tmp/ops-bench.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
MPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$BIN serve --data-dir $W/d --listen 127.0.0.1:$PORT --metrics-listen 127.0.0.1:$MPORT --executors 2 --fragments 8 --segment-bytes 16777216 2>$W/log &
PID=$!
trap 'kill $PID 2>/dev/null; rm -rf $W' EXIT
for _ in $(seq 1 600); do grep -q 'ready: listening' $W/log && break; sleep 0.1; done
python3 - $W/load.sql <<'PY'
import sys, json
with open(sys.argv[1], "w") as f:
    for s in range(80):
        rows = []
        for i in range(2500):
            n = s * 2500 + i
            doc = json.dumps({"n": n, "name": "user-%d" % n, "pad": "x" * 160})
            rows.append("('u/%d', '%s')" % (n, doc))
        f.write("INSERT INTO users VALUES %s;\n" % ", ".join(rows))
PY
t0=$(date +%s.%N); psql -q -h 127.0.0.1 -p $PORT -U b -d tessera -f $W/load.sql >/dev/null; t1=$(date +%s.%N)
echo "load: 200000 docs in $(echo "$t1 - $t0" | bc) s"
du -sb $W/d/fragments | awk '{print "data dir fragments bytes:", $1}'
t0=$(date +%s.%N); $BIN backup --to $W/bk --addr 127.0.0.1:$PORT; t1=$(date +%s.%N)
echo "backup s: $(echo "$t1 - $t0" | bc)"
t0=$(date +%s.%N); for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:$MPORT/metrics; done; t1=$(date +%s.%N)
echo "100 scrapes s: $(echo "$t1 - $t0" | bc)"
curl -s http://127.0.0.1:$MPORT/metrics | wc -c | awk '{print "scrape bytes:", $1}'
kill $PID; wait $PID || true
t0=$(date +%s.%N); $BIN verify --data-dir $W/bk | tail -1; t1=$(date +%s.%N)
echo "verify backup s: $(echo "$t1 - $t0" | bc)"
t0=$(date +%s.%N); $BIN restore --from $W/bk --data-dir $W/r; t1=$(date +%s.%N)
echo "restore s: $(echo "$t1 - $t0" | bc)"
t0=$(date +%s.%N); $BIN dump --data-dir $W/r | wc -l; t1=$(date +%s.%N)
echo "dump s: $(echo "$t1 - $t0" | bc)"
grep -E "backup (started|finished)" $W/log

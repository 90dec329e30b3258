#!/bin/bash
# A/B cost of one cross-executor hop (node/examples/mesh_hop.rs), two builds run alternately.
# Usage: scripts/bench-mesh-hop.sh A_BIN B_BIN [ROUNDS] [CALLS] [CONCURRENCY]
# Build each side with `cargo build --release -p node --example mesh_hop` and copy
# target/release/examples/mesh_hop away (e.g. once on main, once on the branch).
# Prints one line per run and the median of each column per side.
set -euo pipefail
a=$1; b=$2; rounds=${3:-8}; calls=${4:-50000}; conc=${5:-16}
out=$(mktemp)
for _ in $(seq 1 "$rounds"); do
  for side in A B; do
    bin=$a; [ "$side" = B ] && bin=$b
    echo "$side $("$bin" "$calls" "$conc" | tr '\n' ' ')" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import re, statistics, sys
cols = {}
for line in open(sys.argv[1]):
    side = line.split()[0]
    kv = re.findall(r'(\w+)=([\d.]+)', line)
    cpu = [float(v) for k, v in kv if k == 'cpu_us_per_call']
    row = {'p50_us': float(dict(kv)['p50_us']), 'p99_us': float(dict(kv)['p99_us']),
           'seq_cpu_us': cpu[0], 'conc_cpu_us': cpu[1]}
    for k, v in row.items():
        cols.setdefault(side, {}).setdefault(k, []).append(v)
for side, c in sorted(cols.items()):
    print(side, 'medians:', ' '.join(f'{k}={statistics.median(v):.2f}' for k, v in c.items()))
PY
rm -f "$out"

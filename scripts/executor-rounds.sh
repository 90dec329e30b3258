#!/usr/bin/env bash
# What an executor is doing while a finished chunk job waits for it (session 13). Builds a
# scratch node from HEAD whose glommio 0.9.0 is a copy of the registry's with
# scripts/glommio-rounds.patch applied: each blocking-thread result carries when its job ended
# and whether the executor was parked then, and the executor counts its rounds (a round runs
# task queues until all are empty or glommio preempts it). Then runs scripts/node-counters.sh
# with that node and prints each executor's last ROUNDS line from the node's log:
#   collected N, mean M us      results collected, mean time from the job's end to collection
#   top|dry|park/parked|running where they were collected (the poll at the top of the loop,
#                               after a round ran dry, before parking) and whether the
#                               executor was parked when the job ended
#   rounds R mean T us, K tasks, P ended by preemption
# With node-counters' "group commit notice" mean (job end to the log's writer), the writer's
# own wait after collection is the difference of the two means.
# Nothing in the repository changes (the build is scripts/glommio-scratch-node.sh's).
# Usage: scripts/executor-rounds.sh [workload (cross-fragment-transfer)]
set -euo pipefail
cd "$(dirname "$0")/.."
wl=${1:-cross-fragment-transfer}
out=${ROUNDS_RESULTS:-/tmp/executor-rounds}; mkdir -p "$out"
tmp=$(mktemp -d /tmp/executor-rounds.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
scripts/glommio-scratch-node.sh scripts/glommio-rounds.patch "$tmp/tessera"
cargo build -q --release -p bench
COUNTERS_RESULTS="$out" scripts/node-counters.sh "$tmp/tessera" "$wl"
for t in $(grep -o '^ROUNDS [^:]*' "$out/raw/tessera.log" | sort -u | cut -d' ' -f2); do
  grep "^ROUNDS $t:" "$out/raw/tessera.log" | tail -n 1
done

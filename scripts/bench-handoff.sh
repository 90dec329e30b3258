#!/usr/bin/env bash
# Times a fragment handoff of SIZE_MIB MiB between two cluster nodes on loopback, and the
# client latency on the source node during the move (pgbench point reads and inserts on the
# fragment that stays).
#
#   scripts/bench-handoff.sh SIZE_MIB [TESSERA_BIN]
#
# Node 1 (seed, 2 fragments, all data) loads SIZE_MIB of documents into fragment $1 (explicit
# shard 600000); node 2 joins and the coordinator's rebalance moves fragment $1 (the highest
# id) to it. Baseline pgbench runs before node 2 joins, the "during" runs while the handoff is
# in flight. Prints the handoff line of the coordinator's log and pgbench's summaries.
# Work directory under target/tmp/bench-handoff-<pid>, removed at the end; bounded waits.
set -euo pipefail

size_mib=${1:?usage: bench-handoff.sh SIZE_MIB [TESSERA_BIN]}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${2:-$root/target/debug/tessera}
work=$root/target/tmp/bench-handoff-$$
mkdir -p "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [[ ${KEEP:-0} == 1 ]] || rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_node() { # id peer_port join_port|"" -> pg port in $port_out
    local id=$1 peer=$2 join=$3 port
    port=$(free_port)
    local args=(serve --data-dir "$work/n$id" --listen "127.0.0.1:$port" --executors 2 --fragments 2
        --metrics-listen "" --cluster-name bench --node-id "$id" --peer-listen "127.0.0.1:$peer"
        --max-simultaneous-rebalance 1 --handoff-on-shutdown false --log info)
    [[ -n $join ]] && args+=(--join "127.0.0.1:$join")
    "$bin" "${args[@]}" 2>"$work/n$id.log" &
    pids+=($!)
    for _ in $(seq 600); do
        grep -q "ready: listening" "$work/n$id.log" 2>/dev/null && { port_out=$port; return; }
        sleep 0.1
    done
    echo "node $id not ready" >&2; cat "$work/n$id.log" >&2; exit 1
}

psql_at() { psql -X -q -h 127.0.0.1 -p "$1" -U tester -d tessera -v ON_ERROR_STOP=1 "${@:2}"; }

wait_log() { # file needle timeout_s
    for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" && return; sleep 0.1; done
    echo "no '$2' in $1 after $3 s" >&2; tail -20 "$1" >&2; exit 1
}

p1=$(free_port); p2=$(free_port)
start_node 1 "$p1" ""
pg1=$port_out
wait_log "$work/n1.log" "data path follows the shard map" 60

# ~1 MiB per statement: 100 documents of ~10 KiB, all on shard 600000 (fragment $1).
pad=$(head -c 10000 /dev/zero | tr '\0' x)
gen() {
    for s in $(seq 0 $((size_mib - 1))); do
        printf "INSERT INTO notes VALUES "
        for d in $(seq 0 99); do
            [[ $d -gt 0 ]] && printf ", "
            printf "('m%d-%d\$@600000', '{\"n\": %d, \"pad\": \"%s\"}')" "$s" "$d" "$d" "$pad"
        done
        printf ";\n"
    done
}
echo "loading $size_mib MiB into fragment \$1 ..."
t0=$(date +%s.%N)
gen | psql_at "$pg1" -f - >/dev/null
t1=$(date +%s.%N)
echo "loaded in $(echo "$t1 - $t0" | bc) s"
psql_at "$pg1" -c "INSERT INTO notes VALUES ('stay\$@5', '{\"n\": 1}')" >/dev/null
psql_at "$pg1" -c "SHOW FRAGMENTS"

echo "SELECT id() FROM notes WHERE id() = 'stay\$@5';" >"$work/read.sql"
printf '%s\n' '\set k random(1, 2000000000)' \
    "INSERT INTO notes VALUES ('w:k\$@5', '{\"n\": 1}') ON CONFLICT (id) DO UPDATE SET n = excluded.n;" >"$work/write.sql"
bench() { # label script
    pgbench -n -P 5 -h 127.0.0.1 -p "$pg1" -U tester -c 4 -j 2 -T "$BENCH_SECONDS" -f "$work/$2" tessera 2>&1 |
        grep -E "latency average|latency stddev|tps =|failed|error|abort" | sed "s/^/$1 $2: /"
}
BENCH_SECONDS=${BENCH_SECONDS:-10}
bench baseline read.sql
bench baseline write.sql

start_node 2 "$p2" "$p1"
wait_log "$work/n1.log" "handoff begun" 120
bench during read.sql
bench during write.sql
wait_log "$work/n1.log" "handoff committed" 3600
grep -E "handoff (begun|committed)|stream acknowledged" "$work/n1.log"
bench after read.sql

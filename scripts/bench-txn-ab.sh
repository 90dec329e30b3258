#!/usr/bin/env bash
# Old vs new tessera binary on the transaction workloads, in one bench invocation per client
# count and workload so the two alternate every round under the same machine load (default:
# single-fragment-txn, cross-fragment-transfer, pipelined-txn, autocommit-write). Each node's
# CPU (utime+stime from /proc/<pid>/stat) and mesh calls (tessera_mesh_calls_total from SHOW
# STATS) are sampled around each invocation and divided by the operations the bench counted
# for that node (run.json, warm-up included), so CPU and hops per operation are per binary
# and per workload (cpu.txt); PostgreSQL's CPU likewise (all its processes, session 34).
# The first invocation also loads the documents.
#
# Usage: scripts/bench-txn-ab.sh OLD_BIN NEW_BIN
# Environment: TXN_CLIENTS (default "1 32"), TXN_DURATION (default 10s), TXN_DOCS (50000),
#   TXN_WORKLOADS (comma-separated), BENCH_RESULTS (default bench/results/txn-ab-<UTC>),
#   TXN_AB_POSTGRES=1: a private PostgreSQL (scripts/pg-local.sh) is a third target of every
#   invocation, so old, new and PostgreSQL alternate in the same rounds (session 6);
#   with TXN_AB_POSTGRES_SERIALIZABLE=1 too, the same server is a fourth target whose
#   sessions run at SERIALIZABLE (`default_transaction_isolation`, Tessera's only level;
#   PostgreSQL's default, the third target, is READ COMMITTED). The bench retries a
#   transaction PostgreSQL refuses with 40001, as it does Tessera's.
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1
new=$2
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out=${BENCH_RESULTS:-bench/results/txn-ab-$stamp}
work=$(mktemp -d /tmp/bench-txn-ab.XXXXXX)
pids=()
pg=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ ${#pg[@]} -eq 0 ] || scripts/pg-local.sh stop "$work/pg" || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
# start NAME BIN: a node with a fresh data directory on a free port; sets `port` and `pid`.
start() {
  local name=$1 bin=$2
  port=$(free_port)
  mkdir -p "$work/$name"
  "$bin" serve --listen "127.0.0.1:$port" --metrics-listen "" --data-dir "$work/$name/data" \
    >/dev/null 2>"$work/$name/log" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 600); do
    grep -q 'ready: listening on' "$work/$name/log" && break
    sleep 0.1
  done
  grep -q 'ready: listening on' "$work/$name/log" || { tail -n 20 "$work/$name/log" >&2; exit 1; }
}
if [ "${TXN_AB_POSTGRES:-0}" = 1 ]; then
  chmod 755 "$work"   # as root, PostgreSQL runs as the postgres user and must enter it
  scripts/install-deps.sh postgres
  pg_url=$(scripts/pg-local.sh start "$work/pg")
  pg=(--target "postgres=$pg_url")
  if [ "${TXN_AB_POSTGRES_SERIALIZABLE:-0}" = 1 ]; then
    pg+=(--target "postgres-serializable:postgres=$pg_url?options=-c%20default_transaction_isolation%3Dserializable")
  fi
fi
start old "$old"
old_port=$port
old_pid=$pid
start new "$new"
new_port=$port
new_pid=$pid
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# PostgreSQL's CPU (ticks): the postmaster's, its live children's (checkpointer, WAL writer,
# ...) and its reaped children's. A backend's CPU reaches the postmaster's count when it
# exits, so this first waits (at most 5 s) for the bench's backends to be gone; with
# TXN_AB_POSTGRES unset, 0.
pg_cpu() {
  [ ${#pg[@]} -gt 0 ] || { echo 0; return; }
  local pm s=0 v
  pm=$(head -n 1 "$work/pg/data/postmaster.pid")
  for _ in $(seq 1 100); do
    pgrep -P "$pm" -f 'postgres: bench' >/dev/null || break
    sleep 0.05
  done
  s=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for p in $(pgrep -P "$pm"); do
    v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) && s=$((s + v))
  done
  echo "$s"
}
hz=$(getconf CLK_TCK)
mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "old: $old, new: $new"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "uptime at start: $(uptime)"
} >"$out/machine.txt"
# Mesh calls (cross-executor hops) a node has made, from SHOW STATS, summed over executors.
mesh_calls() {
  PGSSLMODE=disable psql -X -A -t -F ' ' "postgres://bench@127.0.0.1:$1/bench" -c 'SHOW STATS' \
    | awk '$1 == "tessera_mesh_calls_total" {s += $NF} END {print s + 0}'
}
workloads=${TXN_WORKLOADS:-single-fragment-txn,cross-fragment-transfer,pipelined-txn,autocommit-write}
load=()
read -r -a clients <<<"${TXN_CLIENTS:-1 32}"
for c in "${clients[@]}"; do
  # One invocation per workload, so CPU and mesh calls are per workload and per binary.
  for w in ${workloads//,/ }; do
    o0=$(cpu "$old_pid"); n0=$(cpu "$new_pid"); p0=$(pg_cpu)
    om0=$(mesh_calls "$old_port"); nm0=$(mesh_calls "$new_port")
    target/release/bench --target "old:tessera=postgres://bench@127.0.0.1:$old_port/bench" \
      --target "new:tessera=postgres://bench@127.0.0.1:$new_port/bench" "${pg[@]}" --out "$out/clients-$c/$w" \
      --workloads "$w" --docs "${TXN_DOCS:-50000}" "${load[@]}" --duration "${TXN_DURATION:-10s}" \
      --warmup 2s --rounds 2 --connections "$c" --no-progress >/dev/null
    o1=$(cpu "$old_pid"); n1=$(cpu "$new_pid"); p1=$(pg_cpu)
    om1=$(mesh_calls "$old_port"); nm1=$(mesh_calls "$new_port")
    load=(--skip-load)
    python3 - "$out/clients-$c/$w/run.json" "$w" "$c" "$(( (o1 - o0) * 1000000 / hz ))" \
      "$(( (n1 - n0) * 1000000 / hz ))" "$om0" "$om1" "$nm0" "$nm1" "$(( (p1 - p0) * 1000000 / hz ))" \
      <<'PY' | tee -a "$out/cpu.txt"
import json, sys
path, w, c, old_us, new_us, om0, om1, nm0, nm1, pg_us = sys.argv[1:]
run = json.load(open(path))
cpu = {"old": int(old_us), "new": int(new_us)}
mesh = {"old": float(om1) - float(om0), "new": float(nm1) - float(nm0)}
for t in ("old", "new"):
    r = [x for x in run["results"] if x["target"] == t][0]
    n = r["ops"] + r["warmup_ops"]
    print(f"{w} clients={c} {t}: {r['ops_per_sec']:.0f} ops/s p99 {r['latency']['p99_ms']:.3f} ms, "
          f"node CPU {cpu[t] / n:.1f} us/op, mesh calls {mesh[t] / n:.3f}/op over {n} ops "
          f"(warm-up included{', load too' if 'load' in run and run['load'] else ''})")
others = [r for r in run["results"] if r["target"] not in ("old", "new")]
pg_ops = sum(r["ops"] + r["warmup_ops"] for r in others)
for r in others:
    # The server's CPU is one count for all its targets (READ COMMITTED and SERIALIZABLE
    # sessions of one server): per operation over all of them.
    cpu = f", server CPU {int(pg_us) / pg_ops:.1f} us/op over all its targets" if pg_ops else ""
    print(f"{w} clients={c} {r['target']}: {r['ops_per_sec']:.0f} ops/s p99 {r['latency']['p99_ms']:.3f} ms{cpu}")
PY
  done
done

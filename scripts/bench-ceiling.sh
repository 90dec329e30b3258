#!/usr/bin/env bash
# The ceiling of pgbench's prepared point read, durable insert and durable upsert on this
# machine: pgbench against a private PostgreSQL (fsync on), against null servers that answer
# every query with one canned row and do no other work (bench's `pg-null-server`: thread per
# connection, one or two epoll loops, one or two glommio executors: Tessera's I/O model), and
# against Tessera node(s), in one run, targets alternating every round.
#
# For the write workloads (insert, upsert) the null servers run with `--durable`: every write
# statement is appended to a preallocated log and answered only after a group-committed
# fdatasync that covers it (threads: one log and a syncer thread, buffered writes as
# PostgreSQL's WAL or O_DIRECT with null-threads-direct; epoll: a log and syncer
# thread per loop, or with null-epoll2-one one for both loops; glommio: an O_DIRECT log per
# executor synced through io_uring, or with null-glommio2-one one log on executor 0 that
# executor 1 forwards its groups to over glommio shared channels). Reads never touch the log, so point-read numbers are
# those of the plain null server.
#
# Per run: `pgbench -n -M prepared -j 2 -c CLIENTS -T $CEIL_SECONDS` with
# bench/pgbench/<flavor>-<workload>.sql (the null servers get Tessera's script) and the CPU
# split per transaction:
#   machine  busy CPU of the whole machine (/proc/stat: user+nice+system+irq+softirq)
#   pgbench  pgbench's own user+system CPU (/usr/bin/time)
#   server   the server's user+system CPU (/proc/<pid>/stat; PostgreSQL: the postmaster with
#            its reaped backends)
#   rest     machine - pgbench - server: softirq not charged to either, other processes
#   cs       context switches of the whole machine (/proc/stat ctxt)
#   syncs    fdatasyncs (and fsyncs) per transaction: the server process's
#            ext4:ext4_sync_file_enter tracepoint (perf, root); PostgreSQL: pg_stat_wal.wal_sync
#            (WAL syncs of its backends and WAL writer)
#   p99      from pgbench's per-transaction log, sampled (CEIL_SAMPLING)
# On a shared machine `machine` and `rest` include other people's work; `pgbench` and `server`
# are the numbers to compare then.
#
# Usage: scripts/bench-ceiling.sh
# Environment:
#   CEIL_WORKLOADS   workloads, each measured over all targets in turn (default "point-read";
#                    also insert, upsert: bench/pgbench/*-insert.sql, *-upsert.sql)
#   CEIL_TARGETS     targets in order (default "postgres null-threads null-epoll1 null-epoll2
#                    null-glommio2" and the names of TESSERA_VARIANTS; null-glommio1,
#                    null-epoll2-one and null-glommio2-one (durable: one log for both loops or
#                    executors; glommio's executor 1 forwards to executor 0),
#                    null-threads-direct and null-epoll2-direct (durable: O_DIRECT log writes
#                    rather than buffered ones, as glommio's), null-glommio1-p2 and
#                    null-glommio2-p2 (durable: 2 group commits in flight per executor, as
#                    Tessera's --max-syncs-per-executor 2) exist too)
#   TESSERA_VARIANTS ';'-separated "NAME BIN [serve args...]" (default
#                    "tessera target/release/tessera"); each gets its own data directory
#   NULL_BIN         the null server (default target/release/pg-null-server)
#   CEIL_SECONDS     seconds per run (default 8)
#   CEIL_CLIENTS     client counts, each measured over all targets in turn (default 32)
#   CEIL_ROUNDS      rounds over all targets (default 1)   CEIL_DOCS  documents (default 20000)
#   CEIL_RESULTS     results directory (default bench/results/ceiling-<UTC date and time>)
#   CEIL_SYSCALLS    1: also count syscalls per transaction with `perf stat` tracepoints (needs
#                    root): the server's io_uring_enter, epoll_wait, sendto, recvfrom and context
#                    switches, and pgbench's ppoll (a few % overhead; default 0)
#   CEIL_SERVER_EVENTS with CEIL_SYSCALLS=1: the server's perf events instead of those (comma-
#                    separated, e.g. add syscalls:sys_enter_write for glommio's eventfd wakes,
#                    syscalls:sys_enter_futex, cpu-migrations)
#   CEIL_SAMPLING    pgbench --sampling-rate of the per-transaction log for the p99 (default 0.1)
# Without TESSERA_VARIANTS or NULL_BIN the release binaries are built first.
# An A/B of two builds in the same load: TESSERA_VARIANTS="old /tmp/tessera-old; new
# target/release/tessera" CEIL_TARGETS="old new" CEIL_ROUNDS=4 (NULL_BIN set to skip the build).
# The durable-write ceiling (BENCHMARKS.md, "The durable-write ceiling"):
#   CEIL_WORKLOADS="insert upsert" CEIL_CLIENTS="1 8 32" CEIL_ROUNDS=3 \
#   TESSERA_VARIANTS="tessera target/release/tessera; tessera-e1 target/release/tessera --executors 1" \
#   CEIL_TARGETS="postgres null-threads null-epoll2 null-epoll2-one null-glommio1 null-glommio2 null-glommio2-one tessera tessera-e1" \
#   scripts/bench-ceiling.sh
# Writes results.tsv, results.md and every raw pgbench output under the results directory.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${CEIL_SECONDS:-8}
syscalls=${CEIL_SYSCALLS:-0}
clients_list=${CEIL_CLIENTS:-32}
workloads=${CEIL_WORKLOADS:-point-read}
sampling=${CEIL_SAMPLING:-0.1}
durable=0
for w in $workloads; do
  case $w in
    point-read) ;;
    insert|upsert) durable=1 ;;
    *) echo "bench-ceiling: unknown workload $w (point-read, insert, upsert)" >&2; exit 1 ;;
  esac
done
rounds=${CEIL_ROUNDS:-1}
docs=${CEIL_DOCS:-20000}
variants=${TESSERA_VARIANTS:-tessera target/release/tessera}
null_bin=${NULL_BIN:-target/release/pg-null-server}
if [ -z "${TESSERA_VARIANTS:-}" ] || [ -z "${NULL_BIN:-}" ]; then
  echo "bench-ceiling: building tessera and pg-null-server (release)"
  cargo build --release -p node -p bench
fi
variant_names=$(echo "$variants" | tr ';' '\n' | awk 'NF {print $1}' | xargs)
targets=${CEIL_TARGETS:-postgres null-threads null-epoll1 null-epoll2 null-glommio2 $variant_names}

scripts/install-deps.sh postgres
command -v pgbench >/dev/null || { echo "pgbench missing: scripts/install-deps.sh postgres" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench-ceiling: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }

stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out=${CEIL_RESULTS:-bench/results/ceiling-$stamp}
name=bench-ceiling
# shellcheck source=scripts/bench-servers.sh
. scripts/bench-servers.sh
mkdir -p "$out/raw"

# Servers started here besides PostgreSQL: name -> pid and port.
declare -A pid_of port_of
ceiling_cleanup() {
  status=$?
  for t in "${!pid_of[@]}"; do kill -TERM "${pid_of[$t]}" 2>/dev/null || true; done
  for t in "${!pid_of[@]}"; do wait "${pid_of[$t]}" 2>/dev/null || true; done
  cp "$work"/*.log "$out/raw/" 2>/dev/null || true
  (exit $status)
  cleanup
}
trap ceiling_cleanup EXIT

# wait_ready NAME LOG: bounded wait (60 s) for a "ready: listening on" line.
wait_ready() {
  for _ in $(seq 1 600); do
    grep -q 'ready: listening on' "$2" && return 0
    kill -0 "${pid_of[$1]}" 2>/dev/null || { tail -n 20 "$2" >&2; echo "$name: $1 exited" >&2; exit 1; }
    sleep 0.1
  done
  echo "$name: $1 printed no ready line in 60 s" >&2
  exit 1
}

pg_url=$(scripts/pg-local.sh start "$work/pg")
pg_port=$(scripts/pg-local.sh url "$work/pg" | sed -E 's|.*:([0-9]+)/.*|\1|')
pg_pid=$(head -n 1 "$work/pg/data/postmaster.pid" 2>/dev/null || true)
[ -n "$pg_pid" ] || pg_pid=$(pgrep -f "postgres -D $work/pg" | head -n 1)
echo "$name: PostgreSQL at $pg_url (postmaster $pg_pid)"

for flavor in threads threads-direct epoll1 epoll2 epoll2-one epoll2-direct glommio1 glommio2 glommio2-one glommio1-p2 glommio2-p2; do
  t=null-$flavor
  case $flavor in
    threads) args=(--model threads) ;;
    threads-direct) args=(--model threads --direct) ;;
    epoll1) args=(--model epoll --loops 1) ;;
    epoll2) args=(--model epoll --loops 2) ;;
    epoll2-one) args=(--model epoll --loops 2 --logs one) ;;
    epoll2-direct) args=(--model epoll --loops 2 --direct) ;;
    glommio1) args=(--model glommio --loops 1) ;;
    glommio2) args=(--model glommio --loops 2) ;;
    glommio2-one) args=(--model glommio --loops 2 --logs one) ;;
    glommio1-p2) args=(--model glommio --loops 1 --syncs-in-flight 2) ;;
    glommio2-p2) args=(--model glommio --loops 2 --syncs-in-flight 2) ;;
  esac
  # Started only if measured (each durable one preallocates a 64 MiB log per loop).
  case " $targets " in *" $t "*) ;; *) continue ;; esac
  [ "$durable" = 1 ] && args+=(--durable "$work/log-$t")
  port_of[$t]=$(free_port)
  "$null_bin" --listen "127.0.0.1:${port_of[$t]}" "${args[@]}" 2>"$work/$t.log" &
  pid_of[$t]=$!
  wait_ready "$t" "$work/$t.log"
done

export PGSSLMODE=disable
filler=$(printf 'a%.0s' $(seq 1 100))
python3 - "$docs" "$filler" >"$work/tessera-load.sql" <<'PY'
import sys
docs, filler = int(sys.argv[1]), sys.argv[2]
print("CREATE TABLE IF NOT EXISTS pgb_docs ();")
for start in range(0, docs, 256):
    rows = ", ".join(
        f"""('{k}', '{{"customer":"{k // 8}","balance":1000,"field0":"{filler}"}}')"""
        for k in range(start, min(start + 256, docs))
    )
    print(f"INSERT INTO pgb_docs VALUES {rows};")
PY
while IFS= read -r spec; do
  read -r -a words <<<"$spec"
  [ "${#words[@]}" -ge 2 ] || continue
  t=${words[0]}; bin=${words[1]}
  [ -x "$bin" ] || { echo "$name: no tessera binary at $bin" >&2; exit 1; }
  port_of[$t]=$(free_port)
  mkdir -p "$work/data-$t"
  "$bin" serve --listen "127.0.0.1:${port_of[$t]}" --metrics-listen "" --data-dir "$work/data-$t" \
    "${words[@]:2}" 2>"$work/$t.log" &
  pid_of[$t]=$!
  wait_ready "$t" "$work/$t.log"
  psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${port_of[$t]}" -U bench bench -f "$work/tessera-load.sql" >/dev/null
  echo "$name: $t at 127.0.0.1:${port_of[$t]}: $(grep -m1 -o 'ready: listening.*' "$work/$t.log")"
done < <(echo "$variants" | tr ';' '\n')

psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U bench postgres <<SQL
DROP TABLE IF EXISTS pgb_docs;
CREATE TABLE pgb_docs (id text PRIMARY KEY, doc jsonb NOT NULL);
INSERT INTO pgb_docs SELECT g::text, jsonb_build_object('customer', (g / 8)::text, 'balance', 1000, 'field0', '$filler') FROM generate_series(0, $docs - 1) g;
VACUUM ANALYZE pgb_docs;
SQL

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: scripts/bench-ceiling.sh (CEIL_WORKLOADS=\"$workloads\" CEIL_SECONDS=$seconds CEIL_CLIENTS=\"$clients_list\" CEIL_ROUNDS=$rounds CEIL_DOCS=$docs CEIL_SAMPLING=$sampling)"
  echo "targets: $targets"
  echo "tessera variants: $variants"
  echo "pgbench: $(pgbench --version)"
  echo "kernel: $(uname -sr), cpus: $(nproc)"
  echo "uptime at start: $(uptime)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- bench scripts node || echo ' (with uncommitted changes)')"
} >"$out/machine.txt"

busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
ctxt() { awk '/^ctxt / {print $2}' /proc/stat; }
# ticks PID [children]: utime+stime (and with "children" cutime+cstime) of PID, in clock ticks.
ticks() {
  if [ "${2:-}" = children ]; then
    sed -E 's/^.*\) //' "/proc/$1/stat" | awk '{print $12 + $13 + $14 + $15}'
  else
    sed -E 's/^.*\) //' "/proc/$1/stat" | awk '{print $12 + $13}'
  fi
}
hz=$(getconf CLK_TCK)

printf 'round\tworkload\tclients\ttarget\ttps\tlatency_avg_ms\tp99_ms\tmachine_us_per_tx\tpgbench_us_per_tx\tserver_us_per_tx\trest_us_per_tx\tcs_per_tx\tsyncs_per_tx\tserver_syscalls_per_tx\tpgbench_ppoll_per_tx\n' >"$out/results.tsv"
# fdatasyncs: perf can count the sync tracepoint per process (root only); PostgreSQL's
# backends come and go, so it reports its own WAL syncs.
count_syncs=0
perf stat -e ext4:ext4_sync_file_enter -x, -o /dev/null -- true 2>/dev/null && count_syncs=1
pg_wal_syncs() {
  psql -X -qAt -h 127.0.0.1 -p "$pg_port" -U bench postgres -c "SELECT wal_sync FROM pg_stat_wal"
}
server_events=${CEIL_SERVER_EVENTS:-syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,context-switches}
# per_tx FILE N: "event=count/N ..." of a perf stat -x, file.
per_tx() { awk -F, -v n="$2" '$1 ~ /^[0-9]+$/ {sub(/^syscalls:sys_enter_/, "", $3); printf "%s%s=%.2f", sep, $3, $1 / n; sep = " "}' "$1"; }
for round in $(seq 1 "$rounds"); do
 for workload in $workloads; do
 for clients in $clients_list; do
  for t in $targets; do
    case $t in
      postgres) p=$pg_port; db=postgres; script=bench/pgbench/postgres-$workload.sql; spid=$pg_pid; mode=children ;;
      *) [ -n "${port_of[$t]:-}" ] || { echo "$name: unknown target $t" >&2; exit 1; }
         p=${port_of[$t]}; db=bench; script=bench/pgbench/tessera-$workload.sql; spid=${pid_of[$t]}; mode=self ;;
    esac
    raw="$out/raw/$t.$workload.c$clients.round$round.txt"
    children0=$(pgrep -c -P "$spid" || true)
    if [ $mode = children ]; then
      sync0=$(pg_wal_syncs)
    elif [ "$count_syncs" = 1 ]; then
      perf stat -e ext4:ext4_sync_file_enter -p "$spid" -x, -o "$work/syncs.perf" &
      sync_perf=$!
    fi
    rm -rf "$work/txlog"; mkdir -p "$work/txlog"
    s0=$(ticks "$spid" $mode); b0=$(busy); c0=$(ctxt)
    status=0
    counter=()
    if [ "$syscalls" = 1 ]; then
      # PostgreSQL's backends are new processes per connection: count the whole machine.
      if [ $mode = children ]; then scope=(-a); else scope=(-p "$spid"); fi
      perf stat -e "$server_events" "${scope[@]}" -x, -o "$work/server.perf" -- sleep "$seconds" &
      perf_pid=$!
      counter=(perf stat -e syscalls:sys_enter_ppoll -x, -o "$work/pgbench.perf" --)
    fi
    (cd "$work/txlog" && "${counter[@]}" /usr/bin/time -f '%U %S' -o "$work/time.txt" pgbench -h 127.0.0.1 -p "$p" -U bench -n -M prepared \
      -j 2 -c "$clients" -T "$seconds" -D docs="$docs" --log --log-prefix=tx --sampling-rate="$sampling" \
      -f "$OLDPWD/$script" "$db") >"$raw" 2>&1 || status=$?
    b1=$(busy); c1=$(ctxt)
    [ "$syscalls" = 1 ] && wait "$perf_pid"
    if [ $mode = children ]; then
      # PostgreSQL's backends end with the run; their CPU reaches the postmaster once reaped.
      for _ in $(seq 1 100); do
        [ "$(pgrep -c -P "$spid" || true)" -le "$children0" ] && break
        sleep 0.05
      done
    fi
    s1=$(ticks "$spid" $mode)
    syncs=""
    if [ $mode = children ]; then
      syncs=$(( $(pg_wal_syncs) - sync0 ))
    elif [ "$count_syncs" = 1 ]; then
      kill -INT "$sync_perf" 2>/dev/null || true
      wait "$sync_perf" 2>/dev/null || true
      syncs=$(awk -F, '$3 ~ /ext4_sync_file_enter/ {print $1}' "$work/syncs.perf")
    fi
    # The sampled per-transaction log: a failed transaction has a word instead of time_us.
    p99=$(cat "$work"/txlog/tx.* 2>/dev/null | awk '$3 ~ /^[0-9]+$/ {print $3}' | sort -n \
      | awk '{v[NR] = $1} END {if (NR) {i = int(NR * 0.99); if (i < 1) i = 1; printf "%.3f", v[i] / 1000}}')
    n=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$raw")
    failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$raw")
    if [ $status -ne 0 ] || [ -z "$n" ] || [ "$n" -eq 0 ] || [ "${failed:-0}" -ne 0 ]; then
      echo "$name: $t round $round failed (status $status, see $raw)" >&2
      [ "$syscalls" = 1 ] && wait "$perf_pid"
      printf '%s\t%s\t%s\t%s\tfailed\t\t\t\t\t\t\t\t\t\t\n' "$round" "$workload" "$clients" "$t" >>"$out/results.tsv"
      continue
    fi
    tps=$(sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)/\1/p' "$raw")
    avg=$(sed -nE 's/^latency average = ([0-9.]+) ms.*/\1/p' "$raw")
    read -r pu ps <"$work/time.txt"
    sys_server=""; sys_pgbench=""
    if [ "$syscalls" = 1 ]; then
      sys_server=$(per_tx "$work/server.perf" "$n")
      sys_pgbench=$(per_tx "$work/pgbench.perf" "$n")
    fi
    python3 - "$round" "$t" "$tps" "$avg" "$n" "$b0" "$b1" "$pu" "$ps" "$s0" "$s1" "$c0" "$c1" "$hz" "$sys_server" "$sys_pgbench" \
      "$workload" "$clients" "$p99" "$syncs" >>"$out/results.tsv" <<'PY'
import sys
r, t, tps, avg = sys.argv[1:5]
n, b0, b1, pu, ps, s0, s1, c0, c1, hz = map(float, sys.argv[5:15])
sys_server, sys_pgbench, workload, clients, p99, syncs = sys.argv[15:21]
syncs = f"{float(syncs) / n:.3f}" if syncs else ""
us = 1e6 / hz / n  # microseconds per tick per transaction
machine = (b1 - b0) * us
pgbench = (pu + ps) * 1e6 / n
server = (s1 - s0) * us
print(f"{r}\t{workload}\t{clients}\t{t}\t{float(tps):.0f}\t{avg}\t{p99}\t{machine:.1f}\t{pgbench:.1f}\t{server:.1f}\t{machine - pgbench - server:.1f}\t{(c1 - c0) / n:.2f}\t{syncs}\t{sys_server}\t{sys_pgbench}")
PY
    tail -n 1 "$out/results.tsv"
  done
 done
 done
done

{
  echo "| round | workload | clients | target | tps | latency avg ms | p99 ms | machine µs/tx | pgbench µs/tx | server µs/tx | rest µs/tx | cs/tx | fdatasyncs/tx | server syscalls/tx | pgbench ppoll/tx |"
  echo "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
  tail -n +2 "$out/results.tsv" | awk -F'\t' '{printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15}'
  echo
  echo "Medians over rounds, and the same-round ratio to PostgreSQL (median over rounds):"
  echo
  python3 - "$out/results.tsv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t") if r["tps"] not in ("", "failed")]
pg = {(r["round"], r["workload"], r["clients"]): float(r["tps"]) for r in rows if r["target"] == "postgres"}
groups = {}
for r in rows:
    groups.setdefault((r["workload"], int(r["clients"]), r["target"]), []).append(r)
def med(rs, key):
    vals = [float(r[key]) for r in rs if r[key] not in ("", None)]
    return f"{statistics.median(vals):.{3 if key in ('syncs_per_tx', 'p99_ms') else 1}f}" if vals else ""
print("| workload | clients | target | rounds | median tps | ÷ PostgreSQL (same round, median) | median p99 ms | machine µs/tx | pgbench µs/tx | server µs/tx | fdatasyncs/tx |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for (w, c, t), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    ratios = [float(r["tps"]) / pg[k] for r in rs if (k := (r["round"], r["workload"], r["clients"])) in pg]
    ratio = f"{statistics.median(ratios):.2f}" if ratios else ""
    print(f"| {w} | {c} | {t} | {len(rs)} | {med(rs, 'tps').split('.')[0]} | {ratio} | {med(rs, 'p99_ms')} | {med(rs, 'machine_us_per_tx')} | {med(rs, 'pgbench_us_per_tx')} | {med(rs, 'server_us_per_tx')} | {med(rs, 'syncs_per_tx')} |")
PY
} >"$out/results.md"
cat "$out/results.md"
echo "$name: results in $out"

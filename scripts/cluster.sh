#!/usr/bin/env bash
# A Tessera cluster of N nodes on loopback, for development and tests.
#
#   scripts/cluster.sh start N    start nodes 1..N (node 1 the seed, the others --join it);
#                                 nodes already running are left alone, so `start 4` on a
#                                 running cluster of 3 adds node 4 (it joins)
#   scripts/cluster.sh stop [N]   SIGTERM nodes N..1 (default: every node with a directory),
#                                 waiting (bounded) for each to exit; stopped nodes are skipped
#   scripts/cluster.sh status [N] per node: id, pid, ports, up/down; then SHOW CLUSTER of the
#                                 first node that answers (psql)
#
# Node i listens on (B = TESSERA_CLUSTER_BASE_PORT, default 15400):
#   PostgreSQL B + 10*i, peer B + 10*i + 1, metrics B + 10*i + 2.
# Its files live in $TESSERA_CLUSTER_DIR/node<i>/ (default ./target/cluster): data/, log,
# pid. Every wait polls a condition until a deadline (TESSERA_CLUSTER_WAIT_SECS, default 120);
# nothing sleeps as synchronisation.
#
# The binary: $TESSERA_BIN if set, else target/<profile>/tessera with profile
# TESSERA_CLUSTER_PROFILE (default release: a cluster you run by hand should be fast; tests
# pass the debug binary through TESSERA_BIN). A missing binary is built with cargo.
#
# Other settings (environment): TESSERA_CLUSTER_NAME (default dev), TESSERA_CLUSTER_EXECUTORS
# (default 1), TESSERA_CLUSTER_FRAGMENTS (default 8), TESSERA_CLUSTER_SEGMENT_BYTES (default
# 4 MiB, small so a dev cluster takes little disk), TESSERA_CLUSTER_MIN_MEMBERS (default: the
# N of the `start` that creates node 1's directory), TESSERA_CLUSTER_LOG (default info),
# TESSERA_CLUSTER_EXTRA_ARGS (appended to every `tessera serve`), and
# TESSERA_CLUSTER_HANDOFF_ON_SHUTDOWN (default false: `stop` stops the whole cluster, so a
# node keeps its fragments on SIGTERM instead of handing them to nodes about to stop too). `tessera serve` settings in
# the environment reach every node as usual, e.g. TESSERA_CLUSTER_SECRET_FILE=path (same file
# for all) or TESSERA_REBALANCE_LOAD=bytes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_PORT="${TESSERA_CLUSTER_BASE_PORT:-15400}"
DIR="${TESSERA_CLUSTER_DIR:-./target/cluster}"
NAME="${TESSERA_CLUSTER_NAME:-dev}"
EXECUTORS="${TESSERA_CLUSTER_EXECUTORS:-1}"
FRAGMENTS="${TESSERA_CLUSTER_FRAGMENTS:-8}"
SEGMENT_BYTES="${TESSERA_CLUSTER_SEGMENT_BYTES:-4194304}"
LOG_FILTER="${TESSERA_CLUSTER_LOG:-info}"
WAIT_SECS="${TESSERA_CLUSTER_WAIT_SECS:-120}"
PROFILE="${TESSERA_CLUSTER_PROFILE:-release}"
HANDOFF_ON_SHUTDOWN="${TESSERA_CLUSTER_HANDOFF_ON_SHUTDOWN:-false}"
NODES_MAX=64

die() { echo "cluster.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[[ "$BASE_PORT" =~ ^[0-9]+$ ]] || die "TESSERA_CLUSTER_BASE_PORT must be a number"
(( BASE_PORT + 10 * NODES_MAX + 2 < 65536 )) || die "TESSERA_CLUSTER_BASE_PORT is too high"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

pg_port() { echo $(( BASE_PORT + 10 * $1 )); }
peer_port() { echo $(( BASE_PORT + 10 * $1 + 1 )); }
metrics_port() { echo $(( BASE_PORT + 10 * $1 + 2 )); }
node_dir() { echo "$DIR/node$1"; }

binary() {
  if [[ -n "${TESSERA_BIN:-}" ]]; then
    [[ -x "$TESSERA_BIN" ]] || die "TESSERA_BIN=$TESSERA_BIN is not an executable"
    echo "$TESSERA_BIN"
    return
  fi
  local flag=() bin="$ROOT/target/$PROFILE/tessera"
  [[ "$PROFILE" == release ]] && flag=(--release)
  [[ "$PROFILE" == debug || "$PROFILE" == release ]] || die "TESSERA_CLUSTER_PROFILE: debug or release"
  if [[ ! -x "$bin" ]]; then
    echo "building $bin" >&2
    (cd "$ROOT" && cargo build -p node --bin tessera "${flag[@]}" >&2)
  fi
  echo "$bin"
}

# Whether process $1 is alive: it exists and is not a zombie. A node started by an earlier
# run of this script is not our child, so after it exits it stays a zombie until init reaps
# it (seconds, in some containers); it no longer runs.
alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state="$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true)"
  [[ "$state" != Z ]]
}

# The pid of node $1 if it runs (its pid file names a live process serving its data dir).
running_pid() {
  local pidfile pid
  pidfile="$(node_dir "$1")/pid"
  [[ -f "$pidfile" ]] || return 1
  pid="$(cat "$pidfile")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$(node_dir "$1")/data" || return 1
  echo "$pid"
}

# Polls until node $1 logged its ready line (0), or exited / the deadline passed (1).
wait_ready() {
  local i="$1" pid="$2" from="$3" log deadline
  log="$(node_dir "$i")/log"
  deadline=$(( $(date +%s) + WAIT_SECS ))
  while :; do
    # Only this start's lines: the log is appended to across restarts.
    if tail -c "+$(( from + 1 ))" "$log" 2>/dev/null | grep -q " ready: listening on "; then
      return 0
    fi
    if ! alive "$pid"; then
      echo "cluster.sh: node $i exited before it was ready; its log ($log) ends:" >&2
      tail -n 20 "$log" >&2 || true
      return 1
    fi
    if (( $(date +%s) >= deadline )); then
      echo "cluster.sh: node $i not ready within ${WAIT_SECS}s; its log ($log) ends:" >&2
      tail -n 20 "$log" >&2 || true
      return 1
    fi
    # Polling interval of a bounded wait, not synchronisation.
    sleep 0.1
  done
}

start_node() {
  local i="$1" n="$2" bin="$3" dir pid join=() min from
  if pid="$(running_pid "$i")"; then
    echo "node $i already running (pid $pid)"
    return 0
  fi
  dir="$(node_dir "$i")"
  mkdir -p "$dir"
  # A pid file left by a crash names no live node: start afresh.
  rm -f "$dir/pid"
  from="$(stat -c %s "$dir/log" 2>/dev/null || echo 0)"
  if (( i > 1 )); then join=(--join "127.0.0.1:$(peer_port 1)"); fi
  min="${TESSERA_CLUSTER_MIN_MEMBERS:-}"
  if [[ -z "$min" ]]; then
    # Decided once, when the cluster is first started; only node 1's state uses it before
    # allocation, later starts keep the same value.
    [[ -f "$DIR/min-members" ]] || echo "$n" > "$DIR/min-members"
    min="$(cat "$DIR/min-members")"
  fi
  # shellcheck disable=SC2086 # TESSERA_CLUSTER_EXTRA_ARGS is a list of words on purpose.
  setsid "$bin" serve \
    --data-dir "$dir/data" \
    --listen "127.0.0.1:$(pg_port "$i")" \
    --metrics-listen "127.0.0.1:$(metrics_port "$i")" \
    --executors "$EXECUTORS" --fragments "$FRAGMENTS" --segment-bytes "$SEGMENT_BYTES" \
    --log "$LOG_FILTER" \
    --cluster-name "$NAME" --node-id "$i" --peer-listen "127.0.0.1:$(peer_port "$i")" \
    --min-members "$min" "${join[@]}" --handoff-on-shutdown "$HANDOFF_ON_SHUTDOWN" \
    ${TESSERA_CLUSTER_EXTRA_ARGS:-} \
    </dev/null >>"$dir/log" 2>&1 &
  pid=$!
  echo "$pid" > "$dir/pid"
  if ! wait_ready "$i" "$pid" "$from"; then
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$dir/pid"
    return 1
  fi
  echo "node $i started (pid $pid, pg 127.0.0.1:$(pg_port "$i"), peer 127.0.0.1:$(peer_port "$i"))"
}

stop_node() {
  local i="$1" pid deadline
  if ! pid="$(running_pid "$i")"; then
    rm -f "$(node_dir "$i")/pid"
    echo "node $i not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(( $(date +%s) + WAIT_SECS ))
  while alive "$pid"; do
    if (( $(date +%s) >= deadline )); then
      echo "cluster.sh: node $i (pid $pid) did not stop within ${WAIT_SECS}s" >&2
      return 1
    fi
    # Polling interval of a bounded wait, not synchronisation.
    sleep 0.1
  done
  rm -f "$(node_dir "$i")/pid"
  echo "node $i stopped"
}

# The highest node number with a directory, or 0.
known_nodes() {
  local max=0 d i
  for d in "$DIR"/node*; do
    [[ -d "$d" ]] || continue
    i="${d##*/node}"
    [[ "$i" =~ ^[0-9]+$ ]] && (( i > max )) && max="$i"
  done
  echo "$max"
}

count_arg() {
  local n="${1:-}"
  [[ "$n" =~ ^[0-9]+$ ]] && (( n >= 1 && n <= NODES_MAX )) || die "N must be 1..$NODES_MAX"
  echo "$n"
}

cmd="${1:-}"
case "$cmd" in
  start)
    n="$(count_arg "${2:-}")"
    bin="$(binary)"
    for (( i = 1; i <= n; i++ )); do start_node "$i" "$n" "$bin"; done
    ;;
  stop)
    if [[ -n "${2:-}" ]]; then n="$(count_arg "$2")"; else n="$(known_nodes)"; fi
    status=0
    for (( i = n; i >= 1; i-- )); do stop_node "$i" || status=1; done
    exit "$status"
    ;;
  status)
    if [[ -n "${2:-}" ]]; then n="$(count_arg "$2")"; else n="$(known_nodes)"; fi
    (( n >= 1 )) || { echo "no nodes under $DIR"; exit 0; }
    printf '%-5s %-8s %-6s %-6s %-8s %s\n' node pid pg peer metrics state
    first_up=""
    for (( i = 1; i <= n; i++ )); do
      if pid="$(running_pid "$i")"; then
        state=up
        [[ -n "$first_up" ]] || first_up="$i"
      else
        pid=-
        state=down
      fi
      printf '%-5s %-8s %-6s %-6s %-8s %s\n' "$i" "$pid" "$(pg_port "$i")" "$(peer_port "$i")" \
        "$(metrics_port "$i")" "$state"
    done
    if [[ -n "$first_up" ]]; then
      echo
      echo "SHOW CLUSTER on node $first_up:"
      PGCONNECT_TIMEOUT=5 psql -X -h 127.0.0.1 -p "$(pg_port "$first_up")" -U tessera \
        -d tessera -c 'SHOW CLUSTER' || echo "(node $first_up did not answer SHOW CLUSTER)"
    fi
    ;;
  *) usage ;;
esac

# Sourced by scripts/bench-vs-postgres.sh and scripts/pgbench-vs-postgres.sh: a work directory
# with a free-disk guard, cleanup on any exit (Tessera stopped with SIGTERM, PostgreSQL
# stopped, both logs copied to $out/raw), a free loopback port, and starting a Tessera node and
# waiting for its ready line. Before sourcing, set `name` (message prefix) and `out` (results
# directory). After it: `work`, `tessera_pid` (empty until start_tessera), `port`.

work=$(mktemp -d "/tmp/$name.XXXXXX")
chmod 755 "$work"   # as root, PostgreSQL runs as the postgres user and must enter it
# Both servers write their logs there; a full disk makes PostgreSQL PANIC mid-run (seen on the
# shared dev machine), so refuse to start with less than $BENCH_MIN_FREE_MIB (default 4096) free.
free_mib=$(df -Pm "$work" | awk 'NR == 2 {print $4}')
if [ "$free_mib" -lt "${BENCH_MIN_FREE_MIB:-4096}" ]; then
  echo "$name: only $free_mib MiB free under $work (need ${BENCH_MIN_FREE_MIB:-4096}); not starting" >&2
  rm -rf "$work"
  exit 1
fi
tessera_pid=""
port=""

cleanup() {
  status=$?
  if [ -n "$tessera_pid" ]; then
    kill -TERM "$tessera_pid" 2>/dev/null || true
    wait "$tessera_pid" 2>/dev/null || true
  fi
  scripts/pg-local.sh stop "$work/pg" || true
  mkdir -p "$out/raw"
  cp "$work"/pg/postgres.log "$work"/tessera.log "$out/raw/" 2>/dev/null || true
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_tessera BIN [SERVE_ARGS...]: a node on a free loopback port with a fresh data
# directory (further arguments go to `serve`); waits (bounded, 60 s) for its ready line and
# exits the script if the node dies or never gets ready.
start_tessera() {
  port=$(free_port)
  rm -rf "$work/tessera"
  mkdir -p "$work/tessera"
  "$1" serve --listen "127.0.0.1:$port" --metrics-listen "" --data-dir "$work/tessera" "${@:2}" 2>"$work/tessera.log" &
  tessera_pid=$!
  for _ in $(seq 1 600); do
    grep -q 'ready: listening on' "$work/tessera.log" && break
    kill -0 "$tessera_pid" 2>/dev/null || { tail -n 20 "$work/tessera.log" >&2; echo "$name: tessera exited" >&2; exit 1; }
    sleep 0.1
  done
  grep -q 'ready: listening on' "$work/tessera.log" || { echo "$name: tessera printed no ready line in 60 s" >&2; exit 1; }
  echo "$name: Tessera at 127.0.0.1:$port"
}

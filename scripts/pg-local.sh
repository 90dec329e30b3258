#!/usr/bin/env bash
# A private PostgreSQL for tests and benchmarks: its own data directory, a random free port on
# 127.0.0.1, fsync on, trust authentication for loopback only, stopped on request.
#
# Usage:
#   scripts/pg-local.sh start DIR   initdb DIR/data if needed, start, print the connection URL
#   scripts/pg-local.sh stop DIR    stop it (fast shutdown), if running
#   scripts/pg-local.sh url DIR     print the connection URL of a running instance
#
# PostgreSQL refuses to run as root, so as root this runs initdb and postgres as the
# unprivileged user $PG_LOCAL_USER (default: postgres) and hands DIR to that user.
# The binaries come from $PG_BINDIR or the newest /usr/lib/postgresql/*/bin; when they are
# missing it says to run scripts/install-deps.sh postgres.
set -euo pipefail

die() { echo "pg-local: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 start|stop|url DIR"
cmd=$1
dir=$(realpath -m "$2")

bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$bindir" ] || [ ! -x "$bindir/postgres" ]; then
  die "PostgreSQL server binaries not found (looked in ${PG_BINDIR:-/usr/lib/postgresql/*/bin}); run scripts/install-deps.sh postgres"
fi

run_as=()
if [ "$(id -u)" = 0 ]; then
  user=${PG_LOCAL_USER:-postgres}
  id "$user" >/dev/null 2>&1 || die "running as root and user $user does not exist; set PG_LOCAL_USER to an unprivileged user"
  run_as=(runuser -u "$user" --)
fi
pg() { "${run_as[@]}" "$@"; }

url() { echo "postgres://bench@127.0.0.1:$(cat "$dir/port")/postgres"; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    if [ ${#run_as[@]} -gt 0 ]; then
      chown "${run_as[2]}" "$dir"
      pg test -w "$dir" || die "$dir is not reachable by user ${run_as[2]}: every parent directory needs o+x (mktemp -d makes 0700 ones; chmod 755 it)"
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      pg "$bindir/initdb" -D "$dir/data" -U bench --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
    fi
    if pg "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      url; exit 0
    fi
    # A port picked free can be taken before postgres binds it; try a few.
    for _ in 1 2 3 4 5; do
      port=$(free_port)
      echo "$port" >"$dir/port"
      # fsync and synchronous_commit are PostgreSQL's defaults; set them anyway so the
      # comparison with Tessera's durable commits is explicit.
      if pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start -o \
        "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c max_connections=200" \
        >/dev/null; then
        url; exit 0
      fi
    done
    tail -n 20 "$dir/postgres.log" >&2 || true
    die "could not start PostgreSQL in $dir"
    ;;
  stop)
    if [ -f "$dir/data/PG_VERSION" ] && pg "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    fi
    ;;
  url)
    [ -f "$dir/port" ] || die "no instance in $dir"
    url
    ;;
  *) die "unknown command $cmd (start, stop, url)" ;;
esac

#!/usr/bin/env bash
# Installs what the tests, benchmarks and fuzzers need, idempotently: each step checks first.
# Usage: scripts/install-deps.sh [postgres] [fuzz] [python] [nextest]   (no argument: all of them)
set -euo pipefail

want() { [ $# -eq 0 ] && return 0; for w in "${WANTED[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
WANTED=("$@")
[ ${#WANTED[@]} -eq 0 ] && WANTED=(postgres fuzz python nextest)

apt_updated=0
apt_install() {
  if [ "$(id -u)" != 0 ]; then echo "install-deps: need root to apt-get install $*" >&2; exit 1; fi
  if [ $apt_updated = 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pg_bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

if want postgres; then
  command -v psql >/dev/null && command -v pgbench >/dev/null || apt_install postgresql-client
  [ -n "$(pg_bindir)" ] && [ -x "$(pg_bindir)/postgres" ] || apt_install postgresql
fi

if want python; then
  python3 -c 'import psycopg' 2>/dev/null || python3 -m pip install -q 'psycopg[binary]>=3.1'
fi

if want fuzz; then
  command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz --version '^0.13'
fi

# scripts/check.sh runs the tests under cargo-nextest (falls back to `cargo test` without it).
if want nextest; then
  cargo nextest --version >/dev/null 2>&1 || cargo install --locked cargo-nextest --version '^0.9'
fi

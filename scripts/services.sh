#!/usr/bin/env bash
# services.sh starts the stores Tollgate needs on loopback and runs a command
# against them.
#
#   scripts/services.sh test -- CMD...   throwaway Postgres, Redis and a
#                                         3-master Redis Cluster on free ports
#                                         in a temporary directory (and
#                                         installs nginx-light and caddy for
#                                         the gateway tests when missing);
#                                         runs CMD
#                                         with TOLLGATE_TEST_* set; stops them
#                                         by PID and removes the directory.
#   scripts/services.sh run -- CMD...     persistent Postgres and Redis (with
#                                         an append-only file) in .local/
#                                         (git-ignored) on fixed ports
#                                         (TOLLGATE_DEV_PG_PORT, default 15432;
#                                         TOLLGATE_DEV_REDIS_PORT, default
#                                         16379: outside the ephemeral range);
#                                         runs CMD with TOLLGATE_* set. On
#                                         SIGINT or SIGTERM, CMD stops first
#                                         (it gets SIGTERM and is waited
#                                         for), then Redis, then Postgres.
#   scripts/services.sh env               print the export line that points
#                                         the CLI and libpq's tools (PG*) at
#                                         the stores of the last `run` (its
#                                         ports, kept in .local/ports, its
#                                         secret key, once made, and the
#                                         webhook receiver it allows).
#
# Postgres refuses to run as root, so as root the servers run as the
# "postgres" user (created when missing). Redis comes from Debian's
# redis-server package, installed with apt-get when missing and we are root;
# so does chromium for the console's browser tests (test mode only; the
# tests skip without it, except in CI).
set -euo pipefail

mode=${1:?usage: services.sh test|run|env -- CMD...}
shift
[ "${1:-}" = "--" ] && shift

log() { printf 'services: %s\n' "$*" >&2; }

# `env` points at the ports the last `run` used (it keeps them in
# .local/ports), so that a second shell need not repeat the variables
# that started it; the variables, when set, still win.
ports_file=.local/ports
remembered() { # remembered NAME: NAME's value in $ports_file, if any
  [ "$mode" = env ] && [ -s "$ports_file" ] && sed -n "s/^$1=\([0-9][0-9]*\)\$/\1/p" "$ports_file" | tail -n 1
}
dev_pg_port=${TOLLGATE_DEV_PG_PORT:-$(remembered TOLLGATE_DEV_PG_PORT || true)}
dev_pg_port=${dev_pg_port:-15432}
dev_redis_port=${TOLLGATE_DEV_REDIS_PORT:-$(remembered TOLLGATE_DEV_REDIS_PORT || true)}
dev_redis_port=${dev_redis_port:-16379}
dev_database_url="postgres://tollgate@127.0.0.1:$dev_pg_port/tollgate?sslmode=disable"
dev_redis_addr="127.0.0.1:$dev_redis_port"
if [ "$mode" = env ]; then
  line="export TOLLGATE_DATABASE_URL='$dev_database_url' TOLLGATE_REDIS_ADDR='$dev_redis_addr'"
  # The same Postgres for libpq's tools (psql, pg_dump, createdb,
  # pg_restore), which read PG* when not given a URL; no password: the
  # local server trusts loopback.
  line="$line PGHOST=127.0.0.1 PGPORT=$dev_pg_port PGUSER=tollgate PGDATABASE=tollgate"
  # The demo's webhook receiver, which `make run` lets its servers send to
  # (scripts/run-local.sh): the CLI checks endpoint URLs against it too.
  line="$line TOLLGATE_WEBHOOK_ALLOW_ADDRS='${TOLLGATE_WEBHOOK_ALLOW_ADDRS:-127.0.0.1:8082}'"
  # The demo's secret key, which `make run` keeps in .local/ (tokens issue
  # and seed need it).
  if [ -s .local/secret_key ]; then line="$line TOLLGATE_SECRET_KEY='$(cat .local/secret_key)'"; fi
  printf '%s\n' "$line"
  exit 0
fi

find_pg_bin() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return
  fi
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  log "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found."
  log "Install them, e.g. 'apt-get install postgresql' (Debian) or 'brew install postgresql@15' (macOS)."
  exit 1
}

ensure_redis() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    return
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing redis-server with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq redis-server >/dev/null
    # The package may start a system instance; ours runs on its own port.
    return
  fi
  log "redis-server and redis-cli not found."
  log "Install them, e.g. 'sudo apt-get install redis-server' (Debian) or 'brew install redis' (macOS)."
  exit 1
}

ensure_chromium() {
  local name
  for name in chromium chromium-browser google-chrome google-chrome-stable headless-shell; do
    command -v "$name" >/dev/null 2>&1 && return
  done
  [ -n "${TOLLGATE_CHROMIUM:-}" ] && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing chromium with apt-get (for the console's browser tests)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq chromium >/dev/null
    return
  fi
  log "chromium not found: the console's browser tests will skip (and fail in CI)."
  log "Install it, e.g. 'sudo apt-get install chromium' (Debian), or set TOLLGATE_CHROMIUM."
}

# ensure_gateway COMMAND PATH PACKAGE installs Debian's PACKAGE for the
# gateway tests (real nginx and caddy in front of the check API) when
# COMMAND is neither on PATH nor at PATH and we are root. Without it those
# tests skip, except in CI (CI=true), where they fail.
ensure_gateway() {
  local command=$1 path=$2 package=$3
  if command -v "$command" >/dev/null 2>&1 || [ -x "$path" ]; then
    return
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing $package with apt-get (for the gateway tests)"
    export DEBIAN_FRONTEND=noninteractive
    # The package would start a system service on port 80; ours run on
    # their own ports. policy-rc.d tells the package scripts not to start it.
    local policy=/usr/sbin/policy-rc.d created=""
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      created=1
    fi
    apt-get update -qq >/dev/null && apt-get install -y -qq "$package" >/dev/null \
      || log "could not install $package: the gateway tests will say so"
    if [ -n "$created" ]; then rm -f "$policy"; fi
    return
  fi
  log "$command not found: the gateway tests will be skipped (install $package, e.g. 'sudo apt-get install $package')"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
  # A port that is free, and whose +10000 (Redis Cluster bus) is free too.
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 30000))
    if port_free "$p" && port_free $((p + 10000)); then
      echo "$p"
      return
    fi
  done
  log "no free port found"
  exit 1
}

as_pg_user() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u "$PG_USER" -- "$@"
  else
    "$@"
  fi
}

wait_for() { # wait_for SECONDS CMD...
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

PG_BIN=$(find_pg_bin)
ensure_redis
PG_USER=postgres
if [ "$(id -u)" = 0 ] && ! id "$PG_USER" >/dev/null 2>&1; then
  useradd --system --no-create-home "$PG_USER"
fi

PIDS=()
PGDATA_DIR=""
child=""
# cleanup stops what we started: the command first (it may still be
# flushing usage into Redis and Postgres), then Redis, then Postgres.
cleanup() {
  local rc=$?
  trap '' INT TERM
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
    while kill -0 "$child" 2>/dev/null; do wait "$child" 2>/dev/null || true; done
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$PGDATA_DIR" ] && [ -f "$PGDATA_DIR/postmaster.pid" ]; then
    as_pg_user "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -m fast -w stop >/dev/null 2>&1 || true
  fi
  if [ "$mode" = test ] && [ -n "${WORK:-}" ]; then rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
# Ctrl-C is how `make run` is stopped: an orderly stop is a success there.
if [ "$mode" = run ]; then trap 'exit 0' INT TERM; else trap 'exit 130' INT TERM; fi

start_postgres() { # start_postgres DIR PORT: returns non-zero when the server did not start
  local dir=$1 port=$2
  local data=$dir/pg
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$data"
    if [ "$(id -u)" = 0 ]; then chown "$PG_USER" "$data"; fi
    as_pg_user "$PG_BIN/initdb" -D "$data" -U tollgate --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  # A server already on this directory (another make run) is not ours to
  # start, nor to stop.
  if as_pg_user "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    log "a Postgres server already runs on $data (another make run in this checkout?)"
    return 2
  fi
  # Socket and log live in a directory the server's user owns.
  mkdir -p "$dir/pgrun"
  if [ "$(id -u)" = 0 ]; then chown "$PG_USER" "$dir/pgrun"; fi
  # From here the server is ours: cleanup stops it, even half started.
  PGDATA_DIR=$data
  as_pg_user "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -l "$dir/pgrun/postgres.log" -w -t 60 \
    -o "-p $port -h 127.0.0.1 -k $dir/pgrun -c fsync=${TOLLGATE_PG_FSYNC:-on} -c max_connections=300" start >/dev/null \
    || return 1
  psql -h 127.0.0.1 -p "$port" -U tollgate -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='tollgate'" | grep -q 1 \
    || psql -h 127.0.0.1 -p "$port" -U tollgate -d postgres -qc "CREATE DATABASE tollgate" >/dev/null
}

TAKEN=()
STARTED_PORT=""

# start_postgres_free DIR: Postgres on a free port (another process may
# take a "free" port first: then try another). Sets STARTED_PORT.
start_postgres_free() {
  local port
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    if start_postgres "$1" "$port"; then
      TAKEN+=("$port")
      STARTED_PORT=$port
      return
    fi
  done
  cat "$1/pgrun/postgres.log" >&2
  exit 1
}

start_redis() { # start_redis DIR PORT [extra args...]: non-zero when it did not start
  local dir=$1 port=$2 pid
  shift 2
  mkdir -p "$dir"
  rm -f "$dir/nodes.conf"
  # In its own process group (set -m), so that Ctrl-C reaches only the
  # scripts, which stop the servers in order.
  set -m
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize no \
    --save "" --appendonly no --logfile "$dir/redis.log" "$@" &
  pid=$!
  set +m
  # Ready when our process answers; a dead process means the port was taken.
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 1; }
    if redis-cli -p "$port" ping >/dev/null 2>&1; then
      PIDS+=("$pid")
      return 0
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null
  return 1
}

start_redis_free() { # start_redis_free DIR [extra args...]: sets STARTED_PORT
  local dir=$1 port
  shift
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    [[ " ${TAKEN[*]} " == *" $port "* ]] && continue
    if start_redis "$dir" "$port" "$@"; then
      TAKEN+=("$port")
      STARTED_PORT=$port
      return
    fi
  done
  cat "$dir/redis.log" >&2
  exit 1
}

case "$mode" in
test)
  ensure_chromium
  ensure_gateway nginx /usr/sbin/nginx nginx-light
  ensure_gateway caddy /usr/bin/caddy caddy
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-test.XXXXXX")
  chmod 755 "$WORK"
  start_postgres_free "$WORK"
  pg_port=$STARTED_PORT
  start_redis_free "$WORK/redis"
  redis_port=$STARTED_PORT
  cluster_ports=()
  for i in 1 2 3; do
    start_redis_free "$WORK/cluster$i" --cluster-enabled yes --cluster-config-file "$WORK/cluster$i/nodes.conf" --cluster-node-timeout 5000
    cluster_ports+=("$STARTED_PORT")
  done
  addrs=()
  for p in "${cluster_ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$WORK/cluster-create.log" 2>&1 \
    || { cat "$WORK/cluster-create.log" >&2; exit 1; }
  cluster_ok() { for p in "${cluster_ports[@]}"; do redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' || return 1; done; }
  wait_for 30 cluster_ok || { log "redis cluster did not become ready"; exit 1; }
  export TOLLGATE_TEST_DATABASE_URL="postgres://tollgate@127.0.0.1:$pg_port/tollgate?sslmode=disable"
  export TOLLGATE_TEST_REDIS_ADDR="127.0.0.1:$redis_port"
  export TOLLGATE_TEST_REDIS_CLUSTER_ADDRS
  TOLLGATE_TEST_REDIS_CLUSTER_ADDRS=$(IFS=,; echo "${addrs[*]}")
  export TOLLGATE_TEST_PG_DATA="$PGDATA_DIR" TOLLGATE_TEST_PG_BIN="$PG_BIN" TOLLGATE_TEST_WORK="$WORK"
  log "postgres 127.0.0.1:$pg_port, redis 127.0.0.1:$redis_port, cluster $TOLLGATE_TEST_REDIS_CLUSTER_ADDRS"
  ;;
run)
  WORK=$(pwd)/.local
  mkdir -p "$WORK"
  chmod 755 "$WORK"
  pg_port=$dev_pg_port
  redis_port=$dev_redis_port
  port_free "$pg_port" || { log "port $pg_port is taken (set TOLLGATE_DEV_PG_PORT)"; exit 1; }
  port_free "$redis_port" || { log "port $redis_port is taken (set TOLLGATE_DEV_REDIS_PORT)"; exit 1; }
  rc=0
  start_postgres "$WORK" "$pg_port" || rc=$?
  if [ "$rc" = 1 ]; then cat "$WORK/pgrun/postgres.log" >&2; fi
  [ "$rc" = 0 ] || exit 1
  # The usage stream holds billable usage until the worker has applied
  # it: an append-only file (synced every second) keeps it across runs.
  start_redis "$WORK/redis" "$redis_port" --appendonly yes --appendfsync everysec \
    || { cat "$WORK/redis/redis.log" >&2; exit 1; }
  printf 'TOLLGATE_DEV_PG_PORT=%s\nTOLLGATE_DEV_REDIS_PORT=%s\n' "$pg_port" "$redis_port" >"$ports_file"
  export TOLLGATE_DATABASE_URL=$dev_database_url
  export TOLLGATE_REDIS_ADDR=$dev_redis_addr
  log "postgres 127.0.0.1:$pg_port (data in .local/pg), redis 127.0.0.1:$redis_port (data in .local/redis)"
  ;;
*)
  log "unknown mode $mode (want test, run or env)"
  exit 2
  ;;
esac

"$@" &
child=$!
set +e
wait "$child"
rc=$?
child=""
exit $rc

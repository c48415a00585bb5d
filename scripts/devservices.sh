#!/usr/bin/env bash
# devservices.sh: throwaway PostgreSQL 15, PgBouncer and Redis servers on free loopback ports, for tests and the demo.
#
#   scripts/devservices.sh up     start them (idempotent), print the connection settings
#   scripts/devservices.sh env    print the settings as shell exports (eval "$(scripts/devservices.sh env)")
#   scripts/devservices.sh down   stop them and delete their data
#   scripts/devservices.sh status say what runs
#   scripts/devservices.sh tools  install what the tests use when missing (redis-server, pgbouncer, promtool, chromium), as root
#   scripts/devservices.sh cluster also start a 3-node Redis Cluster (optional; the tests start their own)
#
# Everything lives under .dev/ in the project (git-ignored), or under BUNBOX_DEV_DIR when set. PostgreSQL's
# initdb refuses to run as root, so as root the cluster belongs to the postgres user. redis-server comes from
# Debian's packages: installed here when missing and running as root, otherwise the script says how.
#
# PgBouncer (Debian's pgbouncer package, installed the same way) runs in front of the PostgreSQL server as
# teams run it: pool_mode = transaction, default_pool_size = 2 (BUNBOX_POOLER_POOL_SIZE), on loopback from
# port BUNBOX_POOLER_PORT (default 56432), with a `* =` entry that routes every database name to the same
# database of the server. TEST_DATABASE_URL stays direct; TEST_POOLER_URL goes through PgBouncer.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${BUNBOX_DEV_DIR:-$root/.dev}
pgdata=$dir/pg
redisdir=$dir/redis
pgbdir=$dir/pgbouncer
envfile=$dir/env

log() { printf 'devservices: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

pgbin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return; }
  done
  command -v pg_ctl >/dev/null 2>&1 && { dirname "$(command -v pg_ctl)"; return; }
  die "PostgreSQL server binaries not found (expected /usr/lib/postgresql/*/bin/pg_ctl); install postgresql-15"
}

# as_pg runs a command as the owner of the cluster: the postgres user when we are root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    su postgres -s /bin/bash -c "$(printf '%q ' "$@")"
  else
    "$@"
  fi
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
  local p=$1
  while ! port_free "$p"; do p=$((p + 1)); done
  echo "$p"
}

ensure_redis() {
  command -v redis-server >/dev/null 2>&1 && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing redis-server from Debian's packages"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    command -v redis-server >/dev/null 2>&1 || die "redis-server still missing after apt-get install"
  else
    die "redis-server is missing: install it with 'sudo apt-get install redis-server' (or your OS's package)"
  fi
}

ensure_pgbouncer() {
  [ -x "$(pgbouncer_bin)" ] && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing pgbouncer from Debian's packages"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null 2>&1 ||
      { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; }
    [ -x "$(pgbouncer_bin)" ] || die "pgbouncer still missing after apt-get install"
  else
    die "pgbouncer is missing: install it with 'sudo apt-get install pgbouncer' (or your OS's package)"
  fi
}

# pgbouncer_bin is the pgbouncer binary: Debian puts it in /usr/sbin, which a user's PATH may lack.
pgbouncer_bin() { command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer; }

wait_for() { # wait_for what seconds cmd...
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 10; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "$what did not come up within ${secs}s"
}

pg_up() {
  local bin port
  bin=$(pgbin)
  if [ -f "$pgdata/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
    return
  fi
  mkdir -p "$pgdata"
  [ "$(id -u)" = 0 ] && chown -R postgres: "$pgdata" && chmod 700 "$pgdata"
  if [ ! -f "$pgdata/PG_VERSION" ]; then
    as_pg "$bin/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --no-instructions >"$dir/initdb.log" 2>&1 ||
      die "initdb failed: $(tail -5 "$dir/initdb.log")"
  fi
  # A free port can be taken by another process before the server binds it: then try the next one.
  port=${BUNBOX_PG_PORT:-55432}
  for attempt in 1 2 3 4 5; do
    port=$(free_port "$port")
    as_pg "$bin/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w -t 60 start \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $pgdata -c max_connections=300 -c shared_buffers=256MB" >/dev/null && break
    [ "$attempt" = 5 ] && die "PostgreSQL did not start: $(tail -5 "$pgdata/server.log")"
    port=$((port + 1))
  done
  echo "$port" >"$dir/pg.port"
  wait_for PostgreSQL 30 "$bin/pg_isready" -h 127.0.0.1 -p "$port"
}

redis_up() {
  local port
  ensure_redis
  if [ -f "$redisdir/redis.pid" ] && kill -0 "$(cat "$redisdir/redis.pid")" 2>/dev/null; then
    return
  fi
  mkdir -p "$redisdir"
  port=${BUNBOX_REDIS_PORT:-56379}
  for attempt in 1 2 3 4 5; do
    port=$(free_port "$port")
    rm -f "$redisdir/redis.pid"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$redisdir" --daemonize yes \
      --pidfile "$redisdir/redis.pid" --logfile "$redisdir/redis.log" \
      --appendonly yes --appendfsync everysec --save "" >/dev/null
    if (wait_for Redis 10 redis-cli -h 127.0.0.1 -p "$port" ping) 2>/dev/null; then
      break
    fi
    [ "$attempt" = 5 ] && die "Redis did not start: $(tail -5 "$redisdir/redis.log")"
    port=$((port + 1))
  done
  echo "$port" >"$dir/redis.port"
}

# pooler_up starts PgBouncer in transaction mode in front of the dev PostgreSQL server. PgBouncer refuses to
# run as root, so as root it runs as the postgres user (-u), which owns its directory.
pooler_up() {
  local port pg bin
  ensure_pgbouncer
  bin=$(pgbouncer_bin)
  if [ -f "$pgbdir/pgbouncer.pid" ] && kill -0 "$(cat "$pgbdir/pgbouncer.pid")" 2>/dev/null; then
    return
  fi
  pg=$(cat "$dir/pg.port")
  mkdir -p "$pgbdir"
  echo '"postgres" ""' >"$pgbdir/userlist.txt"
  port=${BUNBOX_POOLER_PORT:-56432}
  for attempt in 1 2 3 4 5; do
    port=$(free_port "$port")
    cat >"$pgbdir/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$pg

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $pgbdir/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = ${BUNBOX_POOLER_POOL_SIZE:-2}
max_client_conn = 5000
autodb_idle_timeout = 60
ignore_startup_parameters = extra_float_digits
logfile = $pgbdir/pgbouncer.log
pidfile = $pgbdir/pgbouncer.pid
EOF
    if [ "$(id -u)" = 0 ]; then
      chown -R postgres: "$pgbdir"
      "$bin" -q -d -u postgres "$pgbdir/pgbouncer.ini" >/dev/null 2>&1 || true
    else
      "$bin" -q -d "$pgbdir/pgbouncer.ini" >/dev/null 2>&1 || true
    fi
    if (wait_for PgBouncer 10 "$(pgbin)/pg_isready" -h 127.0.0.1 -p "$port") 2>/dev/null; then
      break
    fi
    [ "$attempt" = 5 ] && die "PgBouncer did not start: $(tail -5 "$pgbdir/pgbouncer.log" 2>/dev/null)"
    [ -f "$pgbdir/pgbouncer.pid" ] && kill "$(cat "$pgbdir/pgbouncer.pid")" 2>/dev/null
    port=$((port + 1))
  done
  echo "$port" >"$dir/pooler.port"
}

# cluster_up starts three redis-server nodes in cluster mode on free port pairs (port and bus port+10000),
# joins them with redis-cli --cluster create and records their addresses for write_env.
cluster_up() {
  local p port addrs=() i
  ensure_redis
  [ -f "$dir/cluster.addrs" ] && return
  p=${BUNBOX_REDIS_CLUSTER_PORT:-47001}
  for i in 1 2 3; do
    while ! port_free "$p" || ! port_free $((p + 10000)); do p=$((p + 1)); done
    port=$p
    p=$((p + 1))
    mkdir -p "$dir/cluster/$port"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/cluster/$port" --daemonize yes \
      --pidfile "$dir/cluster/$port/redis.pid" --logfile "$dir/cluster/$port/redis.log" \
      --cluster-enabled yes --cluster-config-file nodes.conf --appendonly yes --save "" >/dev/null
    wait_for "Redis Cluster node $port" 30 redis-cli -h 127.0.0.1 -p "$port" ping
    addrs+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/cluster/create.log" 2>&1 ||
    die "redis-cli --cluster create failed: $(tail -5 "$dir/cluster/create.log")"
  for a in "${addrs[@]}"; do
    wait_for "Redis Cluster ($a)" 30 sh -c "redis-cli -h 127.0.0.1 -p ${a##*:} cluster info | grep -q cluster_state:ok"
  done
  (IFS=,; echo "${addrs[*]}") >"$dir/cluster.addrs"
}

write_env() {
  local pg redis
  pg=$(cat "$dir/pg.port")
  redis=$(cat "$dir/redis.port")
  cat >"$envfile" <<EOF
export TEST_DATABASE_URL='postgres://postgres@127.0.0.1:$pg/postgres?sslmode=disable'
export TEST_REDIS_ADDR='127.0.0.1:$redis'
export TEST_POOLER_URL='postgres://postgres@127.0.0.1:$(cat "$dir/pooler.port")/postgres?sslmode=disable'
export DATABASE_URL="\$TEST_DATABASE_URL"
export REDIS_ADDR="\$TEST_REDIS_ADDR"
EOF
  if [ -f "$dir/cluster.addrs" ]; then
    echo "export TEST_REDIS_CLUSTER_ADDRS='$(cat "$dir/cluster.addrs")'" >>"$envfile"
  fi
}

down() {
  local bin
  if [ -f "$pgbdir/pgbouncer.pid" ]; then
    local pid
    pid=$(cat "$pgbdir/pgbouncer.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  if [ -f "$pgdata/PG_VERSION" ]; then
    bin=$(pgbin)
    as_pg "$bin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null 2>&1 || true
  fi
  if [ -f "$redisdir/redis.pid" ]; then
    local pid
    pid=$(cat "$redisdir/redis.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  for f in "$dir"/cluster/*/redis.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$dir"
  log "stopped"
}

# ensure_promtool installs promtool (Debian's prometheus package), which the alert-rule tests use, when it is
# missing and we are root; otherwise those tests skip their promtool part and say so.
ensure_promtool() {
  command -v promtool >/dev/null 2>&1 && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing promtool (Debian's prometheus package) for the alert-rule tests"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 ||
      { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; }; } ||
      log "could not install prometheus; the promtool checks will be skipped"
  fi
}

# ensure_chromium installs Debian's chromium, which the operator page's browser test (ui/) drives headless,
# when it is missing and we are root; otherwise that test fails and says how to install it.
ensure_chromium() {
  command -v chromium >/dev/null 2>&1 && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing chromium (Debian's package) for the operator page's browser test"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
      { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }; } ||
      die "could not install chromium: the browser test needs it"
  fi
}

case "${1:-}" in
tools)
  ensure_redis
  ensure_pgbouncer
  ensure_promtool
  ensure_chromium
  ;;
up)
  mkdir -p "$dir"
  pg_up
  redis_up
  pooler_up
  write_env
  log "PostgreSQL, PgBouncer and Redis are up; settings in $envfile:"
  sed 's/^export //' "$envfile" | head -3 >&2
  ;;
cluster)
  [ -f "$envfile" ] || die "not running: run '$0 up' first"
  cluster_up
  write_env
  log "Redis Cluster is up: TEST_REDIS_CLUSTER_ADDRS=$(cat "$dir/cluster.addrs")"
  ;;
env)
  [ -f "$envfile" ] || die "not running: run '$0 up' first"
  cat "$envfile"
  ;;
down) down ;;
status)
  [ -f "$envfile" ] && cat "$envfile" || echo "not running"
  ;;
*)
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac

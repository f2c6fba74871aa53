#!/usr/bin/env bash
# peers.sh: install, start and stop the servers the peer benchmark compares,
# each on 127.0.0.1 on a fixed non-default port with its data in a temporary
# directory. The driver tests (go test ./...) use the servers this starts;
# `go run ./cmd/peerbench` starts its own (see README.md). pebbledelay, built
# from ./cmd/pebbledelay, is not started here: its tests start it themselves.
#
#   bash peers.sh install   # apt: redis-server postgresql beanstalkd; go: nats-server, hourglass
#   bash peers.sh start     # start every peer (installing what is missing); PIDs in .peers/pids
#   bash peers.sh status    # which are running
#   bash peers.sh stop      # stop each by its recorded PID, remove the data
#
# Ports: hourglass 17420, redis 16379, postgresql 15432, beanstalkd 11310,
# nats 14222. Each peer runs with per-write fsync here.
set -euo pipefail
cd "$(dirname "$0")"
HERE=$(pwd)
STATE=$HERE/.peers
PIDS=$STATE/pids
NATS_VERSION=v2.15.2
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

install() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v beanstalkd >/dev/null || missing+=(beanstalkd)
  [ -x "$PG_BIN/postgres" ] || missing+=(postgresql)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]} with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
  mkdir -p bin
  if [ ! -x bin/nats-server ]; then
    echo "building nats-server $NATS_VERSION into bench/bin" >&2
    GOBIN=$HERE/bin go install "github.com/nats-io/nats-server/v2@$NATS_VERSION"
  fi
  echo "building hourglass into bench/bin" >&2
  (cd .. && go build -o "$HERE/bin/hourglass" ./cmd/hourglass)
}

wait_port() { # name port pid
  for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then return 0; fi
    if ! kill -0 "$3" 2>/dev/null; then echo "$1 exited; see $STATE/$1.log" >&2; return 1; fi
    sleep 0.1
  done
  echo "$1 did not open port $2 within 30 s; see $STATE/$1.log" >&2
  return 1
}

start() {
  if [ -s "$PIDS" ]; then echo "peers already started (see $PIDS); run: bash peers.sh stop" >&2; exit 1; fi
  install
  mkdir -p "$STATE"
  local data
  data=$(mktemp -d /tmp/peers.XXXXXX)
  chmod 755 "$data"
  echo "$data" >"$STATE/datadir"
  : >"$PIDS"

  mkdir -p "$data/hourglass"
  bin/hourglass serve --data-dir "$data/hourglass" --listen 127.0.0.1:17420 --fsync always >"$STATE/hourglass.log" 2>&1 &
  echo "hourglass $!" >>"$PIDS"; wait_port hourglass 17420 $!

  mkdir -p "$data/redis"
  redis-server --bind 127.0.0.1 --port 16379 --dir "$data/redis" --appendonly yes --appendfsync always --save '' \
    --daemonize no >"$STATE/redis.log" 2>&1 &
  echo "redis $!" >>"$PIDS"; wait_port redis 16379 $!

  mkdir -p "$data/beanstalkd"
  beanstalkd -l 127.0.0.1 -p 11310 -b "$data/beanstalkd" -f 0 >"$STATE/beanstalkd.log" 2>&1 &
  echo "beanstalkd $!" >>"$PIDS"; wait_port beanstalkd 11310 $!

  mkdir -p "$data/nats"
  printf 'listen: "127.0.0.1:14222"\njetstream {\n  store_dir: "%s"\n  sync_interval: always\n}\n' "$data/nats" >"$data/nats.conf"
  bin/nats-server -c "$data/nats.conf" >"$STATE/nats.log" 2>&1 &
  echo "nats $!" >>"$PIDS"; wait_port nats 14222 $!

  # initdb refuses root: the postgres user the package creates owns the cluster.
  mkdir -p "$data/postgresql" "$data/pgsock"
  chown postgres:postgres "$data/postgresql" "$data/pgsock"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$data/postgresql" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$STATE/initdb.log" 2>&1
  touch "$STATE/postgresql.log"; chmod 666 "$STATE/postgresql.log"
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$data/postgresql" -l "$STATE/postgresql.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p 15432 -k $data/pgsock" start >/dev/null
  echo "postgresql $(head -1 "$data/postgresql/postmaster.pid")" >>"$PIDS"

  status
}

status() {
  if [ ! -s "$PIDS" ]; then echo "no peers started (run: bash peers.sh start)"; return 0; fi
  while read -r name pid; do
    if kill -0 "$pid" 2>/dev/null; then echo "$name pid $pid running"; else echo "$name pid $pid NOT running"; fi
  done <"$PIDS"
}

stop() {
  if [ ! -s "$PIDS" ]; then echo "no peers started" >&2; return 0; fi
  while read -r name pid; do
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
    echo "stopped $name (pid $pid)"
  done <"$PIDS"
  rm -f "$PIDS"
  if [ -s "$STATE/datadir" ]; then rm -rf "$(cat "$STATE/datadir")"; rm -f "$STATE/datadir"; fi
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: bash peers.sh install|start|status|stop" >&2; exit 2 ;;
esac

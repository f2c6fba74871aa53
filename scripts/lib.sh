# Shared by the scripts that run a fresh `hourglass serve` on 127.0.0.1
# (bench-server.sh, bench-network.sh, topics-cost.sh): they source it from
# the repository's root. Not a script of its own.

# server_tmp PREFIX makes $tmp, a fresh directory here (named PREFIX.XXXXXX)
# for the binary, data and log, and on exit stops the server $pid, if one
# runs, and removes $tmp.
server_tmp() {
  tmp=$(mktemp -d -p "$PWD" "$1.XXXXXX")
  pid=
  trap server_cleanup EXIT
}

server_cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}

# server_start BIN [FLAG]... starts `BIN serve` with FLAGs on a fresh
# $tmp/data, listening on 127.0.0.1:$port, its log in $tmp/serve.log, and
# waits until it answers /readyz (at most 30 s; else it prints the log and
# exits 1).
server_start() {
  local bin=$1
  shift
  rm -rf "$tmp/data"
  "$bin" serve --data-dir "$tmp/data" --listen "127.0.0.1:$port" "$@" 2>"$tmp/serve.log" &
  pid=$!
  for _ in $(seq 300); do
    if curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "server did not become ready:"; cat "$tmp/serve.log"; exit 1
}

# server_stop stops the server server_start started.
server_stop() { kill "$pid"; wait "$pid" || true; pid=; }

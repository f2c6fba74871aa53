#!/usr/bin/env bash
# Runs the server benchmarks behind docs/BENCHMARKS.md ("The server"): the
# `hourglass bench server` scenarios, each three times against a fresh
# `hourglass serve --fsync always` on 127.0.0.1, and the RPC stack's own
# ceiling (a server that stores nothing) measured in the same run.
# Usage: bash scripts/bench-server.sh > bench-server.txt 2>&1   (about 5 minutes on this machine)
# Run it on an otherwise idle machine: client and server share its cores.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== $(date -u +%FT%TZ) $(uname -sr), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
tmp=$(mktemp -d -p "$PWD" .bench.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/hourglass" ./cmd/hourglass
port=${PORT:-7431}

# serve starts a fresh server and waits until it answers /readyz (at most 30 s).
serve() {
  rm -rf "$tmp/data"
  "$tmp/hourglass" serve --data-dir "$tmp/data" --listen "127.0.0.1:$port" --fsync always "$@" 2>"$tmp/serve.log" &
  pid=$!
  for _ in $(seq 300); do
    if curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "server did not become ready:"; cat "$tmp/serve.log"; exit 1
}
stop() { kill "$pid"; wait "$pid" || true; pid=; }

# single-pipelined is the single scenario with every Schedule its own call,
# pipelined over 4 connections (client.WithPipelining(4)) instead of one
# connection per client.
# single-merged is the single scenario through the Go client's default
# merging (client.WithMaxCalls(2)): the same 64 goroutines each calling
# Schedule, sent as at most 2 calls in flight, merged into ScheduleBatch.
# batch-64 is the batch scenario from 64 clients (the single scenario's
# count), where 8 clients leave the server waiting on fsyncs.
for i in 1 2 3; do
  for s in batch batch-64 single single-pipelined single-merged lateness; do
    serve
    echo "== $s run $i"
    args=(--scenario "$s")
    if [ "$s" = single-merged ]; then args=(--scenario single --max-calls 2); fi
    if [ "$s" = single-pipelined ]; then args=(--scenario single --conns 4); fi
    if [ "$s" = batch-64 ]; then args=(--scenario batch --clients 64 --messages 2000000); fi
    "$tmp/hourglass" bench server --addr "http://127.0.0.1:$port" "${args[@]}" --json | tail -1
    curl -fs "http://127.0.0.1:$port/metrics" | grep -E '^hourglass_commitlog_fsync_seconds_(sum|count)|^process_cpu_seconds_total' || true
    stop
  done
done
echo "== the RPC stack alone (noop) and with the engine (fsync none), in one process"
go test ./server -run '^$' -bench 'ScheduleBatchRPC|ScheduleRPC' -benchtime 3000x -count 3
echo "== load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# Runs the server benchmarks behind docs/BENCHMARKS.md ("The server"): the
# `hourglass-bench server` scenarios over each protocol that matters for
# them, each three times against a fresh `hourglass serve --fsync always`
# on 127.0.0.1.
# Usage: bash scripts/bench-server.sh > bench-server.txt 2>&1   (about 5 minutes on this machine)
# Run it on an otherwise idle machine: client and server share its cores.
# RUNS=1 BENCH_ARGS="--messages 2000" bash scripts/bench-server.sh is a
# quick check of the script itself (BENCH_ARGS go to every hourglass-bench server).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
echo "== $(date -u +%FT%TZ) $(uname -sr), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
server_tmp .bench
go build -o "$tmp/hourglass" ./cmd/hourglass
go build -o "$tmp/hourglass-bench" ./cmd/hourglass-bench
port=${PORT:-7431}
runs=${RUNS:-3}
read -r -a extra <<<"${BENCH_ARGS:-}"

# Each case is SCENARIO/PROTOCOL: grpc makes unary calls on one HTTP/2
# connection; stream sends on one ScheduleStream (single: a message per
# request, batch: a batch per request; 64 and 8 requests in flight) and
# consumes with Consume streams; connect calls over HTTP/1.1, a
# connection per call in flight. single sends every Schedule as its own
# request (--max-calls 0).
for i in $(seq "$runs"); do
  for c in batch/grpc single/grpc single/stream batch/stream single/connect lateness/grpc lateness/stream; do
    server_start "$tmp/hourglass" --fsync always
    echo "== $c run $i"
    "$tmp/hourglass-bench" server --addr "http://127.0.0.1:$port" --scenario "${c%/*}" --protocol "${c#*/}" \
      --timeout 3m "${extra[@]}" --json | tail -1
    curl -fs "http://127.0.0.1:$port/metrics" | grep -E '^hourglass_commitlog_fsync_seconds_(sum|count)|^process_cpu_seconds_total' || true
    server_stop
  done
done
echo "== load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

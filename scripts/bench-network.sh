#!/usr/bin/env bash
# Compares two hourglass binaries' network paths side by side (the numbers
# behind docs/BENCHMARKS.md "The network layer"): each side's load
# generator against its own fresh `serve --fsync always` on 127.0.0.1, the
# binaries interleaved run by run.
#   OLD=path/to/old/hourglass bash scripts/bench-network.sh > out.txt 2>&1
# NEW defaults to a build of this tree, driven by a build of this tree's
# hourglass-bench; OLD is driven by OLD_BENCH (default "$OLD bench", the
# drivers' place in builds before cmd/hourglass-bench). OLD's cases are the old protocol's
# (Connect over HTTP/1.1); NEW's are gRPC unary, ScheduleStream and the
# Consume stream. RUNS (default 3) and BENCH_ARGS (extra hourglass-bench server
# flags, e.g. "--messages 2000" for a quick check) as in bench-server.sh.
# Run it on an otherwise idle machine: client and server share its cores.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
: "${OLD:?set OLD to the hourglass binary to compare against}"
echo "== $(date -u +%FT%TZ) $(uname -sr), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== old: $OLD"
server_tmp .bench
NEW=${NEW:-}
if [ -z "$NEW" ]; then go build -o "$tmp/hourglass" ./cmd/hourglass; NEW="$tmp/hourglass"; fi
go build -o "$tmp/hourglass-bench" ./cmd/hourglass-bench
read -r -a old_bench <<<"${OLD_BENCH:-$OLD bench}"
echo "== new: $NEW ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
port=${PORT:-7432}
runs=${RUNS:-3}
read -r -a extra <<<"${BENCH_ARGS:-}"

# case: NAME BINARY bench-server-args...
one() {
  local name=$1 bin=$2; shift 2
  local driver=("$tmp/hourglass-bench")
  if [ "$bin" = "$OLD" ]; then driver=("${old_bench[@]}"); fi
  server_start "$bin" --fsync always
  echo "== $name run $i"
  "${driver[@]}" server --addr "http://127.0.0.1:$port" --timeout 3m "$@" "${extra[@]}" --json | tail -1
  server_stop
}

for i in $(seq "$runs"); do
  one old/single   "$OLD" --scenario single
  one new/single-grpc   "$NEW" --scenario single --protocol grpc
  one new/single-stream "$NEW" --scenario single --protocol stream
  one old/batch    "$OLD" --scenario batch
  one new/batch-grpc    "$NEW" --scenario batch --protocol grpc
  one new/batch-stream  "$NEW" --scenario batch --protocol stream
  one old/lateness "$OLD" --scenario lateness
  one new/lateness-grpc   "$NEW" --scenario lateness --protocol grpc
  one new/lateness-stream "$NEW" --scenario lateness --protocol stream
done
echo "== load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

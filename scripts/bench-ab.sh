#!/usr/bin/env bash
# Compares two hourglass servers on the same `hourglass-bench server` cases: each case
# runs against OLD's and NEW's own fresh `serve --fsync always` on 127.0.0.1,
# interleaved run by run, always driven by this tree's `hourglass-bench server` (so only the
# servers differ). Prints each run's JSON line and, at the end, the median of
# each case's headline (schedule_per_sec; lateness_p99_ms for lateness).
#   OLD=path/to/old/hourglass bash scripts/bench-ab.sh > out.txt 2>&1
# NEW defaults to a build of this tree. CASES (default "batch/grpc
# lateness/stream") are SCENARIO/PROTOCOL pairs; RUNS (default 5) and
# BENCH_ARGS (extra hourglass-bench server flags, e.g. "--messages 2000" for a quick
# check) as in bench-server.sh.
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
echo "== new: $NEW ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
port=${PORT:-7433}
runs=${RUNS:-5}
read -r -a cases <<<"${CASES:-batch/grpc lateness/stream}"
read -r -a extra <<<"${BENCH_ARGS:-}"
results="$tmp/results"
: >"$results"

for i in $(seq "$runs"); do
  for c in "${cases[@]}"; do
    for side in old new; do
      bin=$OLD
      if [ "$side" = new ]; then bin=$NEW; fi
      server_start "$bin" --fsync always
      echo "== $side $c run $i"
      line=$("$tmp/hourglass-bench" server --addr "http://127.0.0.1:$port" --scenario "${c%/*}" --protocol "${c#*/}" \
        --timeout 3m "${extra[@]}" --json | tail -1)
      echo "$line"
      echo "$side $c $line" >>"$results"
      server_stop
    done
  done
done

echo "== medians over $runs runs"
for c in "${cases[@]}"; do
  key=schedule_per_sec
  if [ "${c%/*}" = lateness ]; then key=lateness_p99_ms; fi
  for side in old new; do
    median=$(grep "^$side $c " "$results" | cut -d' ' -f3- | jq -s "map(.$key) | sort | .[length/2|floor]")
    echo "$c $side $key $median"
  done
done
echo "== load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

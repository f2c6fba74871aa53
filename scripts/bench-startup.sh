#!/usr/bin/env bash
# Start-up time against the number of future schedule segments, for
# docs/BENCHMARKS.md (issue 19; invariant I5: start-up must not grow with
# them; target: ready within 2x of the 100-segment figure at 100,000).
# For each N it makes a data directory with `hourglass serve` (started and
# stopped), adds N future one-hour segments (scripts/startup gen), and
# times `serve` from process start to the first /readyz 200, warm (the
# files in the page cache) and cold (after `echo 3 >
# /proc/sys/vm/drop_caches`, when this user may write it; otherwise the
# cold runs are skipped and it says so).
# Usage: bash scripts/bench-startup.sh > bench-startup.txt 2>&1
#        NS="100 1000" RUNS=1 bash scripts/bench-startup.sh   (a quick check of the script)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== $(date -u +%FT%TZ) $(uname -sr), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
tmp=$(mktemp -d -p "$PWD" .bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/hourglass" ./cmd/hourglass
go build -o "$tmp/startup" ./scripts/startup
runs=${RUNS:-3}
cold=yes
if ! { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
  cold=no
  echo "cold runs skipped: cannot write /proc/sys/vm/drop_caches here (needs root, outside a container)"
fi
for n in ${NS:-100 10000 100000}; do
  d="$tmp/data-$n"
  "$tmp/startup" time -bin "$tmp/hourglass" -data-dir "$d" -runs 1 >/dev/null # creates the directory
  "$tmp/startup" gen -data-dir "$d" -n "$n"
  echo "-- $n future segments, warm"
  "$tmp/startup" time -bin "$tmp/hourglass" -data-dir "$d" -runs 1 >/dev/null # fill the page cache
  "$tmp/startup" time -bin "$tmp/hourglass" -data-dir "$d" -runs "$runs"
  if [ "$cold" = yes ]; then
    echo "-- $n future segments, cold"
    "$tmp/startup" time -bin "$tmp/hourglass" -data-dir "$d" -runs "$runs" -cold
  fi
  rm -rf "$d"
done

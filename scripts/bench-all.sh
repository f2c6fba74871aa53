#!/usr/bin/env bash
# Runs every benchmark behind docs/BENCHMARKS.md, in one go, on this machine.
# Usage: bash scripts/bench-all.sh > bench.txt 2>&1   (about 10 minutes)
# Run it on an otherwise idle machine: the fsync-bound numbers are only
# meaningful when nothing else is writing to the disk.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== $(date -u +%FT%TZ) $(uname -sr), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== raw disk: sequential write, 2 GiB, one fdatasync at the end"
tmp=$(mktemp -d -p "$PWD" .bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
dd if=/dev/zero of="$tmp/dd" bs=1M count=2048 conv=fdatasync 2>&1 | tail -1
rm -f "$tmp/dd"
echo "== raw disk: 4 KiB write + fdatasync (append, preallocated, through a mapping)"
TMPDIR=$tmp go test ./commitlog -run '^$' -bench RawFsync -benchtime 3000x -count 3
echo "== commitlog"
TMPDIR=$tmp go test ./commitlog -run '^$' -bench Append -benchtime 2s -count 3
echo "== reput"
TMPDIR=$tmp go test ./reput -run '^$' -bench . -benchtime 1000000x -count 3
echo "== schedulelog, dispatchlog"
TMPDIR=$tmp go test ./schedulelog ./dispatchlog -run '^$' -bench . -benchtime 1s
echo "== wheel (10 million entries)"
go test ./wheel -run '^$' -bench Memory -benchtime 1x
echo "== engine"
TMPDIR=$tmp go test ./engine -run '^$' -bench 'LoadedMemory|FireHot' -benchtime 1000000x -count 3
echo "== hourglass-bench engine"
go build -o "$tmp/hourglass-bench" ./cmd/hourglass-bench
for s in uniform hot-second; do
  for i in 1 2 3; do "$tmp/hourglass-bench" engine --scenario $s --dir "$tmp/d-$s-$i" --json | tail -1; rm -rf "$tmp/d-$s-$i"; done
done
for s in recovery far-future; do
  "$tmp/hourglass-bench" engine --scenario $s --messages "${BIG:-1000000}" --dir "$tmp/d-$s" --json | tail -1; rm -rf "$tmp/d-$s"
done
echo "== load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

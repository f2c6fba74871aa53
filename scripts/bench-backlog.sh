#!/usr/bin/env bash
# W3 of issue 20 on one node: a backlog far larger than memory. Starts
# `hourglass serve` (--fsync always, defaults otherwise) on a fresh data
# directory, schedules N messages of BODY bytes due evenly over SPREAD
# starting DUE_AFTER from now (`hourglass-bench server --scenario backlog`), waits
# for reput to route them all, and reads the server's memory
# (/proc/PID/status: VmHWM, the peak, VmRSS, RssAnon, RssFile) and the data directory's
# size. Then it kills the server with SIGKILL, times the restart to the
# first /readyz 200 (and three more after clean stops), and receives what
# falls due in the first DRAIN_WINDOW of the backlog (`--scenario drain`):
# lateness, lost, duplicates. DRAIN_WINDOW=0 skips the drain.
# Usage: bash scripts/bench-backlog.sh > bench-backlog.txt 2>&1
#          (100,000,000 messages: about 30 GB of disk, and 1 h 20 min,
#          most of it the drain of the first due hour)
#        N=1000000 DUE_AFTER=2m DRAIN_WINDOW=1m bash scripts/bench-backlog.sh   (a quick check)
# DIR (default: the repository's root) holds the data directory.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
n=${N:-100000000}
body=${BODY:-64}
spread=${SPREAD:-720h}
due_after=${DUE_AFTER:-15m}
drain_window=${DRAIN_WINDOW:-1h}
keys=${KEYS:-}
port=${PORT:-7433}
echo "== $(date -u +%FT%TZ) $(uname -sr), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); $(git rev-parse --short HEAD)"
echo "N=$n BODY=$body SPREAD=$spread DUE_AFTER=$due_after DRAIN_WINDOW=$drain_window KEYS=${keys:-no}"
cd "${DIR:-.}"
server_tmp .bench.backlog
cd - >/dev/null
go build -o "$tmp/hourglass" ./cmd/hourglass
go build -o "$tmp/hourglass-bench" ./cmd/hourglass-bench
go build -o "$tmp/startup" ./scripts/startup
url="http://127.0.0.1:$port"

memory() { # memory LABEL: the server's memory and the data directory's size
  echo "-- $1: $(grep -E '^(VmHWM|VmRSS|RssAnon|RssFile):' "/proc/$pid/status" | tr -s ' \t' ' ' | tr '\n' ' ')"
  echo "   data: $(du -sb "$tmp/data" | cut -f1) bytes; $(cd "$tmp/data" && du -sb commitlog schedule queue 2>/dev/null | tr '\t\n' '= ')"
}

server_start "$tmp/hourglass" --log-level warn
memory "empty server"
from=$(date -u -d "+${due_after/m/ minutes}" +%Y-%m-%dT%H:%M:%SZ)
"$tmp/hourglass-bench" server --addr "$url" --scenario backlog --messages "$n" --body-size "$body" \
  --batch 1000 --clients 8 --protocol stream --spread "$spread" --due-from "$from" ${keys:+--keys} --json | tee "$tmp/backlog.out"
topic=$(tail -1 "$tmp/backlog.out" | sed -E 's/.*"topic":"([^"]+)".*/\1/')
# Reput routes behind the producers; wait until it has routed every record.
for _ in $(seq 600); do
  lag=$(curl -fs "$url/metrics" | awk '/^hourglass_reput_lag_bytes /{print $2}')
  [ "$lag" = 0 ] && break
  sleep 1
done
echo "-- reput lag: ${lag} bytes"
memory "after scheduling $n"

kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
echo "-- restart after SIGKILL"
"$tmp/startup" time -bin "$tmp/hourglass" -data-dir "$tmp/data" -runs 1 -log "$tmp/restart.log"
grep -iE 'recover|torn|ready|took' "$tmp/restart.log" | cut -c1-300 || true
echo "-- restarts after a clean stop"
"$tmp/startup" time -bin "$tmp/hourglass" -data-dir "$tmp/data" -runs 3

"$tmp/hourglass" serve --data-dir "$tmp/data" --listen "127.0.0.1:$port" --log-level warn 2>>"$tmp/serve.log" &
pid=$!
for _ in $(seq 300); do curl -fs "$url/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
memory "restarted and ready"
if [ "$drain_window" = 0 ]; then echo "== $(date -u +%FT%TZ) done (no drain)"; exit 0; fi
"$tmp/hourglass-bench" server --addr "$url" --scenario drain --protocol stream --topic "$topic" --messages "$n" \
  --due-from "$from" --spread "$spread" --window "$drain_window"
memory "after the drain"
echo "== $(date -u +%FT%TZ) done; load: $(cut -d' ' -f1-3 /proc/loadavg)"

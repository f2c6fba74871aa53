#!/usr/bin/env bash
# Descriptors the server holds after one burst of messages spread over
# N hourly buckets (issue 19: open segment writers are bounded at all
# times, whatever the spread of delivery times), for docs/BENCHMARKS.md.
# It starts the real server on a fresh directory on 127.0.0.1, counts its
# open descriptors, schedules N messages one hour apart (ScheduleBatch over
# Connect-JSON with curl, 1,000 per call), waits until reput has routed
# them (hourglass_reput_lag_bytes 0), and counts again.
# Usage: bash scripts/fds-burst.sh            (N=10000)
#        N=1000 bash scripts/fds-burst.sh
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-10000}
echo "== $(date -u +%FT%TZ) $(uname -sr), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
tmp=$(mktemp -d -p "$PWD" .bench.XXXXXX)
go build -o "$tmp/hourglass" ./cmd/hourglass
port=$((20000 + RANDOM % 20000))
"$tmp/hourglass" serve --data-dir "$tmp/data" --listen "127.0.0.1:$port" 2>"$tmp/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
url="http://127.0.0.1:$port"
for _ in $(seq 1 100); do curl -sf "$url/readyz" >/dev/null && break; sleep 0.1; done
fds() { ls /proc/$pid/fd | wc -l; }
echo "descriptors at start: $(fds)"
now=$(date +%s)
for ((b = 0; b < n; b += 1000)); do
  python3 - "$now" "$b" "$((b + 1000 < n ? b + 1000 : n))" >"$tmp/batch.json" <<'PY'
import json, sys, datetime
now, lo, hi = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
msgs = [{"topic": "burst", "body": "eA==",
         "deliverAt": datetime.datetime.fromtimestamp(now + 3600 * (i + 1), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        for i in range(lo, hi)]
print(json.dumps({"messages": msgs}))
PY
  curl -sf -H 'Content-Type: application/json' --data-binary @"$tmp/batch.json" \
    "$url/hourglass.v1.HourglassService/ScheduleBatch" >/dev/null
  echo "scheduled $((b + 1000 < n ? b + 1000 : n)) of $n; descriptors: $(fds)"
done
for _ in $(seq 1 600); do
  lag=$(curl -sf "$url/metrics" | awk '/^hourglass_reput_lag_bytes /{print $2}')
  [ "$lag" = "0" ] && break
  sleep 0.1
done
segs=$(ls "$tmp/data/schedule" | grep -c '\.sched$' || true)
echo "routed: reput lag ${lag:-?} bytes; $segs schedule segments on disk"
echo "descriptors after the burst over $n buckets: $(fds) (limit: $(awk '/Max open files/{print $4}' /proc/$pid/limits))"
grep -c "routing stalled" "$tmp/server.log" | sed 's/^/routing stalls logged: /' || true

#!/usr/bin/env bash
# Measures what queue topics cost on the real binary (docs/BENCHMARKS.md,
# "Disk and goroutines per 1,000 topics"): starts a fresh `hourglass serve`
# on 127.0.0.1, delivers one message into each of TOPICS topics (default
# 1000) with ScheduleBatch over Connect JSON, and prints disk (allocated
# blocks of queue/topics, du), goroutines (go_goroutines on /metrics), open
# descriptors and mappings of topic files (/proc) in all and per topic: once every message
# is in the queue (topics open), and again once they sat idle past
# --topic-idle-timeout (IDLE, default 5s), after which the engine's
# per-topic lanes close too.
# Usage: bash scripts/topics-cost.sh            (about 30 s)
#        TOPICS=100 bash scripts/topics-cost.sh (a quick check of the script)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
topics=${TOPICS:-1000}
idle=${IDLE:-5s}
port=${PORT:-7432}
echo "== $(date -u +%FT%TZ) $(uname -sr), $(nproc) cores; $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $topics topics"
server_tmp .topics
go build -o "$tmp/hourglass" ./cmd/hourglass
server_start "$tmp/hourglass" --topic-idle-timeout "$idle" --max-topics $((topics + 10))

metric() { # the sum of the samples of metric $1
  curl -fs "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%d\n", s }'
}
sample() { # label
  local g d fds maps
  g=$(metric go_goroutines)
  d=$(du -s --block-size=1 "$tmp/data/queue/topics" | cut -f1)
  fds=$(ls "/proc/$pid/fd" | wc -l)
  maps=$(grep -c '/queue/topics/' "/proc/$pid/maps" || true)
  printf '%-28s goroutines %6d (%+.2f/topic)  disk %9d KiB (%.1f KiB/topic)  fds %5d (%+.2f/topic)  mappings %6d (%+.2f/topic)\n' \
    "$1" "$g" "$(echo "($g - $g0) / $topics" | bc -l)" $((d >> 10)) "$(echo "$d / 1024 / $topics" | bc -l)" \
    "$fds" "$(echo "($fds - $fd0) / $topics" | bc -l)" "$maps" "$(echo "($maps - $maps0) / $topics" | bc -l)"
}
g0=$(metric go_goroutines); fd0=$(ls "/proc/$pid/fd" | wc -l); maps0=0
echo "before: goroutines $g0, fds $fd0 (mappings: of files under queue/topics)"

# One message due now into each topic, 1000 per ScheduleBatch.
for ((from = 0; from < topics; from += 1000)); do
  to=$((from + 1000 < topics ? from + 1000 : topics))
  body=$(seq "$from" $((to - 1)) | awk 'BEGIN { printf "{\"messages\":[" } { printf "%s{\"topic\":\"cost-%05d\",\"body\":\"eA==\"}", (NR > 1 ? "," : ""), $1 } END { print "]}" }')
  curl -fs -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$port/hourglass.v1.HourglassService/ScheduleBatch" >/dev/null
done
start=$(date +%s)
until [ "$(metric hourglass_queue_appended_total)" -ge "$topics" ]; do
  if [ $(($(date +%s) - start)) -gt 60 ]; then echo "only $(metric hourglass_queue_appended_total) of $topics messages reached the queue in 60 s"; exit 1; fi
  sleep 0.2
done
sample "open (just delivered)"
echo "waiting for the topics and their engine lanes to go idle (--topic-idle-timeout $idle)..."
start=$(date +%s)
until { [ "$(metric go_goroutines)" -le $((g0 + 20)) ] && [ "$(ls "/proc/$pid/fd" | wc -l)" -le $((fd0 + 20)) ]; } ||
  [ $(($(date +%s) - start)) -gt 120 ]; do sleep 1; done
sample "idle (after $(($(date +%s) - start)) s)"

#!/usr/bin/env bash
# Makes an upgrade fixture: a data directory written by a given hourglass
# binary (the build of main named in README.md), packed as DATE.tar.gz with
# its manifest. Run once per fixture; later builds must open what it wrote.
#   bash testdata/upgrade/make.sh /path/to/old/hourglass 2026-12-05
set -euo pipefail
bin=$1 name=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d) D="$work/data"
port=$((20000 + RANDOM % 20000))
export HOURGLASS_ADDR="http://127.0.0.1:$port"
"$bin" serve --data-dir "$D" --listen "127.0.0.1:$port" --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "$HOURGLASS_ADDR/readyz" >/dev/null && break; sleep 0.1; done
hg() { "$bin" "$@"; }
ids=()
add() { ids+=("\"$1\": \"$2\""); }
# Pending, far ahead, keyed and not.
add pending-keyed "$(hg send --topic orders --at 2030-01-01T09:00:00Z --key order-1 --body one)"
add pending-keyed-2 "$(hg send --topic orders --at 2030-01-01T09:00:00Z --key order-2 --header k=v --body two)"
add pending-plain "$(hg send --topic orders --at 2030-01-01T10:00:00Z --body plain)"
# Cancelled, by ID and by key.
c=$(hg send --topic orders --at 2030-01-02T09:00:00Z --key order-3 --body cancelled)
hg cancel "$c" >/dev/null
add cancelled "$c"
k=$(hg send --topic orders --at 2030-01-02T09:00:00Z --key order-4 --body cancelled-by-key)
hg cancel --topic orders --key order-4 >/dev/null
add cancelled-by-key "$k"
# Rescheduled: the old ID and its replacement.
r=$(hg send --topic orders --at 2030-01-03T09:00:00Z --key order-5 --body moved)
nr=$(hg reschedule "$r" --at 2030-02-01T09:00:00Z | awk '{print $(NF-1)}')
add rescheduled "$r"
add rescheduled-to "$nr"
# Due: acked, and waiting in the queue.
add acked "$(hg send --topic jobs --now --key job-1 --body acked)"
hg recv --topic jobs --count 1 --timeout 10s >/dev/null
add due "$(hg send --topic jobs --now --key job-2 --body due)"
# Dead-lettered, and retried under a backoff-free nack with a delay.
add dead "$(hg send --topic work --now --key work-1 --body dead)"
got=$(hg recv --topic work --count 1 --timeout 10s --no-ack)
hg nack "$(echo "$got" | sed 's/.*"id":"\([0-9a-f]*\)".*/\1/')" --topic work --dead-letter --reason broken >/dev/null
add retried "$(hg send --topic work --now --key work-2 --body retried)"
got=$(hg recv --topic work --count 1 --timeout 10s --no-ack)
hg nack "$(echo "$got" | sed 's/.*"id":"\([0-9a-f]*\)".*/\1/')" --topic work --delay 87600h --reason later >/dev/null
# A policy, a paused topic, a recurring schedule.
hg policy set work --max-attempts 5 --backoff 1s:1m:2:0 >/dev/null
hg pause paused >/dev/null
add paused "$(hg send --topic paused --now --body paused)"
hg schedule create daily --topic reports --spec '0 9 * * *' --tz Europe/Berlin --body report >/dev/null
kill -TERM $pid; wait $pid || true
trap - EXIT
printf '{\n  "binary": "%s",\n  "ids": {\n    %s\n  }\n}\n' "$("$bin" --help >/dev/null 2>&1; git -C "$here" rev-parse --short HEAD)" \
  "$(IFS=$'\n'; echo "${ids[*]}" | paste -sd, | sed 's/,/,\n    /g')" > "$D/manifest.json"
tar -C "$work" -S -czf "$here/$name.tar.gz" data
rm -rf "$work"
echo "wrote $here/$name.tar.gz"

#!/usr/bin/env bash
# bench-cluster.sh: schedule throughput of `serve --cluster` with 1 and with
# 3 Hourglass nodes, against a 3-node NATS JetStream cluster (R3), all on
# 127.0.0.1 of this machine. Bounded: --messages per run (default 100000).
#
#   scripts/bench-cluster.sh [MESSAGES] [SCENARIO]     # SCENARIO batch (default), single or lateness
#   NODES=1 scripts/bench-cluster.sh ...               # only the 1-node run (NODES=3: only 3 nodes)
#   CLIENTS=64 scripts/bench-cluster.sh ...            # load generator goroutines (default 24)
#   PROTOCOL=stream scripts/bench-cluster.sh ...       # grpc (unary, default), connect or stream
#   MAX_CALLS=2 scripts/bench-cluster.sh N single      # grpc single through the Go client with WithMaxCalls(2),
#                                                      # its default (merges Schedules beyond 2 in flight); default 0
#   HOURGLASS_BIN=PATH scripts/bench-cluster.sh ...    # run that hourglass binary instead of building one
#                                                      # (compare two builds side by side)
#   WINDOW=20s scripts/bench-cluster.sh N lateness     # N messages due over WINDOW, consumed on every node
#   KILL=hourglass|nats KILL_AFTER=S ...               # kill -9 the second Hourglass node (or NATS node n1)
#                                                      # S seconds after the run starts (3-node runs only)
#   LEASE_TTL=10s ...                                  # the nodes' --lease-ttl (default 10s)
#   PROFILE=DIR ...                                    # nodes with --pprof; DIR/<nodes>n-cpu.pprof: the first node's
#                                                      # CPU profile over the first PROFILE_SECONDS (default 5) of the bench
#
# After each bench it prints the intake messages stored (JetStream publishes of Schedules) and the
# messages per publish, from the NATS servers' monitoring endpoint.
#
# Every process it starts is stopped by its PID at the end.
set -euo pipefail
N=${1:-100000}
SCEN=${2:-batch}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/hg-bench-cluster.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

cd "$ROOT"
if [ -n "${HOURGLASS_BIN:-}" ]; then cp "$HOURGLASS_BIN" "$WORK/hourglass"; else go build -o "$WORK/hourglass" ./cmd/hourglass; fi
go build -o "$WORK/hourglass-bench" ./cmd/hourglass-bench
NATS=${HOURGLASS_NATS_SERVER:-$WORK/nats-server}
[ -x "$NATS" ] || go build -o "$NATS" github.com/nats-io/nats-server/v2

# Three NATS nodes with JetStream, one cluster.
CP=(16221 16222 16223); RP=(16231 16232 16233); MP=(16241 16242 16243)
ROUTES="nats-route://127.0.0.1:${RP[0]},nats-route://127.0.0.1:${RP[1]},nats-route://127.0.0.1:${RP[2]}"
URLS="nats://127.0.0.1:${CP[0]},nats://127.0.0.1:${CP[1]},nats://127.0.0.1:${CP[2]}"
start_nats() {
  for i in 0 1 2; do
    mkdir -p "$WORK/nats$i"
    cat > "$WORK/nats$i/nats.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:${CP[$i]}
http: 127.0.0.1:${MP[$i]}
jetstream { store_dir: "$WORK/nats$i/js" }
cluster { name: hgbench, listen: 127.0.0.1:${RP[$i]}, routes: [$ROUTES] }
CONF
    "$NATS" -c "$WORK/nats$i/nats.conf" > "$WORK/nats$i/log" 2>&1 &
    PIDS+=($!)
  done
  for i in 0 1 2; do
    # /healthz is 200 once JetStream is current with the meta leader.
    for _ in $(seq 1 600); do
      curl -sf "http://127.0.0.1:${MP[$i]}/healthz" >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
}

cpu_ms() { # cpu_ms PID...: user + system CPU of the live ones, in ms
  local t=0 f
  for p in "$@"; do
    f=$(cut -d' ' -f14,15 "/proc/$p/stat" 2>/dev/null) || continue
    t=$(( t + ${f% *} + ${f#* } ))
  done
  echo $(( t * 1000 / $(getconf CLK_TCK) ))
}

run() { # run NODES: start NODES hourglass nodes on a fresh NATS cluster, bench, stop
  local nodes=$1 addrs="" hgp=()
  start_nats
  start_node() { # start_node I: hourglass node I on port 17520+I
    "$WORK/hourglass" serve --cluster "$URLS" --listen 127.0.0.1:$((17520+$1)) --data-dir "$WORK/hg$nodes-$1" \
      --node-id "hg$1" --replicas 3 --partitions 8 --default-lease 1m --lease-ttl "${LEASE_TTL:-10s}" ${PROFILE:+--pprof} >> "$WORK/hg$nodes-$1.log" 2>&1 &
    PIDS+=($!); hgp[$1]=$!
  }
  for i in $(seq 0 $((nodes-1))); do
    start_node "$i"
    addrs="${addrs:+$addrs,}http://127.0.0.1:$((17520+i))"
  done
  for i in $(seq 0 $((nodes-1))); do
    for attempt in 1 2; do
      for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$((17520+i))/readyz" >/dev/null && break
        kill -0 "${hgp[$i]}" 2>/dev/null || break
        sleep 0.1
      done
      kill -0 "${hgp[$i]}" 2>/dev/null && break
      # A node can give up at start while JetStream is still electing
      # leaders on a loaded machine: say why and start it once more.
      echo "node hg$i exited at start (attempt $attempt):"; tail -2 "$WORK/hg$nodes-$i.log"
      [ "$attempt" = 1 ] && start_node "$i"
    done
  done
  # Let the partitions spread (a node gives up what is over its share within a lease TTL/3).
  sleep 5
  echo "== $nodes node(s): $addrs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  local extra=() killer=""
  [ "$SCEN" = lateness ] && extra=(--window "${WINDOW:-20s}" --grace 90s) # past the 1m lease: a redelivery counts
  if [ -n "${KILL:-}" ] && [ "$nodes" = 3 ]; then
    local victim
    case "$KILL" in
      hourglass) victim=${hgp[1]} ;;
      nats) victim=${PIDS[1]} ;; # start_nats started n0, n1, n2 first
      *) echo "KILL=$KILL: want hourglass or nats"; exit 2 ;;
    esac
    ( sleep "${KILL_AFTER:-10}"; echo "== $(date -u +%T.%N | cut -c1-12) kill -9 $KILL node (pid $victim)"; kill -9 "$victim" ) &
    killer=$!
  fi
  echo "== $(date -u +%T.%N | cut -c1-12) bench starts"
  local cpu_nats0 cpu_hg0
  cpu_nats0=$(cpu_ms "${PIDS[@]:0:3}"); cpu_hg0=$(cpu_ms "${hgp[@]}")
  local profiler=""
  if [ -n "${PROFILE:-}" ]; then
    mkdir -p "$PROFILE"
    curl -sf -o "$PROFILE/${nodes}n-cpu.pprof" "http://127.0.0.1:17520/debug/pprof/profile?seconds=${PROFILE_SECONDS:-5}" &
    profiler=$!
  fi
  "$WORK/hourglass-bench" server --addr "$addrs" --scenario "$SCEN" --messages "$N" --clients "${CLIENTS:-24}" --protocol "${PROTOCOL:-grpc}" --max-calls "${MAX_CALLS:-0}" --timeout 5m "${extra[@]}" || true
  [ -n "$killer" ] && wait "$killer" 2>/dev/null || true
  [ -n "$profiler" ] && { wait "$profiler" || echo "== no profile (node 0's /debug/pprof/profile failed)"; }
  # CPU the servers used during the bench (not measured when one is killed).
  [ -z "$killer" ] && echo "== CPU during the bench: NATS servers $(( $(cpu_ms "${PIDS[@]:0:3}") - cpu_nats0 )) ms, Hourglass nodes $(( $(cpu_ms "${hgp[@]}") - cpu_hg0 )) ms"
  # Intake messages stored: each HG_IN_<p>'s count (the largest any NATS server reports).
  local stored
  stored=$(for i in 0 1 2; do curl -sf "http://127.0.0.1:${MP[$i]}/jsz?accounts=true&streams=true"; echo; done | python3 -c '
import json, sys
most = {}
def walk(v):
    if isinstance(v, dict):
        if str(v.get("name", "")).startswith("HG_IN_") and isinstance(v.get("state"), dict):
            most[v["name"]] = max(most.get(v["name"], 0), v["state"].get("messages", 0))
        for x in v.values(): walk(x)
    elif isinstance(v, list):
        for x in v: walk(x)
text, dec, i = sys.stdin.read(), json.JSONDecoder(), 0
while text[i:].strip():
    i += len(text[i:]) - len(text[i:].lstrip())
    doc, i = dec.raw_decode(text, i)
    walk(doc)
print(sum(most.values()))' 2>/dev/null || true)
  [ "$SCEN" = single ] && [ "${stored:-0}" -gt 0 ] && echo "== intake messages stored: $stored, $(( N / stored )) Schedules per publish"
  for i in $(seq 0 $((nodes-1))); do tail -3 "$WORK/hg$nodes-$i.log" | grep -i "error\|refus" || true; done
  for p in "${hgp[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  rm -rf "$WORK"/nats? "$WORK"/hg$nodes-*
}
# NODES="1 3" (default) or one of them; ONLY3=1 is NODES=3.
for nodes in ${NODES:-$([ "${ONLY3:-}" ] && echo 3 || echo 1 3)}; do run "$nodes"; done

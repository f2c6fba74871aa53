#!/bin/bash
# prod.sh BIN TAG [prof]: 600,000 keyed messages in batches of 100 from 4 clients, due 1-2 h ahead, server --fsync always
BIN=$1; TAG=$2
D=$(mktemp -d /tmp/prof/d.XXXX)
$BIN serve --data-dir $D --listen 127.0.0.1:7520 --fsync always --pprof > $D.log 2>&1 &
P=$!
for i in $(seq 100); do curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:7520/readyz 2>/dev/null | grep -q 200 && break; sleep 0.05; done
if [ "$3" = prof ]; then (sleep 1; curl -s -o /tmp/prof/$TAG.prof "http://127.0.0.1:7520/debug/pprof/profile?seconds=4") & fi
T0=$(awk '{print $14+$15}' /proc/$P/stat)
$BIN bench server --addr http://127.0.0.1:7520 --scenario backlog --messages 600000 --keys --batch 100 --clients 4 --body-size 256 --spread 1h --json 2>/dev/null | tail -1 > /tmp/prof/$TAG.json
T1=$(awk '{print $14+$15}' /proc/$P/stat)
wait %2 2>/dev/null
kill $P; wait $P 2>/dev/null; rm -rf $D $D.log
python3 -c "import json;j=json.load(open('/tmp/prof/$TAG.json'));print('$TAG', 'server_cpu_us_per_msg', ($T1-$T0)*1e4/600000, {k:j[k] for k in j if k in ('schedule_per_sec','errors')})"

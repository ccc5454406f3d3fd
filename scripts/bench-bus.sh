#!/usr/bin/env bash
# Cross-instance delivery, measured from outside: one redis-server, two
# rtserver instances on it (redis.bus single), subscribers on B and
# publishers on A. Prints rtbench fanout's JSON for each window given.
#
#   scripts/bench-bus.sh [-p 100] [-s 1000] [-t 100] [-d 5s] [-b] [windows...]
#
# Defaults: the 100 topics x 10 subscribers shape, windows 64 8 2 1. With
# -b, each window is also run against a third instance without Redis
# (publishers and subscribers on it), the single-instance baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
p=100 s=1000 t=100 d=5s size=100 baseline=""
while getopts p:s:t:d:b o; do
  case $o in p) p=$OPTARG ;; s) s=$OPTARG ;; t) t=$OPTARG ;; d) d=$OPTARG ;; b) baseline=1 ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
windows=("${@:-64 8 2 1}")
windows=(${windows[*]})

tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/rtserver" ./cmd/rtserver
go build -o "$tmp/rtbench" ./cmd/rtbench
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rp=$(port) ap=$(port) bp=$(port) cp=$(port)
redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
rpid=$!
until redis-cli -p "$rp" ping >/dev/null 2>&1; do sleep 0.1; done
export RTSERVER_REDIS_URL=redis://127.0.0.1:$rp RTSERVER_HANDSHAKE_PERTICKBUDGET=0 RTSERVER_HANDSHAKE_MAXCONCURRENT=0
"$tmp/rtserver" --listen 127.0.0.1:$ap --log-level warn >"$tmp/a.log" 2>&1 &
apid=$!
"$tmp/rtserver" --listen 127.0.0.1:$bp --log-level warn >"$tmp/b.log" 2>&1 &
bpid=$!
if [ -n "$baseline" ]; then
  env -u RTSERVER_REDIS_URL "$tmp/rtserver" --listen 127.0.0.1:$cp --log-level warn >"$tmp/c.log" 2>&1 &
  cpid=$!
  until curl -fs "http://127.0.0.1:$cp/readyz" >/dev/null; do sleep 0.1; done
fi
for hp in $ap $bp; do until curl -fs "http://127.0.0.1:$hp/readyz" >/dev/null; do sleep 0.1; done; done
for w in "${windows[@]}"; do
  before=$(awk '{print $14+$15}' /proc/$rpid/stat)
  "$tmp/rtbench" fanout --json --url ws://127.0.0.1:$bp/ws --pub-url ws://127.0.0.1:$ap/ws \
    -p "$p" -s "$s" -t "$t" --size "$size" --duration "$d" --window "$w" \
    --server-pid $bpid --pub-server-pid $apid
  after=$(awk '{print $14+$15}' /proc/$rpid/stat)
  printf '{"window":%s,"redisCpuSeconds":%.2f}\n' "$w" "$(echo "($after-$before)/$(getconf CLK_TCK)" | bc -l)"
  if [ -n "$baseline" ]; then
    echo "baseline (one instance, no Redis), window $w:"
    "$tmp/rtbench" fanout --json --url ws://127.0.0.1:$cp/ws -p "$p" -s "$s" -t "$t" --size "$size" \
      --duration "$d" --window "$w" --server-pid $cpid
  fi
  curl -fs "http://127.0.0.1:$ap/metrics" | grep '^bus_messages_dropped_total' | sed 's/^/A /' || true
  curl -fs "http://127.0.0.1:$bp/metrics" | grep '^bus_messages_dropped_total' | sed 's/^/B /' || true
done

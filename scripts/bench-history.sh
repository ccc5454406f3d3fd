#!/usr/bin/env bash
# History's CPU budgets: the same build with and without history on the
# fan-out topics' namespace, interleaved (off, on, off, on, ...), a fresh
# server per run, medians and on/off ratios (BENCHMARKS.md, "History").
#
# Usage: scripts/bench-history.sh
# Environment:
#   RUNS=3          runs per regime and configuration
#   DURATION=3s     publishing time of each run
#   REGIMES="fan1000 rooms redis-rooms redis-pub"   a subset to run
#   KEEP=dir        keep every run's JSON there
#   PORT=18631      the server's loopback port (the next one is for the redis-server of the redis-* regimes)
# The redis-* regimes start a redis-server of their own.
set -euo pipefail
runs=${RUNS:-3}
dur=${DURATION:-3s}
regimes=${REGIMES:-fan1000 rooms redis-rooms redis-pub}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/bench-history.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
out=${KEEP:-$tmp/out}
mkdir -p "$out"
go build -o "$tmp/rtserver" ./cmd/rtserver
go build -o "$tmp/rtbench" ./cmd/rtbench

port=${PORT:-18631}
rport=$((port + 1))
wait_port() {
	for _ in $(seq 1 200); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	echo "nothing listens on port $1" >&2
	return 1
}

# Configurations: off (no history), on (history on rtbench.*, where
# rtbench fanout's topics are); the redis ones add the Redis bus.
ns='topics:\n  namespaces:\n    - {pattern: "rtbench.*", subscribe: [any], publish: [any]%s}\n'
hist=', history: {size: 1000, ttl: 2m}'
printf "listen: 127.0.0.1:$port\n$ns" '' > "$tmp/off.yaml"
printf "listen: 127.0.0.1:$port\n$ns" "$hist" > "$tmp/on.yaml"
printf "listen: 127.0.0.1:$port\nredis: {url: \"redis://127.0.0.1:$rport\"}\n$ns" '' > "$tmp/redis-off.yaml"
printf "listen: 127.0.0.1:$port\nredis: {url: \"redis://127.0.0.1:$rport\"}\n$ns" "$hist" > "$tmp/redis-on.yaml"

run() { # $1 regime, $2 off|on, $3 run index
	local cfg=$2 shape
	case $1 in
	fan1000) shape=(-p 1 -s 1000 -t 1) ;;
	rooms) shape=(-p 100 -s 1000 -t 100 --own-topics) ;;
	redis-rooms) shape=(-p 100 -s 1000 -t 100 --own-topics) cfg=redis-$2 ;;
	redis-pub) shape=(-p 100 -s 100 -t 100 --own-topics) cfg=redis-$2 ;;
	esac
	local rp=
	if [[ $cfg == redis-* ]]; then
		redis-server --port $rport --bind 127.0.0.1 --save '' --appendonly no --loglevel warning >/dev/null 2>&1 &
		rp=$!
		wait_port $rport
	fi
	"$tmp/rtserver" --config "$tmp/$cfg.yaml" >/dev/null 2>&1 &
	local sp=$!
	wait_port $port
	"$tmp/rtbench" fanout --url ws://127.0.0.1:$port/ws "${shape[@]}" --size 100 --duration "$dur" --server-pid $sp --max-time 90s --json > "$out/$1.$2.$3.json" || true
	kill $sp; wait $sp 2>/dev/null || true
	if [ -n "$rp" ]; then kill $rp; wait $rp 2>/dev/null || true; fi
}

echo "history off vs on, $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ', modified'); runs $runs, $dur each"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$runs"); do
	for r in $regimes; do
		for c in off on; do
			run "$r" "$c" "$i"
		done
	done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "$runs" "$regimes" <<'EOF'
import sys
sys.path.insert(0, "scripts")
from benchtable import table
out, runs, regimes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
cpu = lambda j: j["serverCpuSecondsPerMillionDelivered"]
rows = {
    "fan1000": [("memory: 1 -> 1,000, 64 in flight: server CPU s per million delivered", cpu),
                ("memory: 1 -> 1,000: delivered/s", lambda j: j["deliveredPerSec"])],
    "rooms": [("memory: 100 x 10, a publisher per topic: server CPU s per million", cpu),
              ("memory: 100 x 10: delivered/s", lambda j: j["deliveredPerSec"])],
    "redis-rooms": [("redis: 100 x 10, a publisher per topic: server CPU s per million", cpu),
                    ("redis: 100 x 10: publishes/s", lambda j: j["publishedPerSec"])],
    "redis-pub": [("redis: 100 topics x 1, 64 in flight each: server CPU s per million", cpu),
                  ("redis: 100 topics x 1: publishes/s", lambda j: j["publishedPerSec"])],
}
table(out, runs, regimes, rows, "off", "on")
EOF

#!/usr/bin/env bash
# rtserver against a plain socket.io server (server.js, socket.io from the
# npm registry at the version package-lock.json pins), driven by the same
# load generator (cmd/rtbench; --socketio speaks Engine.IO v4 over its
# websocket transport): the Socket.IO column of BENCHMARKS.md. Runs are
# interleaved (socketio, rtserver, rtserver, socketio, ...), a fresh server
# per run, and printed as one table of medians and rtserver/socketio
# ratios. On a shared machine the absolute figures drift with the load;
# the ratios within one run are what to quote.
#
# Usage: bench/socketio/compare.sh
# Environment:
#   RUNS=3        runs per regime and server (the table shows medians)
#   DURATION=3s   publishing time of each fan-out run
#   REGIMES="fan1000 window1 rooms sparse idle"   a subset to run
#   KEEP=dir      keep every run's JSON there
#   PORT=18631    first of the two loopback ports (rtserver, socket.io)
# Needs go, node and npm (npm ci installs socket.io here, into
# node_modules, which git ignores), python3. Builds into /tmp.
set -euo pipefail
runs=${RUNS:-3}
dur=${DURATION:-3s}
regimes=${REGIMES:-fan1000 window1 rooms sparse idle}
rtport=${PORT:-18631}
sioport=$((rtport + 1))
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
tmp=$(mktemp -d /tmp/bench-socketio.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
out=${KEEP:-$tmp/out}
mkdir -p "$out"

[ -d "$here/node_modules/socket.io" ] || (cd "$here" && npm ci --no-audit --no-fund >/dev/null)
go build -o "$tmp/rtserver" ./cmd/rtserver
go build -o "$tmp/rtbench" ./cmd/rtbench
bench=$tmp/rtbench
printf 'listen: 127.0.0.1:%s\nhandshake: {maxConnections: 20000}\n' "$rtport" > "$tmp/rt.yaml"

wait_port() { # $1 port: until the server accepts
	for _ in $(seq 1 400); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	echo "server on port $1 did not start" >&2
	return 1
}

start_server() { # $1 rtserver or socketio; sets sp, url and flags
	if [ "$1" = rtserver ]; then
		"$tmp/rtserver" --config "$tmp/rt.yaml" >/dev/null 2>&1 &
		sp=$!
		url=ws://127.0.0.1:$rtport/ws
		flags=()
		wait_port "$rtport"
	else
		PORT=$sioport node "$here/server.js" >/dev/null 2>&1 &
		sp=$!
		url="ws://127.0.0.1:$sioport/socket.io/?EIO=4&transport=websocket"
		flags=(--socketio)
		wait_port "$sioport"
	fi
}

stop_server() {
	kill "$sp" 2>/dev/null || true
	wait "$sp" 2>/dev/null || true
}

run_regime() { # $1 regime, $2 server, $3 run index: writes $out/$1.$2.$3.json
	local f=$out/$1.$2.$3.json
	start_server "$2"
	case $1 in
	fan1000 | window1 | rooms | sparse)
		local shape
		case $1 in
		fan1000) shape=(-p 1 -s 1000 -t 1) ;;
		window1) shape=(-p 1 -s 1000 -t 1 --window 1) ;;
		rooms) shape=(-p 100 -s 1000 -t 100 --own-topics) ;;
		sparse) shape=(-p 100 -s 1000 -t 100 --own-topics --rate 2000) ;;
		esac
		"$bench" fanout "${flags[@]}" --url "$url" "${shape[@]}" --size 100 --duration "$dur" --server-pid "$sp" --max-time 90s --json > "$f" || true
		;;
	idle)
		"$bench" idle "${flags[@]}" --url "$url" -n 10000 -c 100 --settle 5s --server-pid "$sp" --max-time 120s --json > "$f" || true
		;;
	esac
	stop_server
}

echo "rtserver $(git rev-parse --short HEAD) vs socket.io $(node -p "require('$here/node_modules/socket.io/package.json').version") on node $(node --version); runs $runs, fan-out $dur each"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$runs"); do
	for r in $regimes; do
		order="socketio rtserver"
		if [ $((i % 2)) -eq 0 ]; then order="rtserver socketio"; fi
		for s in $order; do
			run_regime "$r" "$s" "$i"
		done
	done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "$runs" "$regimes" <<'PY'
import sys
sys.path.insert(0, "scripts")
from benchtable import table
out, runs, regimes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
rows = {
    "fan1000": [("1 -> 1,000, 64 in flight: server CPU s per million delivered", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
                ("1 -> 1,000, 64 in flight: delivered/s", lambda j: j["deliveredPerSec"])],
    "window1": [("1 -> 1,000, one at a time: server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
                ("1 -> 1,000, one at a time: latency p50 ms", lambda j: j["latency"]["p50Ms"])],
    "rooms": [("100 x 10, a publisher per topic, 64 in flight: server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
              ("100 x 10, a publisher per topic, 64 in flight: delivered/s", lambda j: j["deliveredPerSec"])],
    "sparse": [("100 x 10 sparse (20 msg/s per publisher): server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
               ("100 x 10 sparse: latency p50 ms", lambda j: j["latency"]["p50Ms"]),
               ("100 x 10 sparse: latency p99 ms", lambda j: j["latency"]["p99Ms"])],
    "idle": [("idle at 10k: KiB RSS per connection", lambda j: j["serverRssPerConnBytes"] / 1024)],
}
table(out, runs, regimes, rows, "socketio", "rtserver")
PY

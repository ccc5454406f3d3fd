#!/usr/bin/env bash
# Storm isolation: how much a connect storm slows the clients already
# connected, measured so that the load generator's own work cannot be
# mistaken for the server's (BENCHMARKS.md, "Storm isolation").
#
# rtserver and a probe process (20 established clients doing publish round
# trips on private topics, 1,000/s) share core 0; the storm (5,000 upgrade
# attempts from 256 dialers, each connection held 100 ms) and a bare 503
# responder run on core 1 (rtbench storm runs the two processes). Each run prints the probes' p99 before the storm
# (quiet) and during it, and their ratio; a control run aims the same storm
# at the 503 responder instead, which rtserver never sees.
#
# Usage: scripts/storm-isolation.sh [runs] (default 3). Needs taskset
# (util-linux) and python3; builds the binaries into a temporary folder.
# RTSERVER=path measures that server binary instead (to compare builds).
set -euo pipefail
runs=${1:-3}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/rtserver" ./cmd/rtserver
go build -o "$tmp/rtbench" ./cmd/rtbench
srv=${RTSERVER:-$tmp/rtserver}
port=18451 ctl=19503
printf 'listen: 127.0.0.1:%s\nhandshake:\n  maxConnections: 500\n  perTickBudget: 50\n  tick: 10ms\n  maxQueueWait: 200ms\n' "$port" > "$tmp/storm.yaml"

factor() { # probe JSON -> "quiet p99, storm p99, factor"
	python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["probe"]; print("quiet p99 %.2f ms, storm p99 %.2f ms, factor %.1f" % (p["baseline"]["p99Ms"], p["storm"]["p99Ms"], p["p99Factor"]))' "$1"
}

run() { # $1: rtserver or control
	taskset -c 0 "$srv" --config "$tmp/storm.yaml" >/dev/null 2>>"${SERVER_LOG:-/dev/null}" &
	local sp=$!
	taskset -c 1 "$tmp/rtbench" serve503 --listen "127.0.0.1:$ctl" --max-time 120s >/dev/null 2>&1 &
	local cp=$!
	sleep 1
	# rtbench storm: the probes in a process of their own on core 0, the
	# storm in another on core 1, aimed at rtserver or at the 503 responder.
	local target=$port pid=$sp
	if [ "$1" = control ]; then target=$ctl pid=$cp; fi
	"$tmp/rtbench" storm --url "ws://127.0.0.1:$port/ws" --storm-url "ws://127.0.0.1:$target/ws" --server-pid "$pid" \
		--probe-cpu 0 --storm-cpu 1 --max-time 50s --json > "$tmp/storm.json"
	kill "$cp" "$sp"
	wait "$cp" "$sp" 2>/dev/null || true
	echo "$1: $(factor "$tmp/storm.json"); storm server CPU $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverCpuUsPerAttempt"])' "$tmp/storm.json") us/attempt"
}

for i in $(seq 1 "$runs"); do
	run rtserver
	run control
done

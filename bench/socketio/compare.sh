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
# shellcheck source=bench/regimes.sh
. "$here/../regimes.sh"
printf 'listen: 127.0.0.1:%s\nhandshake: {maxConnections: 20000}\n' "$rtport" > "$tmp/rt.yaml"

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

echo "rtserver $(git rev-parse --short HEAD) vs socket.io $(node -p "require('$here/node_modules/socket.io/package.json').version") on node $(node --version); runs $runs, fan-out $dur each"
compare socketio

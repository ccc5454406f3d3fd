#!/usr/bin/env bash
# rtserver against Centrifugo (the version below, installed from the Go
# module proxy with `go install`, configured by config.yaml beside this
# script), driven by the same load generator (cmd/rtbench; --centrifugo
# speaks Centrifugo's JSON client protocol over /connection/websocket):
# the Centrifugo column of BENCHMARKS.md. Runs are interleaved (centrifugo,
# rtserver, rtserver, centrifugo, ...), a fresh server per run, and
# printed as one table of medians and rtserver/centrifugo ratios, as
# BENCHMARKS.md gives them. On a
# shared machine the absolute figures drift with the load; the ratios
# within one run are what to quote.
#
# Usage: bench/centrifugo/compare.sh
# Environment:
#   RUNS=3        runs per regime and server (the table shows medians)
#   DURATION=3s   publishing time of each fan-out run
#   REGIMES="fan1000 window1 rooms sparse idle connect"   a subset to run
#   KEEP=dir      keep every run's JSON there
#   PORT=18641    first of the two loopback ports (rtserver, centrifugo)
#   CENTRIFUGO=path   a centrifugo binary to use instead of installing
#   CENTRIFUGO_VERSION=v6.9.1   the version go install fetches
# Needs go and python3. Builds and installs into /tmp; nothing is left in
# the repository.
set -euo pipefail
runs=${RUNS:-3}
dur=${DURATION:-3s}
regimes=${REGIMES:-fan1000 window1 rooms sparse idle connect}
rtport=${PORT:-18641}
cfport=$((rtport + 1))
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
tmp=$(mktemp -d /tmp/bench-centrifugo.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
out=${KEEP:-$tmp/out}
mkdir -p "$out"

cf=${CENTRIFUGO:-}
cfname="centrifugo $cf"
if [ -z "$cf" ]; then
	cfversion=${CENTRIFUGO_VERSION:-v6.9.1}
	GOBIN=$tmp/bin go install "github.com/centrifugal/centrifugo/v6@$cfversion"
	cf=$tmp/bin/centrifugo
	cfname="centrifugo $cfversion (go install; its own version line says v0.0.0)"
fi
go build -o "$tmp/rtserver" ./cmd/rtserver
go build -o "$tmp/rtbench" ./cmd/rtbench
bench=$tmp/rtbench
# shellcheck source=bench/regimes.sh
. "$here/../regimes.sh"
# The connect flood: far more attempts than a cap of 21 admits, on both.
cap=21
printf 'listen: 127.0.0.1:%s\nhandshake: {maxConnections: 20000}\n' "$rtport" > "$tmp/rt.yaml"
printf 'listen: 127.0.0.1:%s\nhandshake: {maxConnections: %s}\n' "$rtport" "$cap" > "$tmp/rtcap.yaml"

start_server() { # $1 rtserver or centrifugo, $2 regime; sets sp, url and flags
	if [ "$1" = rtserver ]; then
		local conf=$tmp/rt.yaml
		if [ "$2" = connect ]; then conf=$tmp/rtcap.yaml; fi
		"$tmp/rtserver" --config "$conf" >/dev/null 2>&1 &
		sp=$!
		url=ws://127.0.0.1:$rtport/ws
		flags=()
		wait_port "$rtport"
	else
		local limit=0
		if [ "$2" = connect ]; then limit=$cap; fi
		CENTRIFUGO_HTTP_SERVER_PORT=$cfport CENTRIFUGO_CLIENT_CONNECTION_LIMIT=$limit \
			"$cf" --config "$here/config.yaml" >/dev/null 2>&1 &
		sp=$!
		url=ws://127.0.0.1:$cfport/connection/websocket
		flags=(--centrifugo)
		wait_port "$cfport"
	fi
}

echo "rtserver $(git rev-parse --short HEAD) vs $cfname on $(go env GOVERSION); runs $runs, fan-out $dur each"
compare centrifugo

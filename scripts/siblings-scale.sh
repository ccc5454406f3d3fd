#!/usr/bin/env bash
# The cluster view at fleet scale (BENCHMARKS.md, "Cluster view at fleet
# scale"): one real rtserver on a local redis-server, and rtbench siblings
# simulating N other instances that each send their rate envelope once per
# publishInterval (default settings: 250ms, top 20, merged mode). For each N it prints one
# table row: the server's CPU (% of a core, and per envelope net of its
# idle CPU), RSS, whether its view is right (every sibling counted, the hot
# topic spread over them summed exactly), the fleet-wide Redis egress N+1
# such instances would cause, and how long silent siblings take to leave
# the view, and how long after the hot publisher starts the view has all
# of it (catch).
#
# Usage: scripts/siblings-scale.sh [sibling counts...] (default 10 100 300
# 1000). DURATION (default 30s) is each run's sending time, SECRET signs
# the envelopes, CHURN (default 0.2) is the share of each slice renamed per
# interval, MODE (default merged) is publishRate.mode: in merged mode the
# server is the merging instance (the simulated siblings send their slices
# to it, and the egress counts the merged views every instance would get),
# MODE=broadcast makes it one of a fleet where every slice reaches
# every instance; INTERVAL (default 250ms) is publishRate.publishInterval.
# Needs redis-server and python3; builds into a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."
counts=("${@:-10 100 300 1000}")
read -r -a counts <<< "${counts[*]}"
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/rtserver" ./cmd/rtserver
go build -o "$tmp/rtbench" ./cmd/rtbench
rport=18479 port=18480
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
sleep 0.5
echo "| siblings | server CPU (% of a core) | per envelope | RSS | fleet egress | view correct | stale after | catch |"
echo "|---|---|---|---|---|---|---|---|"
for n in "${counts[@]}"; do
	RTSERVER_LISTEN=127.0.0.1:$port RTSERVER_REDIS_URL=redis://127.0.0.1:$rport \
		RTSERVER_PUBLISHRATE_HMACSECRET="${SECRET:-}" RTSERVER_PUBLISHRATE_MAXINSTANCES=$((n + 100)) \
		RTSERVER_PUBLISHRATE_MODE="${MODE:-merged}" RTSERVER_PUBLISHRATE_PUBLISHINTERVAL="${INTERVAL:-250ms}" \
		"$tmp/rtserver" >/dev/null 2>&1 &
	sp=$!
	sleep 1
	"$tmp/rtbench" siblings --redis-url "redis://127.0.0.1:$rport" --metrics-url "http://127.0.0.1:$port/metrics" \
		--mode "${MODE:-merged}" --interval "${INTERVAL:-250ms}" -n "$n" --duration "${DURATION:-30s}" --churn "${CHURN:-0.2}" --secret "${SECRET:-}" --server-pid "$sp" --stale --json > "$tmp/r.json"
	kill "$sp"
	wait "$sp" 2>/dev/null || true
	python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
catch = "%.1f s" % r["catchSeconds"] if r["caught"] else "NOT within 3 intervals"
if r.get("userCatchSeconds"):
    catch += " (user in a view: %.1f s; views of %.1f KB)" % (r["userCatchSeconds"], r.get("viewBytesMean", 0) / 1e3)
print("| %d | %.2f (idle %.2f) | %.1f µs | %.1f MiB | %.1f MB/s | %s | %.1f s | %s |" % (r["siblings"], r.get("serverCpuPercentOfCore", 0), r.get("serverIdleCpuPercentOfCore", 0),
      r.get("serverCpuPerEnvelopeUs", 0), r.get("serverRssBytes", 0) / 2**20, r["fleetEgressMBps"], "yes" if r["viewCorrect"] else "NO", r.get("staleSeconds", 0), catch))' "$tmp/r.json"
done

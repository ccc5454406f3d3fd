#!/usr/bin/env bash
# Bad days, the long variants: what the short matrix in the test suite
# (go test -run 'TestBadDay' ./e2e) checks, at the sizes an incident has,
# through the built binary on a real redis-server. See docs/operations.md,
# "Bad days".
#
# Usage: scripts/bad-days.sh [scenario...] (default: storm matrix rolling)
#   matrix  the suite's three-instance matrix (Redis black-holed, slowed
#           to 200 ms, restarted empty), its figures logged
#   rolling a rolling restart of three instances while N clients (default
#           3,000) stay subscribed to a history topic and recover
#   churn   presence churn at about 20k diffs/s (published straight to
#           Redis) while the server API disconnects a user on the other
#           instance
#   storm   1,000 clients each recover 1,000 messages (history on Redis) at
#           once, while BURN busy-loop processes (default 4) saturate the
#           CPU; prints the storm's JSON (rtbench recover --watch): the
#           flips of bus_degraded and the /readyz 503s sampled every
#           100 ms, the degraded events the clients got, the recoveries
#           completed and the failures; and the "bus: degraded" lines the
#           server logged.
# Environment: BURN=n busy loops (0: none), N=clients (storm: 1,000;
# rolling: 3,000), MISSED=messages per client (storm), RATE=diffs/s
# (churn), RUNS=runs of each scenario (default 1), PORT=first of the
# loopback ports used (default 23411), RTSERVER=path a server binary to
# use instead of building this tree's.
# Needs go, redis-server and python3; builds into a temporary folder.
set -euo pipefail
if [ $# -eq 0 ]; then set -- storm matrix rolling; fi
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/bad-days.XXXXXX)
burners=()
cleanup() {
	[ -f "$tmp/storm.log" ] && tail -5 "$tmp/storm.log" >&2
	for p in "${burners[@]}"; do kill "$p" 2>/dev/null || true; done
	kill $(jobs -p) 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/rtserver" ./cmd/rtserver
go build -o "$tmp/rtbench" ./cmd/rtbench
srv=${RTSERVER:-$tmp/rtserver}
port=${PORT:-23411}
rport=$((port + 9))
runs=${RUNS:-1}

wait_port() { # $1 port: until something accepts
	for _ in $(seq 1 300); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "nothing listens on $1" >&2
	return 1
}

start_redis() {
	redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning >/dev/null 2>&1 &
	redis_pid=$!
	wait_port "$rport"
}

stop() { # $1 pid
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

burn() { # $1 count: busy loops, in processes of their own
	for _ in $(seq 1 "$1"); do
		sh -c 'while :; do :; done' &
		burners+=($!)
	done
}

unburn() {
	for p in "${burners[@]}"; do stop "$p"; done
	burners=()
}

hist='topics:\n  namespaces:\n    - {pattern: "room:*", subscribe: [any], publish: [any], history: {size: 2000, ttl: 2m}}\n'

storm() { # $1 run
	start_redis
	printf "listen: 127.0.0.1:$port\nredis: {url: \"redis://127.0.0.1:$rport\"}\n$hist" > "$tmp/storm.yaml"
	"$srv" --config "$tmp/storm.yaml" 2> "$tmp/storm.log" &
	local sp=$!
	wait_port "$port"
	burn "${BURN:-4}"
	echo "storm run $1: ${BURN:-4} busy loops; load average $(cut -d' ' -f1-3 /proc/loadavg)"
	"$tmp/rtbench" recover --url "ws://127.0.0.1:$port/ws" -n "${N:-1000}" --missed "${MISSED:-1000}" \
		--prefix room: --server-pid "$sp" --watch "http://127.0.0.1:$port" --max-time 300s --json || true
	echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	unburn
	stop "$sp"
	stop "$redis_pid"
	echo "server logged 'bus: degraded' $(grep -c 'bus: degraded' "$tmp/storm.log" || true) times, 'redis is slow' $(grep -c 'redis is slow' "$tmp/storm.log" || true) times"
}

for s in "$@"; do
	for i in $(seq 1 "$runs"); do
		case $s in
		storm) storm "$i" ;;
		matrix) go test -count=1 -run 'TestBadDayMatrix$' -v ./e2e | grep -E 'badday_|^(---|ok|FAIL)' ;;
		rolling) BADDAY_CLIENTS=${N:-3000} go test -count=1 -timeout 20m -run 'TestBadDayRollingRestart$' -v ./e2e | grep -E 'badday_|^(---|ok|FAIL)' ;;
		churn) BADDAY_CHURN_RATE=${RATE:-20000} go test -count=1 -run 'TestDisconnectUnderPresenceChurn$' -v ./e2e | grep -E 'badday_|^(---|ok|FAIL)' ;;
		*)
			echo "unknown scenario $s" >&2
			exit 2
			;;
		esac
	done
done

#!/usr/bin/env bash
# The performance matrix: every regime that a change to the write path can
# make better or worse, measured for the working tree and one or more base
# builds in interleaved runs (base, new, new, base, base, new, ...: which
# build goes first rotates, so load that rises or falls during a set does
# not always count against the same one), a fresh server per run, and
# printed as one table of medians, new/base ratios and a verdict (worse or
# better only when the runs do not overlap). Every regime reports server
# CPU, throughput (or memory) and send -> receipt latency p50 and p99: a
# change is judged on all three. On a shared machine
# absolute figures drift with the load; the ratios within one run are what
# to quote (BENCHMARKS.md, "The performance matrix").
#
# Usage: scripts/bench-matrix.sh [BASE...]   (BASE: a commit, default main;
#        with several, each gets its own table against the working tree,
#        all from the same interleaved runs; a BASE that is an executable
#        file is taken as an rtserver built before)
# Environment:
#   RUNS=3          runs per regime and build (the table shows medians)
#   DURATION=3s     publishing time of each fan-out run
#   REGIMES="fan1000 window1 rooms roomsraw sparse idle shed storm stormfree"   a subset to run; also,
#                   not run unless named: recover and redis-recover, the recovery
#                   storm on the memory and the Redis history store, and
#                   stormctl, stormfree's storm aimed at a trivial 503
#                   responder (the machine's share of the probes' p99)
#   BASE_BIN=path   an already built base rtserver (one BASE, which then only
#                   labels it)
#   KEEP=dir        keep every run's JSON there
#   PORT=18611      first of the six loopback ports the servers (and the
#                   recovery storm's redis-server, and stormctl's 503
#                   responder) listen on
# Needs go, git, python3 and taskset (util-linux, for the storm), and
# redis-server for redis-recover. Builds
# into a temporary folder under /tmp; nothing is written to the tree.
set -euo pipefail
if [ $# -eq 0 ]; then set -- main; fi
bases=("$@")
runs=${RUNS:-3}
dur=${DURATION:-3s}
regimes=${REGIMES:-fan1000 window1 rooms roomsraw sparse idle shed storm stormfree}
fanport=${PORT:-18611}
idleport=$((fanport + 1))
stormport=$((fanport + 2))
recport=$((fanport + 3))
rport=$((fanport + 4))
ctlport=$((fanport + 5))
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/bench-matrix.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
out=${KEEP:-$tmp/out}
mkdir -p "$out" "$tmp/new"

go build -o "$tmp/new/rtserver" ./cmd/rtserver
go build -o "$tmp/rtbench" ./cmd/rtbench # the working tree's rtbench drives both builds
# Build k of base k is in $tmp/base$k, its runs in $out/REGIME.base$k.RUN.json.
builds=(new)
for k in "${!bases[@]}"; do
	mkdir -p "$tmp/base$k"
	builds+=("base$k")
	if [ -n "${BASE_BIN:-}" ]; then
		cp "$BASE_BIN" "$tmp/base$k/rtserver"
	elif [ -f "${bases[$k]}" ] && [ -x "${bases[$k]}" ]; then
		cp "${bases[$k]}" "$tmp/base$k/rtserver" # an rtserver built before
	else
		rm -rf "$tmp/src" && mkdir -p "$tmp/src"
		git archive "${bases[$k]}" | tar -x -C "$tmp/src"
		(cd "$tmp/src" && go build -o "$tmp/base$k/rtserver" ./cmd/rtserver)
	fi
done
bench=$tmp/rtbench

wait_port() { # $1 port: until the server accepts
	for _ in $(seq 1 200); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	echo "server on port $1 did not start" >&2
	return 1
}

start_server() { # $1 build, $2 config file, [$3 taskset cpu list]; sets sp
	if [ -n "${3:-}" ]; then
		taskset -c "$3" "$tmp/$1/rtserver" --config "$2" >/dev/null 2>&1 &
	else
		"$tmp/$1/rtserver" --config "$2" >/dev/null 2>&1 &
	fi
	sp=$!
}

stop_server() {
	kill "$sp" 2>/dev/null || true
	wait "$sp" 2>/dev/null || true
}

printf 'listen: 127.0.0.1:%s\n' "$fanport" > "$tmp/fan.yaml"
printf 'listen: 127.0.0.1:%s\nhandshake: {maxConnections: 20000}\n' "$idleport" > "$tmp/idle.yaml"
printf 'listen: 127.0.0.1:%s\nadmission: {classes: {pub: {rate: {limit: 50, per: 1s, by: conn}}}, methods: {publish: pub}}\n' "$idleport" > "$tmp/shed.yaml"
printf 'listen: 127.0.0.1:%s\nhandshake:\n  maxConnections: 500\n  perTickBudget: 50\n  tick: 10ms\n  maxQueueWait: 200ms\n' "$stormport" > "$tmp/storm.yaml"
hist='topics:\n  namespaces:\n    - {pattern: "room:*", subscribe: [any], publish: [any], history: {size: 2000, ttl: 2m}}\n'
printf "listen: 127.0.0.1:$recport\n$hist" > "$tmp/recover.yaml"
printf "listen: 127.0.0.1:$recport\nredis: {url: \"redis://127.0.0.1:$rport\"}\n$hist" > "$tmp/redis-recover.yaml"
fan=ws://127.0.0.1:$fanport/ws

run_regime() { # $1 regime, $2 build, $3 run index: writes $out/$1.$2.$3.json
	local f=$out/$1.$2.$3.json
	case $1 in
	fan1000 | window1 | rooms | roomsraw | sparse)
		start_server "$2" "$tmp/fan.yaml"
		wait_port $fanport
		local shape
		case $1 in
		fan1000) shape=(-p 1 -s 1000 -t 1) ;;
		window1) shape=(-p 1 -s 1000 -t 1 --window 1) ;;
		rooms) shape=(-p 100 -s 1000 -t 100 --own-topics) ;;
		# The same with clients that read and write raw frames: the
		# generator, 2.5-3.5x the server's CPU through the WebSocket
		# library, then takes less of the two cores from the server.
		roomsraw) shape=(-p 100 -s 1000 -t 100 --own-topics --raw) ;;
		sparse) shape=(-p 100 -s 1000 -t 100 --own-topics --rate 2000) ;;
		esac
		"$bench" fanout --url "$fan" "${shape[@]}" --size 100 --duration "$dur" --server-pid "$sp" --max-time 60s --json > "$f"
		stop_server
		;;
	idle)
		start_server "$2" "$tmp/idle.yaml"
		wait_port $idleport
		"$bench" idle --url ws://127.0.0.1:$idleport/ws -n 10000 -c 100 --settle 5s --server-pid "$sp" \
			--probe-clients 10 --probe-rate 200 --probe-time 3s --max-time 90s --json > "$f"
		stop_server
		;;
	shed)
		# What a refusal costs: five abusers (a process of their own),
		# 16 publishes in flight each, over a rate of 50/s per connection,
		# beside 20 innocents doing 200 publish round trips/s; nothing
		# pinned, as deployed.
		start_server "$2" "$tmp/shed.yaml"
		wait_port $idleport
		"$bench" shed --url ws://127.0.0.1:$idleport/ws --server-pid "$sp" --abusers 5 --window 16 --duration 5s --max-time 60s --json > "$f"
		stop_server
		;;
	storm)
		# The storm-isolation harness (rtbench storm): the server and the
		# probe process on core 0, the storm process on core 1.
		start_server "$2" "$tmp/storm.yaml" 0
		wait_port $stormport
		"$bench" storm --url ws://127.0.0.1:$stormport/ws --server-pid "$sp" --probe-cpu 0 --storm-cpu 1 --max-time 60s --json > "$f"
		stop_server
		;;
	stormfree)
		# The same storm as deployed: nothing pinned. A server pinned to
		# one core runs with one P (the runtime takes GOMAXPROCS from the
		# CPU affinity), which goes idle and busy far more often, and each
		# return from idle sets the runtime's monitor thread polling every
		# 20 us on that same core: pinned, the monitor was 42% of the
		# server's profile, unpinned 19% (docs/journal/latency-and-shedding.md).
		# So the server's CPU per attempt is judged here; the probes'
		# p99 factor is judged in the pinned regime, where the storm's
		# own client cannot take the probes' core.
		start_server "$2" "$tmp/storm.yaml"
		wait_port $stormport
		"$bench" storm --url ws://127.0.0.1:$stormport/ws --server-pid "$sp" --max-time 60s --json > "$f"
		stop_server
		;;
	stormctl)
		# The control of stormfree: the same storm, nothing pinned, aimed
		# at a trivial 503 responder (rtbench serve503, a process of its
		# own) while the probes stay on the server under test, idle but
		# for them. What the storm does to the probes here is the
		# machine's share (the storm's client and a server of the
		# cheapest kind on the same two cores): the budget allows the
		# server 1.5x this factor (docs/journal/storm.md).
		start_server "$2" "$tmp/storm.yaml"
		wait_port $stormport
		"$bench" serve503 --listen 127.0.0.1:$ctlport --max-time 5m >/dev/null 2>&1 &
		local cp=$!
		wait_port $ctlport
		"$bench" storm --url ws://127.0.0.1:$stormport/ws --storm-url ws://127.0.0.1:$ctlport/ws --max-time 60s --json > "$f"
		kill $cp 2>/dev/null || true
		wait $cp 2>/dev/null || true
		stop_server
		;;
	recover | redis-recover)
		# 1,000 clients each missing 1,000 messages of 100 B reconnect at
		# once and recover; the Redis store gets a fresh redis-server.
		local rp=
		if [ "$1" = redis-recover ]; then
			redis-server --port $rport --bind 127.0.0.1 --save '' --appendonly no --loglevel warning >/dev/null 2>&1 &
			rp=$!
			wait_port $rport
		fi
		start_server "$2" "$tmp/$1.yaml"
		wait_port $recport
		"$bench" recover --url ws://127.0.0.1:$recport/ws -n 1000 --missed 1000 --prefix room: --server-pid "$sp" --max-time 90s --json > "$f" || true
		stop_server
		if [ -n "$rp" ]; then kill $rp; wait $rp 2>/dev/null || true; fi
		;;
	esac
}

for k in "${!bases[@]}"; do
	echo "base$k: ${bases[$k]} ($(git rev-parse --short "${bases[$k]}" 2>/dev/null || echo binary))"
done
echo "new: working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ', modified')); runs $runs, fan-out $dur each"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$runs"); do
	for r in $regimes; do
		# Rotate the order by one build per run, and reverse it every
		# other run, so that no build always follows the same one.
		n=${#builds[@]}
		order=()
		for j in $(seq 0 $((n - 1))); do order+=("${builds[$(((i + j) % n))]}"); done
		if [ $((i % 2)) -eq 0 ]; then
			rev=()
			for ((j = n - 1; j >= 0; j--)); do rev+=("${order[$j]}"); done
			order=("${rev[@]}")
		fi
		for b in "${order[@]}"; do
			run_regime "$r" "$b" "$i"
		done
	done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "$runs" "$regimes" "${bases[@]}" <<'EOF'
import sys
sys.path.insert(0, "scripts")
from benchtable import table
out, runs, regimes, bases = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
# Every regime is judged on three things: server CPU, throughput (or
# memory), and send -> receipt latency (p50, p99). Latency is that of the
# regime's own messages (fan-out: publish sent to each delivery
# received), or of established probe clients' publish round trips while
# the regime's load is on (idle, storm); the recovery storm's is each
# client's reconnect to caught up.
lat = lambda name, q: (lambda j: j[name]["p%sMs" % q])
rows = {
    "fan1000": [("1 -> 1,000, 64 in flight: server CPU s per million delivered", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
                ("1 -> 1,000, 64 in flight: delivered/s", lambda j: j["deliveredPerSec"], "higher"),
                ("1 -> 1,000, 64 in flight: send -> receipt p50 ms", lat("latency", 50)),
                ("1 -> 1,000, 64 in flight: send -> receipt p99 ms", lat("latency", 99))],
    "window1": [("1 -> 1,000, one at a time: server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
                ("1 -> 1,000, one at a time: delivered/s", lambda j: j["deliveredPerSec"], "higher"),
                ("1 -> 1,000, one at a time: send -> receipt p50 ms", lat("latency", 50)),
                ("1 -> 1,000, one at a time: send -> receipt p99 ms", lat("latency", 99))],
    "rooms": [("100 x 10, a publisher per topic, 64 in flight: server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
              ("100 x 10, a publisher per topic, 64 in flight: delivered/s", lambda j: j["deliveredPerSec"], "higher"),
              ("100 x 10, 64 in flight: send -> receipt p50 ms", lat("latency", 50)),
              ("100 x 10, 64 in flight: send -> receipt p99 ms", lat("latency", 99)),
              ("100 x 10, 64 in flight: rtbench CPU s per million", lambda j: j["rtbenchCpuSeconds"] / j["delivered"] * 1e6)],
    "roomsraw": [("100 x 10, raw clients: server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
                 ("100 x 10, raw clients: delivered/s", lambda j: j["deliveredPerSec"], "higher"),
                 ("100 x 10, raw clients: send -> receipt p50 ms", lat("latency", 50)),
                 ("100 x 10, raw clients: send -> receipt p99 ms", lat("latency", 99)),
                 ("100 x 10, raw clients: rtbench CPU s per million", lambda j: j["rtbenchCpuSeconds"] / j["delivered"] * 1e6)],
    "sparse": [("100 x 10 sparse (20 msg/s per publisher): server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
               ("100 x 10 sparse: delivered/s", lambda j: j["deliveredPerSec"], "higher"),
               ("100 x 10 sparse: send -> receipt p50 ms", lat("latency", 50)),
               ("100 x 10 sparse: send -> receipt p99 ms", lat("latency", 99))],
    "idle": [("idle at 10k: KiB RSS per connection", lambda j: j["serverRssPerConnBytes"] / 1024),
             ("idle at 10k: probes' send -> receipt p50 ms", lat("probe", 50)),
             ("idle at 10k: probes' send -> receipt p99 ms", lat("probe", 99))],
    "shed": [("refusals (5 abusers, window 16): server CPU us per refused publish", lambda j: j["serverCpuUsPerRefused"]),
             ("refusals: refused publishes/s", lambda j: j["abuse"]["refusedPerSec"], None),
             ("refusals: innocents' p99 factor, abused/quiet", lambda j: j["probe"]["p99Factor"]),
             ("refusals: innocents' quiet send -> receipt p99 ms", lambda j: j["probe"]["baseline"]["p99Ms"]),
             ("refusals: innocents' send -> receipt p99 ms while abused", lambda j: j["probe"]["storm"]["p99Ms"])],
    "storm": [("connect storm (10x cap): probes' p99 factor, storm/quiet", lambda j: j["probe"]["p99Factor"]),
              ("connect storm: probes' quiet send -> receipt p50 ms", lambda j: j["probe"]["baseline"]["p50Ms"]),
              ("connect storm: probes' quiet send -> receipt p99 ms", lambda j: j["probe"]["baseline"]["p99Ms"]),
              ("connect storm: probes' send -> receipt p50 ms during the storm", lambda j: j["probe"]["storm"]["p50Ms"]),
              ("connect storm: probes' send -> receipt p99 ms during the storm", lambda j: j["probe"]["storm"]["p99Ms"]),
              ("connect storm: server CPU us per attempt", lambda j: j["serverCpuUsPerAttempt"]),
              ("connect storm: peak open connections (cap 500)", lambda j: j["peakOpen"], None)],
    "stormctl": [("control: the same storm at a 503 responder, nothing pinned: probes' p99 factor, storm/quiet", lambda j: j["probe"]["p99Factor"]),
                 ("control: probes' send -> receipt p99 ms during the storm", lambda j: j["probe"]["storm"]["p99Ms"])],
    "stormfree": [("connect storm, nothing pinned: server CPU us per attempt", lambda j: j["serverCpuUsPerAttempt"]),
                  ("connect storm, nothing pinned: probes' p99 factor, storm/quiet", lambda j: j["probe"]["p99Factor"]),
                  ("connect storm, nothing pinned: probes' send -> receipt p99 ms during the storm", lambda j: j["probe"]["storm"]["p99Ms"]),
                  ("connect storm, nothing pinned: peak open connections (cap 500)", lambda j: j["peakOpen"], None)],
}
for store in ("", "redis-"):
    name = "Redis" if store else "memory"
    rows[store + "recover"] = [
        (f"recovery storm, {name} store: seconds until all caught up", lambda j: j["seconds"] if j["caughtUp"] == j["clients"] else float("inf")),
        (f"recovery storm, {name} store: reconnect -> caught up p50 ms", lat("perClient", 50)),
        (f"recovery storm, {name} store: reconnect -> caught up p99 ms", lat("perClient", 99)),
        (f"recovery storm, {name} store: server RSS growth MiB", lambda j: j["serverRssGrowthMiB"]),
        (f"recovery storm, {name} store: server CPU s", lambda j: j["serverCpuSeconds"]),
        (f"recovery storm, {name} store: 1013 closes", lambda j: j["closed1013"])]
for k, name in enumerate(bases):
    print("\nagainst base%d (%s):" % (k, name))
    table(out, runs, regimes, rows, "base%d" % k, "new")
if "stormfree" in regimes and "stormctl" in regimes:
    # The storm budget's second form: the server's factor within 1.5x the
    # control's (the same storm at a trivial 503 responder).
    import json, statistics
    def factor(r, b):
        vals = []
        for i in range(1, runs + 1):
            try:
                vals.append(json.load(open("%s/%s.%s.%d.json" % (out, r, b, i)))["probe"]["p99Factor"])
            except (OSError, KeyError, ValueError):
                pass
        return statistics.median(vals) if vals else None
    print()
    for b in ["new"] + ["base%d" % k for k in range(len(bases))]:
        f, c = factor("stormfree", b), factor("stormctl", b)
        if f and c:
            print("%s: stormfree p99 factor %.2f / control %.2f = %.2f (budget: <= 1.5)" % (b, f, c, f / c))
EOF

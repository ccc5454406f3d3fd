# Sourced by bench/*/compare.sh: the regimes of BENCHMARKS.md's headline
# table, run with the same rtbench arguments whichever server is measured
# (the comparison scripts differ only in how they start the other server
# and which protocol flag rtbench gets). Expects $bench (the rtbench
# binary) and $dur (publishing time of a fan-out run); compare also $runs,
# $regimes, $out and the caller's start_server.

wait_port() { # $1 port: until the server accepts
	for _ in $(seq 1 400); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	echo "server on port $1 did not start" >&2
	return 1
}

stop_server() { # the server start_server left in $sp
	kill "$sp" 2>/dev/null || true
	wait "$sp" 2>/dev/null || true
}

# run_rtbench REGIME URL PID OUT [FLAG...]: one run of REGIME against the
# server at URL (process PID), its JSON report into OUT; FLAGs (e.g.
# --socketio) go to rtbench. A failed run leaves what rtbench printed.
run_rtbench() {
	local r=$1 url=$2 pid=$3 f=$4
	shift 4
	case $r in
	fan1000 | window1 | rooms | sparse)
		local shape
		case $r in
		fan1000) shape=(-p 1 -s 1000 -t 1) ;;
		window1) shape=(-p 1 -s 1000 -t 1 --window 1) ;;
		rooms) shape=(-p 100 -s 1000 -t 100 --own-topics) ;;
		sparse) shape=(-p 100 -s 1000 -t 100 --own-topics --rate 2000) ;;
		esac
		"$bench" fanout "$@" --url "$url" "${shape[@]}" --size 100 --duration "$dur" --server-pid "$pid" --max-time 90s --json > "$f" || true
		;;
	idle)
		"$bench" idle "$@" --url "$url" -n 10000 -c 100 --settle 5s --server-pid "$pid" --max-time 120s --json > "$f" || true
		;;
	connect) # a flood of 10,000 attempts at a server capped far below them
		"$bench" connect "$@" --url "$url" -n 10000 -c 200 --hold 2s --server-pid "$pid" --max-time 120s --json > "$f" || true
		;;
	*)
		echo "unknown regime $r" >&2
		return 1
		;;
	esac
}

# compare OTHER: every regime of $regimes, $runs times, against OTHER and
# rtserver in turn (which goes first alternates: OTHER, rtserver,
# rtserver, OTHER, ...), a fresh server per run (start_server SERVER
# REGIME sets sp, url and flags), each run's JSON into $out; then the
# table of medians and rtserver/OTHER ratios.
compare() {
	local other=$1 i r s order
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	for i in $(seq 1 "$runs"); do
		for r in $regimes; do
			order="$other rtserver"
			if [ $((i % 2)) -eq 0 ]; then order="rtserver $other"; fi
			for s in $order; do
				start_server "$s" "$r"
				run_rtbench "$r" "$url" "$sp" "$out/$r.$s.$i.json" "${flags[@]}"
				stop_server
			done
		done
	done
	echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	python3 - "$out" "$runs" "$regimes" "$other" <<'PY'
import sys
sys.path[:0] = ["scripts", "bench"]
from benchtable import table
from regimes import ROWS as rows
out, runs, regimes, other = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
table(out, runs, regimes, rows, other, "rtserver")
PY
}

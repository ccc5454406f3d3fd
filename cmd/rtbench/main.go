package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const usage = `rtbench: load generator for rtserver (loopback targets only)

  rtbench connect  --url ws://127.0.0.1:8080/ws -n 5000 -c 200 --hold 2s [--server-pid PID] [--rate R] [--duration D]
                   [--probe-clients K --probe-rate R --baseline 3s --probe-url URL]
  rtbench storm    --url ... --server-pid PID [-n 5000 -c 256 --hold 100ms] [--storm-url URL] [--probe-cpu 0 --storm-cpu 1]
                   [--probe-clients 20 --probe-rate 1000 --baseline 5s]
  rtbench idle     --url ... -n 10000 [-c 100] [--settle 5s] [--server-pid PID] [--probe-clients 10 --probe-rate 200 --probe-time 3s] [--topics 100 | --sse [--sse-topics 100]]
  rtbench shed     --url ... --server-pid PID [--abusers 5 --window 16 --duration 5s] [--probe-clients 20 --probe-rate 200 --baseline 3s] [--abuse-cpu 1]
  rtbench abuse    --url ... [-n 5 --window 16 --duration 5s] [--server-pid PID]
  rtbench fanout   --url ... -p 1 -s 1000 -t 1 --size 100 --duration 10s [--rate R] [--batch] [--own-topics] [--raw] [--server-pid PID]
  rtbench recover  --url ... -n 1000 --missed 1000 [-t 1] [--size 100] [--prefix room:] [--server-pid PID] [--watch http://host:port]
  rtbench rpc      --url ... --method report.daily --rate 500 --duration 10s -c 10 [--params JSON]
  rtbench api      --url http://127.0.0.1:9090/api/publish --key KEY -c 16 --duration 10s [--body JSON] [--server-pid PID]
  rtbench siblings --redis-url redis://127.0.0.1:6379 --metrics-url http://127.0.0.1:8080/metrics -n 100 --duration 30s
                   [--interval 5s] [--secret S] [--churn 0.2] [--hot-rate 5000] [--server-pid PID] [--stale]
  rtbench serve503 --listen 127.0.0.1:9503 [--max-time 1h]

Common flags: --json (machine-readable output), --max-time (hard bound on the run, default 10m),
--socketio (idle and fanout against a socket.io server: bench/socketio),
--centrifugo (idle, fanout and connect against a Centrifugo server: bench/centrifugo).
Run "rtbench MODE -h" for a mode's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if err := raiseNoFile(); err != nil {
		fmt.Fprintln(stderr, "rtbench: raising RLIMIT_NOFILE:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mode, rest := args[0], args[1:]
	fs := flag.NewFlagSet("rtbench "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	maxTime := fs.Duration("max-time", 10*time.Minute, "hard bound on the whole run")
	rawURL := fs.String("url", "ws://127.0.0.1:8080/ws", "rtserver WebSocket URL (loopback only)")
	pid := fs.Int("server-pid", 0, "server process id: measure its CPU (/proc/PID/stat) or RSS (/proc/PID/status)")
	dialTimeout := fs.Duration("dial-timeout", 10*time.Second, "bound on each upgrade attempt")
	socketIO := fs.Bool("socketio", false, "speak Socket.IO over Engine.IO v4's websocket transport to a socket.io server (bench/socketio), --url ws://127.0.0.1:3000/socket.io/?EIO=4&transport=websocket")
	centrifugo := fs.Bool("centrifugo", false, "speak Centrifugo's JSON client protocol to a Centrifugo server (bench/centrifugo), --url ws://127.0.0.1:8000/connection/websocket")

	var runMode func(context.Context) (any, error)
	switch mode {
	case "connect":
		n := fs.Int("n", 5000, "upgrade attempts")
		c := fs.Int("c", 200, "dialers in parallel")
		hold := fs.Duration("hold", 2*time.Second, "how long each accepted connection is held")
		dur := fs.Duration("duration", 0, "stop the storm after this long even before -n attempts (0: no bound but -n)")
		rate := fs.Float64("rate", 0, "attempts per second over all dialers (0: as fast as -c dialers go); pace the storm to compare targets")
		probeURL := fs.String("probe-url", "", "where the probe clients connect (default --url); aim --url at `rtbench serve503` for the control run")
		probeK := fs.Int("probe-clients", 0, "established clients doing publish round trips on private topics")
		probeR := fs.Float64("probe-rate", 100, "probe round trips per second, over all probe clients")
		baseline := fs.Duration("baseline", 0, "probe-only phase before the storm (default: --duration, or 3s)")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			cfg := connectConfig{URL: u, N: *n, C: *c, Hold: *hold, Duration: *dur, Rate: *rate, DialTimeout: *dialTimeout, ServerPID: *pid,
				ProbeClients: *probeK, ProbeRate: *probeR, Baseline: *baseline}
			if *probeURL != "" {
				if cfg.ProbeURL, err = checkURL(*probeURL); err != nil {
					return nil, err
				}
			}
			if cfg.Baseline == 0 {
				cfg.Baseline = 3 * time.Second
				if *dur > 0 {
					cfg.Baseline = *dur
				}
			}
			return runConnect(ctx, cfg)
		}
	case "storm":
		n := fs.Int("n", 5000, "upgrade attempts of the storm")
		c := fs.Int("c", 256, "storm dialers in parallel")
		hold := fs.Duration("hold", 100*time.Millisecond, "how long each accepted storm connection is held")
		stormURL := fs.String("storm-url", "", "where the storm goes (default --url); a `rtbench serve503` for the control run")
		probeK := fs.Int("probe-clients", 20, "established probe clients on --url, in a process of their own")
		probeR := fs.Float64("probe-rate", 1000, "probe round trips per second, over all probe clients")
		baseline := fs.Duration("baseline", 5*time.Second, "probe-only phase before the storm")
		probeCPU := fs.String("probe-cpu", "", "taskset CPU list for the probe process (the server's core)")
		stormCPU := fs.String("storm-cpu", "", "taskset CPU list for the storm process (the other core)")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			su := u
			if *stormURL != "" {
				if su, err = checkURL(*stormURL); err != nil {
					return nil, err
				}
			}
			return runStorm(ctx, stormConfig{URL: u, StormURL: su, N: *n, C: *c, Hold: *hold, ProbeClients: *probeK, ProbeRate: *probeR,
				Baseline: *baseline, ProbeCPU: *probeCPU, StormCPU: *stormCPU, ServerPID: *pid, MaxTime: *maxTime})
		}
	case "abuse":
		n := fs.Int("n", 5, "abusing connections")
		window := fs.Int("window", 16, "publishes in flight per connection")
		dur := fs.Duration("duration", 5*time.Second, "hammering time")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			return runAbuse(ctx, abuseConfig{URL: u, N: *n, Window: *window, Duration: *dur, ServerPID: *pid})
		}
	case "shed":
		n := fs.Int("abusers", 5, "abusing connections, in a process of their own")
		window := fs.Int("window", 16, "publishes in flight per abuser")
		dur := fs.Duration("duration", 5*time.Second, "hammering time")
		probeK := fs.Int("probe-clients", 20, "innocent clients doing publish round trips on private topics")
		probeR := fs.Float64("probe-rate", 200, "innocents' round trips per second, over all of them")
		baseline := fs.Duration("baseline", 3*time.Second, "innocents alone before the abuse")
		abuseCPU := fs.String("abuse-cpu", "", "taskset CPU list for the abusers' process")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			return runShed(ctx, shedConfig{URL: u, ProbeClients: *probeK, ProbeRate: *probeR, Baseline: *baseline,
				Abuse: abuseConfig{URL: u, N: *n, Window: *window, Duration: *dur, ServerPID: *pid}, AbuseCPU: *abuseCPU, MaxTime: *maxTime})
		}
	case "idle":
		n := fs.Int("n", 10000, "connections to open")
		c := fs.Int("c", 100, "dialers in parallel")
		settle := fs.Duration("settle", 5*time.Second, "wait after the last connection before measuring")
		murl := fs.String("metrics-url", "", "server /metrics for go_goroutines (default: /metrics on --url's host)")
		probeK := fs.Int("probe-clients", 0, "after measuring, established clients doing publish round trips while the idle connections stay open")
		probeR := fs.Float64("probe-rate", 200, "probe round trips per second, over all probe clients")
		probeT := fs.Duration("probe-time", 3*time.Second, "how long the probes run")
		topics := fs.Int("topics", 0, "WebSocket i subscribes to topic room:<i mod this> once open (the naming of --sse-topics), answered before the settle; 0: no subscription")
		sse := fs.Bool("sse", false, "open Server-Sent Events streams (GET /sse) instead of WebSockets (idlesse.go)")
		sseTopics := fs.Int("sse-topics", 0, "with --sse: stream i subscribes to topic room:<i mod this>; 0: GET /sse?rpc, no subscription")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			m := *murl
			if m == "" && !engineIOOn() { // a socket.io server has no /metrics
				m = metricsURL(u)
			}
			if m != "" {
				if _, err := checkURL(m); err != nil {
					return nil, err
				}
			}
			cfg := idleConfig{URL: u, N: *n, C: *c, Settle: *settle, DialTimeout: *dialTimeout, ServerPID: *pid, MetricsURL: m, Topics: *topics,
				ProbeClients: *probeK, ProbeRate: *probeR, ProbeTime: *probeT}
			if *sse {
				if *topics > 0 {
					return nil, fmt.Errorf("idle: --topics is for WebSockets; with --sse, --sse-topics")
				}
				return runIdleSSE(ctx, cfg, *sseTopics)
			}
			return runIdle(ctx, cfg)
		}
	case "fanout":
		p := fs.Int("p", 1, "publishers")
		s := fs.Int("s", 1000, "subscribers (subscriber i listens on topic i mod -t)")
		t := fs.Int("t", 1, "topics")
		size := fs.Int("size", 100, "approximate bytes of each message's data")
		dur := fs.Duration("duration", 10*time.Second, "publishing time")
		rate := fs.Float64("rate", 0, "publishes per second over all publishers (0: as fast as --window allows)")
		window := fs.Int("window", 64, "unanswered publishes per publisher")
		batch := fs.Bool("batch", false, "subscribers offer the rt.batch subprotocol")
		own := fs.Bool("own-topics", false, "publisher j publishes only to topic j mod -t (with -p equal to -t: one publisher per topic) instead of round-robin over all")
		pubURL := fs.String("pub-url", "", "where the publishers connect (default --url): another instance of the fleet, to measure delivery across instances")
		pubPID := fs.Int("pub-server-pid", 0, "the --pub-url instance's process id: measure its CPU too")
		raw := fs.Bool("raw", false, "subscribers and publishers read and write raw frames instead of going through the WebSocket library: rtbench then takes less CPU from the server (rtserver's JSON protocol over ws:// only; others ignore it)")
		data := fs.String("data", dataJSON, "message data: json; bytes (--size bytes, raw on the binary protocol rt.msgpack); base64 (the same bytes on the JSON protocol as {\"$bin\":\"<base64>\"})")
		cpuProf := fs.String("cpu-profile", "", "write rtbench's own CPU profile of the publishing time (pprof) to this file")
		memProf := fs.String("mem-profile", "", "write rtbench's allocations during the publishing time (pprof, every allocation sampled) to this file")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			pu := u
			if *pubURL != "" {
				if pu, err = checkURL(*pubURL); err != nil {
					return nil, err
				}
			}
			return runFanout(ctx, fanoutConfig{URL: u, PubURL: pu, P: *p, S: *s, T: *t, Size: *size, Duration: *dur, Rate: *rate,
				Window: *window, Batch: *batch, Data: *data, OwnTopics: *own, Raw: *raw, DialTimeout: *dialTimeout, ServerPID: *pid, PubServerPID: *pubPID,
				CPUProfile: *cpuProf, MemProfile: *memProf})
		}
	case "recover":
		n := fs.Int("n", 1000, "clients: each subscribes, goes away, misses --missed messages, then all reconnect at once and recover")
		t := fs.Int("t", 1, "topics (client i on topic i mod -t); their namespace must keep history of at least --missed messages")
		missed := fs.Int("missed", 1000, "messages published on each topic while the clients are away")
		size := fs.Int("size", 100, "approximate bytes of each message's data")
		c := fs.Int("c", 0, "reconnecting dialers in parallel (0: all clients at once)")
		prefix := fs.String("prefix", "room:rtbench.", "topic name prefix (a namespace with history)")
		watch := fs.String("watch", "", "http://host:port of a server whose /readyz and bus_degraded to sample every 100ms during the storm")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			return runRecover(ctx, recoverConfig{URL: u, N: *n, T: *t, Missed: *missed, Size: *size, C: *c, Prefix: *prefix,
				DialTimeout: *dialTimeout, ServerPID: *pid, Watch: *watch})
		}
	case "rpc":
		method := fs.String("method", "report.daily", "method to call")
		params := fs.String("params", "{}", "params (JSON)")
		rate := fs.Float64("rate", 500, "calls per second over all connections")
		dur := fs.Duration("duration", 10*time.Second, "calling time")
		c := fs.Int("c", 10, "connections")
		window := fs.Int("window", 16, "unanswered calls per connection")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			return runRPC(ctx, rpcConfig{URL: u, Method: *method, Params: json.RawMessage(*params), Rate: *rate, Duration: *dur,
				C: *c, Window: *window, DialTimeout: *dialTimeout, ServerPID: *pid})
		}
	case "api":
		key := fs.String("key", "", "server API key (api.key)")
		body := fs.String("body", `{"topic":"rtbench.api","data":{"price":101.5,"symbol":"ABC"}}`, "request body")
		c := fs.Int("c", 16, "concurrent callers, each on its own keep-alive connection")
		dur := fs.Duration("duration", 10*time.Second, "calling time")
		runMode = func(ctx context.Context) (any, error) {
			u, err := checkURL(*rawURL)
			if err != nil {
				return nil, err
			}
			return runAPI(ctx, apiConfig{URL: u, Key: *key, Body: *body, C: *c, Duration: *dur, ServerPID: *pid})
		}
	case "siblings":
		redisURL := fs.String("redis-url", "redis://127.0.0.1:6379", "the fleet's Redis (loopback only)")
		channel := fs.String("channel", "rt:pressure:rates", "publishRate.channel")
		n := fs.Int("n", 100, "simulated sibling instances")
		interval := fs.Duration("interval", 250*time.Millisecond, "publishRate.publishInterval: each sibling sends once per interval")
		dur := fs.Duration("duration", 30*time.Second, "sending time; the first interval is warm-up, the second starts the hot publisher, and the measured window starts once the view caught it")
		topN := fs.Int("topn", 20, "topics, users and subscriber counts per envelope (publishRate.topN)")
		secret := fs.String("secret", "", "publishRate.hmacSecret: sign the envelopes")
		churn := fs.Float64("churn", 0.2, "fraction of each sibling's own topics renamed every interval")
		hot := fs.Float64("hot-rate", 5000, "messages/s of one hot topic and one hot user, spread evenly over the siblings")
		murl := fs.String("metrics-url", "http://127.0.0.1:8080/metrics", "the server's /metrics: its view of the siblings")
		stale := fs.Bool("stale", false, "after the last envelope, wait until the server's view is empty and report how long it took")
		mode := fs.String("mode", "merged", "publishRate.mode of the server: merged (slices on <channel>:in, the merged views read off <channel>:view), or broadcast")
		runMode = func(ctx context.Context) (any, error) {
			return runSiblings(ctx, siblingsConfig{RedisURL: *redisURL, Channel: *channel, Mode: *mode, N: *n, Interval: *interval, Duration: *dur,
				TopN: *topN, Secret: *secret, Churn: *churn, HotRate: *hot, MetricsURL: *murl, ServerPID: *pid, Stale: *stale})
		}
	case "serve503":
		listen := fs.String("listen", "127.0.0.1:9503", "address to answer 503 on (loopback only)")
		*maxTime = time.Hour
		runMode = func(ctx context.Context) (any, error) {
			if err := checkListen(*listen); err != nil {
				return nil, err
			}
			ln, err := net.Listen("tcp", *listen)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(stderr, "rtbench serve503: answering 503 on %s (pid %d)\n", ln.Addr(), os.Getpid())
			return nil, serve503(ctx, ln)
		}
	default:
		fmt.Fprintf(stderr, "rtbench: unknown mode %q\n\n%s", mode, usage)
		return 2
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *socketIO && *centrifugo {
		fmt.Fprintf(stderr, "rtbench %s: --socketio and --centrifugo exclude each other\n", mode)
		return 2
	}
	engineIOMode.Store(*socketIO)
	centrifugoMode.Store(*centrifugo)
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rtbench %s: unexpected arguments %q\n", mode, fs.Args())
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *maxTime)
	defer cancel()
	res, err := runMode(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "rtbench %s: %v\n", mode, err)
		return 1
	}
	if res == nil {
		return 0
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	printTable(stdout, res)
	return 0
}

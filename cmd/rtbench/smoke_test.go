package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	rtserver "github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/testnode"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/server"
)

// startNode serves an in-process rtserver on a free loopback port and
// returns its WebSocket URL; it drains and stops at the end of the test.
func startNode(t *testing.T, mutate func(*rtserver.Config)) (*url.URL, *rtserver.Node) {
	t.Helper()
	cfg := rtserver.DefaultConfig()
	cfg.Drain.Duration = time.Millisecond
	// As the binary does: the idle probe reads go_goroutines.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	if mutate != nil {
		mutate(&cfg)
	}
	node, addr := testnode.Start(t, cfg, rtserver.Deps{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	u, err := checkURL("ws://" + addr + "/ws")
	if err != nil {
		t.Fatal(err)
	}
	return u, node
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// holdLong outlasts the few milliseconds a tiny storm takes on loopback,
// so every accepted connection is still held when the last attempt lands.
const holdLong = 3 * time.Second

func TestConnectShedsOverTheCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		reject handshake.RejectMode
	}{
		{"http", handshake.RejectHTTP},
		{"close", handshake.RejectClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, _ := startNode(t, func(c *rtserver.Config) {
				c.Handshake.MaxConnections = 5
				c.Handshake.Reject = tt.reject
			})
			res, err := runConnect(testCtx(t), connectConfig{URL: u, N: 20, C: 4, Hold: holdLong, ServerPID: os.Getpid()})
			if err != nil {
				t.Fatal(err)
			}
			if res.Attempts != 20 || res.Accepted != 5 || res.Shed != 15 || res.Errors != 0 {
				t.Fatalf("attempts %d accepted %d shed %d errors %d (%v); want 20, 5, 15, 0", res.Attempts, res.Accepted, res.Shed, res.Errors, res.ErrorKinds)
			}
			switch tt.reject {
			case handshake.RejectHTTP:
				if res.Shed503 != 15 {
					t.Errorf("shed503 %d, want 15", res.Shed503)
				}
			case handshake.RejectClose:
				if res.ShedClose["1013"] != 15 {
					t.Errorf("close codes %v, want 1013: 15", res.ShedClose)
				}
			}
			if res.PeakOpen != 5 {
				t.Errorf("peak open %d, want 5", res.PeakOpen)
			}
			if res.AcceptLat.N != 5 || res.RejectLat.N != 15 {
				t.Errorf("latency samples accept %d reject %d, want 5 and 15", res.AcceptLat.N, res.RejectLat.N)
			}
			if res.ServerCPU <= 0 && res.CPUPerTry != 0 {
				t.Errorf("cpu per attempt %v without cpu", res.CPUPerTry)
			}
		})
	}
}

func TestConnectAgainstServe503WithProbes(t *testing.T) {
	t.Parallel()
	u, _ := startNode(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- serve503(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	control, err := checkURL("ws://" + ln.Addr().String() + "/ws")
	if err != nil {
		t.Fatal(err)
	}
	res, err := runConnect(testCtx(t), connectConfig{
		URL: control, N: 1 << 30, C: 4, Rate: 1000, Hold: time.Millisecond, Duration: 300 * time.Millisecond,
		ProbeURL: u, ProbeClients: 2, ProbeRate: 100, Baseline: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts == 0 || res.Shed503 != res.Attempts || res.Accepted != 0 {
		t.Fatalf("attempts %d shed503 %d accepted %d errors %v: want every attempt shed 503", res.Attempts, res.Shed503, res.Accepted, res.ErrorKinds)
	}
	p := res.Probe
	if p == nil || p.Baseline.N == 0 || p.Storm.N == 0 || p.BaselineFailed != 0 || p.StormFailed != 0 {
		t.Fatalf("probe result %+v: want round trips in both phases and no failures", p)
	}
}

// Not parallel: go_goroutines counts the whole test process, so the
// goroutines of tests running beside it (starting or winding down between
// the two scrapes) would be counted as, or against, the connections'.
// Parallel tests wait until the sequential ones are done.
func TestIdleCountsServerConnections(t *testing.T) {
	u, _ := startNode(t, nil)
	res, err := runIdle(testCtx(t), idleConfig{URL: u, N: 20, C: 4, ServerPID: os.Getpid(), MetricsURL: metricsURL(u)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Connected != 20 || res.Open != 20 || res.Failed != 0 {
		t.Fatalf("connected %d open %d failed %d (%v), want 20, 20, 0", res.Connected, res.Open, res.Failed, res.FailKinds)
	}
	if res.ConnsOpen != 20 {
		t.Errorf("server connections_open %v, want 20", res.ConnsOpen)
	}
	// In-process, the count includes rtbench's own reader per connection
	// (the server's idle connections park without one), so it is about
	// one per connection: not exactly, since a goroutine of the process
	// that ends between the two scrapes (a finished dial, a timer) counts
	// against it. Zero would mean the count is not read at all.
	if res.GoPerConn < 0.5 {
		t.Errorf("goroutines per connection %v, want about 1", res.GoPerConn)
	}
	if res.RSSAfter <= 0 || res.RSSBefore <= 0 {
		t.Errorf("rss before %d after %d", res.RSSBefore, res.RSSAfter)
	}
}

func TestFanoutDeliversEveryMessage(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		u, _ := startNode(t, nil)
		res, err := runFanout(testCtx(t), fanoutConfig{URL: u, P: 2, S: 6, T: 2, Size: 64, Duration: 200 * time.Millisecond, Rate: 200, Batch: batch, ServerPID: os.Getpid()})
		if err != nil {
			t.Fatal(err)
		}
		if res.Published == 0 || res.PublishErrors != nil || res.SubsClosed != nil {
			t.Fatalf("batch %v: published %d errors %v closed %v", batch, res.Published, res.PublishErrors, res.SubsClosed)
		}
		// 6 subscribers over 2 topics: each message reaches 3.
		if res.Expected != 3*res.Published || res.Delivered != res.Expected {
			t.Errorf("batch %v: published %d expected %d delivered %d, want 3 deliveries each", batch, res.Published, res.Expected, res.Delivered)
		}
		if res.Latency.N != uint64(res.Delivered) {
			t.Errorf("batch %v: %d latency samples for %d deliveries", batch, res.Latency.N, res.Delivered)
		}
		if want := 0; batch {
			want = 6
			if res.BatchNegotiated != want {
				t.Errorf("rt.batch negotiated by %d subscribers, want %d", res.BatchNegotiated, want)
			}
		} else if res.BatchNegotiated != want {
			t.Errorf("rt.batch negotiated by %d subscribers without --batch", res.BatchNegotiated)
		}
	}
}

func TestRPCClassifiesAnswers(t *testing.T) {
	t.Parallel()
	u, node := startNode(t, func(c *rtserver.Config) {
		c.Admission.Classes = map[string]message.Rule{"limited": {Rate: &message.Rate{Limit: 5, Per: time.Hour, By: "conn"}}}
		c.Admission.Methods = map[string]string{"report.*": "limited"}
	})
	ok := func(context.Context, *server.Request) (any, error) { return map[string]int{"n": 1}, nil }
	node.Handle("report.daily", ok)
	node.Handle("echo", ok)

	tests := []struct {
		method          string
		wantOK, wantRL  func(sent int64) int64
		wantOtherMethod string
	}{
		// Unlimited: everything answers OK.
		{method: "echo", wantOK: func(s int64) int64 { return s }, wantRL: func(int64) int64 { return 0 }},
		// 5 per connection per hour, 2 connections: 10 OK, the rest -32002.
		{method: "report.daily", wantOK: func(int64) int64 { return 10 }, wantRL: func(s int64) int64 { return s - 10 }},
		// Nobody answers it: -32601.
		{method: "nope", wantOK: func(int64) int64 { return 0 }, wantRL: func(int64) int64 { return 0 }, wantOtherMethod: "-32601"},
	}
	for _, tt := range tests {
		res, err := runRPC(testCtx(t), rpcConfig{URL: u, Method: tt.method, Params: json.RawMessage(`{"a":1}`), Rate: 200, Duration: 200 * time.Millisecond, C: 2})
		if err != nil {
			t.Fatal(err)
		}
		if res.Sent < 12 || res.Unanswered != 0 {
			t.Fatalf("%s: sent %d unanswered %d", tt.method, res.Sent, res.Unanswered)
		}
		if res.OK != tt.wantOK(res.Sent) || res.RateLimited != tt.wantRL(res.Sent) {
			t.Errorf("%s: sent %d ok %d rate-limited %d other %v", tt.method, res.Sent, res.OK, res.RateLimited, res.Other)
		}
		if tt.wantOtherMethod != "" && int64(res.Other[tt.wantOtherMethod]) != res.Sent {
			t.Errorf("%s: other %v, want all %d as %s", tt.method, res.Other, res.Sent, tt.wantOtherMethod)
		}
		if sum := res.ShareOK + res.ShareOverloaded + res.ShareRateLimited + res.ShareOther; sum < 0.999 || sum > 1.001 {
			t.Errorf("%s: shares sum to %v", tt.method, sum)
		}
	}
}

// The CLI runs a mode end to end and prints JSON a machine can read.
func TestRunJSON(t *testing.T) {
	t.Parallel()
	u, _ := startNode(t, nil)
	var out, errOut bytesBuffer
	code := run([]string{"connect", "--url", u.String(), "-n", "3", "-c", "1", "--hold", "1ms", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var res connectResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res.Attempts != 3 || res.Accepted != 3 {
		t.Fatalf("attempts %d accepted %d, want 3 and 3", res.Attempts, res.Accepted)
	}
	out.Reset()
	if code := run([]string{"connect", "--url", u.String(), "-n", "2", "-c", "1", "--hold", "1ms"}, &out, &errOut); code != 0 || !contains(out.String(), "accepted (held)") {
		t.Fatalf("table output (exit %d): %s", code, out.String())
	}
}

// With --own-topics each publisher publishes only to its own topic: with
// 2 publishers, 3 topics and 6 subscribers, topic 2 gets nothing and each
// message reaches the 2 subscribers of its publisher's topic.
func TestFanoutOwnTopics(t *testing.T) {
	t.Parallel()
	u, _ := startNode(t, nil)
	res, err := runFanout(testCtx(t), fanoutConfig{URL: u, P: 2, S: 6, T: 3, Size: 64, Duration: 200 * time.Millisecond, Rate: 200, OwnTopics: true, ServerPID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Published == 0 || res.PublishErrors != nil || res.SubsClosed != nil {
		t.Fatalf("published %d errors %v closed %v", res.Published, res.PublishErrors, res.SubsClosed)
	}
	if res.Expected != 2*res.Published || res.Delivered != res.Expected {
		t.Errorf("published %d expected %d delivered %d, want 2 deliveries each", res.Published, res.Expected, res.Delivered)
	}
}

// The idle run's probes do round trips with the idle connections open and
// report them; their connections are not counted in the idle figures.
func TestIdleProbesReportRoundTrips(t *testing.T) {
	t.Parallel()
	u, _ := startNode(t, nil)
	res, err := runIdle(testCtx(t), idleConfig{URL: u, N: 10, C: 2, ProbeClients: 2, ProbeRate: 50, ProbeTime: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Open != 10 {
		t.Fatalf("open %d, want 10", res.Open)
	}
	if res.Probe == nil || res.Probe.N == 0 {
		t.Fatalf("probe %+v, want round trips", res.Probe)
	}
	if res.Probe.P50 <= 0 || res.Probe.P99 < res.Probe.P50 {
		t.Errorf("probe p50 %v p99 %v", res.Probe.P50, res.Probe.P99)
	}
}

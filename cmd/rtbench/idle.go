package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rtserver/rtserver/internal/ctxsleep"
)

type idleConfig struct {
	URL         *url.URL
	N           int           // connections to open
	C           int           // dialers in parallel
	Settle      time.Duration // wait after the last connection before measuring
	DialTimeout time.Duration
	ServerPID   int    // 0: no RSS measurement
	MetricsURL  string // "": no goroutine count
	// Topics > 0: WebSocket i subscribes to idleTopic(i, Topics) once
	// open, and counts as connected only when the subscribe is answered
	// (before the settle), as a stream with --sse-topics does. 0: none.
	Topics int
	// After the measurement, ProbeClients established clients do publish
	// round trips (ProbeRate per second in all) for ProbeTime while the
	// idle connections stay open: what an idle herd costs a live
	// conversation. 0 clients: none.
	ProbeClients int
	ProbeRate    float64
	ProbeTime    time.Duration
}

type idleResult struct {
	URL       string `json:"url"`
	Attempted int    `json:"attempted"`
	Connected int    `json:"connected"`
	Failed    int    `json:"failed"`
	// Topics the connections were spread over, one subscription each
	// (0: none).
	Topics    int            `json:"topics,omitempty"`
	FailKinds map[string]int `json:"failKinds,omitempty"`
	// Still open at measurement time (a connection the server closed
	// during the settle period is not counted).
	Open        int     `json:"openAtMeasure"`
	DialSeconds float64 `json:"dialSeconds"`
	RSSBefore   int64   `json:"serverRssBeforeBytes,omitempty"`
	RSSAfter    int64   `json:"serverRssAfterBytes,omitempty"`
	RSSPerConn  float64 `json:"serverRssPerConnBytes,omitempty"`
	GoBefore    float64 `json:"serverGoroutinesBefore,omitempty"`
	GoAfter     float64 `json:"serverGoroutinesAfter,omitempty"`
	GoPerConn   float64 `json:"serverGoroutinesPerConn,omitempty"`
	ConnsOpen   float64 `json:"serverConnectionsOpen,omitempty"`
	// Where the memory is: growth of the Go runtime's own counters per
	// open connection (live heap, heap spans in use, goroutine stacks).
	HeapAllocPerConn float64 `json:"serverHeapAllocPerConnBytes,omitempty"`
	HeapInusePerConn float64 `json:"serverHeapInusePerConnBytes,omitempty"`
	StackPerConn     float64 `json:"serverStackInusePerConnBytes,omitempty"`
	// Heap the collector freed and the runtime keeps for reuse (idle,
	// not returned to the OS): in RSS, but not the connections' state.
	// How much is kept depends on when the last collection ran, so it
	// tells a run's garbage apart from what the connections hold.
	HeapKeptPerConn float64 `json:"serverHeapIdleKeptPerConnBytes,omitempty"`
	AcceptLat       latency `json:"acceptLatency"`
	// Probe is the probes' send -> receipt round trips (publish sent to
	// both its answer and its message received) with the idle
	// connections open; nil without probes.
	Probe *latency `json:"probe,omitempty"`
}

// memSeries are the Go runtime gauges rtserver exports, read before and
// after connecting.
var memSeries = [...]string{"go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes",
	"go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes"}

// runIdle opens cfg.N idle connections, measures the server, and closes
// them.
func runIdle(ctx context.Context, cfg idleConfig) (*idleResult, error) {
	res, closeConns, err := openIdle(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeConns()
	// The probes come after the memory was measured, so their own
	// connections do not count in it.
	if cfg.ProbeClients > 0 && cfg.ProbeTime > 0 {
		p, err := startProbes(ctx, cfg.URL, cfg.ProbeClients, cfg.ProbeRate)
		if err != nil {
			return nil, err
		}
		err = ctxsleep.Sleep(ctx, cfg.ProbeTime)
		p.stop()
		if err != nil {
			return nil, err
		}
		l := p.result(cfg.ProbeClients, cfg.ProbeRate).Baseline
		res.Probe = &l
	}
	return res, nil
}

// idleTopic is the topic idle connection i subscribes to out of k, for
// WebSockets (--topics) and streams (--sse-topics) alike.
func idleTopic(i int64, k int) string {
	return "room:" + strconv.FormatInt(i%int64(k), 10)
}

// subscribeKind labels a failed subscribe: a refusal by its error code
// (not its topic, so that there are few labels), others as a dial's.
func subscribeKind(err error) string {
	kind := errKind(err)
	if _, code, ok := strings.Cut(kind, ": error "); ok {
		kind = "refused " + code
	}
	return "subscribe: " + kind
}

// openIdle opens cfg.N idle WebSockets (each subscribed to a topic, with
// cfg.Topics) and measures the server; they stay open until closeConns.
func openIdle(ctx context.Context, cfg idleConfig) (res *idleResult, closeConns func(), err error) {
	cfg = cfg.withDefaults()
	d := newDialer(cfg.URL, nil)
	res, closeConns, err = measureIdle(ctx, cfg, cfg.URL.String(), func(i int64) (idleConn, string) {
		dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
		c, resp, err := d.dial(dctx)
		if err == nil && cfg.Topics > 0 {
			if err = subscribeSync(dctx, c, 1, idleTopic(i, cfg.Topics)); err != nil {
				c.CloseNow()
				cancel()
				return idleConn{}, subscribeKind(err)
			}
		}
		cancel()
		if err != nil {
			if resp != nil {
				return idleConn{}, fmt.Sprintf("HTTP %d", resp.StatusCode)
			}
			return idleConn{}, errKind(err)
		}
		return idleConn{
			// A reader per connection answers the server's pings, as any
			// real client would; it ends when the connection does.
			read: func() {
				for {
					_, b, err := c.Read(context.Background())
					if err != nil {
						return
					}
					serverPing(c, b)
				}
			},
			close: func() { c.Close(websocket.StatusGoingAway, "") },
		}, ""
	})
	if err != nil {
		return nil, nil, err
	}
	res.Topics = cfg.Topics
	return res, closeConns, nil
}

// withDefaults fills in the dial timeout.
func (c idleConfig) withDefaults() idleConfig {
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	return c
}

// idleConn is one open idle connection: read reads it, as its client
// would, until it ends; close ends it.
type idleConn struct {
	read  func()
	close func()
}

// measureIdle opens cfg.N connections through dial (given each its
// ticket from 1; a failure returns its kind), cfg.C at a time, and
// measures the server's growth per connection still open after
// cfg.Settle. The connections stay open until closeConns, so that more
// can be measured beside them.
func measureIdle(ctx context.Context, cfg idleConfig, target string, dial func(i int64) (idleConn, string)) (res *idleResult, closeConns func(), err error) {
	if cfg.N <= 0 || cfg.C <= 0 {
		return nil, nil, fmt.Errorf("idle: -n and -c must be positive")
	}
	res = &idleResult{URL: target, Attempted: cfg.N}
	before, err := snapshotServer(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}

	var (
		mu      sync.Mutex
		conns   []idleConn
		acc     hist
		kinds   = map[string]int{}
		open    atomic.Int64
		readers sync.WaitGroup
		tickets atomic.Int64
		dialers sync.WaitGroup
	)
	start := time.Now()
	for range cfg.C {
		dialers.Add(1)
		go func() {
			defer dialers.Done()
			for ctx.Err() == nil {
				i := tickets.Add(1)
				if i > int64(cfg.N) {
					return
				}
				begin := time.Now()
				c, kind := dial(i)
				mu.Lock()
				if kind != "" {
					kinds[kind]++
					mu.Unlock()
					continue
				}
				acc.Record(time.Since(begin))
				conns = append(conns, c)
				mu.Unlock()
				open.Add(1)
				readers.Add(1)
				go func() {
					defer readers.Done()
					defer open.Add(-1)
					c.read()
				}()
			}
		}()
	}
	dialers.Wait()
	res.DialSeconds = time.Since(start).Seconds()
	closeConns = func() {
		sem := make(chan struct{}, 256) // closing handshakes, many at once
		for _, c := range conns {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				c.close()
			}()
		}
		for range cap(sem) {
			sem <- struct{}{} // every close has returned
		}
		readers.Wait()
	}
	res.Connected = len(conns)
	res.Failed = cfg.N - res.Connected
	res.FailKinds = nonEmpty(kinds)
	res.AcceptLat = acc.Summary()
	fail := func(err error) (*idleResult, func(), error) {
		closeConns()
		return nil, nil, err
	}
	if err := ctxsleep.Sleep(ctx, cfg.Settle); err != nil {
		return fail(err)
	}
	res.Open = int(open.Load())
	after, err := snapshotServer(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	res.RSSBefore, res.RSSAfter = before.rss, after.rss
	res.GoBefore, res.GoAfter = before.goroutines, after.goroutines
	if cfg.MetricsURL != "" {
		res.ConnsOpen, _ = scrapeMetric(ctx, cfg.MetricsURL, "connections_open")
	}
	if n := float64(res.Open); n > 0 {
		res.RSSPerConn = float64(after.rss-before.rss) / n
		res.GoPerConn = (after.goroutines - before.goroutines) / n
		res.HeapAllocPerConn = (after.mem[0] - before.mem[0]) / n
		res.HeapInusePerConn = (after.mem[1] - before.mem[1]) / n
		res.StackPerConn = (after.mem[2] - before.mem[2]) / n
		res.HeapKeptPerConn = ((after.mem[3] - after.mem[4]) - (before.mem[3] - before.mem[4])) / n
	}
	return res, closeConns, nil
}

// serverState is what measureIdle reads of the server before and after.
type serverState struct {
	rss        int64
	goroutines float64
	mem        [len(memSeries)]float64
}

func snapshotServer(ctx context.Context, cfg idleConfig) (serverState, error) {
	var s serverState
	var err error
	if cfg.ServerPID != 0 {
		if s.rss, err = procRSS(cfg.ServerPID); err != nil {
			return s, fmt.Errorf("server rss: %w", err)
		}
	}
	if cfg.MetricsURL != "" {
		if s.goroutines, err = scrapeMetric(ctx, cfg.MetricsURL, "go_goroutines"); err != nil {
			return s, err
		}
		for i, name := range memSeries {
			s.mem[i], _ = scrapeMetric(ctx, cfg.MetricsURL, name)
		}
	}
	return s, nil
}

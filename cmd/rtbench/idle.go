package main

import (
	"context"
	"fmt"
	"net/url"
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
	// After the measurement, ProbeClients established clients do publish
	// round trips (ProbeRate per second in all) for ProbeTime while the
	// idle connections stay open: what an idle herd costs a live
	// conversation. 0 clients: none.
	ProbeClients int
	ProbeRate    float64
	ProbeTime    time.Duration
}

type idleResult struct {
	URL       string         `json:"url"`
	Attempted int            `json:"attempted"`
	Connected int            `json:"connected"`
	Failed    int            `json:"failed"`
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
	AcceptLat        latency `json:"acceptLatency"`
	// Probe is the probes' send -> receipt round trips (publish sent to
	// both its answer and its message received) with the idle
	// connections open; nil without probes.
	Probe *latency `json:"probe,omitempty"`
}

// memSeries are the Go runtime gauges rtserver exports, read before and
// after connecting.
var memSeries = [...]string{"go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes"}

// runIdle opens cfg.N idle connections, measures the server, and closes
// them.
func runIdle(ctx context.Context, cfg idleConfig) (*idleResult, error) {
	if cfg.N <= 0 || cfg.C <= 0 {
		return nil, fmt.Errorf("idle: -n and -c must be positive")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	res := &idleResult{URL: cfg.URL.String(), Attempted: cfg.N}
	var err error
	if cfg.ServerPID != 0 {
		if res.RSSBefore, err = procRSS(cfg.ServerPID); err != nil {
			return nil, fmt.Errorf("server rss: %w", err)
		}
	}
	var memBefore [len(memSeries)]float64
	if cfg.MetricsURL != "" {
		if res.GoBefore, err = scrapeMetric(ctx, cfg.MetricsURL, "go_goroutines"); err != nil {
			return nil, err
		}
		for i, name := range memSeries {
			memBefore[i], _ = scrapeMetric(ctx, cfg.MetricsURL, name)
		}
	}

	d := newDialer(cfg.URL, nil)
	var (
		mu      sync.Mutex
		conns   []*websocket.Conn
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
			for ctx.Err() == nil && tickets.Add(1) <= int64(cfg.N) {
				begin := time.Now()
				dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
				c, resp, err := d.dial(dctx)
				cancel()
				mu.Lock()
				if err != nil {
					k := errKind(err)
					if resp != nil {
						k = fmt.Sprintf("HTTP %d", resp.StatusCode)
					}
					kinds[k]++
					mu.Unlock()
					continue
				}
				acc.Record(time.Since(begin))
				conns = append(conns, c)
				mu.Unlock()
				open.Add(1)
				// A reader per connection answers the server's pings, as
				// any real client would; it ends when the connection does.
				readers.Add(1)
				go func() {
					defer readers.Done()
					defer open.Add(-1)
					for {
						_, b, err := c.Read(context.Background())
						if err != nil {
							return
						}
						serverPing(c, b)
					}
				}()
			}
		}()
	}
	dialers.Wait()
	res.DialSeconds = time.Since(start).Seconds()
	defer func() {
		closeAll(conns, 256)
		readers.Wait()
	}()
	res.Connected = len(conns)
	res.Failed = cfg.N - res.Connected
	res.FailKinds = nonEmpty(kinds)
	res.AcceptLat = acc.Summary()
	if err := ctxsleep.Sleep(ctx, cfg.Settle); err != nil {
		return nil, err
	}
	res.Open = int(open.Load())
	if cfg.ServerPID != 0 {
		if res.RSSAfter, err = procRSS(cfg.ServerPID); err != nil {
			return nil, fmt.Errorf("server rss: %w", err)
		}
		if res.Open > 0 {
			res.RSSPerConn = float64(res.RSSAfter-res.RSSBefore) / float64(res.Open)
		}
	}
	if cfg.MetricsURL != "" {
		if res.GoAfter, err = scrapeMetric(ctx, cfg.MetricsURL, "go_goroutines"); err != nil {
			return nil, err
		}
		if res.Open > 0 {
			res.GoPerConn = (res.GoAfter - res.GoBefore) / float64(res.Open)
		}
		res.ConnsOpen, _ = scrapeMetric(ctx, cfg.MetricsURL, "connections_open")
		if res.Open > 0 {
			per := make([]float64, len(memSeries))
			for i, name := range memSeries {
				if v, err := scrapeMetric(ctx, cfg.MetricsURL, name); err == nil {
					per[i] = (v - memBefore[i]) / float64(res.Open)
				}
			}
			res.HeapAllocPerConn, res.HeapInusePerConn, res.StackPerConn = per[0], per[1], per[2]
		}
	}
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

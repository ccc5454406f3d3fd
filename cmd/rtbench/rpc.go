package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rtserver/rtserver/internal/ctxsleep"
)

type rpcConfig struct {
	URL         *url.URL
	Method      string
	Params      json.RawMessage // default {}
	Rate        float64         // calls/s over all connections
	Duration    time.Duration
	C           int // connections
	Window      int // calls in flight per connection (default 16, the server's default cap)
	DialTimeout time.Duration
	ServerPID   int
}

type rpcResult struct {
	URL     string  `json:"url"`
	Method  string  `json:"method"`
	Rate    float64 `json:"targetRatePerSec"`
	Sent    int64   `json:"sent"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"answeredPerSec"`
	// Answers by outcome; Other holds every other error code.
	OK          int64          `json:"ok"`
	Overloaded  int64          `json:"overloaded32001"`
	RateLimited int64          `json:"rateLimited32002"`
	Other       map[string]int `json:"otherErrors,omitempty"`
	Unanswered  int64          `json:"unanswered"`
	// Shares of the answered calls.
	ShareOK          float64 `json:"shareOK"`
	ShareOverloaded  float64 `json:"share32001"`
	ShareRateLimited float64 `json:"share32002"`
	ShareOther       float64 `json:"shareOther"`
	// Late counts calls sent after their slot because the window was full.
	Late      int64   `json:"late"`
	Latency   latency `json:"latency"`
	ServerCPU float64 `json:"serverCpuSeconds,omitempty"`
}

type rpcTally struct {
	sent, ok, overloaded, rateLimited, late, answered int64
	other                                             map[string]int
	lat                                               hist
}

func runRPC(ctx context.Context, cfg rpcConfig) (*rpcResult, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.C <= 0 || cfg.Method == "" {
		return nil, fmt.Errorf("rpc: --method, --rate, --duration and -c must be set and positive")
	}
	if len(cfg.Params) == 0 {
		cfg.Params = json.RawMessage(`{}`)
	}
	if !json.Valid(cfg.Params) {
		return nil, fmt.Errorf("rpc: --params is not valid JSON")
	}
	if cfg.Window <= 0 {
		cfg.Window = 16
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	conns, err := dialMany(ctx, newDialer(cfg.URL, nil), cfg.C, 100, cfg.DialTimeout, func(int, *websocket.Conn) error { return nil })
	if err != nil {
		return nil, err
	}
	defer closeAll(conns, 256)
	cpu, err := startCPU(cfg.ServerPID)
	if err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	}
	total := rpcTally{other: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Duration(float64(time.Second) * float64(cfg.C) / cfg.Rate)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := rpcCaller(ctx, c, cfg, interval, interval*time.Duration(i)/time.Duration(cfg.C), start.Add(cfg.Duration))
			mu.Lock()
			total.sent += t.sent
			total.ok += t.ok
			total.overloaded += t.overloaded
			total.rateLimited += t.rateLimited
			total.late += t.late
			total.answered += t.answered
			for k, v := range t.other {
				total.other[k] += v
			}
			total.lat.Merge(&t.lat)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res := &rpcResult{URL: cfg.URL.String(), Method: cfg.Method, Rate: cfg.Rate, Seconds: time.Since(start).Seconds()}
	if used, ok, err := cpu.stop(); err == nil && ok {
		res.ServerCPU = used.Total().Seconds()
	}
	res.Sent, res.OK, res.Overloaded, res.RateLimited, res.Late = total.sent, total.ok, total.overloaded, total.rateLimited, total.late
	res.Other = nonEmpty(total.other)
	res.Unanswered = total.sent - total.answered
	res.Latency = total.lat.Summary()
	if res.Seconds > 0 {
		res.PerSec = float64(total.answered) / res.Seconds
	}
	if a := float64(total.answered); a > 0 {
		res.ShareOK = float64(res.OK) / a
		res.ShareOverloaded = float64(res.Overloaded) / a
		res.ShareRateLimited = float64(res.RateLimited) / a
		res.ShareOther = float64(total.answered-res.OK-res.Overloaded-res.RateLimited) / a
	}
	return res, nil
}

// rpcCaller sends calls on c every interval (after offset) until end, at
// most cfg.Window unanswered, then waits (at most 10 s) for the answers.
// Latency is from each call's scheduled time.
func rpcCaller(ctx context.Context, c *websocket.Conn, cfg rpcConfig, interval, offset time.Duration, end time.Time) *rpcTally {
	t := &rpcTally{other: map[string]int{}}
	var mu sync.Mutex
	scheduled := map[uint64]time.Time{}
	window := make(chan struct{}, cfg.Window)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		readFrames(c, func(now time.Time, f frame) bool {
			if f.ID == nil {
				return true
			}
			mu.Lock()
			at, ok := scheduled[*f.ID]
			delete(scheduled, *f.ID)
			if ok {
				t.answered++
				t.lat.Record(now.Sub(at))
				switch {
				case f.Error == nil:
					t.ok++
				case f.Error.Code == -32001:
					t.overloaded++
				case f.Error.Code == -32002:
					t.rateLimited++
				default:
					t.other[strconv.Itoa(f.Error.Code)]++
				}
			}
			mu.Unlock()
			if ok {
				<-window
			}
			return true
		})
	}()
	next := time.Now().Add(offset)
send:
	for id := uint64(1); next.Before(end) && ctx.Err() == nil; id++ {
		if err := ctxsleep.Sleep(ctx, time.Until(next)); err != nil {
			break
		}
		at := next
		next = next.Add(interval)
		select {
		case window <- struct{}{}:
		default:
			mu.Lock()
			t.late++
			mu.Unlock()
			if sleepUntilSlot(ctx, window, end.Add(10*time.Second)) != nil {
				break send
			}
		}
		mu.Lock()
		scheduled[id] = at
		t.sent++
		mu.Unlock()
		if err := write(ctx, c, request(id, cfg.Method, cfg.Params)); err != nil {
			mu.Lock()
			t.other["write: "+errKind(err)]++
			mu.Unlock()
			break send
		}
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
wait:
	for {
		mu.Lock()
		pending := len(scheduled)
		mu.Unlock()
		if pending == 0 {
			break
		}
		select {
		case <-readerDone:
			break wait
		case <-deadline.C:
			break wait
		case <-time.After(5 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The tally is read by the caller after this returns; the reader may
	// still run until the connection closes, so hand back a copy.
	cp := *t
	cp.other = map[string]int{}
	for k, v := range t.other {
		cp.other[k] = v
	}
	cp.lat = hist{}
	cp.lat.Merge(&t.lat)
	return &cp
}

func sleepUntilSlot(ctx context.Context, window chan struct{}, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	select {
	case window <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

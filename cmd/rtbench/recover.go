package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/protocol"
)

// recoverConfig is a recovery storm: N clients subscribe to history
// topics, go away, miss Missed messages per topic, and reconnect at once,
// each recovering from its position.
type recoverConfig struct {
	URL         *url.URL
	N           int // clients; client i is on topic i mod T
	T           int // topics (on a namespace with history)
	Missed      int // messages published per topic while the clients are away
	Size        int // approximate bytes of each message's data
	Window      int // the publisher's publishes in flight
	C           int // dialers in parallel for the storm (0: N, all at once)
	Prefix      string
	DialTimeout time.Duration
	ServerPID   int
	// Watch, when set (http://host:port), samples that server's /readyz
	// and bus_degraded every 100 ms from the first reconnect to the last
	// client caught up.
	Watch string
}

type recoverResult struct {
	URL     string `json:"url"`
	Clients int    `json:"clients"`
	Topics  int    `json:"topics"`
	Missed  int    `json:"missedPerClient"`
	Size    int    `json:"dataBytes"`
	// CaughtUp counts clients that received every missed message, once
	// each and in order, after a recovered:true answer.
	CaughtUp int `json:"caughtUp"`
	// Seconds is from the first reconnect to the last client caught up.
	Seconds    float64        `json:"seconds"`
	PerClient  latency        `json:"perClient"` // reconnect to caught up
	Replayed   int64          `json:"replayedMessages"`
	Closed1013 int            `json:"closed1013"`
	Failures   map[string]int `json:"failures,omitempty"`
	// DegradedEvents counts system degraded events the recovering
	// clients received.
	DegradedEvents int64        `json:"degradedEvents"`
	Health         *healthWatch `json:"health,omitempty"`
	// RSS of the server before the storm, and the most it reached during
	// it (sampled every 20 ms).
	RSSBeforeMiB float64 `json:"serverRssBeforeMiB,omitempty"`
	RSSPeakMiB   float64 `json:"serverRssPeakMiB,omitempty"`
	RSSGrowthMiB float64 `json:"serverRssGrowthMiB,omitempty"`
	ServerCPU    float64 `json:"serverCpuSeconds,omitempty"`
	ClientCPU    float64 `json:"rtbenchCpuSeconds"`
}

// histPos is a subscribe or publish result on a history topic.
type histPos struct {
	Epoch     string `json:"epoch"`
	Offset    uint64 `json:"offset"`
	Recovered *bool  `json:"recovered"`
	Reason    string `json:"reason"`
}

func recoverTopic(prefix string, t int) string {
	return prefix + strconv.Itoa(os.Getpid()) + "." + strconv.Itoa(t)
}

func runRecover(ctx context.Context, cfg recoverConfig) (*recoverResult, error) {
	if cfg.N <= 0 || cfg.T <= 0 || cfg.Missed <= 0 {
		return nil, errors.New("recover: -n, -t and --missed must be positive")
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	if cfg.C <= 0 {
		cfg.C = cfg.N
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	res := &recoverResult{URL: cfg.URL.String(), Clients: cfg.N, Topics: cfg.T, Missed: cfg.Missed, Size: cfg.Size, Failures: map[string]int{}}
	d := newDialer(cfg.URL, nil)

	// 1. Every client subscribes and learns its position; then all go.
	since := make([]histPos, cfg.N)
	conns, err := dialMany(ctx, d, cfg.N, 100, cfg.DialTimeout, func(i int, c *websocket.Conn) error {
		c.SetReadLimit(1 << 24)
		p, err := callSync(ctx, c, uint64(i+1), protocol.MethodSubscribe, topicParams(recoverTopic(cfg.Prefix, i%cfg.T)))
		since[i] = p
		return err
	})
	if err != nil {
		return nil, err
	}
	closeAll(conns, 256)

	// 2. Missed messages on every topic, acknowledged (stored).
	last := make([]uint64, cfg.T)
	pub, _, err := d.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	defer pub.CloseNow()
	if err := publishMissed(ctx, pub, cfg, last); err != nil {
		return nil, err
	}

	// 3. Everyone reconnects at once and recovers.
	rssBefore, _ := procRSS(cfg.ServerPID)
	var peak atomic.Int64
	peak.Store(rssBefore)
	sampling := make(chan struct{})
	var sampler sync.WaitGroup
	if cfg.ServerPID > 0 {
		sampler.Go(func() {
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-sampling:
					return
				case <-t.C:
				}
				if v, err := procRSS(cfg.ServerPID); err == nil && v > peak.Load() {
					peak.Store(v)
				}
			}
		})
	}
	cpu, err := startCPU(cfg.ServerPID)
	if err != nil {
		return nil, err
	}
	selfCPU, _ := startCPU(selfPID())

	var (
		mu       sync.Mutex
		perLat   hist
		lastDone time.Time
		replayed atomic.Int64
		wg       sync.WaitGroup
		sem      = make(chan struct{}, cfg.C)
		open     = make([]*websocket.Conn, cfg.N)
	)
	fail := func(kind string) {
		mu.Lock()
		res.Failures[kind]++
		mu.Unlock()
	}
	var watch *healthWatch
	if cfg.Watch != "" {
		watch = watchHealth(ctx, cfg.Watch, 100*time.Millisecond)
	}
	var degraded atomic.Int64
	start := time.Now()
	for i := range cfg.N {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			topic := recoverTopic(cfg.Prefix, i%cfg.T)
			dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
			c, _, err := d.dial(dctx)
			cancel()
			if err != nil {
				fail("dial")
				return
			}
			c.SetReadLimit(1 << 24)
			open[i] = c
			n, err := recoverOne(ctx, c, topic, since[i], last[i%cfg.T], &degraded)
			replayed.Add(int64(n))
			if err != nil {
				if websocket.CloseStatus(err) == websocket.StatusTryAgainLater {
					mu.Lock()
					res.Closed1013++
					mu.Unlock()
				} else if strings.Contains(err.Error(), protocol.ReasonHistoryUnavailable) {
					fail(protocol.ReasonHistoryUnavailable) // one key, whatever the hint
				} else {
					fail(err.Error())
				}
				return
			}
			now := time.Now()
			mu.Lock()
			res.CaughtUp++
			perLat.Record(now.Sub(start))
			if now.After(lastDone) {
				lastDone = now
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if watch != nil {
		res.Health = watch.end()
	}
	res.DegradedEvents = degraded.Load()
	close(sampling)
	sampler.Wait()
	if used, ok, err := cpu.stop(); err != nil {
		return nil, err
	} else if ok {
		res.ServerCPU = used.Total().Seconds()
	}
	if used, ok, _ := selfCPU.stop(); ok {
		res.ClientCPU = used.Total().Seconds()
	}
	var live []*websocket.Conn
	for _, c := range open {
		if c != nil {
			live = append(live, c)
		}
	}
	closeAll(live, 256)

	if !lastDone.IsZero() {
		res.Seconds = lastDone.Sub(start).Seconds()
	}
	res.PerClient = perLat.Summary()
	res.Replayed = replayed.Load()
	if cfg.ServerPID > 0 {
		res.RSSBeforeMiB = float64(rssBefore) / (1 << 20)
		res.RSSPeakMiB = float64(peak.Load()) / (1 << 20)
		res.RSSGrowthMiB = res.RSSPeakMiB - res.RSSBeforeMiB
	}
	if len(res.Failures) == 0 {
		res.Failures = nil
	}
	return res, nil
}

// callSync sends one request and reads until its answer, ignoring
// anything else, and decodes a history position from the result.
func callSync(ctx context.Context, c *websocket.Conn, id uint64, method string, params []byte) (histPos, error) {
	if err := write(ctx, c, request(id, method, params)); err != nil {
		return histPos{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return histPos{}, err
		}
		if p, ok, err := answer(b, id); ok {
			return p, err
		}
	}
}

// answer decodes b when it is the answer to id.
func answer(b []byte, id uint64) (histPos, bool, error) {
	if !bytes.Contains(b, []byte(`"id":`)) {
		return histPos{}, false, nil
	}
	var f struct {
		ID     *uint64         `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int             `json:"code"`
			Data json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &f) != nil || f.ID == nil || *f.ID != id {
		return histPos{}, false, nil
	}
	if f.Error != nil {
		return histPos{}, true, fmt.Errorf("error %d %s", f.Error.Code, f.Error.Data)
	}
	var p histPos
	if err := json.Unmarshal(f.Result, &p); err != nil || p.Epoch == "" {
		return histPos{}, true, errors.New("not a history topic (configure history on its namespace)")
	}
	return p, true, nil
}

// publishMissed publishes cfg.Missed messages on every topic, Window in
// flight, and sets last to each topic's offset once all are stored.
func publishMissed(ctx context.Context, c *websocket.Conn, cfg recoverConfig, last []uint64) error {
	total := cfg.Missed * cfg.T
	window := make(chan struct{}, cfg.Window)
	errc := make(chan error, 1)
	var mu sync.Mutex
	go func() {
		for got := 0; got < total; got++ {
			_, b, err := c.Read(ctx)
			if err != nil {
				errc <- err
				return
			}
			var f struct {
				ID     uint64  `json:"id"`
				Result histPos `json:"result"`
				Error  *struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if json.Unmarshal(b, &f) != nil || f.ID == 0 {
				got--
				continue
			}
			if f.Error != nil {
				errc <- fmt.Errorf("publish: error %d", f.Error.Code)
				return
			}
			t := int(f.ID-1) % cfg.T
			mu.Lock()
			last[t] = max(last[t], f.Result.Offset)
			mu.Unlock()
			<-window
		}
		errc <- nil
	}()
	data := payload(0, cfg.Size)
	for i := range total {
		select {
		case window <- struct{}{}:
		case err := <-errc:
			return fmt.Errorf("publisher: %w", err)
		}
		params := append([]byte(`{"topic":`+strconv.Quote(recoverTopic(cfg.Prefix, i%cfg.T))+`,"data":`), data...)
		params = append(params, '}')
		if err := write(ctx, c, request(uint64(i+1), protocol.MethodPublish, params)); err != nil {
			return err
		}
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	return nil
}

var offsetKey = []byte(`"offset":`)

// recoverOne subscribes c to topic with recover from since and reads until
// the topic's offset reaches last, checking that each offset comes once,
// in order. It returns how many messages it received, and counts system
// degraded events in degraded.
func recoverOne(ctx context.Context, c *websocket.Conn, topic string, since histPos, last uint64, degraded *atomic.Int64) (int, error) {
	params, _ := json.Marshal(struct {
		Topic   string  `json:"topic"`
		Recover bool    `json:"recover"`
		Since   histPos `json:"since"`
	}{topic, true, histPos{Epoch: since.Epoch, Offset: since.Offset}})
	if err := write(ctx, c, request(1, protocol.MethodSubscribe, params)); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	answered, at, n := false, since.Offset, 0
	for at < last {
		_, b, err := c.Read(ctx)
		if err != nil {
			return n, err
		}
		if !answered {
			p, ok, err := answer(b, 1)
			if err != nil {
				return n, err
			}
			if ok {
				if p.Recovered == nil || !*p.Recovered {
					return n, fmt.Errorf("recovered false (%s)", p.Reason)
				}
				answered = true
				continue
			}
		}
		if bytes.Contains(b, []byte(`"event":"degraded"`)) {
			degraded.Add(1)
			continue
		}
		if bytes.Contains(b, []byte(`"resync"`)) {
			return n, errors.New("resync")
		}
		i := bytes.Index(b, offsetKey)
		if i < 0 {
			continue
		}
		off, err := strconv.ParseUint(string(digits(b[i+len(offsetKey):])), 10, 64)
		if err != nil {
			continue
		}
		if !answered {
			return n, errors.New("a message before the subscribe result")
		}
		if off != at+1 {
			return n, fmt.Errorf("offset %d after %d", off, at)
		}
		at = off
		n++
	}
	return n, nil
}

func digits(b []byte) []byte {
	j := 0
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	return b[:j]
}

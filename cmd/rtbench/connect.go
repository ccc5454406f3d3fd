package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rtserver/rtserver/internal/ctxsleep"
)

type connectConfig struct {
	URL         *url.URL
	N           int           // upgrade attempts
	C           int           // dialers in parallel
	Hold        time.Duration // how long each accepted connection is kept
	Duration    time.Duration // 0: until N attempts; else also stop after this long
	Rate        float64       // attempts/s over all dialers; 0 = as fast as C dialers go
	DialTimeout time.Duration
	ServerPID   int // 0: no CPU measurement

	// Probes (ProbeClients > 0): established clients on ProbeURL doing
	// ProbeRate round trips/s in all, for Baseline before the storm and
	// then during it.
	ProbeURL     *url.URL
	ProbeClients int
	ProbeRate    float64
	Baseline     time.Duration
}

type connectResult struct {
	URL      string  `json:"url"`
	Attempts int     `json:"attempts"`
	Seconds  float64 `json:"stormSeconds"` // first dial to last dial's end
	PerSec   float64 `json:"attemptsPerSec"`
	// Accepted upgrades that stayed open for the whole hold.
	Accepted int `json:"accepted"`
	// PeakOpen is the most accepted storm connections open at once, as
	// the client saw them (from the upgrade's answer to the end of the
	// hold); upgrades then closed with a shed code are not counted. With
	// probes connected too, PeakOpen + probes is what the cap must cover.
	PeakOpen int `json:"peakOpen"`
	// Shed upgrades: by HTTP status, and by close code within the hold.
	Shed          int            `json:"shed"`
	Shed503       int            `json:"shed503"`
	Shed429       int            `json:"shed429"`
	ShedOtherHTTP map[string]int `json:"shedOtherHTTP,omitempty"`
	ShedClose     map[string]int `json:"shedClose,omitempty"`
	// Errors: no HTTP answer (refused, reset, timeout) or a connection that
	// ended within the hold without a close frame.
	Errors     int            `json:"errors"`
	ErrorKinds map[string]int `json:"errorKinds,omitempty"`
	AcceptLat  latency        `json:"acceptLatency"`
	RejectLat  latency        `json:"rejectLatency"`
	ServerCPU  float64        `json:"serverCpuSeconds,omitempty"`
	ServerUser float64        `json:"serverUserSeconds,omitempty"`
	ServerSys  float64        `json:"serverSysSeconds,omitempty"`
	CPUPerTry  float64        `json:"serverCpuUsPerAttempt,omitempty"`
	CPUPerShed float64        `json:"serverCpuUsPerShed,omitempty"`
	ClientCPU  float64        `json:"rtbenchCpuSeconds"`
	Probe      *probeResult   `json:"probe,omitempty"`
}

// connectTally is one dialer's counts, merged at the end.
type connectTally struct {
	attempts, accepted, shed503, shed429, errors int
	otherHTTP, closes, errKinds                  map[string]int
	accept, reject                               hist
}

func newTally() *connectTally {
	return &connectTally{otherHTTP: map[string]int{}, closes: map[string]int{}, errKinds: map[string]int{}}
}

func (t *connectTally) merge(o *connectTally) {
	t.attempts += o.attempts
	t.accepted += o.accepted
	t.shed503 += o.shed503
	t.shed429 += o.shed429
	t.errors += o.errors
	for _, p := range [][2]map[string]int{{t.otherHTTP, o.otherHTTP}, {t.closes, o.closes}, {t.errKinds, o.errKinds}} {
		for k, v := range p[1] {
			p[0][k] += v
		}
	}
	t.accept.Merge(&o.accept)
	t.reject.Merge(&o.reject)
}

// errKind buckets a dial error into a short, bounded label.
func errKind(err error) string {
	var s string
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		s = "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		s = "eof"
	default:
		s = err.Error()
		for _, k := range []string{"connection refused", "connection reset", "broken pipe", "cannot assign requested address", "too many open files", "i/o timeout"} {
			if strings.Contains(s, k) {
				return k
			}
		}
		if len(s) > 60 {
			s = s[len(s)-60:]
		}
	}
	return s
}

// runConnect storms cfg.URL with upgrade attempts.
func runConnect(ctx context.Context, cfg connectConfig) (*connectResult, error) {
	if cfg.N <= 0 || cfg.C <= 0 {
		return nil, fmt.Errorf("connect: -n and -c must be positive")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	res := &connectResult{URL: cfg.URL.String()}
	selfCPU, _ := startCPU(selfPID())

	var pr *probes
	if cfg.ProbeClients > 0 {
		pu := cfg.ProbeURL
		if pu == nil {
			pu = cfg.URL
		}
		var err error
		pr, err = startProbes(ctx, pu, cfg.ProbeClients, cfg.ProbeRate)
		if err != nil {
			return nil, err
		}
		defer pr.stop()
		if err := ctxsleep.Sleep(ctx, cfg.Baseline); err != nil {
			return nil, err
		}
		pr.setPhase(phaseStorm)
	}

	cpu, err := startCPU(cfg.ServerPID)
	if err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	}
	d := newDialer(cfg.URL, nil)
	total := newTally()
	var mu sync.Mutex
	var tickets atomic.Int64
	var open openCount
	var holders sync.WaitGroup
	stormCtx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		stormCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	start := time.Now()
	var dialers sync.WaitGroup
	for range cfg.C {
		dialers.Add(1)
		go func() {
			defer dialers.Done()
			t := newTally()
			for stormCtx.Err() == nil {
				k := tickets.Add(1)
				if k > int64(cfg.N) {
					break
				}
				if cfg.Rate > 0 {
					// Ticket k is due at start + (k-1)/rate: a paced storm
					// is the same storm whatever it is aimed at.
					due := start.Add(time.Duration(float64(k-1) / cfg.Rate * float64(time.Second)))
					if ctxsleep.Sleep(stormCtx, time.Until(due)) != nil {
						break
					}
				}
				t.attempts++
				attempt(ctx, d, cfg, t, &mu, total, &holders, &open)
			}
			mu.Lock()
			total.merge(t)
			mu.Unlock()
		}()
	}
	dialers.Wait()
	res.Seconds = time.Since(start).Seconds()
	if pr != nil {
		// The storm is the dialling; the held connections are idle.
		pr.setPhase(phaseStop)
	}
	holders.Wait()
	time.Sleep(100 * time.Millisecond) // let the server finish tearing down the held connections
	if used, ok, err := cpu.stop(); err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	} else if ok {
		res.ServerCPU, res.ServerUser, res.ServerSys = used.Total().Seconds(), used.User.Seconds(), used.Sys.Seconds()
	}

	res.Attempts = total.attempts
	res.PeakOpen = open.peak()
	res.Accepted = total.accepted
	res.Shed503, res.Shed429 = total.shed503, total.shed429
	res.Shed = total.shed503 + total.shed429
	for _, m := range []map[string]int{total.otherHTTP, total.closes} {
		for _, v := range m {
			res.Shed += v
		}
	}
	res.ShedOtherHTTP, res.ShedClose, res.ErrorKinds = nonEmpty(total.otherHTTP), nonEmpty(total.closes), nonEmpty(total.errKinds)
	res.Errors = total.errors
	res.AcceptLat, res.RejectLat = total.accept.Summary(), total.reject.Summary()
	if res.Seconds > 0 {
		res.PerSec = float64(res.Attempts) / res.Seconds
	}
	if res.ServerCPU > 0 && res.Attempts > 0 {
		res.CPUPerTry = res.ServerCPU * 1e6 / float64(res.Attempts)
		if res.Shed > 0 {
			res.CPUPerShed = res.ServerCPU * 1e6 / float64(res.Shed)
		}
	}
	if pr != nil {
		pr.stop()
		res.Probe = pr.result(cfg.ProbeClients, cfg.ProbeRate)
	}
	if used, ok, _ := selfCPU.stop(); ok {
		res.ClientCPU = used.Total().Seconds()
	}
	return res, nil
}

// attempt is one upgrade attempt. An accepted connection is handed to a
// holder goroutine so the dialer moves on at once: the storm keeps its
// pace while accepted connections pile up to the server's cap.
func attempt(ctx context.Context, d *dialer, cfg connectConfig, t *connectTally, mu *sync.Mutex, total *connectTally, holders *sync.WaitGroup, open *openCount) {
	begin := time.Now()
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	c, resp, err := d.dial(dctx)
	cancel()
	if err != nil {
		switch {
		case resp != nil && resp.StatusCode == 503:
			t.shed503++
			t.reject.Record(time.Since(begin))
		case resp != nil && resp.StatusCode == 429:
			t.shed429++
			t.reject.Record(time.Since(begin))
		case resp != nil && resp.StatusCode != 101:
			t.otherHTTP[strconv.Itoa(resp.StatusCode)]++
			t.reject.Record(time.Since(begin))
		default:
			t.errors++
			t.errKinds[errKind(err)]++
		}
		return
	}
	accepted := time.Since(begin)
	openedAt := time.Now()
	holders.Add(1)
	go func() {
		defer holders.Done()
		code, closedAt, err := hold(c, cfg.Hold)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case code >= 0:
			total.closes[strconv.Itoa(int(code))]++
			total.reject.Record(time.Since(begin))
		case err != nil:
			total.errors++
			total.errKinds["closed in hold: "+errKind(err)]++
		default:
			total.accepted++
			total.accept.Record(accepted)
			open.add(openedAt, closedAt)
		}
	}()
}

// hold keeps c open for d, reading (so control frames are answered). It
// returns the close code if the server closed the connection within d,
// -1 and an error if it ended otherwise, and -1 and nil if c stayed open;
// then c is closed with 1001, and closing is when that began: the server
// frees the connection's slot only after it, so no connection the server
// accepted later can have opened before it.
func hold(c *websocket.Conn, d time.Duration) (code websocket.StatusCode, closing time.Time, err error) {
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				ended <- err
				return
			}
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-ended:
		c.CloseNow()
		if code := websocket.CloseStatus(err); code != -1 {
			return code, time.Now(), nil
		}
		return -1, time.Now(), err
	case <-t.C:
		closing = time.Now()
		c.Close(websocket.StatusGoingAway, "")
		<-ended
		return -1, closing, nil
	}
}

func nonEmpty(m map[string]int) map[string]int {
	if len(m) == 0 {
		return nil
	}
	return m
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// openCount collects accepted connections' lifetimes; peak is the most
// that overlapped.
type openCount struct{ events []openEvent }

type openEvent struct {
	at time.Time
	d  int // +1 opened, -1 closed
}

func (o *openCount) add(from, to time.Time) {
	o.events = append(o.events, openEvent{from, 1}, openEvent{to, -1})
}

func (o *openCount) peak() int {
	sort.Slice(o.events, func(i, j int) bool {
		if o.events[i].at.Equal(o.events[j].at) {
			return o.events[i].d < o.events[j].d // a close at the same instant first
		}
		return o.events[i].at.Before(o.events[j].at)
	})
	n, p := 0, 0
	for _, e := range o.events {
		n += e.d
		p = max(p, n)
	}
	return p
}

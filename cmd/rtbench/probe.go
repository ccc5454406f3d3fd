package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/protocol"
)

// Probe phases: round trips are recorded in the phase they were scheduled in.
const (
	phaseBaseline = iota
	phaseStorm
	phaseStop
)

// probes are established clients doing publish round trips on private
// topics: each publishes to a topic only it subscribes to and waits for
// both the answer and the message. A round trip is timed from when it was
// scheduled, not from when it was sent, so a stalled server shows up as
// latency instead of as fewer samples (no coordinated omission).
type probes struct {
	phase  atomic.Int32
	wg     sync.WaitGroup
	mu     sync.Mutex
	hists  [2]hist
	failed [2]int
	conns  []*websocket.Conn
}

type probeResult struct {
	Clients  int     `json:"clients"`
	Rate     float64 `json:"ratePerSec"`
	Baseline latency `json:"baseline"`
	Storm    latency `json:"storm"`
	// Failed counts round trips that got an error answer or no answer.
	BaselineFailed int `json:"baselineFailed"`
	StormFailed    int `json:"stormFailed"`
	// P99Factor is storm p99 / baseline p99.
	P99Factor float64 `json:"p99Factor"`
}

// startProbes connects k clients to u and starts their round trips, rate
// round trips per second in all, in the baseline phase.
func startProbes(ctx context.Context, u *url.URL, k int, rate float64) (*probes, error) {
	if k <= 0 || rate <= 0 {
		return nil, fmt.Errorf("probes: need --probe-clients > 0 and --probe-rate > 0")
	}
	d := newDialer(u, nil)
	p := &probes{}
	interval := time.Duration(float64(time.Second) * float64(k) / rate)
	for i := range k {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, _, err := d.dial(dctx)
		cancel()
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("probe %d: dial: %w", i, err)
		}
		p.conns = append(p.conns, c)
		topic := "rtbench.probe." + strconv.Itoa(os.Getpid()) + "." + strconv.Itoa(i)
		if err := subscribeSync(ctx, c, 1, topic); err != nil {
			p.stop()
			return nil, fmt.Errorf("probe %d: %w", i, err)
		}
		// Stagger the clients over one interval so their sends spread out.
		offset := interval * time.Duration(i) / time.Duration(k)
		p.wg.Add(1)
		go p.run(ctx, c, topic, interval, offset)
	}
	return p, nil
}

func (p *probes) setPhase(ph int32) { p.phase.Store(ph) }

// stop ends the round trips and closes the clients.
func (p *probes) stop() {
	p.phase.Store(phaseStop)
	closeAll(p.conns, 64)
	p.wg.Wait()
}

func (p *probes) result(k int, rate float64) *probeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &probeResult{
		Clients: k, Rate: rate,
		Baseline: p.hists[phaseBaseline].Summary(), Storm: p.hists[phaseStorm].Summary(),
		BaselineFailed: p.failed[phaseBaseline], StormFailed: p.failed[phaseStorm],
	}
	if r.Baseline.P99 > 0 {
		r.P99Factor = r.Storm.P99 / r.Baseline.P99
	}
	return r
}

func (p *probes) run(ctx context.Context, c *websocket.Conn, topic string, interval, offset time.Duration) {
	defer p.wg.Done()
	// The reader reports each round trip's two halves: the answer (by id)
	// and the message (by its data, the same number).
	type arrival struct {
		seq  uint64
		resp bool
		err  bool
	}
	arrivals := make(chan arrival, 16)
	done := make(chan struct{})
	defer close(done)
	send := func(a arrival) bool {
		select {
		case arrivals <- a:
			return true
		case <-done:
			return false
		}
	}
	go func() {
		defer close(arrivals)
		readFrames(c, func(_ time.Time, f frame) bool {
			switch {
			case f.ID != nil:
				return send(arrival{seq: *f.ID, resp: true, err: f.Error != nil})
			case f.Method == "message":
				if n, err := strconv.ParseUint(string(f.Params.Data), 10, 64); err == nil {
					return send(arrival{seq: n})
				}
			}
			return true
		})
	}()
	var local [2]hist
	var failed [2]int
	defer func() {
		p.mu.Lock()
		for i := range local {
			p.hists[i].Merge(&local[i])
			p.failed[i] += failed[i]
		}
		p.mu.Unlock()
	}()
	next := time.Now().Add(offset)
	params := func(seq uint64) []byte {
		return []byte(`{"topic":` + strconv.Quote(topic) + `,"data":` + strconv.FormatUint(seq, 10) + `}`)
	}
	for seq := uint64(2); ; seq++ {
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		ph := p.phase.Load()
		if ph == phaseStop {
			return
		}
		scheduled := next
		next = next.Add(interval)
		if err := write(ctx, c, request(seq, protocol.MethodPublish, params(seq))); err != nil {
			if p.phase.Load() != phaseStop {
				failed[ph]++
			}
			return
		}
		// Wait for both halves, at most 10 s.
		gotResp, gotMsg, bad := false, false, false
		timeout := time.NewTimer(10 * time.Second)
		for !(gotResp && gotMsg) && !bad {
			select {
			case a, ok := <-arrivals:
				if !ok {
					timeout.Stop()
					if p.phase.Load() != phaseStop { // not cut short by stop closing the client
						failed[ph]++
					}
					return
				}
				if a.seq != seq {
					continue // a late half of an earlier round trip
				}
				if a.resp {
					gotResp = true
					bad = a.err
				} else {
					gotMsg = true
				}
			case <-timeout.C:
				bad = true
			case <-ctx.Done():
				timeout.Stop()
				return
			}
		}
		timeout.Stop()
		if bad {
			failed[ph]++
			continue
		}
		local[ph].Record(time.Since(scheduled))
	}
}

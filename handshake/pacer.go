package handshake

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rtserver/rtserver/metrics"
)

// pacer lets at most budget upgrades through per tick (docs/handshake.md,
// step 5). Tokens are counted per tick window computed from the clock, so
// an idle gate runs nothing. The excess waits in FIFO order; one timer
// (armed only while someone waits) wakes at the next tick boundary, hands
// the new window's tokens to the head of the queue and expires waiters
// whose deadline passed.
//
// The queue is bounded by the number of waiters that could be served
// before their deadline (budget per tick × ticks in maxWait) and by
// maxConcurrent (every waiter holds an in-flight slot anyway): a newcomer
// past that bound is rejected at once with queue_timeout, since it would
// only time out later.
type pacer struct {
	budget   int
	tick     int64 // ns
	maxWait  int64 // ns
	maxQueue int
	clock    func() int64
	depth    prometheus.Gauge

	over atomic.Bool // n >= maxQueue: read by the door without mu

	mu       sync.Mutex
	window   int64 // tick index that used counts for
	used     int
	head     *waiter
	tail     *waiter
	n        int
	draining bool
	timer    *time.Timer
	armed    bool
}

type waitState uint8

const (
	waiting waitState = iota
	granted
	expired
	drained
	gone // the client went away
)

type waiter struct {
	prev, next *waiter
	done       chan struct{} // closed when state leaves waiting (by the pacer)
	deadline   int64
	state      waitState
}

func newPacer(cfg *Config, clock func() int64, m *metrics.Metrics) *pacer {
	p := &pacer{
		budget:  cfg.PerTickBudget,
		tick:    int64(cfg.Tick),
		maxWait: int64(cfg.MaxQueueWait),
		clock:   clock,
		depth:   m.HandshakeQueueDepth,
		window:  -1 << 62,
	}
	ticks := (p.maxWait + p.tick - 1) / p.tick
	maxQ := int64(p.budget) * ticks
	if cfg.MaxConcurrent > 0 && int64(cfg.MaxConcurrent) < maxQ {
		maxQ = int64(cfg.MaxConcurrent)
	}
	p.maxQueue = int(min(maxQ, 1<<30))
	return p
}

// take uses one token of now's window. p.mu held.
func (p *pacer) take(now int64) bool {
	if w := floorDiv(now, p.tick); w != p.window {
		p.window, p.used = w, 0
	}
	if p.used < p.budget {
		p.used++
		return true
	}
	return false
}

// wait returns "" when the upgrade may proceed, or the rejection reason
// (metrics.RejectQueueTimeout, metrics.RejectDraining, or reasonGone when
// ctx ended first).
func (p *pacer) wait(ctx context.Context) string {
	p.mu.Lock()
	if p.draining {
		p.mu.Unlock()
		return metrics.RejectDraining
	}
	now := p.clock()
	p.pump(now)
	if p.n == 0 && p.take(now) {
		p.mu.Unlock()
		return ""
	}
	if p.maxWait <= 0 || p.n >= p.maxQueue {
		p.mu.Unlock()
		return metrics.RejectQueueTimeout
	}
	w := &waiter{done: make(chan struct{}), deadline: now + p.maxWait}
	p.push(w)
	p.arm(now)
	p.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
	}

	p.mu.Lock()
	if w.state == waiting {
		p.remove(w)
		w.state = gone
	}
	st := w.state
	p.mu.Unlock()
	switch {
	case st == granted && ctx.Err() != nil:
		return reasonGone // its token is spent; the slot still comes back
	case st == granted:
		return ""
	case st == expired:
		return metrics.RejectQueueTimeout
	case st == drained:
		return metrics.RejectDraining
	default:
		return reasonGone
	}
}

// pump grants now's tokens to the head of the queue, then expires waiters
// past their deadline (deadlines are in FIFO order). p.mu held.
func (p *pacer) pump(now int64) {
	for p.head != nil && p.take(now) {
		p.finish(p.head, granted)
	}
	for p.head != nil && p.head.deadline <= now {
		p.finish(p.head, expired)
	}
}

// fire is the timer callback.
func (p *pacer) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	now := p.clock()
	p.pump(now)
	p.arm(now)
}

// arm schedules fire for the next tick boundary (or the head's deadline,
// if sooner) while anyone waits. p.mu held.
func (p *pacer) arm(now int64) {
	if p.armed || p.head == nil {
		return
	}
	d := (floorDiv(now, p.tick)+1)*p.tick - now
	if dl := p.head.deadline - now; dl < d {
		d = dl
	}
	d = max(d, 1)
	if p.timer == nil {
		p.timer = time.AfterFunc(time.Duration(d), p.fire)
	} else {
		p.timer.Reset(time.Duration(d))
	}
	p.armed = true
}

// setDraining rejects every waiter and every later arrival while on.
func (p *pacer) setDraining(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draining = on
	if on {
		for p.head != nil {
			p.finish(p.head, drained)
		}
	}
}

func (p *pacer) queueLen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// finish removes w from the queue with its final state and wakes it.
func (p *pacer) finish(w *waiter, st waitState) {
	p.remove(w)
	w.state = st
	close(w.done)
}

func (p *pacer) push(w *waiter) {
	w.prev = p.tail
	if p.tail != nil {
		p.tail.next = w
	} else {
		p.head = w
	}
	p.tail = w
	p.n++
	p.depth.Set(float64(p.n))
	p.over.Store(p.maxQueue > 0 && p.n >= p.maxQueue)
}

func (p *pacer) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		p.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		p.tail = w.prev
	}
	w.prev, w.next = nil, nil
	p.n--
	p.depth.Set(float64(p.n))
	p.over.Store(p.maxQueue > 0 && p.n >= p.maxQueue)
}

// overflowing reports whether the queue is at its bound: a newcomer that
// finds no token would be refused with queue_timeout. Lock-free, for the
// door; draining is not its business.
func (p *pacer) overflowing() bool { return p.over.Load() }

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

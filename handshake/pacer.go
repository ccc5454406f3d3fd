package handshake

import (
	"context"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rtserver/rtserver/metrics"
)

// maxSteps is the most sub-steps a tick is divided into for the queue:
// enough to spread a budget of dozens into groups of a few, few enough
// that a waiting pacer wakes at most 16 times per tick.
const maxSteps = 16

// pacer lets at most budget upgrades through per tick (docs/handshake.md,
// step 5). Tokens are counted per aligned tick window computed from the
// clock, so an idle gate runs nothing. An arrival that finds the queue
// empty takes a token of the current window at once if one is left: a
// quiet server's small burst of reconnects is not delayed.
//
// The excess waits in FIFO order and is released in steps: each window is
// divided into S = min(budget, maxSteps) sub-steps, sub-step j starting at
// ceil(j*tick/S) into the window, and by sub-step j at most
// ceil(budget*(j+1)/S) tokens of the window may be used in all (instant
// ones included). Releasing a whole budget at the tick boundary would make
// that many upgrade goroutines runnable in the same instant, and in a
// storm established clients' goroutines would queue behind all of them on
// the CPU; in steps, at most ceil(budget/S) wake together. One timer
// (armed only while someone waits) wakes at the next sub-step that has a
// token to give, or at the head's deadline if sooner, grants, and expires
// waiters whose deadline passed.
//
// A waiter whose client goes away gives its place up. When its context
// can be asked without waiting (a request the door serves: Gone), the
// timer's goroutine asks, every probeEvery, for the waiters that have
// waited one such period already (one peek each, outside the lock): a
// storm's queue of hundreds then costs no goroutine per waiter, and
// an upgrade granted within its first period is never asked. Any other
// context's Done is waited on beside the grant, as before.
//
// The queue is bounded by the number of waiters that could be served
// before their deadline (budget per tick × ticks in maxWait) and by
// maxConcurrent (every waiter holds an in-flight slot anyway): a newcomer
// past that bound is rejected at once with queue_timeout, since it would
// only time out later.
type pacer struct {
	budget   int
	steps    int64 // sub-steps per tick for queued waiters: min(budget, maxSteps)
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

	// Probing waiters whose client may have gone (goneProbe).
	probes    int       // waiters in the queue with a probe
	round     uint32    // probe rounds begun
	nextProbe int64     // when the next round is due
	probing   bool      // a round's peeks are under way, outside mu
	scratch   []*waiter // the round's waiters, kept for the next round
}

// probeEvery is how often queued clients are looked at for having gone:
// a client that leaves gives its slot up within two periods.
const probeEvery = int64(20 * time.Millisecond)

// goneProbe is a context that can tell, without waiting, that its client
// has gone (and then ends).
type goneProbe interface{ Gone() bool }

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
	probe      goneProbe // nil: the waiter watches its context's Done
	round      uint32    // p.round when it arrived: probed from the next round on
}

func newPacer(cfg *Config, clock func() int64, m *metrics.Metrics) *pacer {
	p := &pacer{
		budget:  cfg.PerTickBudget,
		steps:   int64(min(cfg.PerTickBudget, maxSteps)),
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

// take uses one token of window w if fewer than limit of its tokens are
// used. p.mu held.
func (p *pacer) take(w int64, limit int) bool {
	if w != p.window {
		p.window, p.used = w, 0
	}
	if p.used < limit {
		p.used++
		return true
	}
	return false
}

// step returns now's window and the index j of now's sub-step in it: the
// last j with ceil(j*tick/S) <= offset, i.e. floor(offset*S/tick)
// (computed in 128 bits, so no tick is too long).
func (p *pacer) step(now int64) (w, j int64) {
	w = floorDiv(now, p.tick)
	off := now - w*p.tick
	hi, lo := bits.Mul64(uint64(off), uint64(p.steps))
	q, _ := bits.Div64(hi, lo, uint64(p.tick)) // hi < tick since off < tick
	return w, int64(q)
}

// stepStart is the offset of sub-step j into its window, ceil(j*tick/S),
// for 0 <= j <= S (sub-step S is the next window's start).
func (p *pacer) stepStart(j int64) int64 {
	q, r := p.tick/p.steps, p.tick%p.steps
	return j*q + (j*r+p.steps-1)/p.steps
}

// stepCap is how many tokens of a window may be used in all by the end of
// sub-step j, ceil(budget*(j+1)/S): budget at j = S-1.
func (p *pacer) stepCap(j int64) int {
	b := int64(p.budget)
	q, r := b/p.steps, b%p.steps
	return int((j+1)*q + ((j+1)*r+p.steps-1)/p.steps)
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
	if p.n == 0 && p.take(floorDiv(now, p.tick), p.budget) {
		p.mu.Unlock()
		return ""
	}
	if p.maxWait <= 0 || p.n >= p.maxQueue {
		p.mu.Unlock()
		return metrics.RejectQueueTimeout
	}
	w := &waiter{done: make(chan struct{}), deadline: now + p.maxWait, round: p.round}
	w.probe, _ = ctx.(goneProbe)
	p.push(w)
	p.arm(now)
	p.mu.Unlock()

	if w.probe != nil {
		<-w.done // the pacer finishes it as gone if its client leaves
	} else {
		select {
		case <-w.done:
		case <-ctx.Done():
		}
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
		// A released upgrade yields before its work (the rest of Admit,
		// the accept, the connection's setup): the pacer wakes a step's
		// worth at once, and they go to the back of the run queue rather
		// than ahead of the connections already served.
		runtime.Gosched()
		return ""
	case st == expired:
		return metrics.RejectQueueTimeout
	case st == drained:
		return metrics.RejectDraining
	default:
		return reasonGone
	}
}

// pump grants the head of the queue what now's sub-step allows, then
// expires waiters past their deadline (deadlines are in FIFO order).
// p.mu held.
func (p *pacer) pump(now int64) {
	if p.head != nil {
		w, j := p.step(now)
		limit := p.stepCap(j)
		for p.head != nil && p.take(w, limit) {
			p.finish(p.head, granted)
		}
	}
	for p.head != nil && p.head.deadline <= now {
		p.finish(p.head, expired)
	}
}

// fire is the timer callback.
func (p *pacer) fire() {
	p.mu.Lock()
	p.armed = false
	now := p.clock()
	p.pump(now)
	ask := p.probeRound(now)
	p.arm(now)
	p.mu.Unlock()
	if len(ask) > 0 {
		p.askGone(ask)
	}
}

// probeRound begins a round of probes if one is due and none is under
// way: it returns the waiters to ask (those that arrived before the
// previous round began). p.mu held.
func (p *pacer) probeRound(now int64) []*waiter {
	if p.probes == 0 || p.probing || now < p.nextProbe {
		return nil
	}
	ask := p.scratch[:0]
	for w := p.head; w != nil; w = w.next {
		if w.probe != nil && w.round != p.round {
			ask = append(ask, w)
		}
	}
	p.round++
	p.nextProbe = now + probeEvery
	p.probing = len(ask) > 0
	p.scratch = ask
	return ask
}

// askGone asks each of ask whether its client has gone, without p.mu (a
// peek each), then finishes those that have and still wait.
func (p *pacer) askGone(ask []*waiter) {
	left := ask[:0]
	for _, w := range ask {
		if w.probe.Gone() {
			left = append(left, w)
		}
	}
	p.mu.Lock()
	for _, w := range left {
		if w.state == waiting {
			p.finish(w, gone)
		}
	}
	clear(ask) // the waiters may go
	p.probing = false
	p.mu.Unlock()
}

// arm schedules fire for the next grant (or the head's deadline, if
// sooner) while anyone waits. p.mu held.
func (p *pacer) arm(now int64) {
	if p.armed || p.head == nil {
		return
	}
	at := min(p.nextGrant(now), p.head.deadline)
	if p.probes > 0 {
		at = min(at, p.nextProbe)
	}
	d := at - now
	d = max(d, 1)
	if p.timer == nil {
		p.timer = time.AfterFunc(time.Duration(d), p.fire)
	} else {
		p.timer.Reset(time.Duration(d))
	}
	p.armed = true
}

// nextGrant is the first time after now at which the queue's head could
// get a token: the start of the first later sub-step of now's window whose
// cap exceeds the tokens used, else the start of the next window. Sub-steps
// with nothing to give are skipped rather than woken for. p.mu held.
func (p *pacer) nextGrant(now int64) int64 {
	w, j := p.step(now)
	used := 0
	if p.window == w {
		used = p.used
	}
	base := w * p.tick
	for k := j + 1; k < p.steps; k++ {
		if p.stepCap(k) > used {
			return base + p.stepStart(k)
		}
	}
	return base + p.tick
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
	if w.probe != nil {
		p.probes++
	}
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
	if w.probe != nil {
		p.probes--
	}
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

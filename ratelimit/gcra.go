package ratelimit

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Result is one rate decision.
type Result struct {
	Allowed    bool
	Limit      int64         // events allowed per period (the burst)
	Remaining  int64         // events left right now (0 when denied)
	RetryAfter time.Duration // > 0 when denied: when the next event would be allowed
}

// params are the GCRA constants of one limit.
type params struct {
	limit int64
	t     int64 // emission interval in ns: ceil(per/limit), >= 1
	span  int64 // limit * t: how far ahead of now the TAT may run, plus one t
}

func newParams(limit int, per time.Duration) params {
	l := int64(limit)
	t := EmissionInterval(l, per)
	span := l * t
	if span/l != t { // overflow: an absurd period; clamp to "burst only, no refill"
		span = math.MaxInt64 / 2
		t = span / l
	}
	return params{limit: l, t: t, span: span}
}

// EmissionInterval is the time one unit of a limit of limit units per per
// refills, in nanoseconds: per/limit rounded up to a whole nanosecond (at
// least 1), the constant every limiter of this package decides with. A
// limiter that must decide as they do elsewhere (message/clusterrate, on
// Redis) uses it. It panics when limit < 1 or per <= 0.
func EmissionInterval(limit int64, per time.Duration) int64 {
	if limit < 1 || per <= 0 {
		panic(fmt.Sprintf("ratelimit: invalid limit %d per %v (want limit >= 1, per > 0)", limit, per))
	}
	return max((int64(per)+limit-1)/limit, 1)
}

// decide applies GCRA to an event of weight n (1 for a plain event, a cost
// otherwise) at now given the stored theoretical arrival time tat. It
// returns the tat to store (unchanged when the event is denied).
func (p params) decide(tat, now, n int64) (int64, Result) {
	if tat < now {
		tat = now
	}
	if n > p.limit { // heavier than the whole burst: never allowed
		return tat, Result{Limit: p.limit, RetryAfter: time.Duration(max(p.span, 1))}
	}
	next := tat + n*p.t // n <= limit, so n*t <= span: no overflow
	if allowAt := next - p.span; now < allowAt {
		return tat, Result{Limit: p.limit, RetryAfter: time.Duration(allowAt - now)}
	}
	return next, Result{Allowed: true, Limit: p.limit, Remaining: (now + p.span - next) / p.t}
}

// GCRA is a single-key limiter of limit events per period (burst = limit),
// lock-free and safe for concurrent use. Allow allocates nothing.
type GCRA struct {
	p     params
	epoch time.Time
	tat   atomic.Int64
}

// NewGCRA returns a limiter of limit events per per. It panics when limit
// < 1 or per <= 0 (configuration is validated before it gets here).
func NewGCRA(limit int, per time.Duration) *GCRA {
	g := &GCRA{p: newParams(limit, per), epoch: time.Now()}
	g.tat.Store(math.MinInt64)
	return g
}

// Allow records one event at now and decides it.
func (g *GCRA) Allow(now time.Time) Result {
	n := int64(now.Sub(g.epoch))
	for {
		old := g.tat.Load()
		tat, r := g.p.decide(old, n, 1)
		if !r.Allowed || g.tat.CompareAndSwap(old, tat) {
			return r
		}
	}
}

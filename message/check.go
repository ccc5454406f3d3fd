package message

import (
	"errors"
	"math"
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// errLeaseHeld is the panic value of Check on a Call still holding a lease.
var errLeaseHeld = errors.New("message: Check on a Call that still holds a concurrency lease; Release it before reusing the Call")

// Check decides call and counts the decision in the admission metrics. When
// allowed with a Concurrency or AdaptiveConcurrency part, the lease is held
// in call until call.Release() (or ReleaseWith).
//
// Parts run cheapest and stateless first, stateful last, and the first part
// that denies decides: pressure reasons, then the cluster top-publisher
// view, then the predicate, then the bid price (which spends nothing),
// then the local rate limiter (which spends a
// token), then the local cost budget (which spends the call's cost), then
// the cluster-scoped rate and cost (one round trip to the shared store,
// charged together or not at all), then concurrency (which takes a lease).
// So a call shed by pressure spends no token and holds no lease, and a call
// denied by a budget takes no lease. A call that clears an earlier budget
// but is denied by a later part has spent what it cleared (GCRA tokens
// cannot be handed back); that denial reports the combination of the parts
// checked. An allowed decision carries the tightest Limit and Remaining of
// the budget and concurrency parts.
//
// Check panics if call still holds a lease (see Call).
func (c *Class) Check(call *Call) Decision {
	if call.lease.Load() != nil {
		panic(errLeaseHeld)
	}
	var snap *pressure.Snapshot
	if c.needSnap {
		snap = c.loadSnapshot()
		if c.reasonMask>>snap.Reason&1 != 0 {
			return c.rejectPressure(snap.Reason)
		}
	}
	if c.cluster && c.clusterHot(call) {
		return c.reject(codeCluster)
	}
	if c.predicate != nil && !c.runPredicate(snap, call) {
		return c.reject(codePredicate)
	}

	// The bid price needs the call's cost (a BidPrice part comes with a
	// Cost part); price it once for both. -1: unknown.
	costPrice := int64(-1)
	if c.bid != nil {
		if n, ok := c.cost.price(call); ok {
			costPrice = n
		}
		if !c.clearsBid(call, costPrice) {
			return c.reject(codePolicy)
		}
	}

	d := AllowFull
	// One clock read per Check, shared by every part that needs one: the
	// wall clock when a cluster-scoped part compares times across
	// instances, else the cheaper monotonic one (Admission.localNow); an
	// adaptive-only class reads just its nanoseconds since its epoch.
	var now time.Time
	var start int64 // the adaptive part's start reading, ns since its epoch
	switch {
	case c.shared != nil:
		now = c.a.now()
	case c.rate != nil || c.cost != nil:
		now = c.a.localNow()
	case c.adaptive != nil:
		start = c.adaptive.elapsed()
	}
	if c.adaptive != nil && (c.shared != nil || c.rate != nil || c.cost != nil) {
		start = c.adaptive.since(now)
	}
	if c.rate != nil {
		r := c.rate.allow(call, now)
		if !r.Allowed {
			c.rejected[codeRate].Inc()
			return budgetDecision(r, codeRate)
		}
		d.Limit, d.Remaining = r.Limit, r.Remaining
	}
	cost := int64(-1) // the call's price; -1: unknown (or no Cost part)
	if c.cost != nil {
		n, ok := costPrice, costPrice >= 0
		if c.bid == nil {
			n, ok = c.cost.price(call)
		}
		switch {
		case ok:
			cost = n
		case c.a.failClosed:
			c.errors.Inc()
			return Combine(d, c.reject(codeCost))
		default:
			c.errors.Inc() // decided open: the cost part is skipped
		}
		if ok && c.cost.keyed != nil {
			r := c.cost.allow(call, n, now)
			if !r.Allowed {
				c.rejected[codeCost].Inc()
				return Combine(d, budgetDecision(r, codeCost))
			}
			d.Limit, d.Remaining = min(d.Limit, r.Limit), min(d.Remaining, r.Remaining)
		}
	}
	if c.shared != nil {
		sd := c.checkShared(call, now, cost)
		d = Combine(d, sd)
		if !d.Allowed {
			return d
		}
	}
	if c.hasConc {
		limit := c.ConcurrencyLimit()
		left, ok := c.acquire(limit)
		if !ok {
			c.rejected[codeConcurrency].Inc()
			return Combine(d, Decision{
				Limit:      limit,
				Remaining:  0,
				RetryAfter: c.a.retryHint(),
				Reason:     ReasonConcurrency,
			})
		}
		// The lease is the last thing taken: nothing after this point can
		// deny, so there is no path that must hand it back here. start is
		// written before the lease is published, so the Release that swaps
		// the lease out sees it.
		if c.adaptive != nil {
			call.start = start
		}
		call.lease.Store(c)
		d.Limit = min(d.Limit, limit)
		d.Remaining = min(d.Remaining, left)
	}
	c.accepted.Inc()
	return d
}

// clearsBid reports whether the call's value clears its bid price. A value
// that cannot be read is a rule error decided by the fail policy; an
// unknown cost skips the filter (the Cost part decides that call by the
// fail policy, and counts the error once).
func (c *Class) clearsBid(call *Call, cost int64) bool {
	if cost < 0 {
		return true
	}
	v, ok := c.bid.valueOf(call)
	if !ok {
		c.errors.Inc()
		return !c.a.failClosed
	}
	return c.bid.Admits(v, float64(cost))
}

// rejectPressure is a denial by a listed pressure reason.
func (c *Class) rejectPressure(r pressure.Reason) Decision {
	for _, rp := range c.reasons {
		if rp.r == r {
			return c.reject(rp.code)
		}
	}
	panic("message: reason mask and list disagree") // unreachable: built together
}

// reject is a denial by a part without a limit of its own (pressure,
// cluster, predicate, a failed part decided closed): neutral Limit and
// Remaining, a jittered hint.
func (c *Class) reject(code reasonCode) Decision {
	c.rejected[code].Inc()
	return Decision{
		Limit:      math.MaxInt64,
		Remaining:  math.MaxInt64,
		RetryAfter: c.a.retryHint(),
		Reason:     codeText[code],
	}
}

// clusterHot reports whether the call's topic (or user) publishes at or
// above the threshold. Calls without a key are not affected. The user key
// of an anonymous call is its IP, as everywhere else (docs/configuration.md).
func (c *Class) clusterHot(call *Call) bool {
	rates := c.a.rates
	if rates == nil {
		return false
	}
	if c.clusterByUser {
		key := call.User
		if key == "" {
			key = call.IP
		}
		return key != "" && rates.RateOfUser(key) >= c.clusterThresh
	}
	return call.Topic != "" && rates.RateOf(call.Topic) >= c.clusterThresh
}

// runPredicate runs the application's predicate; an error or a panic is
// counted and decided by the fail policy.
func (c *Class) runPredicate(s *pressure.Snapshot, call *Call) (ok bool) {
	defer func() {
		if recover() != nil {
			c.errors.Inc()
			ok = !c.a.failClosed
		}
	}()
	ok, err := c.predicate(s, call)
	if err != nil {
		c.errors.Inc()
		return !c.a.failClosed
	}
	return ok
}

// acquire takes one concurrency slot if fewer than limit are taken and
// returns how many are left. A CAS loop rather than add-then-undo: an
// over-the-cap add, even undone at once, would make a concurrent caller see
// a full class that is not full. (An adaptive limit that just fell may
// leave more in flight than the new limit: they drain as they complete.)
func (c *Class) acquire(limit int64) (left int64, ok bool) {
	for {
		n := c.inflight.Load()
		if n >= limit {
			return 0, false
		}
		if c.inflight.CompareAndSwap(n, n+1) {
			return limit - n - 1, true
		}
	}
}

// release gives back the slot a Call held (Call.ReleaseWith calls it once
// per lease) and feeds the adaptive limit the call's latency and outcome.
func (c *Class) release(start int64, o Outcome) {
	inflight := c.inflight.Add(-1) + 1
	if c.adaptive != nil {
		c.adaptive.observe(start, c.adaptive.elapsed(), inflight, o)
	}
}

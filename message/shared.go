package message

import (
	"context"
	"time"

	"github.com/rtserver/rtserver/ratelimit"
)

// SharedLimit is one cluster-scoped budget a call is checked against: a
// GCRA of Limit units per Per (a token bucket of Limit, refilled evenly),
// charged N units. Name tells the budgets of one call apart ("rate",
// "cost").
type SharedLimit struct {
	Name  string
	Limit int64
	Per   time.Duration
	N     int64
}

// SharedLimiter decides cluster-scoped Rate and Cost parts against a store
// every instance shares (clusterrate.Limiter: Redis). It is the one part of
// the message tier that does I/O, and only for classes that ask for it.
type SharedLimiter interface {
	// AllowShared decides every limit of one call at now, atomically and in
	// one round trip: when all allow, all are charged; otherwise none is.
	// key identifies the caller (class, by, key) and is the same for
	// every limit, so their stored state can live together (one Redis
	// Cluster slot). It writes one result per limit into results (len(results)
	// == len(limits)). An error means nothing is known; the caller decides
	// by its fail policy.
	AllowShared(ctx context.Context, key string, now time.Time, limits []SharedLimit, results []ratelimit.Result) error
}

// sharedLimit is a cluster-scoped Rate or Cost part as built.
type sharedLimit struct {
	part  string // "rate" or "cost"
	by    rateBy
	limit int64
	per   time.Duration
}

// sharedPart holds a class's cluster-scoped parts; both share by.
type sharedPart struct {
	rate, cost *sharedLimit
}

// sharedKey is the caller's key in the shared store: class, the key space
// and the key. An anonymous caller of a by-user part is in its own key
// space ("anon"), as in the local limiters.
func (c *Class) sharedKey(call *Call) string {
	p := c.shared.rate
	if p == nil {
		p = c.shared.cost
	}
	key, anon := keyOf(p.by, call)
	space := byText[p.by]
	if anon {
		space = "anon"
	}
	return c.name + ":" + space + ":" + key
}

// checkShared runs the cluster-scoped parts: cost is the call's price for a
// shared Cost part, or -1 when it is unknown (a param error already decided
// open). It returns the combined decision of those parts.
func (c *Class) checkShared(call *Call, now time.Time, cost int64) Decision {
	var (
		limits  [2]SharedLimit
		results [2]ratelimit.Result
		codes   [2]reasonCode
		n       int
	)
	if p := c.shared.rate; p != nil {
		limits[n], codes[n] = SharedLimit{Name: "rate", Limit: p.limit, Per: p.per, N: 1}, codeRate
		n++
	}
	if p := c.shared.cost; p != nil && cost >= 0 {
		limits[n], codes[n] = SharedLimit{Name: "cost", Limit: p.limit, Per: p.per, N: cost}, codeCost
		n++
	}
	if n == 0 {
		return AllowFull
	}
	if err := c.a.shared.AllowShared(context.Background(), c.sharedKey(call), now, limits[:n], results[:n]); err != nil {
		c.errors.Inc()
		if !c.a.failClosed {
			return AllowFull
		}
		c.rejected[codes[0]].Inc()
		return Decision{Limit: limits[0].Limit, RetryAfter: c.a.retryHint(), Reason: codeText[codes[0]]}
	}
	d := AllowFull
	for i, r := range results[:n] {
		d = Combine(d, budgetDecision(r, codes[i]))
	}
	if !d.Allowed {
		// A denial binds over an allowance, so the reason is one of the
		// denied budgets': RATE or COST.
		code := codeRate
		if d.Reason == ReasonCost {
			code = codeCost
		}
		c.rejected[code].Inc()
	}
	return d
}

// budgetDecision is a limiter result as a Decision of the given part.
func budgetDecision(r ratelimit.Result, code reasonCode) Decision {
	if r.Allowed {
		return Decision{Allowed: true, Limit: r.Limit, Remaining: r.Remaining}
	}
	return Decision{
		Limit:      r.Limit,
		Remaining:  r.Remaining,
		RetryAfter: max(r.RetryAfter, time.Millisecond),
		Reason:     codeText[code],
	}
}

package message

import (
	"math"
	"time"

	"github.com/rtserver/rtserver/internal/retryhint"
)

// Reason words of a denied Decision (docs/protocol.md, the reason field of
// -32001; RATE and COST are answered as -32002 instead). The first four
// are the pressure reasons' own text; BUS is also how a publish the
// cross-instance bus refused is answered.
const (
	ReasonMemory              = "MEMORY"
	ReasonPublishRate         = "PUBLISH_RATE"
	ReasonSubscribers         = "SUBSCRIBERS"
	ReasonBus                 = "BUS"
	ReasonClusterTopPublisher = "CLUSTER_TOP_PUBLISHER"
	ReasonPredicate           = "PREDICATE"
	ReasonConcurrency         = "CONCURRENCY"
	ReasonRate                = "RATE"
	ReasonCost                = "COST"
	// ReasonPolicy: the class's bid-price filter (BidPrice) judged the
	// call worth less than the budget it would spend.
	ReasonPolicy = "POLICY"
)

// IsRateLimited reports whether a denial's reason is a per-key budget (RATE
// or COST): the client spent its own allowance and is answered -32002 (HTTP
// 429, gRPC ResourceExhausted) rather than -32001 (the service is shedding
// load: 503, Unavailable).
func IsRateLimited(reason string) bool { return reason == ReasonRate || reason == ReasonCost }

// Decision is a combined admission decision.
//
// A well-formed Decision (every one Check returns, and AllowFull) is either
// allowed with RetryAfter 0 and Reason "", or denied with RetryAfter > 0 and
// a Reason word. Combine keeps decisions well-formed, and its laws are
// stated over well-formed decisions.
type Decision struct {
	Allowed    bool
	Limit      int64 // binding limit (math.MaxInt64 when no part limits)
	Remaining  int64
	RetryAfter time.Duration // > 0 when denied
	Reason     string        // binding part when denied: MEMORY, BUS, PUBLISH_RATE, SUBSCRIBERS, CLUSTER_TOP_PUBLISHER, PREDICATE, POLICY, CONCURRENCY, RATE, COST
}

// AllowFull is the identity of Combine: allowed, no limit, nothing to wait
// for. Treat it as a constant.
var AllowFull = Decision{Allowed: true, Limit: math.MaxInt64, Remaining: math.MaxInt64}

// Combine joins two decisions about the same call (the seed's algebra):
// Allowed is the AND, Limit and Remaining the minimum, RetryAfter the
// maximum (never under-state the wait). Reason is the binding part's: a
// denial binds over an allowance; between two denials the one with the
// larger RetryAfter binds, and equal waits are broken by a fixed priority
// (MEMORY, BUS, PUBLISH_RATE, SUBSCRIBERS, CLUSTER_TOP_PUBLISHER, PREDICATE,
// POLICY, CONCURRENCY, RATE, COST, then any other word in byte order), so that Combine is
// commutative and the binding reason does not depend on evaluation order.
//
// Over well-formed decisions Combine is associative, commutative and
// idempotent, and AllowFull is its identity: N parts reduce flat, in any
// order, and a part that is not configured is simply AllowFull.
func Combine(a, b Decision) Decision {
	out := Decision{
		Allowed:    a.Allowed && b.Allowed,
		Limit:      min(a.Limit, b.Limit),
		Remaining:  min(a.Remaining, b.Remaining),
		RetryAfter: max(a.RetryAfter, b.RetryAfter),
		Reason:     a.Reason,
	}
	if binds(b, a) {
		out.Reason = b.Reason
	}
	return out
}

// binds reports whether b's reason takes precedence over a's. It is a strict
// total order on (denied, RetryAfter, priority, reason), so picking the
// larger is a semilattice join.
func binds(b, a Decision) bool {
	if a.Allowed != b.Allowed {
		return !b.Allowed
	}
	if a.RetryAfter != b.RetryAfter {
		return b.RetryAfter > a.RetryAfter
	}
	ra, rb := reasonRank(a.Reason), reasonRank(b.Reason)
	if ra != rb {
		return rb > ra
	}
	return b.Reason > a.Reason
}

// reasonRank orders reasons for ties: higher binds. Pressure first (the
// instance itself is in trouble), then the cluster view, the application's
// predicate, and last the per-class budgets, whose hint is the most exact.
func reasonRank(r string) int {
	switch r {
	case "":
		return 0
	case ReasonMemory:
		return 11
	case ReasonBus:
		return 10
	case ReasonPublishRate:
		return 9
	case ReasonSubscribers:
		return 8
	case ReasonClusterTopPublisher:
		return 7
	case ReasonPredicate:
		return 6
	case ReasonPolicy:
		return 5
	case ReasonConcurrency:
		return 4
	case ReasonRate:
		return 3
	case ReasonCost:
		return 2
	}
	return 1
}

// RetryAfterMillis is RetryAfter in whole milliseconds, rounded up, for the
// hint on the wire: at least 1 when denied (docs/protocol.md: a positive
// integer), 0 when allowed.
func (d Decision) RetryAfterMillis() int64 {
	if d.Allowed {
		return 0
	}
	return retryhint.Millis(d.RetryAfter)
}

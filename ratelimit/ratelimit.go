package ratelimit

// STUB: the API other packages build against. The ratelimit helper replaces
// the bodies (and adds doc.go, tests, benchmarks); signatures stay.

import "time"

// Result is one rate decision.
type Result struct {
	Allowed    bool
	Limit      int64         // events allowed per period (the burst)
	Remaining  int64         // events left right now (0 when denied)
	RetryAfter time.Duration // > 0 when denied: when the next event would be allowed
}

// Keyed is a GCRA limiter per key (limit events per period, burst = limit)
// in a bounded store: when full it evicts the least recently used key; it
// never fails open. Safe for concurrent use; Allow on an existing key
// allocates nothing.
type Keyed struct {
	limit int64
	per   time.Duration
}

// NewKeyed returns a limiter of limit events per per, tracking at most
// maxKeys keys (maxKeys <= 0 means a default of 65536).
func NewKeyed(limit int, per time.Duration, maxKeys int) *Keyed {
	return &Keyed{limit: int64(limit), per: per}
}

// Allow records one event for key at now and decides it.
func (k *Keyed) Allow(key string, now time.Time) Result {
	return Result{Allowed: true, Limit: k.limit, Remaining: k.limit}
}

// Len is the number of keys tracked.
func (k *Keyed) Len() int { return 0 }

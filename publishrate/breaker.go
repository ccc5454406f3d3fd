package publishrate

import (
	"sync"
	"time"
)

// ConsecutiveBreaker opens after a run of consecutive failures and stays
// open for a cool-down; then it lets exactly one probe through (half-open):
// the probe's Success closes it, its Failure opens it for another cool-down.
// It is safe for concurrent use.
type ConsecutiveBreaker struct {
	threshold int
	coolDown  time.Duration
	now       func() time.Time

	mu        sync.Mutex
	failures  int
	openUntil time.Time // zero: closed
	probing   bool      // half-open: one probe is out
}

// NewBreaker returns a breaker that opens after threshold consecutive
// failures (values < 1 mean 1) for coolDown, on clock now (nil: time.Now).
func NewBreaker(threshold int, coolDown time.Duration, now func() time.Time) *ConsecutiveBreaker {
	if now == nil {
		now = time.Now
	}
	return &ConsecutiveBreaker{threshold: max(threshold, 1), coolDown: coolDown, now: now}
}

// Allow reports whether a call may go ahead now.
func (b *ConsecutiveBreaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() {
		return true
	}
	if b.probing || b.now().Before(b.openUntil) {
		return false
	}
	b.probing = true
	return true
}

// Success records a call that worked: the breaker closes.
func (b *ConsecutiveBreaker) Success() {
	b.mu.Lock()
	b.failures, b.openUntil, b.probing = 0, time.Time{}, false
	b.mu.Unlock()
}

// Failure records a call that failed: the threshold-th consecutive one (or
// a failed probe) opens the breaker for the cool-down.
func (b *ConsecutiveBreaker) Failure() {
	b.mu.Lock()
	b.failures++
	if b.probing || b.failures >= b.threshold {
		b.openUntil = b.now().Add(b.coolDown)
		b.probing = false
	}
	b.mu.Unlock()
}

// Open reports whether the breaker has tripped and no success has closed
// it since (it may be cooling down or waiting for its probe).
func (b *ConsecutiveBreaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero()
}

package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// Window is a sliding-window limiter per key: an event is allowed when
// fewer than limit events of that key were allowed in the last period, the
// window (now-per, now]. It keeps the true count, not an estimate: per key
// a ring of the allowed events' timestamps, at most limit of them, so any
// window of length per holds at most limit allowed events. Keys live in the
// same bounded LRU store as Keyed (evicting, never failing open). Safe for
// concurrent use; Allow on an existing key allocates nothing once its ring
// has grown to the key's peak count (rings start small and double, never
// past limit).
type Window struct {
	limit int
	per   int64
	epoch time.Time
	store[ring]
}

// ring holds one key's allowed events, oldest first from head, as ns since
// the limiter's epoch.
type ring struct {
	ts   []int64 // len(ts) is the capacity in use, <= limit
	head int
	n    int
}

// NewWindow returns a sliding-window limiter of limit events per per,
// tracking at most maxKeys keys (maxKeys <= 0 means 65536). Memory per key
// is bounded by limit timestamps (8 bytes each). It panics when limit < 1
// or per <= 0.
func NewWindow(limit int, per time.Duration, maxKeys int) *Window {
	if limit < 1 || per <= 0 {
		panic(fmt.Sprintf("ratelimit: invalid limit %d per %v (want limit >= 1, per > 0)", limit, per))
	}
	// A key below its limit owes little (less the fewer events it holds);
	// a full one owes until its oldest event leaves the window. A full
	// store evicts the least indebted of its least recently used keys, so
	// a flood of new keys cannot flush a limited one (see store).
	debt := func(r *ring) int64 {
		if r.n < limit {
			return math.MinInt64 + int64(r.n)
		}
		return r.ts[r.head]
	}
	return &Window{limit: limit, per: int64(per), epoch: time.Now(), store: newStore(maxKeys, debt)}
}

// Allow records one event for key at now and decides it. A denied event
// does not count. When denied, RetryAfter is when the oldest event in the
// window leaves it. Allowed or not, key becomes the most recently used key
// of its shard.
func (w *Window) Allow(key string, now time.Time) Result {
	t := int64(now.Sub(w.epoch))
	s := w.shardOf(key)
	s.mu.Lock()
	r, fresh := s.get(key)
	if fresh {
		r.head, r.n = 0, 0 // keep ts: an evicted key's ring is reused
	}
	res := w.decide(r, t)
	s.mu.Unlock()
	return res
}

func (w *Window) decide(r *ring, t int64) Result {
	// Events at or before t-per have left the window (now-per, now].
	cut := t - w.per
	for r.n > 0 && r.ts[r.head] <= cut {
		r.head++
		if r.head == len(r.ts) {
			r.head = 0
		}
		r.n--
	}
	lim := int64(w.limit)
	if r.n >= w.limit {
		return Result{Limit: lim, RetryAfter: time.Duration(r.ts[r.head] - cut)}
	}
	if r.n > 0 {
		// Callers read the clock before taking the lock, so times may
		// arrive slightly out of order; keep the ring sorted (a clamped
		// event leaves the window no earlier than it really would).
		t = max(t, r.ts[r.last()])
	}
	r.push(t, w.limit)
	return Result{Allowed: true, Limit: lim, Remaining: lim - int64(r.n)}
}

func (r *ring) last() int {
	i := r.head + r.n - 1
	if i >= len(r.ts) {
		i -= len(r.ts)
	}
	return i
}

// push appends t, growing the ring (doubling, at most to limit) when full.
// The caller has checked n < limit.
func (r *ring) push(t int64, limit int) {
	if r.n == len(r.ts) {
		grown := make([]int64, min(max(2*len(r.ts), 4), limit))
		for i := range r.n {
			j := r.head + i
			if j >= len(r.ts) {
				j -= len(r.ts)
			}
			grown[i] = r.ts[j]
		}
		r.ts, r.head = grown, 0
	}
	i := r.head + r.n
	if i >= len(r.ts) {
		i -= len(r.ts)
	}
	r.ts[i] = t
	r.n++
}

// Len is the number of keys tracked.
func (w *Window) Len() int { return w.len() }

// Evictions is how many keys have been evicted to make room for new ones
// (see Keyed.Evictions). An evicted key comes back with an empty window.
func (w *Window) Evictions() uint64 { return w.evictions() }

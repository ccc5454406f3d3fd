package ratelimit

import (
	"math"
	"time"
)

// Keyed is a GCRA limiter per key (limit events per period, burst = limit)
// in a bounded store: when full it evicts, of its least recently used keys,
// the one that has used least of its burst, so that a flood of new keys
// (a client with many source addresses) cannot flush a limited key back to
// a fresh burst; it never fails open. Safe for concurrent use; Allow on an existing key
// allocates nothing.
type Keyed struct {
	p            params
	epoch        time.Time
	store[int64] // per key: the theoretical arrival time, ns since epoch
}

// NewKeyed returns a limiter of limit events per per, tracking at most
// maxKeys keys (maxKeys <= 0 means a default of 65536). It panics when
// limit < 1 or per <= 0.
func NewKeyed(limit int, per time.Duration, maxKeys int) *Keyed {
	// A key's debt is its theoretical arrival time: the later, the more
	// of its burst it has used. Evicting a limited key would hand it a
	// fresh burst, so a full store evicts the least indebted of its least
	// recently used keys instead (see store).
	return &Keyed{p: newParams(limit, per), epoch: time.Now(), store: newStore(maxKeys, func(tat *int64) int64 { return *tat })}
}

// Allow records one event for key at now and decides it. Allowed or not,
// key becomes the most recently used key of its shard.
func (k *Keyed) Allow(key string, now time.Time) Result { return k.AllowN(key, 1, now) }

// AllowN records an event of weight n (n >= 0; a cost) for key at now and
// decides it: the key's budget of limit units per period is charged n
// units when allowed, nothing when denied. An event heavier than limit can
// never be allowed: it is denied with RetryAfter one period (and Limit
// tells the caller why). Allowed or not, key becomes the most recently used
// key of its shard.
func (k *Keyed) AllowN(key string, n int64, now time.Time) Result {
	t := int64(now.Sub(k.epoch))
	s := k.shardOf(key)
	s.mu.Lock()
	v, fresh := s.get(key)
	if fresh {
		*v = math.MinInt64
	}
	tat, r := k.p.decide(*v, t, n)
	*v = tat
	s.mu.Unlock()
	return r
}

// Len is the number of keys tracked.
func (k *Keyed) Len() int { return k.len() }

// Evictions is how many keys have been evicted to make room for new ones
// since the store was created. Eviction prefers keys that used least of
// their burst, but a key evicted while still limited comes back with a
// full burst, so a steadily rising count means maxKeys is too small for
// the number of distinct clients (or a flood of source addresses).
func (k *Keyed) Evictions() uint64 { return k.evictions() }

package pressure

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// numShards spreads keys over independent locks so that recorders on
// different topics do not share a cache line. A power of two so the shard
// index is a mask. 64 is well above any core count we run on and keeps the
// fixed cost (64 × 128 bytes per table) small.
const numShards = 64

// DefaultMaxTrackedKeys bounds the distinct topics (and, separately, users)
// tracked per sample interval when Config.MaxTrackedKeys is 0.
const DefaultMaxTrackedKeys = 10000

// counter is one key's attempts in the current interval.
type counter struct {
	msgs  atomic.Int64
	bytes atomic.Int64
}

// shard is one lock and its map, padded to two cache lines so neighbouring
// shards never false-share (adjacent-line prefetch pulls pairs of lines).
type shard struct {
	mu sync.RWMutex
	m  map[string]*counter
	_  [128 - 24 - 8]byte
}

// table counts attempts per key (topic or user) for one sample interval.
//
// Recording on a key already present is a read-locked map lookup plus two
// atomic adds, done while holding the read lock: the sampler takes each
// shard's write lock to read and zero the counts (drain) and to delete idle
// names (prune), so an add can never land on a counter that has been read
// and dropped. Counts are exact.
//
// The number of keys is bounded by max; an attempt on a new key past the
// bound is counted in the overflow counters instead, so client-chosen names
// can never grow memory without limit.
type table struct {
	seed   maphash.Seed
	max    int64
	n      atomic.Int64 // keys in all shards
	overN  atomic.Int64 // attempts not attributed to a key (bound hit)
	shards [numShards]shard
}

func newTable(max int) *table {
	t := &table{seed: maphash.MakeSeed(), max: int64(max)}
	for i := range t.shards {
		t.shards[i].m = make(map[string]*counter)
	}
	return t
}

func (t *table) record(key string, bytes int64) {
	s := &t.shards[maphash.String(t.seed, key)&(numShards-1)]
	s.mu.RLock()
	if c := s.m[key]; c != nil {
		c.msgs.Add(1)
		c.bytes.Add(bytes)
		s.mu.RUnlock()
		return
	}
	s.mu.RUnlock()
	t.insert(s, key, bytes)
}

// insert is the slow path for a key not yet seen this interval.
func (t *table) insert(s *shard, key string, bytes int64) {
	s.mu.Lock()
	c := s.m[key]
	if c == nil {
		// Add-then-check keeps the bound exact when several shards insert
		// at once.
		if t.n.Add(1) > t.max {
			t.n.Add(-1)
			s.mu.Unlock()
			t.overN.Add(1)
			return
		}
		c = new(counter)
		// Clone: the caller's string may alias a large decoded frame that
		// we must not pin for the life of the entry.
		s.m[strings.Clone(key)] = c
	}
	c.msgs.Add(1)
	c.bytes.Add(bytes)
	s.mu.Unlock()
}

// entry is one key's counts as read by the sampler.
type entry struct {
	key         string
	msgs, bytes int64
}

// drain reads every key's counts for the interval that just ended into buf
// (reused by the caller), zeroes them, and returns them with the count of
// attempts that overflowed the key bound. Keys stay in the table until
// prune.
func (t *table) drain(buf []entry) (_ []entry, overflow int64) {
	buf = buf[:0]
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k, c := range s.m {
			if msgs := c.msgs.Load(); msgs > 0 {
				buf = append(buf, entry{key: k, msgs: msgs, bytes: c.bytes.Load()})
				c.msgs.Store(0)
				c.bytes.Store(0)
			}
		}
		s.mu.Unlock()
	}
	return buf, t.overN.Swap(0)
}

// prune deletes every key that is not in keep and has had no attempt since
// drain. The sampler keeps this interval's top-N (and hot topics) so that a
// heavy publisher never loses its slot to a flood of new names; a key that
// was recorded between drain and prune keeps its counts for the next
// interval, so no attempt is lost.
func (t *table) prune(keep map[string]struct{}) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k, c := range s.m {
			if c.msgs.Load() != 0 {
				continue
			}
			if _, ok := keep[k]; ok {
				continue
			}
			delete(s.m, k)
			t.n.Add(-1)
		}
		s.mu.Unlock()
	}
}

package ratelimit

import (
	"hash/maphash"
	"strings"
	"sync"
)

// DefaultMaxKeys is the bound of a keyed store created with maxKeys <= 0.
const DefaultMaxKeys = 65536

const (
	maxShards     = 64
	minShardSlots = 128 // fewer keys than this per shard and LRU order gets too coarse
	// evictScan is how many of the least recently used keys an eviction
	// weighs by debt. A limited key that reaches the tail stays there
	// while at least one of the others owes less.
	evictScan = 8
)

// store is the bounded, sharded LRU map from key to a limiter's per-key
// state V that Keyed and Window share. It never holds more than maxKeys
// keys; inserting into a full shard evicts one of that shard's least
// recently used keys: with a debt function, the one owing least among the
// evictScan least recently used (so a flood of new keys from many source
// addresses evicts the flood's own keys, not a limited key that would come
// back with a fresh burst), else the least recently used.
type store[V any] struct {
	seed   maphash.Seed
	mask   uint64
	shards []shard[V]
}

// shard is one LRU: a map from key to slot, and the slots in a slice
// linked most recently used (head) to least (tail) by index, so the list
// holds no pointers for the GC to chase.
type shard[V any] struct {
	mu      sync.Mutex
	idx     map[string]int32
	ents    []entry[V]
	head    int32 // -1 when empty
	tail    int32
	cap     int
	evicted uint64
	debt    func(*V) int64 // nil: plain LRU
	_       [64]byte       // keep neighbouring shards' mutexes off one cache line
}

type entry[V any] struct {
	key        string
	val        V
	prev, next int32
}

// newStore makes a store of at most maxKeys keys (<= 0: DefaultMaxKeys).
// debt, when not nil, says how much a key's state owes (more: further from
// a fresh key's, so costlier to forget); eviction prefers the least.
func newStore[V any](maxKeys int, debt func(*V) int64) store[V] {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := 1
	for n*2 <= maxShards && n*2*minShardSlots <= maxKeys {
		n *= 2
	}
	st := store[V]{seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard[V], n)}
	for i := range st.shards {
		s := &st.shards[i]
		s.cap = maxKeys / n
		if i < maxKeys%n {
			s.cap++
		}
		s.idx = make(map[string]int32)
		s.head, s.tail = -1, -1
		s.debt = debt
	}
	return st
}

// shardOf is key's shard; lock it around get and the use of the value.
func (st *store[V]) shardOf(key string) *shard[V] {
	return &st.shards[maphash.String(st.seed, key)&st.mask]
}

// get returns key's state and makes key the most recently used. A key not
// in the shard takes a slot (evicting the least recently used key when
// full) and fresh is true: *v then still holds the slot's previous state
// (the zero value, or the evicted key's), which the caller must reset, and
// may reuse (its buffers, so a full store churns without allocating).
// Call with s.mu held.
func (s *shard[V]) get(key string) (v *V, fresh bool) {
	i, ok := s.idx[key]
	if ok {
		s.toFront(i)
		return &s.ents[i].val, false
	}
	if len(s.ents) < s.cap {
		i = int32(len(s.ents))
		s.ents = append(s.ents, entry[V]{})
	} else {
		i = s.victim()
		s.unlink(i)
		delete(s.idx, s.ents[i].key)
		s.evicted++
	}
	// Clone once: the store must never pin a larger buffer the key was
	// sliced from.
	key = strings.Clone(key)
	e := &s.ents[i]
	e.key, e.prev, e.next = key, -1, -1
	s.idx[key] = i
	s.pushFront(i)
	return &e.val, true
}

// victim picks the slot to evict from a full shard: the least recently
// used, or with a debt function the one owing least of the evictScan least
// recently used (ties: the less recently used).
func (s *shard[V]) victim() int32 {
	v := s.tail
	if s.debt == nil {
		return v
	}
	least := s.debt(&s.ents[v].val)
	for i, n := s.ents[v].prev, 1; i >= 0 && n < evictScan; i, n = s.ents[i].prev, n+1 {
		if d := s.debt(&s.ents[i].val); d < least {
			v, least = i, d
		}
	}
	return v
}

func (st *store[V]) len() int {
	n := 0
	for i := range st.shards {
		s := &st.shards[i]
		s.mu.Lock()
		n += len(s.idx)
		s.mu.Unlock()
	}
	return n
}

func (st *store[V]) evictions() uint64 {
	var n uint64
	for i := range st.shards {
		s := &st.shards[i]
		s.mu.Lock()
		n += s.evicted
		s.mu.Unlock()
	}
	return n
}

func (s *shard[V]) toFront(i int32) {
	if s.head == i {
		return
	}
	s.unlink(i)
	s.pushFront(i)
}

func (s *shard[V]) unlink(i int32) {
	e := &s.ents[i]
	if e.prev >= 0 {
		s.ents[e.prev].next = e.next
	} else {
		s.head = e.next
	}
	if e.next >= 0 {
		s.ents[e.next].prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (s *shard[V]) pushFront(i int32) {
	e := &s.ents[i]
	e.prev, e.next = -1, s.head
	if s.head >= 0 {
		s.ents[s.head].prev = i
	}
	s.head = i
	if s.tail < 0 {
		s.tail = i
	}
}

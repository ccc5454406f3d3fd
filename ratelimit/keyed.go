package ratelimit

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"
)

// DefaultMaxKeys is the bound of a Keyed store created with maxKeys <= 0.
const DefaultMaxKeys = 65536

const (
	maxShards     = 64
	minShardSlots = 128 // fewer keys than this per shard and LRU order gets too coarse
)

// Keyed is a GCRA limiter per key (limit events per period, burst = limit)
// in a bounded store: when full it evicts the least recently used key; it
// never fails open. Safe for concurrent use; Allow on an existing key
// allocates nothing.
type Keyed struct {
	p      params
	epoch  time.Time
	seed   maphash.Seed
	mask   uint64
	shards []shard
}

// shard is one LRU: a map from key to slot, and the slots in a slice
// linked most recently used (head) to least (tail) by index, so the list
// holds no pointers for the GC to chase.
type shard struct {
	mu      sync.Mutex
	idx     map[string]int32
	ents    []entry
	head    int32 // -1 when empty
	tail    int32
	cap     int
	evicted uint64
	_       [64]byte // keep neighbouring shards' mutexes off one cache line
}

type entry struct {
	key        string
	tat        int64
	prev, next int32
}

// NewKeyed returns a limiter of limit events per per, tracking at most
// maxKeys keys (maxKeys <= 0 means a default of 65536). It panics when
// limit < 1 or per <= 0.
func NewKeyed(limit int, per time.Duration, maxKeys int) *Keyed {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := 1
	for n*2 <= maxShards && n*2*minShardSlots <= maxKeys {
		n *= 2
	}
	k := &Keyed{
		p:      newParams(limit, per),
		epoch:  time.Now(),
		seed:   maphash.MakeSeed(),
		mask:   uint64(n - 1),
		shards: make([]shard, n),
	}
	for i := range k.shards {
		s := &k.shards[i]
		s.cap = maxKeys / n
		if i < maxKeys%n {
			s.cap++
		}
		s.idx = make(map[string]int32)
		s.head, s.tail = -1, -1
	}
	return k
}

// Allow records one event for key at now and decides it. Allowed or not,
// key becomes the most recently used key of its shard.
func (k *Keyed) Allow(key string, now time.Time) Result {
	n := int64(now.Sub(k.epoch))
	s := &k.shards[maphash.String(k.seed, key)&k.mask]
	s.mu.Lock()
	i, ok := s.idx[key]
	if ok {
		s.toFront(i)
	} else {
		i = s.insert(key)
	}
	e := &s.ents[i]
	tat, r := k.p.decide(e.tat, n)
	e.tat = tat
	s.mu.Unlock()
	return r
}

// Len is the number of keys tracked.
func (k *Keyed) Len() int {
	n := 0
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		n += len(s.idx)
		s.mu.Unlock()
	}
	return n
}

// Evictions is how many keys have been evicted to make room for new ones
// since the store was created. A key evicted while still limited comes
// back with a full burst, so a steadily rising count means maxKeys is too
// small for the number of distinct clients.
func (k *Keyed) Evictions() uint64 {
	var n uint64
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		n += s.evicted
		s.mu.Unlock()
	}
	return n
}

// insert adds key at the front, evicting the tail when the shard is full,
// and returns its slot.
func (s *shard) insert(key string) int32 {
	var i int32
	if len(s.ents) < s.cap {
		i = int32(len(s.ents))
		s.ents = append(s.ents, entry{})
	} else {
		i = s.tail
		s.unlink(i)
		delete(s.idx, s.ents[i].key)
		s.evicted++
	}
	key = strings.Clone(key)
	s.ents[i] = entry{key: key, tat: math.MinInt64, prev: -1, next: -1}
	s.idx[key] = i
	s.pushFront(i)
	return i
}

func (s *shard) toFront(i int32) {
	if s.head == i {
		return
	}
	s.unlink(i)
	s.pushFront(i)
}

func (s *shard) unlink(i int32) {
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

func (s *shard) pushFront(i int32) {
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

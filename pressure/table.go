package pressure

import (
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultMaxTrackedKeys bounds the distinct topics (and, separately, users)
// tracked per sample interval when Config.MaxTrackedKeys is 0.
const DefaultMaxTrackedKeys = 10000

// counter is one key's attempts in the current interval and its live
// rings (live.go): 192 bytes, three 64-byte cache lines and a size class
// of its own, so that counters of keys inserted one after the other never
// share a line and two cores recording different topics do not bounce one
// between them.
type counter struct {
	msgs      atomic.Int64
	bytes     atomic.Int64
	live      ring // attempts per 100 ms bucket
	liveBytes ring // bytes per 100 ms bucket
}

// table counts attempts per key (topic or user).
//
// The hot path (a key already present) is a lock-free sync.Map lookup
// plus two atomic adds on that key's counter: recorders share no written
// cache line except the counter itself, so different keys never contend and
// one hot key costs only its two adds. A read/write lock per shard was
// measured first and abandoned: the lock's reader count is a second shared
// line written twice per call, which made one hot topic recorded from two
// cores several times slower than from one.
//
// The sampler (one goroutine at a time) swaps each counter to zero (drain),
// then deletes idle keys (prune). A recorder may have looked a key up just
// before prune deleted it and add afterwards, so deleted counters are kept
// on a retired list for one more interval and anything added to them is
// carried into the next drain. Counts are therefore exact unless a
// recorder stalls between its lookup and its add for longer than a whole
// sample interval; the only other skew is that an attempt racing a drain
// may have its message counted in one interval and its bytes in the next.
//
// The number of keys is bounded by max; an attempt on a new key past the
// bound is counted in the overflow counter instead, so client-chosen names
// can never grow memory without limit.
type table struct {
	m   sync.Map // string -> *counter
	max int64
	// liveBytes: count bytes in the live rings too (topics, whose live
	// bytes/s the cluster envelope carries; users' it does not).
	liveBytes bool
	n         atomic.Int64 // keys in m
	over      atomic.Int64 // attempts not attributed to a key (bound hit)

	retired []retiredCounter // sampler only
}

type retiredCounter struct {
	key string
	c   *counter
}

func newTable(max int) *table {
	return &table{max: int64(max)}
}

// newLiveBytesTable is newTable counting live bytes too.
func newLiveBytesTable(max int) *table {
	return &table{max: int64(max), liveBytes: true}
}

// record counts one attempt of bytes on key, in the live bucket tick too.
func (t *table) record(key string, bytes int64, tick int64) {
	var c *counter
	if v, ok := t.m.Load(key); ok {
		c = v.(*counter)
		c.msgs.Add(1)
		c.bytes.Add(bytes)
	} else if c = t.insert(key, 1, bytes); c == nil {
		return
	}
	c.live.add(tick, 1)
	if t.liveBytes {
		c.liveBytes.add(tick, uint64(bytes))
	}
}

// insert is the slow path for a key not yet in the table: it counts msgs
// and bytes for the interval and returns the key's counter, or nil when
// the bound left the key out.
func (t *table) insert(key string, msgs, bytes int64) *counter {
	// A plain load first, so a flood of new names past the bound costs
	// one shared read and one add, not two writes to n.
	if t.n.Load() >= t.max {
		t.over.Add(msgs)
		return nil
	}
	// Add-then-check keeps the bound exact when several inserts race.
	if t.n.Add(1) > t.max {
		t.n.Add(-1)
		t.over.Add(msgs)
		return nil
	}
	c := new(counter)
	c.msgs.Store(msgs)
	c.bytes.Store(bytes)
	// Clone: the caller's string may alias a large decoded frame that we
	// must not pin for the life of the entry.
	if v, loaded := t.m.LoadOrStore(strings.Clone(key), c); loaded {
		t.n.Add(-1)
		c = v.(*counter)
		c.msgs.Add(msgs)
		c.bytes.Add(bytes)
	}
	return c
}

// entry is one key's counts as read by the sampler.
type entry struct {
	key         string
	msgs, bytes int64
}

// drain reads every key's counts for the interval that just ended into buf
// (reused by the caller), zeroes them, and returns them with the count of
// attempts that overflowed the key bound. Keys stay in the table until
// prune. Late adds to counters retired by the previous prune are carried
// in first.
func (t *table) drain(buf []entry) (_ []entry, overflow int64) {
	for i, r := range t.retired {
		if msgs, bytes := r.c.msgs.Swap(0), r.c.bytes.Swap(0); msgs > 0 || bytes > 0 {
			t.insert(r.key, msgs, bytes)
		}
		t.retired[i] = retiredCounter{}
	}
	t.retired = t.retired[:0]

	buf = buf[:0]
	t.m.Range(func(k, v any) bool {
		c := v.(*counter)
		if msgs := c.msgs.Swap(0); msgs > 0 {
			buf = append(buf, entry{key: k.(string), msgs: msgs, bytes: c.bytes.Swap(0)})
		}
		return true
	})
	return buf, t.over.Swap(0)
}

// prune deletes every key that is not in keep, has had no attempt since
// drain, and none in the live window that ends in the bucket tick. The
// sampler keeps this interval's top-N (and hot topics) so that a heavy
// publisher never loses its slot to a flood of new names; a key that was
// recorded between drain and prune keeps its counts for the next
// interval; a key with recent attempts keeps its live rate whatever the
// sample interval. (Attempts a late recorder adds to a pruned counter's
// rings are lost: its live rate was about to leave the window anyway.)
func (t *table) prune(keep map[string]struct{}, tick int64) {
	t.m.Range(func(k, v any) bool {
		c := v.(*counter)
		if c.msgs.Load() != 0 || c.live.recent(tick) {
			return true
		}
		key := k.(string)
		if _, ok := keep[key]; ok {
			return true
		}
		if t.m.CompareAndDelete(key, c) {
			t.n.Add(-1)
			t.retired = append(t.retired, retiredCounter{key: key, c: c})
		}
		return true
	})
}

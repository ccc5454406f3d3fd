package pressure

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"
)

// Live rates. Beside the per-sample counts, every tracked topic and user
// counts its attempts (and bytes) in a ring of 100 ms buckets, so that its
// rate over the last second is current at every call, not as of the last
// sample: a publisher that turns abusive is seen as soon as its last
// second is over a threshold, and seen to slow down as soon as it is not.
const (
	// LiveWindow is the span of a live rate.
	LiveWindow = time.Second
	liveBucket = 100 * time.Millisecond
	// liveBuckets buckets cover the window; one more holds the bucket the
	// window's start falls in, which counts in proportion.
	liveBuckets = int(LiveWindow / liveBucket)
	liveSlots   = liveBuckets + 1
)

// ring is one key's sliding window: slot tick%liveSlots holds the bucket
// of that tick, its tick in the high 32 bits and its count in the low 32
// (4 G attempts, or 4 GiB, per key per 100 ms before a count would spill
// into its tick: far beyond what one instance receives).
type ring [liveSlots]atomic.Uint64

// tickOf is the 100 ms bucket of a Unix time in nanoseconds. A slot keeps
// its low 32 bits (they wrap every 13 years: only differences matter).
func tickOf(ns int64) int64 { return ns / int64(liveBucket) }

// add counts n in the bucket of tick. A slot still holding an older
// bucket (or none) is restarted; an add older than the slot's bucket (a
// recorder that stalled for more than the window) is dropped. Ticks wrap
// at 2^32 (13 years): only their differences matter.
func (r *ring) add(tick64 int64, n uint64) {
	s := &r[tick64%int64(liveSlots)]
	tick := uint32(tick64)
	for {
		v := s.Load()
		t := uint32(v >> 32)
		if t == tick && v != 0 {
			s.Add(n)
			return
		}
		if d := t - tick; d < 1<<16 && v != 0 {
			return // the slot holds a newer bucket (by up to 1.8 hours)
		}
		if s.CompareAndSwap(v, uint64(tick)<<32|n) {
			return
		}
	}
}

// sum is the count over the window that ends at ns: the buckets that lie
// inside it whole, the current one up to ns, and the share of the oldest
// bucket that the window still covers, assuming its count spread evenly.
// Over a window of one second it is also the rate per second.
func (r *ring) sum(ns int64) float64 {
	tick := uint32(tickOf(ns))
	frac := float64(ns%int64(liveBucket)) / float64(liveBucket)
	var total float64
	for i := range r {
		v := r[i].Load()
		c := float64(uint32(v))
		switch age := tick - uint32(v>>32); {
		case age < uint32(liveBuckets):
			total += c
		case age == uint32(liveBuckets):
			total += c * (1 - frac)
		}
	}
	return total
}

// recent reports whether the ring counted anything in the last nine
// buckets before tick's or in tick's own: a name without is at most a
// tenth of its count from 0 and will be 0 within 100 ms.
func (r *ring) recent(tick64 int64) bool {
	tick := uint32(tick64)
	for i := range r {
		v := r[i].Load()
		if uint32(v) != 0 && tick-uint32(v>>32) < uint32(liveBuckets) {
			return true
		}
	}
	return false
}

// perSecond converts a window's count into a rate.
func perSecond(count float64) float64 { return count / LiveWindow.Seconds() }

// rate is key's live rate at ns (messages/s), 0 when untracked.
func (t *table) rate(key string, ns int64) float64 {
	v, ok := t.m.Load(key)
	if !ok {
		return 0
	}
	return perSecond(v.(*counter).live.sum(ns))
}

// liveRate is one key's live rates, for liveTop.
type liveRate struct {
	key         string
	msgs, bytes float64
}

// liveTop returns the n keys with the highest live message rates at ns,
// descending (ties by key), those at 0 left out.
func (t *table) liveTop(n int, ns int64) []liveRate {
	var all []liveRate
	t.m.Range(func(k, v any) bool {
		c := v.(*counter)
		if msgs := c.live.sum(ns); msgs > 0 {
			all = append(all, liveRate{key: k.(string), msgs: perSecond(msgs), bytes: perSecond(c.liveBytes.sum(ns))})
		}
		return true
	})
	slices.SortFunc(all, func(a, b liveRate) int {
		return cmp.Or(cmp.Compare(b.msgs, a.msgs), cmp.Compare(a.key, b.key))
	})
	return all[:min(n, len(all))]
}

// keepNow sets the live clock: the middle of the current bucket. The
// sampling goroutine calls it every bucket, so it lags the clock by less
// than a bucket.
func (m *Monitor) keepNow() {
	m.now.Store(tickOf(m.clock().UnixNano())*int64(liveBucket) + int64(liveBucket)/2)
}

// liveNow is the time live rates are counted at: the live clock while
// started (an atomic load), else the clock.
func (m *Monitor) liveNow() int64 {
	if ns := m.now.Load(); ns != 0 {
		return ns
	}
	return m.clock().UnixNano()
}

// RateOf is topic's publish attempts per second over the last second
// (LiveWindow), current at this call to within a 100 ms bucket; 0 for a
// topic not tracked. Unlike Snapshot.RateOf it does not wait for a
// sample. While the monitor runs (Start) it is a lock-free map lookup and
// eleven atomic loads, with no clock read: safe on the admission path.
func (m *Monitor) RateOf(topic string) float64 {
	return m.topics.rate(topic, m.liveNow())
}

// RateOfUser is RateOf for a user's publish attempts.
func (m *Monitor) RateOfUser(user string) float64 {
	return m.users.rate(user, m.liveNow())
}

// LiveTop returns the n topics and the n users with the most publish
// attempts per second over the last second, as RateOf counts them,
// descending (ties by name); users' BytesPerSec is 0 (not counted live).
// It walks every tracked name: call it once per broadcast, not per call.
func (m *Monitor) LiveTop(n int) ([]TopicRate, []UserRate) {
	ns := m.liveNow()
	lt, lu := m.topics.liveTop(n, ns), m.users.liveTop(n, ns)
	topics := make([]TopicRate, len(lt))
	for i, r := range lt {
		topics[i] = TopicRate{Topic: r.key, MessagesPerSec: r.msgs, BytesPerSec: r.bytes}
	}
	users := make([]UserRate, len(lu))
	for i, r := range lu {
		users[i] = UserRate{User: r.key, MessagesPerSec: r.msgs, BytesPerSec: r.bytes}
	}
	return topics, users
}

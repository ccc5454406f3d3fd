package ratelimit

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestWindowProperties drives random timelines over a few keys and checks
// the sliding window against a brute-force count of the allowed events:
// no half-open window [a, a+per) ever holds more than limit of a key's
// allowed events; a denial happens only when limit events were allowed in
// (now-per, now] (the count is true, not an estimate); a denial's
// RetryAfter is exactly when the oldest of them leaves; and a key's ring
// never holds more than limit timestamps.
func TestWindowProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(1, 6).Draw(rt, "limit")
		per := time.Duration(rapid.IntRange(1, 50).Draw(rt, "perMs")) * time.Millisecond
		w := NewWindow(limit, per, 0)
		keys := []string{"a", "b", "c"}
		allowed := map[string][]time.Duration{}
		var now time.Duration
		steps := rapid.IntRange(1, 300).Draw(rt, "steps")
		for i := range steps {
			now += time.Duration(rapid.IntRange(0, 20).Draw(rt, fmt.Sprintf("gap%d", i))) * time.Millisecond / 4
			key := rapid.SampledFrom(keys).Draw(rt, fmt.Sprintf("key%d", i))
			r := w.Allow(key, at(now))
			var inWindow []time.Duration
			for _, ts := range allowed[key] {
				if ts > now-per {
					inWindow = append(inWindow, ts)
				}
			}
			if r.Allowed {
				if len(inWindow) >= limit {
					rt.Fatalf("t=%v key %s allowed with %d events already in the window (limit %d)", now, key, len(inWindow), limit)
				}
				if r.Remaining != int64(limit-len(inWindow)-1) {
					rt.Fatalf("t=%v Remaining %d, want %d", now, r.Remaining, limit-len(inWindow)-1)
				}
				allowed[key] = append(allowed[key], now)
			} else {
				if len(inWindow) < limit {
					rt.Fatalf("t=%v key %s denied with only %d events in the window (limit %d)", now, key, len(inWindow), limit)
				}
				if want := inWindow[0] + per - now; r.RetryAfter != want {
					rt.Fatalf("t=%v RetryAfter %v, want %v", now, r.RetryAfter, want)
				}
			}
		}
		for key, ts := range allowed {
			sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
			for i := range ts { // the densest windows start at an allowed event
				n := sort.Search(len(ts), func(j int) bool { return ts[j] >= ts[i]+per }) - i
				if n > limit {
					rt.Fatalf("key %s: %d allowed events in [%v, %v), limit %d", key, n, ts[i], ts[i]+per, limit)
				}
			}
		}
		for i := range w.shards {
			for _, e := range w.shards[i].ents {
				if len(e.val.ts) > limit {
					rt.Fatalf("key %s ring holds %d slots, limit %d", e.key, len(e.val.ts), limit)
				}
			}
		}
	})
}

// TestWindowIsNotATokenBucket pins the difference from GCRA: after a full
// burst, nothing more is allowed until the first event is a whole period
// old (a GCRA would refill one event every per/limit).
func TestWindowIsNotATokenBucket(t *testing.T) {
	t.Parallel()
	w := NewWindow(4, time.Second, 0)
	for i := range 4 {
		if !w.Allow("k", at(time.Duration(i)*time.Millisecond)).Allowed {
			t.Fatalf("burst event %d denied", i)
		}
	}
	r := w.Allow("k", at(999*time.Millisecond))
	if r.Allowed || r.RetryAfter != time.Millisecond {
		t.Fatalf("at 999ms: %+v, want denied with RetryAfter 1ms", r)
	}
	if !w.Allow("k", at(time.Second)).Allowed {
		t.Fatal("at 1s the first event has left the window")
	}
	if w.Allow("k", at(time.Second)).Allowed {
		t.Fatal("only one event left the window at 1s")
	}
}

// TestWindowHammeringKeySurvivesKeyFlood: a full store evicts other keys,
// never lets the hammering key through untracked.
func TestWindowHammeringKeySurvivesKeyFlood(t *testing.T) {
	t.Parallel()
	const maxKeys, limit = 1024, 3
	w := NewWindow(limit, time.Hour, maxKeys)
	for i := range maxKeys {
		w.Allow(fmt.Sprintf("early-%d", i), at(0))
	}
	allowed := 0
	for i := range 20_000 {
		now := at(time.Duration(i) * time.Millisecond)
		w.Allow(fmt.Sprintf("fake-%d", i), now)
		if w.Allow("abuser", now).Allowed {
			allowed++
		}
	}
	if allowed != limit {
		t.Fatalf("abuser allowed %d times within one window, want %d", allowed, limit)
	}
	if w.Len() > maxKeys || w.Evictions() == 0 {
		t.Fatalf("Len %d Evictions %d: want <= %d and > 0", w.Len(), w.Evictions(), maxKeys)
	}
}

func TestWindowMemoryBoundedByLimit(t *testing.T) {
	t.Parallel()
	w := NewWindow(5, time.Second, 0)
	for i := range 1000 {
		w.Allow("k", at(time.Duration(i)*time.Millisecond))
	}
	s := w.shardOf("k")
	if got := len(s.ents[s.idx["k"]].val.ts); got != 5 {
		t.Fatalf("ring of a key at its limit holds %d slots, want exactly the limit 5", got)
	}
}

func TestWindowAllowAllocatesNothing(t *testing.T) {
	w := NewWindow(10, time.Second, 0)
	for i := range 20 {
		w.Allow("k", at(time.Duration(i)*time.Millisecond))
	}
	var i time.Duration
	if n := testing.AllocsPerRun(1000, func() { i += 50 * time.Millisecond; w.Allow("k", at(i)) }); n != 0 {
		t.Fatalf("Allow on a key whose ring has grown: %v allocs", n)
	}
}

func TestKeyedAllowN(t *testing.T) {
	t.Parallel()
	k := NewKeyed(100, time.Second, 0) // 100 units per second: one per 10ms
	if r := k.AllowN("k", 60, at(0)); !r.Allowed || r.Remaining != 40 {
		t.Fatalf("60 of 100: %+v", r)
	}
	r := k.AllowN("k", 50, at(0))
	if r.Allowed || r.RetryAfter != 100*time.Millisecond {
		t.Fatalf("50 more with 40 left: %+v, want denied for 100ms (10 units)", r)
	}
	if !k.AllowN("k", 50, at(100*time.Millisecond)).Allowed {
		t.Fatal("after RetryAfter the cost fits")
	}
	if r := k.AllowN("k", 0, at(100*time.Millisecond)); !r.Allowed {
		t.Fatalf("a zero cost is always allowed: %+v", r)
	}
	if r := k.AllowN("big", 101, at(0)); r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("a cost over the whole budget: %+v, want denied", r)
	}
}

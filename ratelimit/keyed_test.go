package ratelimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// order lists the keys of the single shard of k, most recently used first.
func order(k *Keyed) []string {
	s := &k.shards[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i := s.head; i >= 0; i = s.ents[i].next {
		out = append(out, s.ents[i].key)
	}
	return out
}

func TestShardLayout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give       int
		wantShards int
		wantTotal  int
	}{
		{give: 1, wantShards: 1, wantTotal: 1},
		{give: 255, wantShards: 1, wantTotal: 255},
		{give: 256, wantShards: 2, wantTotal: 256},
		{give: 1000, wantShards: 4, wantTotal: 1000},
		{give: 0, wantShards: 64, wantTotal: DefaultMaxKeys},
		{give: 1 << 20, wantShards: 64, wantTotal: 1 << 20},
		{give: 8193, wantShards: 64, wantTotal: 8193},
	}
	for _, tt := range tests {
		k := NewKeyed(1, time.Second, tt.give)
		total := 0
		for i := range k.shards {
			total += k.shards[i].cap
		}
		if len(k.shards) != tt.wantShards || total != tt.wantTotal {
			t.Errorf("NewKeyed(maxKeys=%d): %d shards holding %d, want %d holding %d",
				tt.give, len(k.shards), total, tt.wantShards, tt.wantTotal)
		}
	}
}

func TestEvictionOrderIsLRU(t *testing.T) {
	t.Parallel()
	k := NewKeyed(1, time.Hour, 3)
	now := at(0)
	for _, key := range []string{"a", "b", "c"} {
		k.Allow(key, now)
	}
	if got, want := fmt.Sprint(order(k)), "[c b a]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	// a denied event still counts as use: "a" moves to the front.
	if k.Allow("a", now).Allowed {
		t.Fatal("second event of a within the hour allowed")
	}
	k.Allow("d", now) // evicts the LRU key, b
	if got, want := fmt.Sprint(order(k)), "[d a c]"; got != want {
		t.Fatalf("order after inserting d: %s, want %s", got, want)
	}
	if k.Len() != 3 || k.Evictions() != 1 {
		t.Fatalf("Len %d Evictions %d, want 3 and 1", k.Len(), k.Evictions())
	}
	// a and c kept their state; b was forgotten and restarts with a full burst.
	if k.Allow("a", now).Allowed || k.Allow("c", now).Allowed {
		t.Fatal("a key that was not evicted lost its state")
	}
	if !k.Allow("b", now).Allowed {
		t.Fatal("evicted key b should restart with a full burst")
	}
	if got, want := fmt.Sprint(order(k)), "[b c a]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// TestHammeringKeySurvivesKeyFlood fills the store with many more fake
// keys than it can hold while one key hammers: the store stays bounded and
// the hammering key never gets more than its GCRA allowance.
func TestHammeringKeySurvivesKeyFlood(t *testing.T) {
	t.Parallel()
	const (
		maxKeys  = 4096
		limit    = 5
		per      = time.Second
		fakes    = 200_000
		perRound = 20 // fake keys between two hammer events, far below a shard (64 slots)
	)
	k := NewKeyed(limit, per, maxKeys)
	// The store is already full when the abuser arrives: a store that lets
	// new keys through untracked once full would never limit it.
	for i := range maxKeys {
		k.Allow(fmt.Sprintf("early-%d", i), at(0))
	}
	allowed := 0
	var elapsed time.Duration
	for i := 0; i < fakes; i += perRound {
		now := at(elapsed)
		for j := range perRound {
			k.Allow(fmt.Sprintf("fake-%d", i+j), now)
		}
		if k.Allow("abuser", now).Allowed {
			allowed++
		}
		elapsed += time.Millisecond
	}
	if n := k.Len(); n > maxKeys {
		t.Fatalf("store holds %d keys, bound %d", n, maxKeys)
	}
	if k.Evictions() == 0 {
		t.Fatal("the flood should have evicted fake keys")
	}
	// 10s of hammering at 1000/s: GCRA allows the burst plus one per 200ms.
	bound := limit + int(elapsed/(per/limit))
	if allowed > bound {
		t.Fatalf("abuser allowed %d events in %v, bound %d: the flood switched limiting off", allowed, elapsed, bound)
	}
	if allowed < bound-1 {
		t.Fatalf("abuser allowed only %d of %d: limiter too strict", allowed, bound)
	}
}

func TestKeyedConcurrentBound(t *testing.T) {
	t.Parallel()
	k := NewKeyed(1, time.Hour, 512)
	now := at(0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k.Allow(fmt.Sprintf("g%d-%d", g, i%700), now)
				k.Allow("shared", now)
			}
		})
	}
	wg.Wait()
	if n := k.Len(); n > 512 {
		t.Fatalf("Len %d over the bound 512", n)
	}
	if k.Allow("shared", now).Allowed {
		t.Fatal("shared key allowed twice within its period")
	}
}

func TestAllowExistingKeyAllocatesNothing(t *testing.T) {
	k := NewKeyed(10, time.Second, 0)
	key := "client-1"
	now := at(0)
	k.Allow(key, now)
	if n := testing.AllocsPerRun(1000, func() { k.Allow(key, now) }); n != 0 {
		t.Fatalf("Allow on an existing key: %v allocs", n)
	}
	g := NewGCRA(10, time.Second)
	if n := testing.AllocsPerRun(1000, func() { g.Allow(now) }); n != 0 {
		t.Fatalf("GCRA.Allow: %v allocs", n)
	}
}

// A client with many source addresses (an IPv6 /48 holds 65,536 /64s)
// floods the store with new keys to evict its own limited key and get a
// fresh burst. The store evicts the flood's keys instead: they have used
// less of their burst. Both limiters, a full default-sized store, twice
// as many flood keys as it holds.
func TestFloodOfNewKeysCannotFlushALimitedKey(t *testing.T) {
	now := time.Now()
	for name, allow := range map[string]func() func(key string, now time.Time) Result{
		"gcra":   func() func(string, time.Time) Result { return NewKeyed(5, 10*time.Second, 0).Allow },
		"window": func() func(string, time.Time) Result { return NewWindow(5, 10*time.Second, 0).Allow },
	} {
		t.Run(name, func(t *testing.T) {
			allow := allow()
			for range 5 {
				allow("2001:db8:0:1::/64", now)
			}
			if allow("2001:db8:0:1::/64", now).Allowed {
				t.Fatal("the sixth event was allowed")
			}
			for i := range 2 * DefaultMaxKeys {
				allow(fmt.Sprintf("2001:db8:1:%x::/64", i), now)
			}
			if allow("2001:db8:0:1::/64", now).Allowed {
				t.Fatal("after a flood of new keys the limited key had a fresh burst")
			}
		})
	}
}

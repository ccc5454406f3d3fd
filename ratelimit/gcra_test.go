package ratelimit

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestGCRATable(t *testing.T) {
	t.Parallel()
	type step struct {
		at   time.Duration
		want Result
	}
	tests := []struct {
		name  string
		limit int
		per   time.Duration
		steps []step
	}{
		{
			name: "burst of limit then denied until one interval", limit: 3, per: 3 * time.Second,
			steps: []step{
				{0, Result{Allowed: true, Limit: 3, Remaining: 2}},
				{0, Result{Allowed: true, Limit: 3, Remaining: 1}},
				{0, Result{Allowed: true, Limit: 3, Remaining: 0}},
				{0, Result{Limit: 3, RetryAfter: time.Second}},
				{400 * time.Millisecond, Result{Limit: 3, RetryAfter: 600 * time.Millisecond}},
				{time.Second, Result{Allowed: true, Limit: 3, Remaining: 0}},
				{time.Second, Result{Limit: 3, RetryAfter: time.Second}},
			},
		},
		{
			name: "idle for a full period refills the whole burst", limit: 2, per: time.Second,
			steps: []step{
				{0, Result{Allowed: true, Limit: 2, Remaining: 1}},
				{0, Result{Allowed: true, Limit: 2, Remaining: 0}},
				{time.Second, Result{Allowed: true, Limit: 2, Remaining: 1}},
				{10 * time.Second, Result{Allowed: true, Limit: 2, Remaining: 1}},
			},
		},
		{
			name: "partial refill", limit: 4, per: 4 * time.Second,
			steps: []step{
				{0, Result{Allowed: true, Limit: 4, Remaining: 3}},
				{0, Result{Allowed: true, Limit: 4, Remaining: 2}},
				{0, Result{Allowed: true, Limit: 4, Remaining: 1}},
				{0, Result{Allowed: true, Limit: 4, Remaining: 0}},
				{2500 * time.Millisecond, Result{Allowed: true, Limit: 4, Remaining: 1}},
				{2500 * time.Millisecond, Result{Allowed: true, Limit: 4, Remaining: 0}},
				{2500 * time.Millisecond, Result{Limit: 4, RetryAfter: 500 * time.Millisecond}},
			},
		},
		{
			name: "limit 1 is one event per period", limit: 1, per: time.Minute,
			steps: []step{
				{0, Result{Allowed: true, Limit: 1, Remaining: 0}},
				{59 * time.Second, Result{Limit: 1, RetryAfter: time.Second}},
				{time.Minute, Result{Allowed: true, Limit: 1, Remaining: 0}},
			},
		},
		{
			name: "emission interval rounds up so the rate never exceeds limit/per", limit: 3, per: 10 * time.Nanosecond,
			steps: []step{
				{0, Result{Allowed: true, Limit: 3, Remaining: 2}},
				{0, Result{Allowed: true, Limit: 3, Remaining: 1}},
				{0, Result{Allowed: true, Limit: 3, Remaining: 0}},
				{3 * time.Nanosecond, Result{Limit: 3, RetryAfter: time.Nanosecond}},
				{4 * time.Nanosecond, Result{Allowed: true, Limit: 3, Remaining: 0}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewGCRA(tt.limit, tt.per)
			k := NewKeyed(tt.limit, tt.per, 4)
			for i, s := range tt.steps {
				if got := g.Allow(at(s.at)); got != s.want {
					t.Errorf("GCRA step %d at %v: got %+v, want %+v", i, s.at, got, s.want)
				}
				if got := k.Allow("k", at(s.at)); got != s.want {
					t.Errorf("Keyed step %d at %v: got %+v, want %+v", i, s.at, got, s.want)
				}
			}
		})
	}
}

func TestNewPanicsOnInvalidLimit(t *testing.T) {
	t.Parallel()
	for _, give := range []struct {
		limit int
		per   time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -time.Second}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewKeyed(%d, %v) did not panic", give.limit, give.per)
				}
			}()
			NewKeyed(give.limit, give.per, 0)
		}()
	}
}

// TestGCRAProperties drives random event times at a few keys and checks,
// for every key:
//   - the GCRA bound: any closed interval of length L holds at most
//     limit + floor(L/T) allowed events (T = ceil(per/limit));
//   - a denial's RetryAfter is exact: at now+RetryAfter-1ns still denied,
//     at now+RetryAfter allowed;
//   - Remaining is exact: Remaining more events at the same instant are
//     allowed and the next one is not;
//   - a fresh key gets its full burst.
func TestGCRAProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(1, 12).Draw(rt, "limit")
		per := time.Duration(rapid.Int64Range(1, int64(5*time.Second)).Draw(rt, "per"))
		T := (int64(per) + int64(limit) - 1) / int64(limit)
		k := NewKeyed(limit, per, 8)
		keys := []string{"a", "b", "c"}
		allowed := map[string][]int64{}
		now := int64(0)
		record := func(key string, n int64) Result {
			r := k.Allow(key, at(time.Duration(n)))
			if r.Allowed != (r.RetryAfter == 0) || r.RetryAfter < 0 {
				rt.Fatalf("inconsistent result %+v", r)
			}
			if r.Limit != int64(limit) || r.Remaining < 0 || r.Remaining >= int64(limit) || (!r.Allowed && r.Remaining != 0) {
				rt.Fatalf("bad limit/remaining %+v", r)
			}
			if r.Allowed {
				allowed[key] = append(allowed[key], n)
			}
			return r
		}
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for range steps {
			now += rapid.Int64Range(0, 2*T).Draw(rt, "gap")
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			r := record(key, now)
			switch rapid.IntRange(0, 3).Draw(rt, "probe") {
			case 1: // probe RetryAfter exactness
				if !r.Allowed {
					ra := int64(r.RetryAfter)
					if r2 := record(key, now+ra-1); r2.Allowed {
						rt.Fatalf("allowed 1ns before RetryAfter %v", r.RetryAfter)
					}
					if r2 := record(key, now+ra); !r2.Allowed {
						rt.Fatalf("denied at RetryAfter %v: %+v", r.RetryAfter, r2)
					}
					now += ra
				}
			case 2: // probe Remaining exactness
				if r.Allowed {
					for i := range r.Remaining {
						if !record(key, now).Allowed {
							rt.Fatalf("event %d of Remaining=%d denied", i+1, r.Remaining)
						}
					}
					if record(key, now).Allowed {
						rt.Fatalf("event past Remaining=%d allowed", r.Remaining)
					}
				}
			}
		}
		for key, ts := range allowed {
			for i := range ts {
				for j := i; j < len(ts); j++ {
					if n, bound := int64(j-i+1), int64(limit)+(ts[j]-ts[i])/T; n > bound {
						rt.Fatalf("key %s: %d events in [%d, %d], GCRA bound %d", key, n, ts[i], ts[j], bound)
					}
				}
			}
		}
		fresh := 0
		for k.Allow("fresh", at(time.Duration(now))).Allowed {
			fresh++
		}
		if fresh != limit {
			rt.Fatalf("fresh key burst %d, want %d", fresh, limit)
		}
	})
}

// TestWindowOfOnePeriodIsNotCappedAtLimit documents the semantics (doc.go):
// GCRA refills continuously, so one period can hold more than limit events.
func TestWindowOfOnePeriodIsNotCappedAtLimit(t *testing.T) {
	t.Parallel()
	k := NewKeyed(2, 10*time.Second, 0)
	for _, d := range []time.Duration{0, 0, 5 * time.Second} {
		if !k.Allow("k", at(d)).Allowed {
			t.Fatalf("event at %v denied", d)
		}
	}
	if k.Allow("k", at(5*time.Second)).Allowed {
		t.Fatal("a fourth event within 5s allowed")
	}
}

func TestGCRAConcurrent(t *testing.T) {
	t.Parallel()
	g := NewGCRA(1000, time.Hour)
	now := at(0)
	done := make(chan int)
	for range 8 {
		go func() {
			n := 0
			for range 500 {
				if g.Allow(now).Allowed {
					n++
				}
			}
			done <- n
		}()
	}
	total := 0
	for range 8 {
		total += <-done
	}
	if total != 1000 {
		t.Fatalf("allowed %d of 4000 concurrent events, want exactly the burst 1000", total)
	}
}

package message

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/metrics"
)

// fakeCeilings is a CeilingStore in memory: the limits of other instances
// are set by the test, this instance's is recorded.
type fakeCeilings struct {
	mu     sync.Mutex
	others []int64
	mine   int64
	err    error
}

func (f *fakeCeilings) ShareLimit(_ context.Context, _ string, limit int64) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.mine = limit
	return append(slices.Clone(f.others), limit), nil
}

func TestAggregate(t *testing.T) {
	for _, tc := range []struct {
		g      aggregate
		limits []int64
		want   int64
	}{
		{aggMedian, []int64{90, 30, 60}, 60},
		{aggMedian, []int64{10, 40}, 25},
		{aggMean, []int64{10, 20, 60}, 30},
		{aggMin, []int64{10, 20, 60}, 10},
		{aggMax, []int64{10, 20, 60}, 60},
	} {
		if got := tc.g.of(tc.limits); got != tc.want {
			t.Errorf("%d of %v = %d, want %d", tc.g, tc.limits, got, tc.want)
		}
	}
	if got := fleetShare(aggMedian, []int64{1, 1, 1}); got != 1 {
		t.Errorf("a share is at least 1, got %d", got)
	}
}

// probed returns a fleet-wide adaptive class whose first no-load probe is
// over, so its own limit (Min) is what the controller inferred.
func probed(t interface{ Fatal(...any) }, a *Admission, name string, min int) *Class {
	if err := a.Register(name, Rule{AdaptiveConcurrency: &AdaptiveConcurrency{Min: min, Max: 1000, Scope: "cluster"}}); err != nil {
		t.Fatal(err)
	}
	c, _ := a.Class(name)
	call := &Call{}
	for range defaultTuning.probeCalls {
		if !c.Check(call).Allowed {
			t.Fatal("a probe call denied")
		}
		call.Release()
	}
	if c.adaptive.probing.Load() {
		t.Fatal("still probing")
	}
	return c
}

// TestFleetCeiling: the class applies the median of the fleet's limits
// divided by the live instance count; a failed exchange falls back to its
// own limit and is counted; the next good one restores the share.
func TestFleetCeiling(t *testing.T) {
	m := newMetrics()
	store := &fakeCeilings{others: []int64{90, 30}}
	a := newAdmission(Deps{Metrics: m, Ceilings: store, now: newClock().Now})
	c := probed(t, a, "llm", 60)
	if !a.HasCeilings() {
		t.Fatal("HasCeilings false")
	}
	a.ShareCeilings(context.Background(), time.Second)
	if store.mine != 60 {
		t.Fatalf("shared %d, want the class's own 60", store.mine)
	}
	if got := c.ConcurrencyLimit(); got != 20 {
		t.Fatalf("limit %d, want median 60 / 3 instances = 20", got)
	}
	store.err = errors.New("redis down")
	a.ShareCeilings(context.Background(), time.Second)
	if got := c.ConcurrencyLimit(); got != 60 {
		t.Fatalf("limit %d with the store down, want its own 60", got)
	}
	if got := testutilCount(m, "llm"); got != 1 {
		t.Fatalf("fallbacks %v, want 1", got)
	}
	store.err = nil
	a.ShareCeilings(context.Background(), time.Second)
	if got := c.ConcurrencyLimit(); got != 20 {
		t.Fatalf("limit %d after recovery, want 20", got)
	}
	// Enforced: 20 leases, then CONCURRENCY.
	calls := make([]*Call, 21)
	for i := range calls {
		calls[i] = &Call{}
		if d := c.Check(calls[i]); d.Allowed != (i < 20) {
			t.Fatalf("call %d: %+v", i, d)
		}
	}
	for _, call := range calls {
		call.Release()
	}
}

func TestFleetCeilingValidation(t *testing.T) {
	r := Rule{AdaptiveConcurrency: &AdaptiveConcurrency{Min: 1, Max: 2, Scope: "cluster"}}
	if err := newAdmission(Deps{}).Register("x", r); err == nil {
		t.Error("scope cluster without a store registered")
	}
	for _, ac := range []*AdaptiveConcurrency{{Min: 1, Max: 2, Scope: "fleet"}, {Min: 1, Max: 2, Scope: "cluster", Aggregate: "p99"}} {
		if err := newAdmission(Deps{Ceilings: &fakeCeilings{}}).Register("x", Rule{AdaptiveConcurrency: ac}); err == nil {
			t.Errorf("%+v registered", ac)
		}
		if err := (Config{Classes: map[string]Rule{"x": {AdaptiveConcurrency: ac}}}).Validate(); err == nil {
			t.Errorf("%+v validated", ac)
		}
	}
}

// TestFleetCeilingExactlyOnceRelease: with the fleet's share moving under
// it (exchanges that raise, lower or fail), random Checks and Releases
// (single, double, racing from another goroutine) keep every lease
// released once: in flight never goes below zero, is exact whenever every
// releaser is joined, and ends at zero; and no Check is allowed while the
// leases certainly held reach the limit in force.
func TestFleetCeilingExactlyOnceRelease(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		store := &fakeCeilings{others: []int64{5}}
		a := newAdmission(Deps{Ceilings: store, now: newClock().Now})
		c := probed(rt, a, "c", 4)
		n := rapid.IntRange(1, 8).Draw(rt, "calls")
		calls := make([]*Call, n)
		held := make([]bool, n)
		var wg sync.WaitGroup
		for i := range calls {
			calls[i] = &Call{}
		}
		for i := range rapid.IntRange(1, 80).Draw(rt, "steps") {
			j := rapid.IntRange(0, n-1).Draw(rt, fmt.Sprint("call", i))
			switch rapid.SampledFrom([]string{"check", "release", "double", "race", "share", "fail"}).Draw(rt, fmt.Sprint("op", i)) {
			case "check":
				wg.Wait()
				if held[j] {
					continue
				}
				certain := int64(0)
				for _, h := range held {
					if h {
						certain++
					}
				}
				limit := c.ConcurrencyLimit()
				d := c.Check(calls[j])
				if d.Allowed && certain >= limit {
					rt.Fatalf("allowed with %d held, limit %d", certain, limit)
				}
				held[j] = d.Allowed
			case "release":
				calls[j].Release()
				held[j] = false
			case "double":
				calls[j].Release()
				calls[j].Release()
				held[j] = false
			case "race":
				wg.Go(calls[j].Release)
				wg.Go(calls[j].Release)
				held[j] = false
			case "share":
				store.mu.Lock()
				store.err = nil
				store.others = []int64{int64(rapid.IntRange(1, 30).Draw(rt, fmt.Sprint("other", i)))}
				store.mu.Unlock()
				a.ShareCeilings(context.Background(), time.Second)
			case "fail":
				store.mu.Lock()
				store.err = errors.New("down")
				store.mu.Unlock()
				a.ShareCeilings(context.Background(), time.Second)
			}
			if got := c.InFlight(); got < 0 {
				rt.Fatalf("in flight %d", got)
			}
		}
		wg.Wait()
		want := int64(0)
		for _, h := range held {
			if h {
				want++
			}
		}
		if got := c.InFlight(); got != want {
			rt.Fatalf("in flight %d with every releaser joined, want %d", got, want)
		}
		for _, call := range calls {
			call.Release()
		}
		if got := c.InFlight(); got != 0 {
			rt.Fatalf("in flight %d at the end", got)
		}
	})
}

// TestRunCeilingsStops: the exchange runs at once and, when its context
// ends, puts every class back on its own limit.
func TestRunCeilingsStops(t *testing.T) {
	store := &fakeCeilings{others: []int64{90, 30}}
	a := newAdmission(Deps{Ceilings: store, now: newClock().Now})
	c := probed(t, a, "llm", 60)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.runCeilings(ctx, time.Hour) // one exchange, then it sees ctx done
	if store.mine != 60 {
		t.Fatalf("no exchange: %d", store.mine)
	}
	if got := c.ConcurrencyLimit(); got != 60 {
		t.Fatalf("limit %d after the exchange ended, want its own 60", got)
	}
}

// TestStartClose: Start runs the exchange until Close, which waits for it
// and leaves every class on its own limit; Close without Start, twice, or
// before a Start that then starts nothing, is safe.
func TestStartClose(t *testing.T) {
	defer leakcheck.Check(t)
	store := &fakeCeilings{others: []int64{90, 30}}
	a := newAdmission(Deps{Ceilings: store, now: newClock().Now})
	c := probed(t, a, "llm", 60)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := c.ConcurrencyLimit(); got != 60 {
		t.Fatalf("limit %d after Close, want its own 60", got)
	}
	a.Close()
	b := newAdmission(Deps{Ceilings: store})
	b.Close()
	b.Start(context.Background()) // after Close: starts nothing
	b.Close()
	if err := newAdmission(Deps{}).Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func testutilCount(m *metrics.Metrics, class string) float64 {
	return testutil.ToFloat64(m.AdmissionCeilingFallbacks.WithLabelValues(class))
}

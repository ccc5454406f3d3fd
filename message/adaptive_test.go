package message

import (
	"container/heap"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rtserver/rtserver/internal/testkit"
)

// simCall is a call running in the simulated backend.
type simCall struct {
	call *Call
	end  time.Time
}

type simHeap []simCall

func (h simHeap) Len() int           { return len(h) }
func (h simHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h simHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simHeap) Push(x any)        { *h = append(*h, x.(simCall)) }
func (h *simHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// simPhase runs the class under unlimited demand (every free slot is
// taken at once) for d of simulated time against a backend whose latency
// is latency(in flight when the call starts); each call ends with outcome.
// It checks the limit never leaves [lo, hi] and returns the limits seen
// after each release.
func simPhase(t *testing.T, clk *testkit.Clock, c *Class, running *simHeap, d time.Duration,
	latency func(inflight int64) time.Duration, outcome Outcome, lo, hi int64) []int64 {
	t.Helper()
	end := clk.Now().Add(d)
	var seen []int64
	for clk.Now().Before(end) {
		for {
			call := &Call{}
			if !c.Check(call).Allowed {
				break
			}
			heap.Push(running, simCall{call: call, end: clk.Now().Add(latency(c.InFlight()))})
		}
		next := heap.Pop(running).(simCall)
		clk.Advance(next.end.Sub(clk.Now()))
		next.call.ReleaseWith(outcome)
		l := c.ConcurrencyLimit()
		if l < lo || l > hi {
			t.Fatalf("limit %d left [%d, %d]", l, lo, hi)
		}
		seen = append(seen, l)
	}
	return seen
}

// settled is the median limit over the second half of a phase.
func settled(xs []int64) int64 {
	s := slices.Clone(xs[len(xs)/2:])
	slices.Sort(s)
	return s[len(s)/2]
}

// TestAdaptiveConcurrencyFollowsTheKnee simulates a backend with an
// injected clock: fast at any concurrency (the limit climbs to Max), then
// slowing down linearly past a knee of 32 calls in flight (the limit comes
// down near the knee), then fast again (it climbs back), then failing
// every call (dropped calls pull it down to Min). The limit never leaves
// [Min, Max], and admission_concurrency_limit follows it.
func TestAdaptiveConcurrencyFollowsTheKnee(t *testing.T) {
	const (
		lo, hi = 4, 128
		knee   = 32
		base   = 20 * time.Millisecond
		phase  = 5 * time.Second
	)
	clk := newClock()
	m := newMetrics()
	a := newAdmission(Deps{now: clk.Now, Metrics: m})
	c := mustRegister(t, a, "llm", Rule{AdaptiveConcurrency: &AdaptiveConcurrency{Min: lo, Max: hi}})
	if got := c.ConcurrencyLimit(); got != lo {
		t.Fatalf("initial limit %d, want Min %d (probing the no-load latency)", got, lo)
	}
	fast := func(int64) time.Duration { return base }
	kneed := func(n int64) time.Duration {
		if n <= knee {
			return base
		}
		return base * time.Duration(n) / knee
	}
	running := &simHeap{}

	got := settled(simPhase(t, clk, c, running, phase, fast, Completed, lo, hi))
	t.Logf("fast: %d", got)
	if got < hi*9/10 {
		t.Fatalf("fast backend: limit settled at %d, want near Max %d", got, hi)
	}
	got = settled(simPhase(t, clk, c, running, phase, kneed, Completed, lo, hi))
	t.Logf("knee %d: %d", knee, got)
	// Past the knee every call slows in proportion, so the fixed point is
	// tolerance × knee plus the square-root headroom: about 46.
	if got < knee*3/4 || got > knee*7/4 {
		t.Fatalf("backend with a knee at %d: limit settled at %d, want within [%d, %d]", knee, got, knee*3/4, knee*7/4)
	}
	got = settled(simPhase(t, clk, c, running, phase, fast, Completed, lo, hi))
	t.Logf("recovered: %d", got)
	if got < hi*9/10 {
		t.Fatalf("recovered backend: limit settled at %d, want back near Max %d", got, hi)
	}
	got = settled(simPhase(t, clk, c, running, phase, fast, Dropped, lo, hi))
	t.Logf("dropped: %d", got)
	if got > 2*lo {
		t.Fatalf("every call dropped: limit settled at %d, want near Min %d", got, lo)
	}
	if got, want := testutil.ToFloat64(m.AdmissionConcLimit.WithLabelValues("llm")), float64(c.ConcurrencyLimit()); got != want {
		t.Fatalf("admission_concurrency_limit = %v, want the limit %v", got, want)
	}
	for running.Len() > 0 {
		heap.Pop(running).(simCall).call.Release()
	}
	if c.InFlight() != 0 {
		t.Fatalf("in flight %d after every release", c.InFlight())
	}
}

// TestAdaptiveProbeRestoresLimit: a probe pins the limit to Min and gives
// the previous limit back once probeCalls calls have completed.
func TestAdaptiveProbeRestoresLimit(t *testing.T) {
	clk := newClock()
	a := newAdmission(Deps{now: clk.Now})
	c := mustRegister(t, a, "x", Rule{AdaptiveConcurrency: &AdaptiveConcurrency{
		Min: 2, Max: 50, tuning: &adaptiveTuning{tolerance: 1.25, window: 10 * time.Millisecond, probeEvery: time.Second, probeCalls: 4},
	}})
	running := &simHeap{}
	fast := func(int64) time.Duration { return time.Millisecond }
	simPhase(t, clk, c, running, 900*time.Millisecond, fast, Completed, 2, 50)
	if got := c.ConcurrencyLimit(); got != 50 {
		t.Fatalf("limit %d before the probe, want Max 50", got)
	}
	// Past probeEvery (+15% jitter at most), the next window end starts a probe.
	seen := simPhase(t, clk, c, running, 500*time.Millisecond, fast, Completed, 2, 50)
	if !slices.Contains(seen, 2) {
		t.Fatalf("no probe (limit pinned to Min 2) among %d limits seen (min %d)", len(seen), slices.Min(seen))
	}
	if got := c.ConcurrencyLimit(); got != 50 {
		t.Fatalf("limit %d after the probe, want it restored to 50", got)
	}
}

// TestAdaptiveWithConcurrencyMax: a fixed Max beside an adaptive limit caps
// it; both count one lease.
func TestAdaptiveWithConcurrencyMax(t *testing.T) {
	clk := newClock()
	a := newAdmission(Deps{now: clk.Now})
	c := mustRegister(t, a, "x", Rule{
		Concurrency:         &Concurrency{Max: 3},
		AdaptiveConcurrency: &AdaptiveConcurrency{Min: 5, Max: 10},
	})
	calls := make([]*Call, 4)
	for i := range calls {
		calls[i] = &Call{}
	}
	for i := range 3 {
		if !c.Check(calls[i]).Allowed {
			t.Fatalf("call %d denied under Max 3", i)
		}
	}
	if d := c.Check(calls[3]); d.Allowed || d.Reason != ReasonConcurrency || d.Limit != 3 {
		t.Fatalf("4th call: %+v, want CONCURRENCY with limit 3", d)
	}
	for _, call := range calls {
		call.Release()
	}
	if c.InFlight() != 0 {
		t.Fatal("leases not given back")
	}
}

// TestAdaptiveConcurrent: many goroutines checking and releasing at once
// (the race detector watches the lock-free window sums); in flight never
// passes the largest limit and ends at zero, and the limit stays in range.
func TestAdaptiveConcurrent(t *testing.T) {
	a := newAdmission(Deps{})
	c := mustRegister(t, a, "x", Rule{AdaptiveConcurrency: &AdaptiveConcurrency{
		Min: 2, Max: 16, tuning: &adaptiveTuning{tolerance: 1.25, window: time.Millisecond, probeEvery: 20 * time.Millisecond, probeCalls: 3},
	}})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			call := &Call{}
			for i := range 2000 {
				if !c.Check(call).Allowed {
					continue
				}
				if n := c.InFlight(); n > 16 {
					t.Errorf("in flight %d over max 16", n)
				}
				if l := c.ConcurrencyLimit(); l < 2 || l > 16 {
					t.Errorf("limit %d outside [2, 16]", l)
				}
				if (g+i)%7 == 0 {
					call.ReleaseWith(Dropped)
				} else {
					call.Release()
				}
			}
		})
	}
	wg.Wait()
	if n := c.InFlight(); n != 0 {
		t.Fatalf("in flight %d after every release", n)
	}
}

package message

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// adaptiveTuning is the gradient controller's tuning. No key sets it:
// every part runs with defaultTuning (tests pass their own).
type adaptiveTuning struct {
	// tolerance: calls may take this many times the no-load latency
	// before the limit falls (Envoy's 25% buffer); > 1.
	tolerance float64
	// window is how often the limit is recomputed from the calls that
	// completed since the last update.
	window time.Duration
	// probeEvery is how often the no-load latency is re-measured (plus up
	// to probeJitter of it): the limit is pinned to Min until probeCalls
	// calls started at that concurrency have completed, then restored.
	probeEvery time.Duration
	probeCalls int
}

// defaultTuning is Envoy's adaptive concurrency filter's (gradient
// controller) defaults, except probeCalls (Envoy: 50), halved so a probe
// pins the limit for half as long.
var defaultTuning = adaptiveTuning{
	tolerance:  1.25,
	window:     100 * time.Millisecond,
	probeEvery: 60 * time.Second,
	probeCalls: 25,
}

const (
	// probeJitter spreads probes: each interval is probeEvery plus up to
	// this fraction of it (Envoy's default jitter is 15%).
	probeJitter = 0.15
	// The gradient is clamped to [minGradient, maxGradient] per update, so
	// one window can at most halve or double the limit (Envoy's bounds).
	minGradient = 0.5
	maxGradient = 2.0
)

// adaptiveLimit is the gradient controller of an AdaptiveConcurrency part.
//
// Every window it compares the mean latency of the calls completed in the
// window (sample) with the no-load latency (minRTT):
//
//	gradient = clamp(tolerance × minRTT / sample, 0.5, 2)
//	limit    = clamp(limit × gradient + sqrt(limit × gradient), Min, Max)
//
// The square root is burst headroom: at gradient 1 the limit still creeps
// up, which is how it finds out that more concurrency is fine. When the
// busiest moment of the window used less than half the limit, the limit
// does not grow (the calls, not the limit, were the bottleneck).
//
// A dropped call (Outcome Dropped) counts as a sample of at least
// 2 × tolerance × minRTT: alone it drives the gradient to its floor, and
// mixed with completed calls it drags the mean up in proportion.
//
// minRTT is measured by a probe: at start and every probeEvery (+ up to 15%
// jitter) the limit is pinned to Min until probeCalls calls that started
// during the probe have completed (or, at low traffic, at least one has and
// probeEvery/12 has passed); their mean latency is the new minRTT and the
// limit returns to where it was. Pinning is what makes the measurement a
// no-load one even under sustained overload.
//
// The hot path takes no lock: Check loads the limit, Release adds its
// sample to atomic window sums; the Release that finds the window over
// takes the mutex (TryLock: the others go on) and computes the next limit.
// A sample that lands while a window is being closed may count towards the
// next one; the mean does not notice. Probes are rare (25 calls a minute)
// and run under the mutex.
type adaptiveLimit struct {
	min, max   int64
	tolerance  float64
	window     int64 // ns
	probeEvery int64 // ns
	probeCalls int
	now        func() time.Time // Deps.now; nil: the monotonic clock (elapsed)
	epoch      time.Time
	gauge      prometheus.Gauge

	limit     atomic.Int64 // the controller's limit: est, or Min while probing
	ceiling   atomic.Int64 // the fleet's share (scope cluster); 0: none, the limit applies
	probing   atomic.Bool
	dropFloor atomic.Int64 // ns: a dropped call's least sample, 2 × tolerance × minRTT
	winStart  atomic.Int64
	sum       atomic.Int64 // latency (ns) of the window's samples
	n         atomic.Int64
	peak      atomic.Int64 // most calls in flight seen at a release in this window

	mu         sync.Mutex // closes windows; guards the fields below
	est        float64    // the controller's limit
	minRTT     float64    // ns; 0 until the first probe ends
	probeStart int64
	probeSum   float64
	probeN     int
	nextProbe  int64
}

func newAdaptiveLimit(p AdaptiveConcurrency, now func() time.Time, gauge prometheus.Gauge) (*adaptiveLimit, error) {
	if p.Min < 1 || p.Max < p.Min {
		return nil, fmt.Errorf("min and max must satisfy 1 <= min <= max (got min %d, max %d)", p.Min, p.Max)
	}
	tu := defaultTuning
	if p.tuning != nil {
		tu = *p.tuning
	}
	al := &adaptiveLimit{
		min: int64(p.Min), max: int64(p.Max), tolerance: tu.tolerance,
		window: int64(tu.window), probeEvery: int64(tu.probeEvery), probeCalls: tu.probeCalls,
		now: now, epoch: time.Now(), gauge: gauge,
		est: float64(p.Min),
	}
	if now != nil {
		al.epoch = now()
	}
	// The first probe starts at once: nothing is known about the latency.
	al.probing.Store(true)
	al.set(al.min)
	return al, nil
}

// since is t in ns since the limiter's epoch.
func (al *adaptiveLimit) since(t time.Time) int64 { return int64(t.Sub(al.epoch)) }

// elapsed reads the clock: ns since the limiter's epoch. A latency needs
// only the monotonic clock, so by default this is time.Since (one monotonic
// read, about half of time.Now); an injected clock is read as given.
func (al *adaptiveLimit) elapsed() int64 {
	if al.now == nil {
		return int64(time.Since(al.epoch))
	}
	return int64(al.now().Sub(al.epoch))
}

// current is the limit Check enforces: the fleet's share when one is set
// (scope cluster), except while the no-load latency is probed (the probe
// must run at Min in flight), else the controller's own limit.
func (al *adaptiveLimit) current() int64 {
	if c := al.ceiling.Load(); c > 0 && !al.probing.Load() {
		return c
	}
	return al.limit.Load()
}

// estimate is the controller's inferred limit (not Min while probing): what
// a fleet-wide part publishes.
func (al *adaptiveLimit) estimate() int64 {
	al.mu.Lock()
	defer al.mu.Unlock()
	return int64(al.est)
}

// setCeiling sets the fleet's share (0: none) and the gauge to what is
// enforced.
func (al *adaptiveLimit) setCeiling(c int64) {
	al.ceiling.Store(c)
	al.gauge.Set(float64(al.current()))
}

func (al *adaptiveLimit) set(l int64) {
	al.limit.Store(l)
	al.gauge.Set(float64(al.current()))
}

// observe feeds one released call: it started at start and ended at end (ns
// since epoch), inflight calls were in flight just before it was released.
func (al *adaptiveLimit) observe(start, end, inflight int64, o Outcome) {
	lat := max(end-start, 0)
	if al.probing.Load() {
		al.mu.Lock()
		if al.probing.Load() {
			al.observeProbe(start, end, lat, o)
			al.mu.Unlock()
			return
		}
		al.mu.Unlock()
	}
	if o == Dropped {
		lat = max(lat, al.dropFloor.Load())
	}
	al.sum.Add(lat)
	al.n.Add(1)
	for p := al.peak.Load(); inflight > p; p = al.peak.Load() {
		if al.peak.CompareAndSwap(p, inflight) {
			break
		}
	}
	if end-al.winStart.Load() < al.window || !al.mu.TryLock() {
		return
	}
	defer al.mu.Unlock()
	if end-al.winStart.Load() < al.window || al.probing.Load() {
		return // another release closed it meanwhile
	}
	al.winStart.Store(end)
	sum, n, peak := al.sum.Swap(0), al.n.Swap(0), al.peak.Swap(0)
	if n <= 0 {
		return
	}
	sample := float64(sum) / float64(n)
	g := maxGradient
	if sample > 0 {
		g = min(max(al.tolerance*al.minRTT/sample, minGradient), maxGradient)
	}
	appLimited := float64(peak) < al.est/2
	if !(g >= 1 && appLimited) {
		l := al.est * g
		al.est = min(max(l+math.Sqrt(l), float64(al.min)), float64(al.max))
	}
	if end >= al.nextProbe {
		al.probeStart, al.probeSum, al.probeN = end, 0, 0
		al.probing.Store(true)
		al.set(al.min)
		return
	}
	al.set(int64(al.est))
}

// observeProbe counts calls that started during the probe, so ran at no
// more than Min in flight; completed calls only (a drop is not a speed).
// Called with al.mu held.
func (al *adaptiveLimit) observeProbe(start, end, lat int64, o Outcome) {
	if start < al.probeStart || o != Completed {
		return
	}
	al.probeSum += float64(lat)
	al.probeN++
	if al.probeN < al.probeCalls && end-al.probeStart < al.probeEvery/12 {
		return
	}
	al.minRTT = al.probeSum / float64(al.probeN)
	al.dropFloor.Store(int64(2 * al.tolerance * al.minRTT))
	al.nextProbe = end + al.probeEvery + int64(rand.Float64()*probeJitter*float64(al.probeEvery))
	al.winStart.Store(end)
	al.sum.Store(0)
	al.n.Store(0)
	al.peak.Store(0)
	al.probing.Store(false)
	al.set(int64(al.est))
}

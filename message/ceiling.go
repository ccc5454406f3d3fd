package message

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CeilingStore shares adaptive concurrency limits across a fleet
// (clusterrate.Ceilings: Redis). It is used off the call path only, by
// Admission.RunCeilings.
type CeilingStore interface {
	// ShareLimit records limit as this instance's inferred limit of class
	// and returns the limits of every live instance of the fleet for it,
	// this one's included. An error means nothing is known.
	ShareLimit(ctx context.Context, class string, limit int64) ([]int64, error)
}

// DefaultCeilingEvery is how often a started Admission exchanges the limits of
// classes with a fleet-wide (scope cluster) adaptive concurrency limit.
const DefaultCeilingEvery = time.Second

// aggregate reduces the fleet's limits to one.
type aggregate uint8

const (
	aggMedian aggregate = iota
	aggMean
	aggMin
	aggMax
)

func parseAggregate(s string) (aggregate, error) {
	switch s {
	case "", "median":
		return aggMedian, nil
	case "mean":
		return aggMean, nil
	case "min":
		return aggMin, nil
	case "max":
		return aggMax, nil
	}
	return 0, fmt.Errorf("aggregate must be median, mean, min or max (got %q)", s)
}

// of is the aggregate of limits (not empty); the median of an even count
// is the mean of the middle two, rounded down.
func (g aggregate) of(limits []int64) int64 {
	s := slices.Clone(limits)
	slices.Sort(s)
	switch g {
	case aggMean:
		var sum float64
		for _, l := range s {
			sum += float64(l)
		}
		return int64(sum / float64(len(s)))
	case aggMin:
		return s[0]
	case aggMax:
		return s[len(s)-1]
	}
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// fleetShare is what one of the instances applies: the fleet's ceiling
// (the aggregate of every live instance's limit) divided by their count,
// at least 1.
func fleetShare(g aggregate, limits []int64) int64 {
	return max(g.of(limits)/int64(len(limits)), 1)
}

// fleetPart is the fleet-wide side of an AdaptiveConcurrency part with
// scope cluster.
type fleetPart struct {
	agg       aggregate
	fallbacks prometheus.Counter
}

// HasCeilings reports whether some class has a fleet-wide adaptive
// concurrency limit (so RunCeilings has work to do).
func (a *Admission) HasCeilings() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.classes {
		if c.fleet != nil {
			return true
		}
	}
	return false
}

// ShareCeilings exchanges, once, every fleet-wide class's limit through
// Deps.Ceilings: it publishes the class's own inferred limit and then
// applies the fleet's ceiling divided by the live instance count. A class
// whose exchange fails falls back to its own limit (counted in
// admission_concurrency_ceiling_fallbacks_total) until an exchange
// succeeds. Each exchange is bounded by timeout.
func (a *Admission) ShareCeilings(ctx context.Context, timeout time.Duration) {
	a.mu.Lock()
	var classes []*Class
	for _, c := range a.classes {
		if c.fleet != nil {
			classes = append(classes, c)
		}
	}
	a.mu.Unlock()
	for _, c := range classes {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		limits, err := a.ceilings.ShareLimit(cctx, c.name, c.adaptive.estimate())
		cancel()
		if err == nil && len(limits) == 0 {
			err = errors.New("no limits, not even this instance's")
		}
		if err != nil {
			c.fleet.fallbacks.Inc()
			c.adaptive.setCeiling(0)
			continue
		}
		c.adaptive.setCeiling(fleetShare(c.fleet.agg, limits))
	}
}

// Start starts exchanging the limits of the fleet-wide classes through
// Deps.Ceilings in the background, at once and then every
// DefaultCeilingEvery (each exchange bounded by half of it), until Close.
// Without Deps.Ceilings there is nothing to exchange and it starts
// nothing. It does no I/O itself and never fails: an exchange that fails
// leaves the classes on their own limits. After Close it starts nothing.
func (a *Admission) Start(context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ceilings == nil || a.run.done != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.run.cancel, a.run.done = cancel, make(chan struct{})
	go func() {
		defer close(a.run.done)
		a.runCeilings(ctx, DefaultCeilingEvery)
	}()
	return nil
}

// Close stops what Start started and waits for it: every class is back on
// its own limit.
func (a *Admission) Close() error {
	a.mu.Lock()
	if a.run.done == nil {
		a.run.done = closedRun // a later Start starts nothing
	}
	cancel, done := a.run.cancel, a.run.done
	a.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	<-done
	return nil
}

// closedRun is the done channel of an Admission closed before it started.
var closedRun = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// runCeilings calls ShareCeilings every interval (each exchange bounded
// by half of it) until ctx ends; at the end every class is back on its
// own limit.
func (a *Admission) runCeilings(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		a.ShareCeilings(ctx, every/2)
		select {
		case <-ctx.Done():
			a.mu.Lock()
			for _, c := range a.classes {
				if c.fleet != nil {
					c.adaptive.setCeiling(0)
				}
			}
			a.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

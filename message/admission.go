package message

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/message/internal/clock"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

// RateSource answers publish-attempt rates (messages/s) by topic and user.
// The cluster aggregator implements it; without Redis, the pressure
// monitor does (its live rates over the last second). Both methods run on the admission path:
// they must be memory reads, safe for concurrent use, and must not block.
type RateSource interface {
	RateOf(topic string) float64
	RateOfUser(user string) float64
}

// ClusterTopPublisher rejects while the topic's (or user's) rate >= Threshold.
type ClusterTopPublisher struct {
	Threshold float64 `yaml:"threshold" help:"publish attempts per second, this instance plus every sibling's fresh slice, at which calls are shed (positive)"`
	By        string  `yaml:"by" help:"topic | user; empty: topic"` // "topic" (default, when empty) or "user"
}

// Rate limits calls per key: Limit per Per, keyed By "user", "conn" or "ip".
// By "user" (the default, when empty) keys an anonymous call (User == "")
// by its IP, in a separate key space so a user id never shares a budget
// with an IP. Calls with an empty key (no IP known) share one budget.
type Rate struct {
	Limit int           `yaml:"limit" help:"calls allowed per period and key (positive)"`
	Per   time.Duration `yaml:"per" help:"the period (positive)"`
	By    string        `yaml:"by" help:"user | conn | ip; an anonymous connection's user key is its client IP; empty: user"`
	// Strategy is "gcra" (the default, when empty: a token bucket of
	// Limit, refilled one call every Per/Limit, so a window of Per may see
	// up to 2·Limit−1 calls) or "slidingWindow" (the true count: no window
	// of length Per ever holds more than Limit admitted calls; memory per
	// key up to Limit timestamps).
	Strategy string `yaml:"strategy" help:"gcra (a token bucket: a full burst, then one call per per/limit) | slidingWindow (the true count: at most limit calls in any window of per; memory up to limit timestamps per key); empty: gcra"`
	// Scope is "local" (default: each instance counts its own calls) or
	// "cluster" (one budget shared by every instance: each check is one
	// round trip through Deps.Shared; strategy gcra only; by user or ip,
	// since a connection lives on one instance).
	Scope string `yaml:"scope" help:"local (each instance counts its own calls) | cluster (one budget shared by every instance through Redis: needs redis.url, strategy gcra, by user or ip; one round trip per check; a Redis failure is decided by admission.failPolicy and counted in admission_rule_errors_total); empty: local"`
}

// Concurrency caps in-flight calls of the class.
type Concurrency struct {
	Max int `yaml:"max" help:"calls of this class in flight at once on this instance (positive)"`
}

// AdaptiveConcurrency caps in-flight calls of the class at a limit that
// follows the latency of the calls: it falls when calls slow down past
// their no-load latency or are dropped, and climbs back when they speed
// up, never leaving [Min, Max]. The algorithm is Envoy's adaptive
// concurrency gradient controller, with Envoy's tuning (see adaptive.go
// and docs/admission.md). Calls
// must be released with Call.ReleaseWith (or Release, which reports
// Completed) for the limit to learn.
type AdaptiveConcurrency struct {
	Min int `yaml:"min" help:"lowest in-flight limit, and the limit while the no-load latency is probed (positive)"`
	Max int `yaml:"max" help:"highest in-flight limit (at least min); the limit starts at min and moves with the calls' latency and drops (reason CONCURRENCY; gauge admission_concurrency_limit)"`
	// tuning is the controller's (adaptive.go); nil: defaultTuning.
	// Only tests set another.
	tuning *adaptiveTuning
	// Scope is "local" (default: the limit is this instance's) or
	// "cluster": every instance publishes its inferred limit through
	// Deps.Ceilings (Redis) and applies the fleet's Aggregate of the
	// live instances' limits divided by their count, so a backend behind
	// the fleet sees one ceiling. While the exchange fails, the instance
	// uses its own limit (counted). While probing, Min applies.
	Scope string `yaml:"scope" help:"local (this instance's limit) | cluster (every instance publishes its inferred limit through Redis and applies the fleet's aggregate divided by the live instance count, so a backend sees one ceiling for the fleet; needs redis.url; exchanged every second; while Redis fails, the local limit, counted in admission_concurrency_ceiling_fallbacks_total); empty: local"`
	// Aggregate reduces the fleet's limits (scope cluster): "median" (the
	// default), "mean", "min" or "max".
	Aggregate string `yaml:"aggregate" help:"scope cluster: how the live instances' limits make the fleet's ceiling: median | mean | min | max; empty: median"`
}

// Cost charges each call's cost against a per-key budget: a token bucket
// of Budget units refilled evenly over Per (the same GCRA as Rate, weighted
// by the cost). A call that does not fit is denied with reason COST
// (-32002); a call costing more than Budget never fits.
type Cost struct {
	Budget int64         `yaml:"budget" help:"cost units allowed per period and key: a token bucket of this size, refilled evenly over per (1 to 2147483647)"`
	Per    time.Duration `yaml:"per" help:"the period (positive)"`
	// Of is what a call costs: "bytes" (Call.Bytes, the request's size),
	// "fanout" (Call.Bytes × Call.Subscribers: a publish's bytes times
	// this instance's subscribers of the topic) or "param:<name>" (the
	// call's top-level numeric param <name>, rounded up; a call without
	// it, or with a negative or non-numeric value, is a rule error decided
	// by FailPolicy and counted in admission_rule_errors_total).
	Of string `yaml:"of" help:"what a call costs: bytes (the request frame) | fanout (the request's bytes x this instance's subscribers of the topic, for publish) | param:NAME (the call's top-level numeric param NAME, e.g. param:maxTokens, rounded up; a call without it is decided by admission.failPolicy); denied calls answer -32002 with reason COST"`
	By string `yaml:"by" help:"user | conn | ip, as for rate; empty: user"` // as Rate.By: "user" (default), "conn" or "ip"
	// Scope is "local" (default: this instance's own budget) or "cluster"
	// (one budget shared by every instance, through Deps.Shared).
	Scope string `yaml:"scope" help:"local | cluster, as for rate; a class whose rate and cost are both cluster-scoped checks both in one round trip and needs the same by for both; empty: local"`
}

// Rule is a class's rule; a call must clear every part that is set. A Rule
// with no part admits everything (and still counts it).
type Rule struct {
	// Reasons rejects while the pressure snapshot's reason is listed.
	Reasons             []pressure.Reason    `yaml:"reasons,omitempty" help:"shed while the local pressure reason is one of these: MEMORY, PUBLISH_RATE, SUBSCRIBERS, BUS (the bus refused a publish in the last sample interval)"`
	ClusterTopPublisher *ClusterTopPublisher `yaml:"clusterTopPublisher,omitempty"`
	Rate                *Rate                `yaml:"rate,omitempty"`
	Cost                *Cost                `yaml:"cost,omitempty"`
	BidPrice            *BidPrice            `yaml:"bidPrice,omitempty"`
	Concurrency         *Concurrency         `yaml:"concurrency,omitempty"`
	AdaptiveConcurrency *AdaptiveConcurrency `yaml:"adaptiveConcurrency,omitempty"`
}

// FailPolicy decides a rule part that errors or panics: a predicate, a
// cluster-scoped check whose store fails, a cost param that cannot be read.
type FailPolicy int

const (
	FailOpen   FailPolicy = iota // allow the call (the default)
	FailClosed                   // reject it with the part's reason (PREDICATE, RATE or COST)
)

func (p FailPolicy) String() string {
	switch p {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailPolicy(%d)", int(p))
}

// Predicate is an application's own rule part, in Go: it rejects
// (PREDICATE) when it returns false. One that errors or panics is decided
// by Config.FailPolicy and counted in admission_rule_errors_total. It runs
// on the dispatch path: keep it cheap and non-blocking. The snapshot is
// never nil.
type Predicate func(s *pressure.Snapshot, c *Call) (bool, error)

// Deps are what an Admission uses beside its configuration. The zero value
// works: no pressure source, no rate source, a 1s retry base, metrics
// discarded.
type Deps struct {
	// Snapshot is the pressure monitor's Snapshot (an atomic load). It is
	// required by classes with Reasons; nil (or a nil snapshot) reads as
	// no pressure for predicates.
	Snapshot func() *pressure.Snapshot
	// Rates answers ClusterTopPublisher parts. nil: every rate reads 0
	// (nothing is shed by that part).
	Rates RateSource
	// RetryAfter is the base of the jittered retry hint for rejections
	// other than RATE (a node passes handshake.retryAfter, the one base of
	// both tiers): the hint is uniform in [base/2, 3*base/2), at least
	// 1ms. <= 0 means 1s.
	RetryAfter time.Duration
	Metrics    *metrics.Metrics // nil: metrics.NewDiscard()
	// Predicates are the application's predicates by class name: each
	// joins the rule of the class of that name in Config.Classes, which a
	// class with a predicate may leave otherwise empty. A predicate whose
	// class Config.Classes lacks stops New.
	Predicates map[string]Predicate
	// Ceilings shares the limits of AdaptiveConcurrency parts with Scope
	// "cluster" (e.g. clusterrate.Ceilings on Redis); Admission.Start
	// drives it. nil: registering such a part is an error.
	Ceilings CeilingStore
	// Shared decides the Rate and Cost parts with Scope "cluster" (e.g.
	// clusterrate.Limiter on Redis). nil: registering such a part is an
	// error.
	Shared SharedLimiter

	// now is the clock of Rate, Cost and AdaptiveConcurrency parts (tests
	// inject a fixed or stepped one; those of sub-packages through
	// message/internal/clock). nil: the monotonic clock for the local
	// parts (a latency or a local budget only measures intervals) and
	// time.Now for cluster-scoped ones.
	now func() time.Time
	// rateMaxKeys bounds each local Rate and Cost part's key store
	// (ratelimit.NewKeyed's maxKeys); <= 0 means ratelimit's default.
	rateMaxKeys int
}

// Admission holds the registered classes. Register and Class are start-up
// calls; Check and Release are safe for concurrent use.
type Admission struct {
	snapshot    func() *pressure.Snapshot
	rates       RateSource // nil: every rate reads 0
	failClosed  bool
	retryBase   time.Duration
	m           *metrics.Metrics
	now         func() time.Time // wall clock: Deps.now, or time.Now
	injectedNow func() time.Time // Deps.now as given (nil: the default clocks)
	epoch       time.Time        // a time.Now reading taken by New (see localNow)
	rateMaxKeys int
	shared      SharedLimiter
	ceilings    CeilingStore

	mu      sync.Mutex
	classes map[string]*Class
	// run is the ceilings exchange of Start, until Close.
	run struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
}

func init() {
	clock.Set = func(deps any, now func() time.Time) { deps.(*Deps).now = now }
}

// New validates cfg and returns an Admission with cfg's classes
// registered, each with its predicate from deps.Predicates. cfg.Methods
// is for a Router (NewRouter). More classes may be registered in code
// (Register).
func New(cfg Config, deps Deps) (*Admission, error) {
	if err := cfg.ValidateWith(deps); err != nil {
		return nil, err
	}
	a := &Admission{
		snapshot:    deps.Snapshot,
		failClosed:  cfg.FailPolicy != FailOpen,
		retryBase:   deps.RetryAfter,
		m:           deps.Metrics,
		now:         deps.now,
		injectedNow: deps.now,
		epoch:       time.Now(),
		rateMaxKeys: deps.rateMaxKeys,
		shared:      deps.Shared,
		ceilings:    deps.Ceilings,
		rates:       deps.Rates,
		classes:     map[string]*Class{},
	}
	if a.retryBase <= 0 {
		a.retryBase = retryhint.DefaultBase
	}
	if a.m == nil {
		a.m = metrics.NewDiscard()
	}
	if a.now == nil {
		a.now = time.Now
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Classes)) {
		if err := a.register(name, cfg.Classes[name], deps.Predicates[name]); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// localNow is the clock of the parts that only measure intervals on this
// instance (local Rate and Cost parts: the limiters use only t.Sub of their
// own time.Now epoch, which reads the monotonic clock). By default it is
// epoch plus time.Since(epoch): one monotonic clock read (time.Since skips
// the wall clock for a time with a monotonic reading), where time.Now reads
// both clocks and costs about twice as much. Its wall part follows the
// monotonic clock from New on, which no local part reads. A cluster-scoped
// part compares times across instances, so it keeps the wall clock (a.now).
// An injected clock (Deps.now) drives every part.
func (a *Admission) localNow() time.Time {
	if a.injectedNow != nil {
		return a.injectedNow()
	}
	return a.epoch.Add(time.Since(a.epoch))
}

// emptySnapshot stands in when there is no pressure source: reason NONE.
var emptySnapshot = &pressure.Snapshot{}

func (c *Class) loadSnapshot() *pressure.Snapshot {
	if c.snapshot == nil {
		return emptySnapshot
	}
	if s := c.snapshot(); s != nil {
		return s
	}
	return emptySnapshot
}

// retryHint is the retry hint for a rejection that has no exact wait of its
// own: uniform in [base/2, 3*base/2), so shed clients do not come back in
// step; never below 1ms, so the hint on the wire is never zero.
func (a *Admission) retryHint() time.Duration {
	b := a.retryBase
	return max(retryhint.Jitter(b/2, b), time.Millisecond)
}

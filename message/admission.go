package message

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/ratelimit"
)

// RateSource answers publish-attempt rates (messages/s) by topic and user.
// The cluster aggregator implements it; without Redis, the pressure
// monitor's latest snapshot does. Both methods run on the admission path:
// they must be memory reads, safe for concurrent use, and must not block.
type RateSource interface {
	RateOf(topic string) float64
	RateOfUser(user string) float64
}

// ClusterTopPublisher rejects while the topic's (or user's) rate >= Threshold.
type ClusterTopPublisher struct {
	Threshold float64
	By        string // "topic" (default, when empty) or "user"
}

// Rate limits calls per key: Limit per Per, keyed By "user", "conn" or "ip".
// By "user" (the default, when empty) keys an anonymous call (User == "")
// by its IP, in a separate key space so a user id never shares a budget
// with an IP. Calls with an empty key (no IP known) share one budget.
type Rate struct {
	Limit int
	Per   time.Duration
	By    string
	// Strategy is "gcra" (the default, when empty: a token bucket of
	// Limit, refilled one call every Per/Limit, so a window of Per may see
	// up to 2·Limit−1 calls) or "slidingWindow" (the true count: no window
	// of length Per ever holds more than Limit admitted calls; memory per
	// key up to Limit timestamps).
	Strategy string
}

// Concurrency caps in-flight calls of the class.
type Concurrency struct {
	Max int
}

// Rule is a class's rule; a call must clear every part that is set. A Rule
// with no part admits everything (and still counts it).
type Rule struct {
	// Reasons rejects while the pressure snapshot's reason is listed.
	Reasons []pressure.Reason
	// Predicate rejects (PREDICATE) when it returns false. One that errors
	// or panics is decided by Options.FailPolicy and counted in
	// admission_rule_errors_total. It runs on the dispatch path: keep it
	// cheap and non-blocking. The snapshot is never nil.
	Predicate           func(s *pressure.Snapshot, c *Call) (bool, error)
	ClusterTopPublisher *ClusterTopPublisher
	Rate                *Rate
	Concurrency         *Concurrency
}

// FailPolicy decides a rule part that errors or panics.
type FailPolicy int

const (
	FailOpen   FailPolicy = iota // allow the call (the default)
	FailClosed                   // reject it with reason PREDICATE
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

// Options of an Admission. The zero value works: no pressure source, no
// rate source, fail open, a 1s retry base, metrics on a private registry.
type Options struct {
	// Snapshot is the pressure monitor's Snapshot (an atomic load). It is
	// required by classes with Reasons; nil (or a nil snapshot) reads as
	// no pressure for predicates.
	Snapshot func() *pressure.Snapshot
	// Rates answers ClusterTopPublisher parts; it may be swapped later with
	// SetRates. nil: every rate reads 0 (nothing is shed by that part).
	Rates      RateSource
	FailPolicy FailPolicy // any value but FailOpen decides as FailClosed
	// RetryAfter is the base of the jittered retry hint for rejections
	// other than RATE: the hint is uniform in [base/2, 3*base/2), at
	// least 1ms. <= 0 means 1s.
	RetryAfter time.Duration
	Metrics    *metrics.Metrics // nil: metrics.NewDiscard()
	Now        func() time.Time // clock for Rate parts; default time.Now
	// RateMaxKeys bounds each Rate part's key store (ratelimit.NewKeyed's
	// maxKeys); <= 0 means ratelimit's default.
	RateMaxKeys int
}

// Admission holds the registered classes. Register and Class are start-up
// calls; Check, Release and SetRates are safe for concurrent use.
type Admission struct {
	snapshot    func() *pressure.Snapshot
	rates       atomic.Pointer[rateBox]
	failClosed  bool
	retryBase   time.Duration
	m           *metrics.Metrics
	now         func() time.Time
	rateMaxKeys int

	mu      sync.Mutex
	classes map[string]*Class
}

// rateBox lets an interface live behind an atomic pointer.
type rateBox struct{ RateSource }

// New returns an Admission with no classes.
func New(opts Options) *Admission {
	a := &Admission{
		snapshot:    opts.Snapshot,
		failClosed:  opts.FailPolicy != FailOpen,
		retryBase:   opts.RetryAfter,
		m:           opts.Metrics,
		now:         opts.Now,
		rateMaxKeys: opts.RateMaxKeys,
		classes:     map[string]*Class{},
	}
	if a.retryBase <= 0 {
		a.retryBase = time.Second
	}
	if a.m == nil {
		a.m = metrics.NewDiscard()
	}
	if a.now == nil {
		a.now = time.Now
	}
	a.SetRates(opts.Rates)
	return a
}

// SetRates swaps the rate source (e.g. to the cluster aggregator once it is
// active). Calls already past the lookup finish with the old source. nil
// makes every rate read 0.
func (a *Admission) SetRates(r RateSource) {
	if r == nil {
		a.rates.Store(nil)
		return
	}
	a.rates.Store(&rateBox{r})
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

// jitter is the retry hint for a rejection that has no exact wait of its
// own: uniform in [base/2, 3*base/2), so shed clients do not come back in
// step; never below 1ms, so retryAfterMs is never zero. math/rand/v2's
// top-level functions use the runtime's per-thread generator: no lock, no
// allocation.
func (a *Admission) jitter() time.Duration {
	b := a.retryBase
	return max(b/2+time.Duration(rand.Int64N(int64(b))), time.Millisecond)
}

// reason codes index a class's pre-resolved rejection counters.
type reasonCode uint8

const (
	codeMemory reasonCode = iota
	codePublishRate
	codeSubscribers
	codeCluster
	codePredicate
	codeConcurrency
	codeRate
	numCodes
)

var codeText = [numCodes]string{
	ReasonMemory, ReasonPublishRate, ReasonSubscribers,
	ReasonClusterTopPublisher, ReasonPredicate, ReasonConcurrency, ReasonRate,
}

// Class is one registered class; resolve it once and check it per call.
type Class struct {
	name string
	a    *Admission

	snapshot   func() *pressure.Snapshot // Options.Snapshot; nil: none
	needSnap   bool
	reasonMask uint64 // bit r is set when pressure.Reason r is listed
	reasons    []reasonPart

	cluster       bool
	clusterByUser bool
	clusterThresh float64
	predicate     func(*pressure.Snapshot, *Call) (bool, error)
	rate          *ratePart
	concMax       int64
	accepted      prometheus.Counter
	rejected      [numCodes]prometheus.Counter // nil for reasons this class cannot produce
	errors        prometheus.Counter

	// inflight is written by every call of the class; the padding keeps it
	// off the cache line of the read-mostly fields above.
	_        [64]byte
	inflight atomic.Int64
}

type reasonPart struct {
	r    pressure.Reason
	code reasonCode
}

type rateBy uint8

const (
	byUser rateBy = iota
	byConn
	byIP
)

// keyedLimiter is a per-key limiter: ratelimit.Keyed or ratelimit.Window.
type keyedLimiter interface {
	Allow(key string, now time.Time) ratelimit.Result
}

type ratePart struct {
	by    rateBy
	keyed keyedLimiter
	anon  keyedLimiter // by user: anonymous calls, keyed by IP
}

// Register adds a class. Registering a name twice, or a rule with an invalid
// part, is an error naming the class and the part.
func (a *Admission) Register(name string, r Rule) error {
	if name == "" {
		return errors.New("message: class name is empty")
	}
	c, err := a.build(name, r)
	if err != nil {
		return fmt.Errorf("message: class %q: %w", name, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.classes[name]; dup {
		return fmt.Errorf("message: class %q is already registered", name)
	}
	c.resolveMetrics(a.m)
	a.classes[name] = c
	return nil
}

func (a *Admission) build(name string, r Rule) (*Class, error) {
	c := &Class{name: name, a: a, predicate: r.Predicate}
	seen := map[pressure.Reason]bool{}
	for _, pr := range r.Reasons {
		code, ok := pressureCode(pr)
		if !ok {
			return nil, fmt.Errorf("reasons: unknown reason %v (%d)", pr, uint8(pr))
		}
		if seen[pr] {
			continue
		}
		seen[pr] = true
		c.reasons = append(c.reasons, reasonPart{r: pr, code: code})
		c.reasonMask |= 1 << pr
	}
	if len(c.reasons) > 0 && a.snapshot == nil {
		return nil, errors.New("reasons: Options.Snapshot is nil, so pressure would never be seen")
	}
	c.needSnap = len(c.reasons) > 0 || c.predicate != nil
	c.snapshot = a.snapshot

	if p := r.ClusterTopPublisher; p != nil {
		if !(p.Threshold > 0) || math.IsInf(p.Threshold, 1) {
			return nil, fmt.Errorf("clusterTopPublisher: threshold must be a positive number (got %v)", p.Threshold)
		}
		switch p.By {
		case "", "topic":
		case "user":
			c.clusterByUser = true
		default:
			return nil, fmt.Errorf("clusterTopPublisher: by must be topic or user (got %q)", p.By)
		}
		c.cluster = true
		c.clusterThresh = p.Threshold
	}

	if p := r.Rate; p != nil {
		if p.Limit <= 0 {
			return nil, fmt.Errorf("rate: limit must be > 0 (got %d)", p.Limit)
		}
		if p.Per <= 0 {
			return nil, fmt.Errorf("rate: per must be > 0 (got %v)", p.Per)
		}
		var newLimiter func() keyedLimiter
		switch p.Strategy {
		case "", "gcra":
			newLimiter = func() keyedLimiter { return ratelimit.NewKeyed(p.Limit, p.Per, a.rateMaxKeys) }
		case "slidingWindow":
			newLimiter = func() keyedLimiter { return ratelimit.NewWindow(p.Limit, p.Per, a.rateMaxKeys) }
		default:
			return nil, fmt.Errorf("rate: strategy must be gcra or slidingWindow (got %q)", p.Strategy)
		}
		rp := &ratePart{keyed: newLimiter()}
		switch p.By {
		case "", "user":
			rp.by = byUser
			rp.anon = newLimiter()
		case "conn":
			rp.by = byConn
		case "ip":
			rp.by = byIP
		default:
			return nil, fmt.Errorf("rate: by must be user, conn or ip (got %q)", p.By)
		}
		c.rate = rp
	}

	if p := r.Concurrency; p != nil {
		if p.Max <= 0 {
			return nil, fmt.Errorf("concurrency: max must be > 0 (got %d)", p.Max)
		}
		c.concMax = int64(p.Max)
	}
	return c, nil
}

// pressureCode maps a pressure reason to its code; NONE and unknown values
// are not listable.
func pressureCode(r pressure.Reason) (reasonCode, bool) {
	if p, ok := pressure.ParseReason(r.String()); !ok || p != r {
		return 0, false
	}
	switch r.String() {
	case ReasonMemory:
		return codeMemory, true
	case ReasonPublishRate:
		return codePublishRate, true
	case ReasonSubscribers:
		return codeSubscribers, true
	}
	return 0, false
}

// resolveMetrics looks up every counter child this class can touch once, so
// Check does no label lookup: one child per reason the rule can produce.
func (c *Class) resolveMetrics(m *metrics.Metrics) {
	c.accepted = m.AdmissionAccepted.WithLabelValues(c.name)
	rej := func(code reasonCode) {
		c.rejected[code] = m.AdmissionRejected.WithLabelValues(c.name, codeText[code])
	}
	for _, rp := range c.reasons {
		rej(rp.code)
	}
	if c.cluster {
		rej(codeCluster)
	}
	if c.predicate != nil {
		rej(codePredicate)
		c.errors = m.AdmissionErrors.WithLabelValues(c.name)
	}
	if c.rate != nil {
		rej(codeRate)
	}
	if c.concMax > 0 {
		rej(codeConcurrency)
	}
}

// Class returns a registered class.
func (a *Admission) Class(name string) (*Class, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.classes[name]
	return c, ok
}

// Name is the class name.
func (c *Class) Name() string { return c.name }

// InFlight is the number of concurrency leases of this class held now (0
// for a class without a Concurrency part).
func (c *Class) InFlight() int64 { return c.inflight.Load() }

// errLeaseHeld is the panic value of Check on a Call still holding a lease.
var errLeaseHeld = errors.New("message: Check on a Call that still holds a concurrency lease; Release it before reusing the Call")

// Check decides call and counts the decision in the admission metrics. When
// allowed with a concurrency part, the lease is held in call until
// call.Release().
//
// Parts run cheapest and stateless first, stateful last, and the first part
// that denies decides: pressure reasons, then the cluster top-publisher
// view, then the predicate, then the rate limiter (which spends a token),
// then concurrency (which takes a lease). So a call shed by pressure spends
// no rate token and holds no lease, and a call denied by the rate limiter
// takes no lease. A call that clears the rate part but finds concurrency
// full has spent its token (GCRA tokens cannot be handed back); that denial
// reports the combination of both parts. An allowed decision carries the
// tightest Limit and Remaining of the rate and concurrency parts.
//
// Check panics if call still holds a lease (see Call).
func (c *Class) Check(call *Call) Decision {
	if call.lease.Load() != nil {
		panic(errLeaseHeld)
	}
	var snap *pressure.Snapshot
	if c.needSnap {
		snap = c.loadSnapshot()
		if c.reasonMask>>snap.Reason&1 != 0 {
			return c.rejectPressure(snap.Reason)
		}
	}
	if c.cluster && c.clusterHot(call) {
		return c.reject(codeCluster)
	}
	if c.predicate != nil && !c.runPredicate(snap, call) {
		return c.reject(codePredicate)
	}

	d := AllowFull
	if c.rate != nil {
		r := c.rate.allow(call, c.a.now())
		if !r.Allowed {
			c.rejected[codeRate].Inc()
			return Decision{
				Limit:      r.Limit,
				Remaining:  r.Remaining,
				RetryAfter: max(r.RetryAfter, time.Millisecond),
				Reason:     ReasonRate,
			}
		}
		d.Limit, d.Remaining = r.Limit, r.Remaining
	}
	if c.concMax > 0 {
		left, ok := c.acquire()
		if !ok {
			c.rejected[codeConcurrency].Inc()
			return Combine(d, Decision{
				Limit:      c.concMax,
				Remaining:  0,
				RetryAfter: c.a.jitter(),
				Reason:     ReasonConcurrency,
			})
		}
		// The lease is the last thing taken: nothing after this point can
		// deny, so there is no path that must hand it back here.
		call.lease.Store(c)
		d.Limit = min(d.Limit, c.concMax)
		d.Remaining = min(d.Remaining, left)
	}
	c.accepted.Inc()
	return d
}

// rejectPressure is a denial by a listed pressure reason.
func (c *Class) rejectPressure(r pressure.Reason) Decision {
	for _, rp := range c.reasons {
		if rp.r == r {
			return c.reject(rp.code)
		}
	}
	panic("message: reason mask and list disagree") // unreachable: built together
}

// reject is a denial by a part without a limit of its own (pressure,
// cluster, predicate): neutral Limit and Remaining, a jittered hint.
func (c *Class) reject(code reasonCode) Decision {
	c.rejected[code].Inc()
	return Decision{
		Limit:      math.MaxInt64,
		Remaining:  math.MaxInt64,
		RetryAfter: c.a.jitter(),
		Reason:     codeText[code],
	}
}

// clusterHot reports whether the call's topic (or user) publishes at or
// above the threshold. Calls without a key are not affected. The user key
// of an anonymous call is its IP, as everywhere else (admission.classes in docs/configuration.md).
func (c *Class) clusterHot(call *Call) bool {
	box := c.a.rates.Load()
	if box == nil {
		return false
	}
	if c.clusterByUser {
		key := call.User
		if key == "" {
			key = call.IP
		}
		return key != "" && box.RateOfUser(key) >= c.clusterThresh
	}
	return call.Topic != "" && box.RateOf(call.Topic) >= c.clusterThresh
}

// runPredicate runs the application's predicate; an error or a panic is
// counted and decided by the fail policy.
func (c *Class) runPredicate(s *pressure.Snapshot, call *Call) (ok bool) {
	defer func() {
		if recover() != nil {
			c.errors.Inc()
			ok = !c.a.failClosed
		}
	}()
	ok, err := c.predicate(s, call)
	if err != nil {
		c.errors.Inc()
		return !c.a.failClosed
	}
	return ok
}

// release gives back the slot a Call held (Call.ReleaseWith calls it once
// per lease). start and o feed an adaptive limit.
func (c *Class) release(start int64, o Outcome) {
	c.inflight.Add(-1)
}

// acquire takes one concurrency slot if one is free and returns how many
// are left. A CAS loop rather than add-then-undo: an over-the-cap add, even
// undone at once, would make a concurrent caller see a full class that is
// not full.
func (c *Class) acquire() (left int64, ok bool) {
	for {
		n := c.inflight.Load()
		if n >= c.concMax {
			return 0, false
		}
		if c.inflight.CompareAndSwap(n, n+1) {
			return c.concMax - n - 1, true
		}
	}
}

func (p *ratePart) allow(call *Call, now time.Time) ratelimit.Result {
	switch p.by {
	case byConn:
		return p.keyed.Allow(call.connIDKey(), now)
	case byIP:
		return p.keyed.Allow(call.IP, now)
	}
	if call.User == "" {
		return p.anon.Allow(call.IP, now)
	}
	return p.keyed.Allow(call.User, now)
}

package message

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/ratelimit"
)

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
	codeCost
	codeBus
	codePolicy
	numCodes
)

var codeText = [numCodes]string{
	ReasonMemory, ReasonPublishRate, ReasonSubscribers,
	ReasonClusterTopPublisher, ReasonPredicate, ReasonConcurrency, ReasonRate, ReasonCost,
	ReasonBus, ReasonPolicy,
}

// Class is one registered class; resolve it once and check it per call.
type Class struct {
	name string
	a    *Admission

	snapshot   func() *pressure.Snapshot // Deps.Snapshot; nil: none
	needSnap   bool
	reasonMask uint64 // bit r is set when pressure.Reason r is listed
	reasons    []reasonPart

	cluster       bool
	clusterByUser bool
	clusterThresh float64
	predicate     func(*pressure.Snapshot, *Call) (bool, error)
	bid           *bidPart  // BidPrice, or nil
	rate          *ratePart // local Rate part, or nil
	cost          *costPart // local Cost part, or nil
	shared        *sharedPart
	concMax       int64 // Concurrency.Max; math.MaxInt64 when only adaptive
	hasConc       bool  // a Concurrency or AdaptiveConcurrency part is set
	adaptive      *adaptiveLimit
	fleet         *fleetPart // the adaptive part is scope cluster
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

var byText = [...]string{byUser: "user", byConn: "conn", byIP: "ip"}

func parseBy(part, by string) (rateBy, error) {
	switch by {
	case "", "user":
		return byUser, nil
	case "conn":
		return byConn, nil
	case "ip":
		return byIP, nil
	}
	return 0, fmt.Errorf("%s: by must be user, conn or ip (got %q)", part, by)
}

// keyOf is the limiter key of call for a part keyed by: for byUser an
// anonymous call is keyed by its IP, and anon reports that so the part
// can keep the two key spaces apart.
func keyOf(by rateBy, call *Call) (key string, anon bool) {
	switch by {
	case byConn:
		return call.connIDKey(), false
	case byIP:
		return call.IP, false
	}
	if call.User == "" {
		return call.IP, true
	}
	return call.User, false
}

// keyedLimiter is a per-key limiter: ratelimit.Keyed or ratelimit.Window.
type keyedLimiter interface {
	Allow(key string, now time.Time) ratelimit.Result
}

type ratePart struct {
	by    rateBy
	keyed keyedLimiter
	anon  keyedLimiter // by user: anonymous calls, keyed by IP
}

func (p *ratePart) allow(call *Call, now time.Time) ratelimit.Result {
	key, anon := keyOf(p.by, call)
	if anon {
		return p.anon.Allow(key, now)
	}
	return p.keyed.Allow(key, now)
}

// Register adds a class besides Config's (New registered those).
// Registering a name twice, or a rule with an invalid part, is an error
// naming the class and the part.
func (a *Admission) Register(name string, r Rule) error {
	return a.register(name, r, nil)
}

// register is Register with the class's predicate (nil: none).
func (a *Admission) register(name string, r Rule, pred Predicate) error {
	if name == "" {
		return errors.New("message: class name is empty")
	}
	c, err := a.build(name, r, pred)
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

func (a *Admission) build(name string, r Rule, pred Predicate) (*Class, error) {
	c := &Class{name: name, a: a, predicate: pred}
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
		return nil, errors.New("reasons: Deps.Snapshot is nil, so pressure would never be seen")
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

	var sharedRate, sharedCost *sharedLimit
	if p := r.Rate; p != nil {
		var err error
		if sharedRate, err = a.buildRate(c, p); err != nil {
			return nil, err
		}
	}
	if p := r.Cost; p != nil {
		var err error
		if sharedCost, err = a.buildCost(c, p); err != nil {
			return nil, err
		}
	}
	if sharedRate != nil || sharedCost != nil {
		for _, sl := range []*sharedLimit{sharedRate, sharedCost} {
			if sl != nil && sl.by == byConn {
				// Connection ids are per instance: conn 7 here and conn 7
				// there would share one budget.
				return nil, fmt.Errorf("%s: scope cluster cannot be by conn (a connection lives on one instance; use scope local)", sl.part)
			}
		}
		if sharedRate != nil && sharedCost != nil && sharedRate.by != sharedCost.by {
			return nil, fmt.Errorf("rate and cost: both are scope cluster, so they must have the same by (one key, one round trip); got %s and %s",
				byText[sharedRate.by], byText[sharedCost.by])
		}
		if a.shared == nil {
			return nil, errors.New("scope cluster: no shared store to keep the fleet's budget in (message.Deps.Shared; a node has one when redis.url is set)")
		}
		c.shared = &sharedPart{rate: sharedRate, cost: sharedCost}
	}

	if p := r.BidPrice; p != nil {
		var err error
		if c.bid, err = buildBidPrice(p, c.cost != nil); err != nil {
			return nil, err
		}
	}

	c.concMax = math.MaxInt64
	if p := r.Concurrency; p != nil {
		if p.Max <= 0 {
			return nil, fmt.Errorf("concurrency: max must be > 0 (got %d)", p.Max)
		}
		c.concMax = int64(p.Max)
		c.hasConc = true
	}
	if p := r.AdaptiveConcurrency; p != nil {
		al, err := newAdaptiveLimit(*p, a.injectedNow, a.m.AdmissionConcLimit.WithLabelValues(name))
		if err != nil {
			return nil, fmt.Errorf("adaptiveConcurrency: %w", err)
		}
		c.adaptive = al
		c.hasConc = true
		// Exported at 0 for every adaptive class, as every family with
		// labels known in advance is, so dashboards and alerts see it
		// from start-up; a local class never falls back.
		fallbacks := a.m.AdmissionCeilingFallbacks.WithLabelValues(name)
		switch p.Scope {
		case "", "local":
		case "cluster":
			g, err := parseAggregate(p.Aggregate)
			if err != nil {
				return nil, fmt.Errorf("adaptiveConcurrency: %w", err)
			}
			if a.ceilings == nil {
				return nil, errors.New("adaptiveConcurrency: scope cluster: no store to share the fleet's limits in (message.Deps.Ceilings; a node has one when redis.url is set)")
			}
			c.fleet = &fleetPart{agg: g, fallbacks: fallbacks}
		default:
			return nil, fmt.Errorf("adaptiveConcurrency: scope must be local or cluster (got %q)", p.Scope)
		}
	}
	return c, nil
}

func (a *Admission) buildRate(c *Class, p *Rate) (*sharedLimit, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("rate: limit must be > 0 (got %d)", p.Limit)
	}
	if p.Per <= 0 {
		return nil, fmt.Errorf("rate: per must be > 0 (got %v)", p.Per)
	}
	by, err := parseBy("rate", p.By)
	if err != nil {
		return nil, err
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
	switch p.Scope {
	case "", "local":
	case "cluster":
		if p.Strategy == "slidingWindow" {
			return nil, errors.New("rate: scope cluster supports strategy gcra only")
		}
		return &sharedLimit{part: "rate", by: by, limit: int64(p.Limit), per: p.Per}, nil
	default:
		return nil, fmt.Errorf("rate: scope must be local or cluster (got %q)", p.Scope)
	}
	rp := &ratePart{by: by, keyed: newLimiter()}
	if by == byUser {
		rp.anon = newLimiter()
	}
	c.rate = rp
	return nil, nil
}

func (a *Admission) buildCost(c *Class, p *Cost) (*sharedLimit, error) {
	if p.Budget <= 0 || p.Budget > math.MaxInt32 {
		return nil, fmt.Errorf("cost: budget must be in [1, %d] (got %d)", math.MaxInt32, p.Budget)
	}
	if p.Per <= 0 {
		return nil, fmt.Errorf("cost: per must be > 0 (got %v)", p.Per)
	}
	by, err := parseBy("cost", p.By)
	if err != nil {
		return nil, err
	}
	cp := &costPart{by: by}
	switch {
	case p.Of == "bytes":
		cp.of = costBytes
	case p.Of == "fanout":
		cp.of = costFanout
	case strings.HasPrefix(p.Of, "param:") && len(p.Of) > len("param:"):
		cp.of = costParam
		cp.param = p.Of[len("param:"):]
	default:
		return nil, fmt.Errorf("cost: of must be bytes, fanout or param:<name> (got %q)", p.Of)
	}
	switch p.Scope {
	case "", "local":
	case "cluster":
		c.cost = cp // the part computes the cost; the shared store charges it
		return &sharedLimit{part: "cost", by: by, limit: p.Budget, per: p.Per}, nil
	default:
		return nil, fmt.Errorf("cost: scope must be local or cluster (got %q)", p.Scope)
	}
	cp.keyed = ratelimit.NewKeyed(int(p.Budget), p.Per, a.rateMaxKeys)
	if by == byUser {
		cp.anon = ratelimit.NewKeyed(int(p.Budget), p.Per, a.rateMaxKeys)
	}
	c.cost = cp
	return nil, nil
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
	case ReasonBus:
		return codeBus, true
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
	}
	if c.bid != nil {
		rej(codePolicy)
	}
	if c.rate != nil || (c.shared != nil && c.shared.rate != nil) {
		rej(codeRate)
	}
	if c.cost != nil {
		rej(codeCost)
	}
	if c.hasConc {
		rej(codeConcurrency)
	}
	// Every class exports its rule-error series at 0, even one whose rule
	// has no part that can fail: a dashboard or alert summing the family
	// then finds it on every instance with classes.
	c.errors = m.AdmissionErrors.WithLabelValues(c.name)
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

// BidPrice is the class's bid prices, and whether it has a BidPrice part.
func (c *Class) BidPrice() (Duals, bool) {
	if c.bid == nil {
		return Duals{}, false
	}
	return c.bid.Duals, true
}

// InFlight is the number of concurrency leases of this class held now (0
// for a class without a Concurrency or AdaptiveConcurrency part).
func (c *Class) InFlight() int64 { return c.inflight.Load() }

// ConcurrencyLimit is the class's current in-flight limit: the smaller of
// Concurrency.Max and the adaptive limit; math.MaxInt64 without either.
func (c *Class) ConcurrencyLimit() int64 {
	if c.adaptive != nil {
		return min(c.concMax, c.adaptive.current())
	}
	return c.concMax
}

package message

// STUB: the API other packages build against. The message helper replaces
// the bodies (and adds doc.go, tests, benchmarks); signatures stay.

import (
	"fmt"
	"time"

	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

// Call describes one call at dispatch. The caller owns it (the server keeps
// one per in-flight call) so checking allocates nothing; a concurrency lease
// taken by Check lives inside it and is given back by Release.
type Call struct {
	Method string
	Topic  string // publish/subscribe topic, or ""
	User   string // authenticated user id; "" when anonymous
	IP     string // client IP key (an IPv6 /64 prefix as text)
	ConnID uint64
	// unexported lease state goes here
}

// Release gives back the concurrency lease Check took, if any. It is
// idempotent and safe to call from several goroutines: the lease is
// released exactly once.
func (c *Call) Release() {}

// Decision is a combined admission decision.
type Decision struct {
	Allowed    bool
	Limit      int64 // binding limit (math.MaxInt64 when no part limits)
	Remaining  int64
	RetryAfter time.Duration // > 0 when denied
	Reason     string        // binding part when denied: MEMORY, PUBLISH_RATE, SUBSCRIBERS, CLUSTER_TOP_PUBLISHER, PREDICATE, CONCURRENCY, RATE
}

// RateSource answers publish-attempt rates (messages/s) by topic and user.
// The cluster aggregator implements it; without Redis, the pressure
// monitor's latest snapshot does.
type RateSource interface {
	RateOf(topic string) float64
	RateOfUser(user string) float64
}

// ClusterTopPublisher rejects while the topic's (or user's) rate >= Threshold.
type ClusterTopPublisher struct {
	Threshold float64
	By        string // "topic" (default) or "user"
}

// Rate limits calls per key: Limit per Per, keyed By "user", "conn" or "ip".
type Rate struct {
	Limit int
	Per   time.Duration
	By    string
}

// Concurrency caps in-flight calls of the class.
type Concurrency struct {
	Max int
}

// Rule is a class's rule; a call must clear every part that is set.
type Rule struct {
	Reasons             []pressure.Reason
	Predicate           func(s *pressure.Snapshot, c *Call) (bool, error)
	ClusterTopPublisher *ClusterTopPublisher
	Rate                *Rate
	Concurrency         *Concurrency
}

// FailPolicy decides a rule part that errors or panics.
type FailPolicy int

const (
	FailOpen FailPolicy = iota
	FailClosed
)

// Options of an Admission.
type Options struct {
	Snapshot   func() *pressure.Snapshot // the pressure monitor's Snapshot
	Rates      RateSource                // may be swapped later with SetRates
	FailPolicy FailPolicy
	RetryAfter time.Duration // base of the jittered retry hint for pressure rejections (default 1s)
	Metrics    *metrics.Metrics
	Now        func() time.Time // default time.Now
}

// Admission holds the registered classes.
type Admission struct {
	classes map[string]*Class
}

// New returns an Admission with no classes.
func New(opts Options) *Admission { return &Admission{classes: map[string]*Class{}} }

// SetRates swaps the rate source (e.g. to the cluster aggregator once it is active).
func (a *Admission) SetRates(r RateSource) {}

// Register adds a class. Registering a name twice is an error.
func (a *Admission) Register(name string, r Rule) error {
	a.classes[name] = &Class{name: name}
	return nil
}

// Class returns a registered class.
func (a *Admission) Class(name string) (*Class, bool) {
	c, ok := a.classes[name]
	return c, ok
}

// Class is one registered class; resolve it once and check it per call.
type Class struct{ name string }

// Name is the class name.
func (c *Class) Name() string { return c.name }

// Check decides call and counts the decision in the admission metrics. When
// allowed with a concurrency part, the lease is held in call until
// call.Release().
func (c *Class) Check(call *Call) Decision { return Decision{Allowed: true} }

// Router maps method names (exact, or path.Match globs) to classes.
type Router struct{ exact map[string]*Class }

// NewRouter builds a router; a method mapped to an unregistered class is an
// error naming it.
func NewRouter(a *Admission, methods map[string]string) (*Router, error) {
	r := &Router{exact: map[string]*Class{}}
	for m, cl := range methods {
		c, ok := a.Class(cl)
		if !ok {
			return nil, fmt.Errorf("method %q: class %q is not registered", m, cl)
		}
		r.exact[m] = c
	}
	return r, nil
}

// ClassOf returns the class of method, or nil when no mapping matches (the
// call is admitted). Exact names win over globs. Allocation free.
func (r *Router) ClassOf(method string) *Class { return r.exact[method] }

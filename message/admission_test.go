package message

import (
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

// pressureSource is a settable pressure snapshot, as the monitor publishes.
type pressureSource struct {
	p atomic.Pointer[pressure.Snapshot]
}

func newPressure(r pressure.Reason) *pressureSource {
	s := &pressureSource{}
	s.set(r)
	return s
}
func (s *pressureSource) set(r pressure.Reason)        { s.p.Store(&pressure.Snapshot{Reason: r}) }
func (s *pressureSource) Snapshot() *pressure.Snapshot { return s.p.Load() }

// fakeRates is a RateSource backed by maps (pure logic; the aggregator has
// its own tests).
type fakeRates struct{ topics, users map[string]float64 }

func (f fakeRates) RateOf(topic string) float64    { return f.topics[topic] }
func (f fakeRates) RateOfUser(user string) float64 { return f.users[user] }

// newClock is a test clock an hour ahead of the real one.
func newClock() *testkit.Clock { return testkit.NewClock(time.Now().Add(time.Hour)) }

func newMetrics() *metrics.Metrics { return metrics.NewDiscard() }

func mustRegister(t testing.TB, a *Admission, name string, r Rule) *Class {
	t.Helper()
	if err := a.Register(name, r); err != nil {
		t.Fatalf("Register(%q): %v", name, err)
	}
	c, ok := a.Class(name)
	if !ok {
		t.Fatalf("Class(%q) not found after Register", name)
	}
	return c
}

func accepted(m *metrics.Metrics, class string) float64 {
	return testutil.ToFloat64(m.AdmissionAccepted.WithLabelValues(class))
}
func rejected(m *metrics.Metrics, class, reason string) float64 {
	return testutil.ToFloat64(m.AdmissionRejected.WithLabelValues(class, reason))
}
func ruleErrors(m *metrics.Metrics, class string) float64 {
	return testutil.ToFloat64(m.AdmissionErrors.WithLabelValues(class))
}

// checkJitter asserts a non-rate denial's hint: within [base/2, 3*base/2).
func checkJitter(t testing.TB, d Decision, base time.Duration) {
	t.Helper()
	if d.RetryAfter < base/2 || d.RetryAfter >= base*3/2 {
		t.Errorf("RetryAfter = %v, want in [%v, %v)", d.RetryAfter, base/2, base*3/2)
	}
}

// The class-by-reason matrix: every pressure reason (and none) against
// classes listing it or not; a call is shed exactly when the active reason
// is listed, with the reason's own word.
func TestReasonsMatrix(t *testing.T) {
	classes := map[string][]pressure.Reason{
		"none":    nil,
		"mem":     {pressure.Memory},
		"mem+pub": {pressure.Memory, pressure.PublishRate},
		"subs":    {pressure.Subscribers},
		"all":     {pressure.Memory, pressure.PublishRate, pressure.Subscribers},
	}
	active := []pressure.Reason{pressure.None, pressure.Memory, pressure.PublishRate, pressure.Subscribers}

	src := newPressure(pressure.None)
	m := newMetrics()
	const base = 200 * time.Millisecond
	a := newAdmission(Deps{Snapshot: src.Snapshot, Metrics: m, RetryAfter: base})
	for name, rs := range classes {
		mustRegister(t, a, name, Rule{Reasons: rs})
	}
	for _, r := range active {
		src.set(r)
		for name, rs := range classes {
			t.Run(r.String()+"/"+name, func(t *testing.T) {
				listed := false
				for _, x := range rs {
					listed = listed || x == r
				}
				c, _ := a.Class(name)
				before := rejected(m, name, r.String())
				beforeOK := accepted(m, name)
				var call Call
				d := c.Check(&call)
				if d.Allowed == listed {
					t.Fatalf("reason %v, class lists %v: Allowed = %v", r, rs, d.Allowed)
				}
				if !listed {
					if d != AllowFull {
						t.Errorf("allowed decision = %+v, want AllowFull", d)
					}
					if got := accepted(m, name) - beforeOK; got != 1 {
						t.Errorf("accepted moved by %v, want 1", got)
					}
					return
				}
				if d.Reason != r.String() {
					t.Errorf("Reason = %q, want %q", d.Reason, r.String())
				}
				if d.Limit != math.MaxInt64 || d.Remaining != math.MaxInt64 {
					t.Errorf("pressure denial Limit/Remaining = %d/%d, want neutral", d.Limit, d.Remaining)
				}
				checkJitter(t, d, base)
				if got := rejected(m, name, r.String()) - before; got != 1 {
					t.Errorf("rejected{%s,%s} moved by %v, want 1", name, r, got)
				}
			})
		}
	}
}

func TestPredicateFailPolicy(t *testing.T) {
	boom := errors.New("boom")
	preds := map[string]func(*pressure.Snapshot, *Call) (bool, error){
		"true":  func(*pressure.Snapshot, *Call) (bool, error) { return true, nil },
		"false": func(*pressure.Snapshot, *Call) (bool, error) { return false, nil },
		"error": func(*pressure.Snapshot, *Call) (bool, error) { return true, boom },
		"panic": func(*pressure.Snapshot, *Call) (bool, error) { panic("predicate bug") },
	}
	tests := []struct {
		policy    FailPolicy
		pred      string
		wantAllow bool
		wantErrs  float64
	}{
		{FailOpen, "true", true, 0},
		{FailOpen, "false", false, 0},
		{FailOpen, "error", true, 1},
		{FailOpen, "panic", true, 1},
		{FailClosed, "true", true, 0},
		{FailClosed, "false", false, 0},
		{FailClosed, "error", false, 1},
		{FailClosed, "panic", false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String()+"/"+tt.pred, func(t *testing.T) {
			m := newMetrics()
			a := newAdmissionCfg(Config{FailPolicy: tt.policy, Classes: map[string]Rule{"p": {}}},
				Deps{Metrics: m, Predicates: map[string]Predicate{"p": preds[tt.pred]}})
			c, _ := a.Class("p")
			var call Call
			d := c.Check(&call)
			if d.Allowed != tt.wantAllow {
				t.Fatalf("Allowed = %v, want %v", d.Allowed, tt.wantAllow)
			}
			if !d.Allowed && (d.Reason != ReasonPredicate || d.RetryAfter <= 0) {
				t.Errorf("denial = %+v, want reason PREDICATE and a positive hint", d)
			}
			if got := ruleErrors(m, "p"); got != tt.wantErrs {
				t.Errorf("admission_rule_errors_total = %v, want %v", got, tt.wantErrs)
			}
			wantRej := 0.0
			if !tt.wantAllow {
				wantRej = 1
			}
			if got := rejected(m, "p", ReasonPredicate); got != wantRej {
				t.Errorf("rejected{PREDICATE} = %v, want %v", got, wantRej)
			}
		})
	}
}

// The predicate sees the live snapshot and the call; with no pressure
// source it sees an empty (never nil) snapshot.
func TestPredicateArguments(t *testing.T) {
	var seen *pressure.Snapshot
	var seenCall *Call
	pred := func(s *pressure.Snapshot, c *Call) (bool, error) {
		seen, seenCall = s, c
		return s.Reason == pressure.None, nil
	}

	classes := map[string]Rule{"p": {}}
	preds := map[string]Predicate{"p": pred}
	a := newAdmissionCfg(Config{Classes: classes}, Deps{Predicates: preds})
	c, _ := a.Class("p")
	call := Call{Method: "m"}
	if d := c.Check(&call); !d.Allowed || seen == nil || seenCall != &call {
		t.Fatalf("no source: d=%+v snapshot=%v call=%p", d, seen, seenCall)
	}

	src := newPressure(pressure.Memory)
	a = newAdmissionCfg(Config{Classes: classes}, Deps{Snapshot: src.Snapshot, Predicates: preds})
	c, _ = a.Class("p")
	if d := c.Check(&call); d.Allowed || seen != src.Snapshot() {
		t.Fatalf("with source: d=%+v, snapshot %p want %p", d, seen, src.Snapshot())
	}
}

func TestClusterTopPublisher(t *testing.T) {
	rates := fakeRates{
		topics: map[string]float64{"hot": 1000, "warm": 999.9},
		users:  map[string]float64{"alice": 5000, "10.0.0.1": 1000, "bob": 10},
	}
	tests := []struct {
		by   string
		call *Call
		want bool // allowed
	}{
		{"topic", &Call{Topic: "hot"}, false}, // at the threshold: shed
		{"topic", &Call{Topic: "warm"}, true},
		{"topic", &Call{Topic: "cold"}, true},
		{"topic", &Call{Topic: "", User: "alice"}, true}, // no topic: not affected
		{"", &Call{Topic: "hot"}, false},                 // topic is the default
		{"user", &Call{User: "alice", Topic: "cold"}, false},
		{"user", &Call{User: "bob", Topic: "hot"}, true},
		{"user", &Call{IP: "10.0.0.1"}, false}, // anonymous: keyed by IP
		{"user", &Call{User: "carol", IP: "10.0.0.1"}, true},
		{"user", &Call{}, true}, // no key at all: not affected
	}
	for _, tt := range tests {
		t.Run(tt.by+"/"+tt.call.Topic+tt.call.User+tt.call.IP, func(t *testing.T) {
			m := newMetrics()
			a := newAdmission(Deps{Rates: rates, Metrics: m})
			c := mustRegister(t, a, "cb", Rule{ClusterTopPublisher: &ClusterTopPublisher{Threshold: 1000, By: tt.by}})
			d := c.Check(tt.call)
			if d.Allowed != tt.want {
				t.Fatalf("Allowed = %v, want %v (%+v)", d.Allowed, tt.want, d)
			}
			if !d.Allowed {
				if d.Reason != ReasonClusterTopPublisher {
					t.Errorf("Reason = %q", d.Reason)
				}
				checkJitter(t, d, time.Second)
				if got := rejected(m, "cb", ReasonClusterTopPublisher); got != 1 {
					t.Errorf("rejected = %v, want 1", got)
				}
			}
		})
	}
}

// Options.Rates answers the cluster part; without it nothing is hot.
func TestRatesSource(t *testing.T) {
	call := Call{Topic: "t"}
	for _, tt := range []struct {
		name string
		src  RateSource
		want bool
	}{
		{"none", nil, true},
		{"hot", fakeRates{topics: map[string]float64{"t": 150}}, false},
		{"at the threshold", fakeRates{topics: map[string]float64{"t": 100}}, false},
		{"cool", fakeRates{topics: map[string]float64{"t": 50}}, true},
	} {
		a := newAdmission(Deps{Rates: tt.src})
		c := mustRegister(t, a, "cb", Rule{ClusterTopPublisher: &ClusterTopPublisher{Threshold: 100}})
		if d := c.Check(&call); d.Allowed != tt.want {
			t.Errorf("%s: Allowed = %v, want %v", tt.name, d.Allowed, tt.want)
		}
	}
}

func TestRate(t *testing.T) {
	clk := newClock()
	m := newMetrics()
	a := newAdmission(Deps{now: clk.Now, Metrics: m})
	c := mustRegister(t, a, "chat", Rule{Rate: &Rate{Limit: 3, Per: time.Second, By: "user"}})

	alice := Call{User: "alice", IP: "10.0.0.1"}
	for i := range 3 {
		d := c.Check(&alice)
		if !d.Allowed || d.Limit != 3 || d.Remaining != int64(2-i) {
			t.Fatalf("call %d: %+v, want allowed, limit 3, remaining %d", i, d, 2-i)
		}
	}
	d := c.Check(&alice)
	if d.Allowed || d.Reason != ReasonRate || d.Limit != 3 || d.Remaining != 0 {
		t.Fatalf("4th call: %+v, want RATE denial with limit 3 remaining 0", d)
	}
	if d.RetryAfter <= 0 || d.RetryAfter > time.Second {
		t.Fatalf("RetryAfter = %v, want in (0, 1s]", d.RetryAfter)
	}

	// Other keys have their own budget: another user, and an anonymous
	// call from an IP equal to a user's name (separate key spaces).
	if d := c.Check(&Call{User: "bob"}); !d.Allowed {
		t.Errorf("bob denied: %+v", d)
	}
	anon := Call{IP: "alice"}
	if d := c.Check(&anon); !d.Allowed || d.Remaining != 2 {
		t.Errorf("anonymous IP %q shares alice's budget: %+v", anon.IP, d)
	}

	// The hint is exact: waiting it out admits the next call.
	clk.Advance(d.RetryAfter)
	if d := c.Check(&alice); !d.Allowed {
		t.Errorf("after waiting RetryAfter: %+v", d)
	}
	if got := rejected(m, "chat", ReasonRate); got != 1 {
		t.Errorf("rejected{RATE} = %v, want 1", got)
	}
	if got := accepted(m, "chat"); got != 6 {
		t.Errorf("accepted = %v, want 6", got)
	}
}

func TestRateKeys(t *testing.T) {
	tests := []struct {
		by         string
		first      *Call
		same, diff *Call
	}{
		{"user", &Call{User: "u", IP: "1", ConnID: 1}, &Call{User: "u", IP: "2", ConnID: 2}, &Call{User: "v", IP: "1", ConnID: 1}},
		{"", &Call{User: "u", IP: "1", ConnID: 1}, &Call{User: "u", IP: "2", ConnID: 2}, &Call{User: "v", IP: "1", ConnID: 1}},
		{"user", &Call{IP: "1"}, &Call{IP: "1", ConnID: 9}, &Call{IP: "2"}}, // anonymous: by IP
		{"conn", &Call{User: "u", IP: "1", ConnID: 7}, &Call{User: "v", IP: "2", ConnID: 7}, &Call{User: "u", IP: "1", ConnID: 8}},
		{"ip", &Call{User: "u", IP: "1", ConnID: 1}, &Call{User: "v", IP: "1", ConnID: 2}, &Call{User: "u", IP: "2", ConnID: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.by, func(t *testing.T) {
			clk := newClock()
			a := newAdmission(Deps{now: clk.Now})
			c := mustRegister(t, a, "r", Rule{Rate: &Rate{Limit: 1, Per: time.Minute, By: tt.by}})
			if d := c.Check(tt.first); !d.Allowed {
				t.Fatalf("first: %+v", d)
			}
			if d := c.Check(tt.same); d.Allowed {
				t.Errorf("same key %+v allowed past the limit", tt.same)
			}
			if d := c.Check(tt.diff); !d.Allowed {
				t.Errorf("different key %+v denied: %+v", tt.diff, d)
			}
		})
	}
}

// A Call reused on another connection must not keep the old connection's
// cached key.
func TestRateConnKeyFollowsConnID(t *testing.T) {
	a := newAdmission(Deps{now: newClock().Now})
	c := mustRegister(t, a, "r", Rule{Rate: &Rate{Limit: 1, Per: time.Minute, By: "conn"}})
	call := Call{ConnID: 1}
	if d := c.Check(&call); !d.Allowed {
		t.Fatal(d)
	}
	call.ConnID = 2
	if d := c.Check(&call); !d.Allowed {
		t.Fatalf("conn 2 charged to conn 1: %+v", d)
	}
	call.ConnID = 1
	if d := c.Check(&call); d.Allowed {
		t.Fatalf("conn 1 over its limit was allowed")
	}
}

// Evaluation order: a call shed by pressure spends no rate token and takes
// no lease; a call denied by the rate part takes no lease.
func TestEvaluationOrder(t *testing.T) {
	src := newPressure(pressure.Memory)
	clk := newClock()
	m := newMetrics()
	a := newAdmission(Deps{Snapshot: src.Snapshot, now: clk.Now, Metrics: m})
	c := mustRegister(t, a, "x", Rule{
		Reasons:     []pressure.Reason{pressure.Memory},
		Rate:        &Rate{Limit: 2, Per: time.Minute},
		Concurrency: &Concurrency{Max: 5},
	})
	calls := make([]Call, 4)
	for i := range 10 {
		if d := c.Check(&calls[0]); d.Allowed || d.Reason != ReasonMemory {
			t.Fatalf("under pressure, call %d: %+v", i, d)
		}
	}
	if c.InFlight() != 0 || calls[0].Holding() {
		t.Fatalf("a pressure denial took a lease")
	}
	src.set(pressure.None)
	for i := range 2 {
		d := c.Check(&calls[i])
		if !d.Allowed {
			t.Fatalf("pressure denials spent rate tokens: call %d %+v", i, d)
		}
	}
	if d := c.Check(&calls[2]); d.Allowed || d.Reason != ReasonRate {
		t.Fatalf("third call: %+v, want RATE", d)
	}
	if c.InFlight() != 2 || calls[2].Holding() {
		t.Fatalf("in flight = %d, rate-denied call holding = %v; want 2, false", c.InFlight(), calls[2].Holding())
	}
	calls[0].Release()
	calls[1].Release()
	if c.InFlight() != 0 {
		t.Fatalf("in flight = %d after release", c.InFlight())
	}
	if got := rejected(m, "x", ReasonMemory); got != 10 {
		t.Errorf("rejected{MEMORY} = %v", got)
	}
}

func TestConcurrency(t *testing.T) {
	m := newMetrics()
	const base = 100 * time.Millisecond
	a := newAdmission(Deps{Metrics: m, RetryAfter: base, now: newClock().Now})
	c := mustRegister(t, a, "c", Rule{Concurrency: &Concurrency{Max: 2}})
	var x, y, z Call
	if d := c.Check(&x); !d.Allowed || d.Limit != 2 || d.Remaining != 1 {
		t.Fatalf("first: %+v", d)
	}
	if d := c.Check(&y); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("second: %+v", d)
	}
	d := c.Check(&z)
	if d.Allowed || d.Reason != ReasonConcurrency || d.Limit != 2 || d.Remaining != 0 {
		t.Fatalf("third: %+v, want CONCURRENCY denial", d)
	}
	checkJitter(t, d, base)
	if z.Holding() {
		t.Fatal("denied call holds a lease")
	}
	x.Release()
	x.Release() // idempotent
	if c.InFlight() != 1 {
		t.Fatalf("in flight = %d after a double release, want 1", c.InFlight())
	}
	if d := c.Check(&z); !d.Allowed {
		t.Fatalf("after release: %+v", d)
	}
	if d := c.Check(&x); d.Allowed {
		t.Fatalf("cap exceeded after reuse: %+v", d)
	}
	y.Release()
	z.Release()
	if c.InFlight() != 0 {
		t.Fatalf("in flight = %d, want 0", c.InFlight())
	}
	if got, want := accepted(m, "c"), 3.0; got != want {
		t.Errorf("accepted = %v, want %v", got, want)
	}
	if got := rejected(m, "c", ReasonConcurrency); got != 2 {
		t.Errorf("rejected{CONCURRENCY} = %v, want 2", got)
	}
}

// Rate clears, concurrency denies: the reported decision is both parts
// combined (tightest limit, the concurrency reason and hint).
func TestRateThenConcurrencyCombined(t *testing.T) {
	a := newAdmission(Deps{now: newClock().Now})
	c := mustRegister(t, a, "c", Rule{Rate: &Rate{Limit: 10, Per: time.Second}, Concurrency: &Concurrency{Max: 1}})
	held := Call{User: "u"}
	if d := c.Check(&held); !d.Allowed || d.Limit != 1 || d.Remaining != 0 {
		t.Fatalf("first: %+v, want limit 1 (the tighter part) remaining 0", d)
	}
	d := c.Check(&Call{User: "u"})
	if d.Allowed || d.Reason != ReasonConcurrency || d.Limit != 1 || d.Remaining != 0 || d.RetryAfter <= 0 {
		t.Fatalf("second: %+v", d)
	}
	held.Release()
	if d := c.Check(&Call{User: "v"}); !d.Allowed || d.Limit != 1 {
		t.Fatalf("third: %+v", d)
	}
}

func TestCheckPanicsOnHeldLease(t *testing.T) {
	a := newAdmission(Deps{})
	c := mustRegister(t, a, "c", Rule{Concurrency: &Concurrency{Max: 5}})
	other := mustRegister(t, a, "o", Rule{})
	var call Call
	c.Check(&call)
	for _, cl := range []*Class{c, other} {
		func() {
			defer func() {
				if r := recover(); r != errLeaseHeld {
					t.Errorf("%s: recover() = %v, want errLeaseHeld", cl.Name(), r)
				}
			}()
			cl.Check(&call)
		}()
	}
	if c.InFlight() != 1 {
		t.Fatalf("in flight = %d after refused checks, want 1", c.InFlight())
	}
	call.Release()
	if d := c.Check(&call); !d.Allowed {
		t.Fatalf("reuse after Release: %+v", d)
	}
	call.Release()
}

func TestRegisterValidation(t *testing.T) {
	tests := []struct {
		name    string
		rule    Rule
		noSnap  bool
		wantErr string // "" = valid
	}{
		{"empty rule", Rule{}, false, ""},
		{"everything", Rule{
			Reasons:             []pressure.Reason{pressure.Memory, pressure.Memory},
			ClusterTopPublisher: &ClusterTopPublisher{Threshold: 1, By: "user"},
			Rate:                &Rate{Limit: 1, Per: time.Second, By: "ip"},
			Concurrency:         &Concurrency{Max: 1},
		}, false, ""},
		{"reason none", Rule{Reasons: []pressure.Reason{pressure.None}}, false, "reasons: unknown reason"},
		{"reason out of range", Rule{Reasons: []pressure.Reason{200}}, false, "reasons: unknown reason"},
		{"reasons without snapshot", Rule{Reasons: []pressure.Reason{pressure.Memory}}, true, "reasons: Deps.Snapshot is nil"},
		{"rate limit 0", Rule{Rate: &Rate{Limit: 0, Per: time.Second}}, false, "rate: limit"},
		{"rate per 0", Rule{Rate: &Rate{Limit: 1}}, false, "rate: per"},
		{"rate by", Rule{Rate: &Rate{Limit: 1, Per: time.Second, By: "topic"}}, false, "rate: by"},
		{"rate strategy", Rule{Rate: &Rate{Limit: 1, Per: time.Second, Strategy: "leakyBucket"}}, false, "rate: strategy"},
		{"rate scope", Rule{Rate: &Rate{Limit: 1, Per: time.Second, Scope: "global"}}, false, "rate: scope"},
		{"rate cluster sliding", Rule{Rate: &Rate{Limit: 1, Per: time.Second, Scope: "cluster", Strategy: "slidingWindow"}}, false, "rate: scope cluster supports strategy gcra only"},
		{"rate cluster without store", Rule{Rate: &Rate{Limit: 1, Per: time.Second, Scope: "cluster"}}, false, "no shared store"},
		{"rate cluster by conn", Rule{Rate: &Rate{Limit: 1, Per: time.Second, Scope: "cluster", By: "conn"}}, false, "rate: scope cluster cannot be by conn"},
		{"cost cluster by conn", Rule{Cost: &Cost{Budget: 1, Per: time.Second, Of: "bytes", Scope: "cluster", By: "conn"}}, false, "cost: scope cluster cannot be by conn"},
		{"cost budget", Rule{Cost: &Cost{Per: time.Second, Of: "bytes"}}, false, "cost: budget"},
		{"cost per", Rule{Cost: &Cost{Budget: 1, Of: "bytes"}}, false, "cost: per"},
		{"cost of", Rule{Cost: &Cost{Budget: 1, Per: time.Second, Of: "tokens"}}, false, "cost: of"},
		{"cost of param empty", Rule{Cost: &Cost{Budget: 1, Per: time.Second, Of: "param:"}}, false, "cost: of"},
		{"cost by", Rule{Cost: &Cost{Budget: 1, Per: time.Second, Of: "bytes", By: "topic"}}, false, "cost: by"},
		{"cost scope", Rule{Cost: &Cost{Budget: 1, Per: time.Second, Of: "bytes", Scope: "everywhere"}}, false, "cost: scope"},
		{"cost ok", Rule{Cost: &Cost{Budget: 1, Per: time.Second, Of: "param:n"}}, false, ""},
		{"adaptive min 0", Rule{AdaptiveConcurrency: &AdaptiveConcurrency{Max: 4}}, false, "adaptiveConcurrency: min and max"},
		{"adaptive max < min", Rule{AdaptiveConcurrency: &AdaptiveConcurrency{Min: 5, Max: 4}}, false, "adaptiveConcurrency: min and max"},
		{"adaptive ok", Rule{AdaptiveConcurrency: &AdaptiveConcurrency{Min: 1, Max: 1}}, false, ""},
		{"concurrency 0", Rule{Concurrency: &Concurrency{}}, false, "concurrency: max"},
		{"concurrency negative", Rule{Concurrency: &Concurrency{Max: -1}}, false, "concurrency: max"},
		{"threshold 0", Rule{ClusterTopPublisher: &ClusterTopPublisher{}}, false, "clusterTopPublisher: threshold"},
		{"threshold NaN", Rule{ClusterTopPublisher: &ClusterTopPublisher{Threshold: math.NaN()}}, false, "clusterTopPublisher: threshold"},
		{"threshold Inf", Rule{ClusterTopPublisher: &ClusterTopPublisher{Threshold: math.Inf(1)}}, false, "clusterTopPublisher: threshold"},
		{"cluster by", Rule{ClusterTopPublisher: &ClusterTopPublisher{Threshold: 1, By: "conn"}}, false, "clusterTopPublisher: by"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := Deps{Snapshot: newPressure(pressure.None).Snapshot}
			if tt.noSnap {
				deps.Snapshot = nil
			}
			a := newAdmission(deps)
			err := a.Register("k", tt.rule)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Register: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), `"k"`) {
				t.Fatalf("Register error = %v, want one naming class \"k\" and %q", err, tt.wantErr)
			}
			if _, ok := a.Class("k"); ok {
				t.Error("an invalid class was registered")
			}
		})
	}
	a := newAdmission(Deps{})
	mustRegister(t, a, "dup", Rule{})
	if err := a.Register("dup", Rule{}); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate Register error = %v", err)
	}
	if err := a.Register("", Rule{}); err == nil {
		t.Error("empty class name accepted")
	}
	if _, ok := a.Class("missing"); ok {
		t.Error("Class of an unregistered name found")
	}
}

// Register pre-creates exactly the counter children the rule can move, so
// series exist at zero and Check never creates one; and one rule-error
// series per class, so that family exists wherever classes do.
func TestMetricSeriesResolvedAtRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "")
	if err != nil {
		t.Fatal(err)
	}
	a := newAdmissionCfg(Config{Classes: map[string]Rule{"b": {
		Rate:        &Rate{Limit: 1, Per: time.Second},
		Concurrency: &Concurrency{Max: 1},
	}}}, Deps{Snapshot: newPressure(pressure.None).Snapshot, Metrics: m, Predicates: map[string]Predicate{
		"b": func(*pressure.Snapshot, *Call) (bool, error) { return true, nil },
	}})
	mustRegister(t, a, "a", Rule{Reasons: []pressure.Reason{pressure.Memory, pressure.Subscribers}})
	mustRegister(t, a, "c", Rule{ClusterTopPublisher: &ClusterTopPublisher{Threshold: 1}})
	if got := testutil.CollectAndCount(m.AdmissionAccepted); got != 3 {
		t.Errorf("accepted series = %d, want 3", got)
	}
	// a: MEMORY, SUBSCRIBERS; b: PREDICATE, RATE, CONCURRENCY; c: CLUSTER_TOP_PUBLISHER.
	if got := testutil.CollectAndCount(m.AdmissionRejected); got != 6 {
		t.Errorf("rejected series = %d, want 6", got)
	}
	if got := testutil.CollectAndCount(m.AdmissionErrors); got != 3 {
		t.Errorf("error series = %d, want 3", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP admission_rejected_total Message-tier calls shed, by class and binding reason.
# TYPE admission_rejected_total counter
admission_rejected_total{class="a",reason="MEMORY"} 0
admission_rejected_total{class="a",reason="SUBSCRIBERS"} 0
admission_rejected_total{class="b",reason="CONCURRENCY"} 0
admission_rejected_total{class="b",reason="PREDICATE"} 0
admission_rejected_total{class="b",reason="RATE"} 0
admission_rejected_total{class="c",reason="CLUSTER_TOP_PUBLISHER"} 0
`), "admission_rejected_total"); err != nil {
		t.Error(err)
	}
}

func TestJitter(t *testing.T) {
	for _, base := range []time.Duration{time.Nanosecond, time.Millisecond, time.Second} {
		a := newAdmission(Deps{RetryAfter: base})
		lo, hi := max(base/2, time.Millisecond), max(base*3/2, time.Millisecond+1)
		seen := map[time.Duration]bool{}
		for range 1000 {
			d := a.retryHint()
			if d < lo || d >= hi {
				t.Fatalf("base %v: jitter %v outside [%v, %v)", base, d, lo, hi)
			}
			seen[d] = true
		}
		if base == time.Second && len(seen) < 100 {
			t.Errorf("base 1s: only %d distinct hints in 1000: not jittered", len(seen))
		}
	}
	if got := newAdmission(Deps{}).retryBase; got != time.Second {
		t.Errorf("default base = %v, want 1s", got)
	}
}

// A predicate joins the class of its name in Config.Classes, which may
// then have no other part; one naming a class Config lacks, or nil, stops
// New, and Validate, which knows no predicate, refuses the empty rule.
func TestPredicatesByClassName(t *testing.T) {
	yes := func(*pressure.Snapshot, *Call) (bool, error) { return true, nil }
	cfg := Config{Classes: map[string]Rule{"admin": {}}}
	if _, err := New(cfg, Deps{Predicates: map[string]Predicate{"admin": yes}}); err != nil {
		t.Fatalf("predicate-only class: %v", err)
	}
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepted an empty rule that has no predicate")
	}
	for name, preds := range map[string]map[string]Predicate{
		"unknown class": {"admin": yes, "other": yes},
		"nil predicate": {"admin": nil},
	} {
		if _, err := New(cfg, Deps{Predicates: preds}); err == nil || !strings.Contains(err.Error(), "admission.classes.") {
			t.Errorf("%s: New error = %v, want one naming the class's key", name, err)
		}
	}
}

// newAdmission is New with no classes in the configuration.
func newAdmission(deps Deps) *Admission { return newAdmissionCfg(Config{}, deps) }

// newAdmissionCfg is New, which must succeed.
func newAdmissionCfg(cfg Config, deps Deps) *Admission {
	a, err := New(cfg, deps)
	if err != nil {
		panic(err)
	}
	return a
}

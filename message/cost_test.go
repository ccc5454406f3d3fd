package message

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rtserver/rtserver/ratelimit"
)

// TestCostFanoutChargesPerSubscriber: with of: fanout, a publish to a topic
// with 10 subscribers is charged ten times one with 1, so the budget lasts
// a tenth as many publishes.
func TestCostFanoutChargesPerSubscriber(t *testing.T) {
	admitted := func(subscribers int64) int {
		clk := newClock()
		a := newAdmission(Deps{now: clk.Now})
		c := mustRegister(t, a, "fanout", Rule{Cost: &Cost{Budget: 10_000, Per: time.Hour, Of: "fanout", By: "user"}})
		call := &Call{Method: "publish", Topic: "t", User: "u", Bytes: 100, Subscribers: subscribers}
		n := 0
		for c.Check(call).Allowed {
			n++
		}
		return n
	}
	one, ten := admitted(1), admitted(10)
	if one != 100 || ten != 10 {
		t.Fatalf("publishes admitted on a budget of 10,000: %d with 1 subscriber, %d with 10; want 100 and 10", one, ten)
	}
}

func TestCostDenialIsCOSTWithExactWait(t *testing.T) {
	clk := newClock()
	m := newMetrics()
	a := newAdmission(Deps{now: clk.Now, Metrics: m})
	c := mustRegister(t, a, "b", Rule{Cost: &Cost{Budget: 1000, Per: time.Second, Of: "bytes", By: "conn"}})
	call := &Call{ConnID: 7, Bytes: 600}
	if d := c.Check(call); !d.Allowed || d.Limit != 1000 || d.Remaining != 400 {
		t.Fatalf("first: %+v, want allowed with 400 of 1000 left", d)
	}
	d := c.Check(call)
	if d.Allowed || d.Reason != ReasonCost || !IsRateLimited(d.Reason) || d.RetryAfter != 200*time.Millisecond {
		t.Fatalf("second: %+v, want COST, retry in 200ms (200 units at 1 per ms)", d)
	}
	clk.Advance(200 * time.Millisecond)
	if !c.Check(call).Allowed {
		t.Fatal("after the hinted wait the call fits")
	}
	if got := testutil.ToFloat64(m.AdmissionRejected.WithLabelValues("b", ReasonCost)); got != 1 {
		t.Fatalf(`admission_rejected_total{reason="COST"} = %v, want 1`, got)
	}
	huge := &Call{ConnID: 8, Bytes: 1001}
	if d := c.Check(huge); d.Allowed || d.Reason != ReasonCost {
		t.Fatalf("a call over the whole budget: %+v, want COST", d)
	}
}

// TestCostParam charges a numeric param; a call without it is a rule
// error decided by the fail policy and counted.
func TestCostParam(t *testing.T) {
	for _, fp := range []FailPolicy{FailOpen, FailClosed} {
		t.Run(fp.String(), func(t *testing.T) {
			clk := newClock()
			m := newMetrics()
			a := newAdmissionCfg(Config{FailPolicy: fp}, Deps{now: clk.Now, Metrics: m})
			c := mustRegister(t, a, "llm", Rule{Cost: &Cost{Budget: 1000, Per: time.Minute, Of: "param:maxTokens"}})
			call := &Call{User: "u", Params: []byte(`{"prompt":"hi {\"maxTokens\": 1}","maxTokens": 700}`)}
			if d := c.Check(call); !d.Allowed || d.Remaining != 300 {
				t.Fatalf("700 of 1000: %+v", d)
			}
			if d := c.Check(call); d.Allowed || d.Reason != ReasonCost {
				t.Fatalf("700 more: %+v, want COST", d)
			}
			missing := &Call{User: "u", Params: []byte(`{"prompt":"hi"}`)}
			d := c.Check(missing)
			if d.Allowed != (fp == FailOpen) || (!d.Allowed && d.Reason != ReasonCost) {
				t.Fatalf("missing param under fail %s: %+v", fp, d)
			}
			if got := testutil.ToFloat64(m.AdmissionErrors.WithLabelValues("llm")); got != 1 {
				t.Fatalf("admission_rule_errors_total = %v, want 1", got)
			}
		})
	}
}

func TestParamCost(t *testing.T) {
	tests := []struct {
		give   string
		want   int64
		wantOK bool
	}{
		{`{"n":5}`, 5, true},
		{` { "a" : [1,{"n":2}], "b":"}", "n" : 12.0 } `, 12, true},
		{`{"n":1.2}`, 2, true},
		{`{"n":0}`, 0, true},
		{`{"a":{"n":3}}`, 0, false}, // nested: not a top-level member
		{`{"n":-1}`, 0, false},
		{`{"n":"5"}`, 0, false},
		{`{"n":1e3}`, 0, false},
		{`{"n":99999999999999999999}`, 0, false},
		{`{"n":5 x}`, 0, false},
		{`{"m":5}`, 0, false},
		{`{}`, 0, false},
		{`[{"n":5}]`, 0, false},
		{`{"n\u0000":5}`, 0, false},
		{``, 0, false},
		{`{"a":"\"n\":4","n":3}`, 3, true},
		{`{"a":`, 0, false},
		// Params a backend could read as another n: denied (MaxInt64).
		{`{"n":1,"n":1000}`, math.MaxInt64, true},
		{`{"n":1,"N":1000}`, math.MaxInt64, true},
		{`{"N":1000,"n":1}`, math.MaxInt64, true},
		{`{"n":1,"\u006e":1000}`, math.MaxInt64, true},
		{`{"n":1,"\u004e":1000}`, math.MaxInt64, true},
		{`{"n":5,"m":1}`, 5, true},
		{`{"n":5,"x":{"n":9,"N":9}}`, 5, true}, // nested members are not read
	}
	for _, tt := range tests {
		got, ok := paramCost([]byte(tt.give), "n")
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("paramCost(%s) = %d, %v; want %d, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
	params := []byte(`{"prompt":"a long prompt","maxTokens":4096}`)
	if n := testing.AllocsPerRun(100, func() { paramCost(params, "maxTokens") }); n != 0 {
		t.Fatalf("paramCost allocates %v", n)
	}
}

// FuzzParamCost: never panics, and whatever it accepts is a member that
// encoding/json-like scanning agrees is there (a non-negative value).
func FuzzParamCost(f *testing.F) {
	for _, s := range []string{`{"n":5}`, `{"a":[1,{"n":2}],"n":3.5}`, `{"n":`, `{"\\":1,"n":0}`, `[`, `"`, `{"n":1,"N":9}`, `{"n":1,"n":9}`, `{"n":1,"\\u006e":9}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := paramCost(b, "n")
		if ok && n < 0 {
			t.Fatalf("negative cost %d accepted from %q", n, b)
		}
		if ok && n != math.MaxInt64 && !strings.Contains(string(b), `"n"`) {
			t.Fatalf("accepted %q without the member", b)
		}
		// What was charged is what a backend reads: JavaScript-style (exact
		// keys, the last of a repeat) and encoding/json-style
		// (case-insensitive) alike. Anything ambiguous was denied.
		if !ok || n == math.MaxInt64 || !json.Valid(b) || !utf8.Valid(b) {
			return
		}
		var exact map[string]json.RawMessage
		var loose struct{ N json.RawMessage }
		if json.Unmarshal(b, &exact) != nil || json.Unmarshal(b, &loose) != nil {
			return
		}
		if string(exact["n"]) != string(loose.N) {
			t.Fatalf("charged %d for %q, but backends read n as %s and %s", n, b, exact["n"], loose.N)
		}
		if m, mok := parseCost(append(append([]byte{}, exact["n"]...), '}'), 0); !mok || m != n {
			t.Fatalf("charged %d for %q, a backend reads %s", n, b, exact["n"])
		}
	})
}

// flakyShared is a SharedLimiter that fails on demand or answers from a
// local GCRA per key and name (not atomically): the fail-policy paths of a cluster-scoped
// part, without a store. (clusterrate tests the Redis limiter itself.)
type flakyShared struct {
	err   error
	keyed map[string]*ratelimit.Keyed
	keys  []string
}

func (f *flakyShared) AllowShared(_ context.Context, key string, now time.Time, limits []SharedLimit, results []ratelimit.Result) error {
	f.keys = append(f.keys, key)
	if f.err != nil {
		return f.err
	}
	for i, l := range limits {
		k := f.keyed[key+"/"+l.Name]
		if k == nil {
			k = ratelimit.NewKeyed(int(l.Limit), l.Per, 0)
			f.keyed[key+"/"+l.Name] = k
		}
		results[i] = k.AllowN(key, l.N, now)
	}
	return nil
}

func TestSharedPartsFailPolicy(t *testing.T) {
	for _, fp := range []FailPolicy{FailOpen, FailClosed} {
		t.Run(fp.String(), func(t *testing.T) {
			m := newMetrics()
			sh := &flakyShared{keyed: map[string]*ratelimit.Keyed{}}
			a := newAdmissionCfg(Config{FailPolicy: fp}, Deps{Metrics: m, Shared: sh})
			c := mustRegister(t, a, "g", Rule{
				Rate: &Rate{Limit: 2, Per: time.Minute, Scope: "cluster"},
				Cost: &Cost{Budget: 100, Per: time.Minute, Of: "bytes", Scope: "cluster"},
			})
			call := &Call{User: "alice", Bytes: 10}
			if d := c.Check(call); !d.Allowed || d.Limit != 2 || d.Remaining != 1 {
				t.Fatalf("first: %+v", d)
			}
			big := &Call{User: "alice", Bytes: 95}
			if d := c.Check(big); d.Allowed || d.Reason != ReasonCost {
				t.Fatalf("over the cost budget: %+v, want COST", d)
			}
			// (This fake charges the rate even when the cost denies; the
			// Redis limiter charges all or nothing: clusterrate's tests.)
			if d := c.Check(call); d.Allowed || d.Reason != ReasonRate {
				t.Fatalf("third: %+v, want RATE", d)
			}
			if sh.keys[0] != "g:user:alice" {
				t.Fatalf("shared key %q", sh.keys[0])
			}
			anon := &Call{IP: "alice"}
			c.Check(anon)
			if k := sh.keys[len(sh.keys)-1]; k != "g:anon:alice" {
				t.Fatalf("anonymous shared key %q, want its own key space", k)
			}

			sh.err = errors.New("redis: connection refused")
			d := c.Check(&Call{User: "bob"})
			if d.Allowed != (fp == FailOpen) || (!d.Allowed && d.Reason != ReasonRate) {
				t.Fatalf("store down under fail %s: %+v", fp, d)
			}
			if got := testutil.ToFloat64(m.AdmissionErrors.WithLabelValues("g")); got != 1 {
				t.Fatalf("admission_rule_errors_total = %v, want 1", got)
			}
		})
	}
}

func TestSharedRateAndCostMustShareBy(t *testing.T) {
	a := newAdmission(Deps{Shared: &flakyShared{}})
	err := a.Register("g", Rule{
		Rate: &Rate{Limit: 2, Per: time.Minute, Scope: "cluster", By: "ip"},
		Cost: &Cost{Budget: 100, Per: time.Minute, Of: "bytes", Scope: "cluster", By: "user"},
	})
	if err == nil || !strings.Contains(err.Error(), "same by") {
		t.Fatalf("Register = %v, want the same-by error", err)
	}
}

package message

import (
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/pressure"
)

// benchPaths builds the hot paths the budgets in BENCHMARKS.md name. Each
// returns a func that runs one call through Check (and Release) and fails
// if the decision is not the expected one, so a benchmark cannot measure a
// short-circuit by mistake.
type benchPath struct {
	name string
	run  func(tb testing.TB) func()
}

// mapRates is a RateSource that is a plain map read, as the aggregator's
// merged view is.
type mapRates map[string]float64

func (m mapRates) RateOf(topic string) float64    { return m[topic] }
func (m mapRates) RateOfUser(user string) float64 { return m[user] }

func benchPaths() []benchPath {
	return []benchPath{
		{"reasons", func(tb testing.TB) func() {
			src := newPressure(pressure.Subscribers)
			a := newAdmission(Deps{Snapshot: src.Snapshot})
			c := mustRegister(tb, a, "x", Rule{Reasons: []pressure.Reason{pressure.Memory, pressure.PublishRate}})
			call := &Call{Method: "report.daily"}
			return func() {
				if !c.Check(call).Allowed {
					tb.Fatal("denied")
				}
			}
		}},
		{"reasons_denied", func(tb testing.TB) func() {
			src := newPressure(pressure.Memory)
			a := newAdmission(Deps{Snapshot: src.Snapshot})
			c := mustRegister(tb, a, "x", Rule{Reasons: []pressure.Reason{pressure.Memory, pressure.PublishRate}})
			call := &Call{Method: "report.daily"}
			return func() {
				if c.Check(call).Allowed {
					tb.Fatal("allowed")
				}
			}
		}},
		{"cluster", func(tb testing.TB) func() {
			rates := mapRates{}
			for i := range 20 {
				rates["topic:"+string(rune('a'+i))] = float64(i * 100)
			}
			a := newAdmission(Deps{Rates: rates})
			c := mustRegister(tb, a, "x", Rule{ClusterTopPublisher: &ClusterTopPublisher{Threshold: 1000}})
			call := &Call{Method: "publish", Topic: "topic:e"}
			return func() {
				if !c.Check(call).Allowed {
					tb.Fatal("denied")
				}
			}
		}},
		{"rate+concurrency", func(tb testing.TB) func() {
			return rateConcurrencyPath(tb, nil)
		}},
		// The same with a clock that is a plain read: time.Now on this
		// shared VM costs 25-80 ns alone, which this separates out.
		{"rate+concurrency_fixedclock", func(tb testing.TB) func() {
			now := time.Now()
			return rateConcurrencyPath(tb, func() time.Time { return now })
		}},
		// Adaptive concurrency: Check and Release (two clock reads).
		{"adaptive", func(tb testing.TB) func() {
			return adaptivePath(tb, nil)
		}},
		// The same on a clock that steps 1µs per read: every call is a
		// latency sample and a window closes every 50,000 reads.
		{"adaptive_steppedclock", func(tb testing.TB) func() {
			return adaptivePath(tb, steppedClock(time.Microsecond))
		}},
		// Sliding window at its steady state: 100 per second, the clock
		// steps 10ms per read, so each call expires one event and adds one.
		{"slidingWindow_steppedclock", func(tb testing.TB) func() {
			a := newAdmission(Deps{now: steppedClock(10 * time.Millisecond)})
			c := mustRegister(tb, a, "x", Rule{Rate: &Rate{Limit: 100, Per: time.Second, Strategy: "slidingWindow"}})
			call := &Call{Method: "chat.send", User: "alice"}
			return func() {
				if !c.Check(call).Allowed {
					tb.Fatal("denied")
				}
			}
		}},
		{"cost", func(tb testing.TB) func() {
			return costPath(tb, nil)
		}},
		{"cost_fixedclock", func(tb testing.TB) func() {
			now := time.Now()
			return costPath(tb, func() time.Time { return now })
		}},
	}
}

// steppedClock is a clock that advances by step on every read (for one
// goroutine).
func steppedClock(step time.Duration) func() time.Time {
	t := time.Now()
	return func() time.Time {
		t = t.Add(step)
		return t
	}
}

func adaptivePath(tb testing.TB, now func() time.Time) func() {
	a := newAdmission(Deps{now: now})
	c := mustRegister(tb, a, "x", Rule{AdaptiveConcurrency: &AdaptiveConcurrency{Min: 4, Max: 128}})
	call := &Call{Method: "llm.complete", User: "alice"}
	return func() {
		if !c.Check(call).Allowed {
			tb.Fatal("denied")
		}
		call.Release()
	}
}

// costPath charges a fan-out call (1 byte to 1 subscriber, so a fixed
// clock does not run the budget dry within a benchmark).
func costPath(tb testing.TB, now func() time.Time) func() {
	a := newAdmission(Deps{now: now})
	c := mustRegister(tb, a, "x", Rule{Cost: &Cost{Budget: 2_000_000_000, Per: time.Nanosecond, Of: "fanout"}})
	call := &Call{Method: "publish", Topic: "t", User: "alice", Bytes: 1, Subscribers: 1}
	return func() {
		if !c.Check(call).Allowed {
			tb.Fatal("denied")
		}
	}
}

// rateConcurrencyPath is the full path: token spent, lease taken and given
// back. The limit is so generous that every call is allowed.
func rateConcurrencyPath(tb testing.TB, now func() time.Time) func() {
	a := newAdmission(Deps{now: now})
	c := mustRegister(tb, a, "x", Rule{
		Rate:        &Rate{Limit: 1_000_000_000, Per: time.Second},
		Concurrency: &Concurrency{Max: 8},
	})
	call := &Call{Method: "chat.send", User: "alice", IP: "10.0.0.1", ConnID: 42}
	return func() {
		if !c.Check(call).Allowed {
			tb.Fatal("denied")
		}
		call.Release()
	}
}

func BenchmarkCheck(b *testing.B) {
	for _, p := range benchPaths() {
		b.Run(p.name, func(b *testing.B) {
			f := p.run(b)
			b.ReportAllocs()
			for b.Loop() {
				f()
			}
		})
	}
}

// The same path from every P at once: the shared counters (in-flight,
// metric children) are where contention would show.
func BenchmarkCheckParallel(b *testing.B) {
	for _, p := range benchPaths() {
		if strings.HasPrefix(p.name, "rate+concurrency") || strings.HasPrefix(p.name, "adaptive") || strings.HasSuffix(p.name, "steppedclock") {
			continue // one Call (or clock) per goroutine is needed
		}
		b.Run(p.name, func(b *testing.B) {
			f := p.run(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					f()
				}
			})
		})
	}
}

func routerForBench(tb testing.TB) *Router {
	a := newAdmission(Deps{})
	for _, n := range []string{"cb", "rpc", "chat"} {
		mustRegister(tb, a, n, Rule{})
	}
	r, err := NewRouter(a, map[string]string{
		"publish":   "cb",
		"subscribe": "chat",
		"report.*":  "rpc",
		"admin.*.x": "rpc",
		"chat.*":    "chat",
	})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func BenchmarkClassOf(b *testing.B) {
	r := routerForBench(b)
	for _, m := range []struct{ name, method string }{
		{"exact", "publish"},
		{"glob", "report.daily"},
		{"unmatched", "ping"},
	} {
		b.Run(m.name, func(b *testing.B) {
			r.ClassOf(m.method) // warm the cache
			b.ReportAllocs()
			for b.Loop() {
				r.ClassOf(m.method)
			}
		})
	}
}

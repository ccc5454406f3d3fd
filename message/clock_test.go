package message

import (
	"testing"
	"time"

	"github.com/rtserver/rtserver/ratelimit"
)

// TestDefaultClockStartIsOnTheLatencyClock: with the default clocks, the
// adaptive part's start reading, whichever clock Check took it from (the
// monotonic one alone, the local parts' monotonic time, or time.Now for a
// cluster-scoped part), lies between two readings of the clock Release
// measures the end with. A start on another epoch would make every latency
// wrong by the offset.
func TestDefaultClockStartIsOnTheLatencyClock(t *testing.T) {
	adaptive := &AdaptiveConcurrency{Min: 4, Max: 8}
	for name, r := range map[string]Rule{
		"adaptive only": {AdaptiveConcurrency: adaptive},
		"rate":          {Rate: &Rate{Limit: 1000, Per: time.Second}, AdaptiveConcurrency: adaptive},
		"cost":          {Cost: &Cost{Budget: 1000, Per: time.Second, Of: "bytes"}, AdaptiveConcurrency: adaptive},
		"cluster rate":  {Rate: &Rate{Limit: 1000, Per: time.Second, Scope: "cluster"}, AdaptiveConcurrency: adaptive},
	} {
		a := newAdmission(Deps{Shared: &flakyShared{keyed: map[string]*ratelimit.Keyed{}}})
		time.Sleep(time.Millisecond) // New's epoch and the limiter's must not coincide
		c := mustRegister(t, a, "x", r)
		for range 100 {
			call := &Call{Method: "m", User: "alice", Bytes: 1}
			before := c.adaptive.elapsed()
			if !c.Check(call).Allowed {
				t.Fatalf("%s: denied", name)
			}
			after := c.adaptive.elapsed()
			if call.start < before || call.start > after {
				t.Fatalf("%s: start %d outside [%d, %d]", name, call.start, before, after)
			}
			call.Release()
		}
	}
}

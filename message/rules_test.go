package message

import (
	"testing"
	"time"
)

// TestRateSlidingWindow: a slidingWindow rate admits Limit calls per key in
// any window of Per, where the default GCRA would refill within it.
func TestRateSlidingWindow(t *testing.T) {
	for _, tt := range []struct {
		strategy    string
		wantAt500ms bool // after a full burst at 0, is a call at 500ms admitted?
	}{
		{"", true},
		{"gcra", true},
		{"slidingWindow", false},
	} {
		t.Run("strategy="+tt.strategy, func(t *testing.T) {
			clk := newClock()
			a := newAdmission(Deps{now: clk.Now})
			c := mustRegister(t, a, "fair", Rule{Rate: &Rate{Limit: 4, Per: time.Second, Strategy: tt.strategy}})
			call := &Call{User: "u"}
			for i := range 4 {
				if d := c.Check(call); !d.Allowed || d.Remaining != int64(3-i) {
					t.Fatalf("burst call %d: %+v", i, d)
				}
			}
			if d := c.Check(call); d.Allowed || d.Reason != ReasonRate {
				t.Fatalf("5th call: %+v, want RATE", d)
			}
			clk.Advance(500 * time.Millisecond)
			if got := c.Check(call).Allowed; got != tt.wantAt500ms {
				t.Fatalf("call at 500ms allowed = %v, want %v", got, tt.wantAt500ms)
			}
			clk.Advance(500 * time.Millisecond)
			if !c.Check(call).Allowed {
				t.Fatal("a call one period after the burst must be admitted")
			}
		})
	}
}

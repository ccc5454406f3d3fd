package message

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genDecision draws well-formed decisions (the domain Check produces):
// allowed ones carry RetryAfter 0 and no reason; denied ones a positive
// RetryAfter and a reason word, including an undocumented one. Values are
// drawn from small sets so that ties, the interesting case, are common.
func genDecision() *rapid.Generator[Decision] {
	return rapid.Custom(func(t *rapid.T) Decision {
		limits := []int64{0, 1, 5, 20, math.MaxInt64}
		d := Decision{
			Allowed:   rapid.Bool().Draw(t, "allowed"),
			Limit:     rapid.SampledFrom(limits).Draw(t, "limit"),
			Remaining: rapid.SampledFrom(limits).Draw(t, "remaining"),
		}
		if !d.Allowed {
			d.RetryAfter = time.Duration(rapid.IntRange(1, 4).Draw(t, "retry")) * time.Millisecond
			d.Reason = rapid.SampledFrom([]string{
				ReasonMemory, ReasonPublishRate, ReasonSubscribers, ReasonClusterTopPublisher,
				ReasonPredicate, ReasonConcurrency, ReasonRate, ReasonCost, "OTHER", "ZZZ",
			}).Draw(t, "reason")
		}
		return d
	})
}

func TestCombineIdentity(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genDecision().Draw(t, "a")
		if got := Combine(a, AllowFull); got != a {
			t.Fatalf("Combine(a, AllowFull) = %+v, want %+v", got, a)
		}
		if got := Combine(AllowFull, a); got != a {
			t.Fatalf("Combine(AllowFull, a) = %+v, want %+v", got, a)
		}
	})
}

func TestCombineAssociative(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := genDecision().Draw(t, "a"), genDecision().Draw(t, "b"), genDecision().Draw(t, "c")
		l, r := Combine(Combine(a, b), c), Combine(a, Combine(b, c))
		if l != r {
			t.Fatalf("(a·b)·c = %+v, a·(b·c) = %+v", l, r)
		}
	})
}

func TestCombineCommutative(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := genDecision().Draw(t, "a"), genDecision().Draw(t, "b")
		if l, r := Combine(a, b), Combine(b, a); l != r {
			t.Fatalf("a·b = %+v, b·a = %+v", l, r)
		}
	})
}

func TestCombineIdempotent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genDecision().Draw(t, "a")
		if got := Combine(a, a); got != a {
			t.Fatalf("a·a = %+v, want %+v", got, a)
		}
	})
}

// The laws are what make evaluation order irrelevant; this checks the
// consequence directly: any permutation of N parts reduces to the same
// decision, which is well-formed, and the binding reason is one of the
// denying parts' reasons with the largest wait.
func TestCombineReduceOrderFree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ds := rapid.SliceOfN(genDecision(), 0, 6).Draw(t, "parts")
		want := AllowFull
		for _, d := range ds {
			want = Combine(want, d)
		}
		perm := rapid.Permutation(ds).Draw(t, "perm")
		got := AllowFull
		for i := len(perm) - 1; i >= 0; i-- {
			got = Combine(perm[i], got)
		}
		if got != want {
			t.Fatalf("order changed the result: %+v vs %+v", got, want)
		}
		var maxWait time.Duration
		for _, d := range ds {
			maxWait = max(maxWait, d.RetryAfter)
		}
		if got.Allowed {
			if got.RetryAfter != 0 || got.Reason != "" {
				t.Fatalf("allowed result not well-formed: %+v", got)
			}
			return
		}
		found := false
		for _, d := range ds {
			if !d.Allowed && d.Reason == got.Reason && d.RetryAfter == maxWait {
				found = true
			}
		}
		if !found || got.RetryAfter != maxWait {
			t.Fatalf("result %+v is not bound by a denying part with the largest wait %v in %+v", got, maxWait, ds)
		}
	})
}

func TestCombineBinding(t *testing.T) {
	deny := func(reason string, ms int) Decision {
		return Decision{Limit: math.MaxInt64, Remaining: math.MaxInt64, RetryAfter: time.Duration(ms) * time.Millisecond, Reason: reason}
	}
	rate := Decision{Limit: 20, Remaining: 0, RetryAfter: 300 * time.Millisecond, Reason: ReasonRate}
	allowed := Decision{Allowed: true, Limit: 8, Remaining: 3}
	tests := []struct {
		name string
		a, b Decision
		want Decision
	}{
		{"deny binds over allow", allowed, rate, Decision{Limit: 8, Remaining: 0, RetryAfter: 300 * time.Millisecond, Reason: ReasonRate}},
		{"larger wait binds", deny(ReasonMemory, 100), rate, Decision{Limit: 20, Remaining: 0, RetryAfter: 300 * time.Millisecond, Reason: ReasonRate}},
		{"tie: pressure over concurrency", deny(ReasonConcurrency, 5), deny(ReasonMemory, 5), deny(ReasonMemory, 5)},
		{"tie: concurrency over rate", deny(ReasonRate, 5), deny(ReasonConcurrency, 5), deny(ReasonConcurrency, 5)},
		{"tie: rate over cost", deny(ReasonCost, 5), deny(ReasonRate, 5), deny(ReasonRate, 5)},
		{"tie: known over unknown", deny("CUSTOM", 5), deny(ReasonCost, 5), deny(ReasonCost, 5)},
		{"both allowed", allowed, AllowFull, allowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Combine(tt.a, tt.b); got != tt.want {
				t.Errorf("Combine = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRetryAfterMillis(t *testing.T) {
	tests := []struct {
		give Decision
		want int64
	}{
		{AllowFull, 0},
		{Decision{RetryAfter: time.Nanosecond}, 1},
		{Decision{RetryAfter: 0}, 1},
		{Decision{RetryAfter: time.Millisecond}, 1},
		{Decision{RetryAfter: 1500 * time.Microsecond}, 2},
		{Decision{RetryAfter: 2 * time.Second}, 2000},
	}
	for _, tt := range tests {
		if got := tt.give.RetryAfterMillis(); got != tt.want {
			t.Errorf("%+v.RetryAfterMillis() = %d, want %d", tt.give, got, tt.want)
		}
	}
}

package client

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestBackoffProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		minB := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(5*time.Second)).Draw(t, "min"))
		maxB := time.Duration(rapid.Int64Range(int64(minB), int64(time.Minute)).Draw(t, "max"))
		hint := time.Duration(0)
		if rapid.Bool().Draw(t, "withHint") {
			hint = time.Duration(rapid.Int64Range(1, int64(2*time.Minute)).Draw(t, "hint"))
		}
		attempt := rapid.IntRange(0, 100).Draw(t, "attempt")
		r := rapid.Float64Range(0, 1).Draw(t, "r")

		d := backoff(attempt, minB, maxB, hint, r)
		if d < hint {
			t.Fatalf("backoff %v below the server's hint %v", d, hint)
		}
		if hi := max(hint, maxB); d > hi {
			t.Fatalf("backoff %v above max(hint, MaxBackoff) = %v", d, hi)
		}
		if next := backoff(attempt+1, minB, maxB, hint, r); next < d {
			t.Fatalf("backoff shrank from %v to %v at attempt %d", d, next, attempt+1)
		}
		if hint == 0 {
			// Full jitter under a cap that doubles from MinBackoff.
			cp := minB
			for i := 0; i < attempt && cp < maxB; i++ {
				cp *= 2
			}
			if d > min(cp, maxB) {
				t.Fatalf("backoff %v above cap %v at attempt %d", d, min(cp, maxB), attempt)
			}
		}
	})
}

func TestBackoffGrowsToMax(t *testing.T) {
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{0, 500 * time.Millisecond},
		{1, time.Second},
		{3, 4 * time.Second},
		{5, 16 * time.Second},
		{6, 20 * time.Second},
		{1000, 20 * time.Second},
	}
	for _, tt := range tests {
		// r = 1 shows the cap itself.
		if got := backoff(tt.attempt, DefaultMinBackoff, DefaultMaxBackoff, 0, 1); got != tt.want {
			t.Errorf("attempt %d: cap %v, want %v", tt.attempt, got, tt.want)
		}
	}
	// A hint past MaxBackoff is honoured as is.
	if got := backoff(0, DefaultMinBackoff, DefaultMaxBackoff, time.Minute, 0.9); got != time.Minute {
		t.Errorf("hint 1m: %v", got)
	}
}

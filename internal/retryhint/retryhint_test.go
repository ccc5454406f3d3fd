package retryhint

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestJitter(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lo := time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "lo"))
		spread := time.Duration(rapid.Int64Range(-1, int64(time.Hour)).Draw(t, "spread"))
		d := Jitter(lo, spread)
		if d < lo || (spread > 0 && d >= lo+spread) || (spread <= 0 && d != lo) {
			t.Fatalf("Jitter(%v, %v) = %v, want in [lo, lo+spread)", lo, spread, d)
		}
	})
	seen := map[time.Duration]bool{}
	for range 1000 {
		seen[Jitter(time.Second/2, time.Second)] = true
	}
	if len(seen) < 900 {
		t.Fatalf("only %d distinct values in 1000: not jittered", len(seen))
	}
}

func TestMillis(t *testing.T) {
	tests := []struct {
		give time.Duration
		want int64
	}{
		{0, 1}, {-time.Second, 1}, {time.Nanosecond, 1}, {time.Millisecond, 1},
		{time.Millisecond + 1, 2}, {1500 * time.Millisecond, 1500},
	}
	for _, tt := range tests {
		if got := Millis(tt.give); got != tt.want {
			t.Errorf("Millis(%v) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

// The wire forms are what clients parse: byte for byte.
func TestWireForms(t *testing.T) {
	if got := Reason(250); got != "retry_after_ms=250" {
		t.Errorf("Reason(250) = %q", got)
	}
	if got := Reason(0); got != "retry_after_ms=1" {
		t.Errorf("Reason(0) = %q: N must be positive", got)
	}
	if got := string(EndBody([]byte(HeadOverloaded), 1200)); got != `{"error":"OVERLOADED","retryAfterMs":1200}` {
		t.Errorf("overloaded body %s", got)
	}
	if got := string(EndBody([]byte(HeadRateLimited), 7)); got != `{"error":"RATE_LIMITED","retryAfterMs":7}` {
		t.Errorf("rate-limited body %s", got)
	}
}

func TestAnswer(t *testing.T) {
	tests := []struct {
		head       string
		ms         int64
		retryAfter string
	}{
		{HeadOverloaded, 1, "1"},
		{HeadOverloaded, 1000, "1"},
		{HeadRateLimited, 1001, "2"},
		{HeadOverloaded, 601_000, "601"}, // past the precomputed table
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		Answer(rec, http.StatusServiceUnavailable, tt.head, tt.ms)
		want := tt.head + `,"retryAfterMs":` + strconv.FormatInt(tt.ms, 10) + "}"
		if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != want {
			t.Errorf("Answer(%d): %d %s, want 503 %s", tt.ms, rec.Code, rec.Body, want)
		}
		h := rec.Header()
		if h.Get("Retry-After") != tt.retryAfter || h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("Answer(%d): headers %v, want Retry-After %s", tt.ms, h, tt.retryAfter)
		}
		if got := FromBody(rec.Body.Bytes()); got != min(time.Duration(tt.ms)*time.Millisecond, MaxHint) {
			t.Errorf("FromBody(%s) = %v", rec.Body, got)
		}
	}
}

func TestAnswerAllocs(t *testing.T) {
	w := discardWriter{h: http.Header{}}
	if n := testing.AllocsPerRun(100, func() { Answer(w, http.StatusServiceUnavailable, HeadOverloaded, 1500) }); n != 0 {
		t.Fatalf("Answer allocates %v times", n)
	}
}

type discardWriter struct{ h http.Header }

func (w discardWriter) Header() http.Header         { return w.h }
func (w discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w discardWriter) WriteHeader(int)             {}

func TestFromReason(t *testing.T) {
	tests := []struct {
		give string
		want time.Duration
	}{
		{"retry_after_ms=300", 300 * time.Millisecond},
		{"draining retry_after_ms=1500 bye", 1500 * time.Millisecond},
		{"retry_after_ms=", 0},
		{"retry_after_ms=-5", 0},
		{"retry_after_ms=0", 0},
		{"retry_after_ms=99999999999999999999", 0},
		{"retry_after_ms=999999999", MaxHint},
		{"", 0},
		{"slow consumer", 0},
	}
	for _, tt := range tests {
		if got := FromReason(tt.give); got != tt.want {
			t.Errorf("FromReason(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestFromBody(t *testing.T) {
	tests := []struct {
		give string
		want time.Duration
	}{
		{`{"error":"OVERLOADED","retryAfterMs":1500}`, 1500 * time.Millisecond},
		{`{"class":"c","reason":"MEMORY","retryAfterMs":5}`, 5 * time.Millisecond},
		{`{"retryAfterMs":0}`, 0},
		{`{"retryAfterMs":-3}`, 0},
		{`{"retryAfterMs":1.5}`, 0},
		{`{"retryAfterMs":999999999}`, MaxHint},
		{`{"error":"OVERLOADED"}`, 0},
		{`Service Unavailable`, 0},
		{``, 0},
	}
	for _, tt := range tests {
		if got := FromBody([]byte(tt.give)); got != tt.want {
			t.Errorf("FromBody(%s) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestFromHeader(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		give string
		want time.Duration
	}{
		{"2", 2 * time.Second},
		{" 1 ", time.Second},
		{"0", 0},
		{"-1", 0},
		{"soon", 0},
		{"", 0},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"86400", MaxHint},
	}
	for _, tt := range tests {
		if got := FromHeader(tt.give, now); got != tt.want {
			t.Errorf("FromHeader(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// FuzzFromReason: close reasons are untrusted bytes.
func FuzzFromReason(f *testing.F) {
	for _, s := range []string{"retry_after_ms=300", "retry_after_ms=", "x retry_after_ms=1e9", "retry_after_ms=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d := FromReason(s); d < 0 || d > MaxHint {
			t.Fatalf("FromReason(%q) = %v", s, d)
		}
	})
}

// FuzzFromBody: shed bodies and error data are untrusted bytes.
func FuzzFromBody(f *testing.F) {
	for _, s := range []string{`{"retryAfterMs":5}`, `{"retryAfterMs":"5"}`, `{"retryAfterMs":1e99}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if d := FromBody(b); d < 0 || d > MaxHint {
			t.Fatalf("FromBody(%q) = %v", b, d)
		}
	})
}

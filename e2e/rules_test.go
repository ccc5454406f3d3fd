package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// rateLimited asserts f is a -32002 answer and returns its data.
func rateLimited(t *testing.T, f wstest.Frame) protocol.RateLimitedData {
	t.Helper()
	if f.Error == nil || f.Error.Code != protocol.CodeRateLimited {
		t.Fatalf("got %+v, want -32002", f)
	}
	var d protocol.RateLimitedData
	if err := json.Unmarshal(f.Error.Data, &d); err != nil || d.RetryAfterMs <= 0 {
		t.Fatalf("-32002 data %s", f.Error.Data)
	}
	return d
}

// A slidingWindow rate through the binary: limit calls per key, then
// -32002 with the window's wait.
func TestSlidingWindowRateThroughBinary(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, `
admission:
  classes:
    fair: {rate: {limit: 3, per: 1m, by: conn, strategy: slidingWindow}}
  methods: {subscribe: fair}
`)
	c := wstest.Dial(t, p.WS())
	for _, topic := range []string{"a", "b", "c"} {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"`+topic+`"}`))
	}
	d := rateLimited(t, c.Call("subscribe", `{"topic":"d"}`))
	if d.Class != "fair" || d.Limit != 3 || d.Remaining != 0 || d.Reason != "" {
		t.Fatalf("-32002 data %+v", d)
	}
	if d.RetryAfterMs < 59_000 || d.RetryAfterMs > 60_000 {
		t.Fatalf("retryAfterMs %d, want about a minute (the oldest call leaves the window)", d.RetryAfterMs)
	}
	// Another connection has its own window.
	wstest.MustOK(t, wstest.Dial(t, p.WS()).Call("subscribe", `{"topic":"a"}`))
}

// Bad values of the rule parts' keys stop start-up with an error naming
// the key.
func TestBadRuleValuesStopStartup(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		give    string
		wantKey string
	}{
		{"fair: {rate: {limit: 3, per: 1m, strategy: leaky}}", "admission.classes.fair.rate.strategy"},
	}
	for _, tt := range tests {
		t.Run(tt.wantKey, func(t *testing.T) {
			p := startNoWait(t, "admission:\n  classes:\n    "+tt.give+"\n")
			if code := p.exitCode(30 * time.Second); code == 0 {
				t.Fatalf("rtserver started with %s", tt.give)
			}
			if out := p.log.String(); !strings.Contains(out, tt.wantKey) {
				t.Fatalf("start-up error does not name %s:\n%s", tt.wantKey, out)
			}
		})
	}
}

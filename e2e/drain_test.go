package e2e

import (
	"context"
	"net/http"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// SIGTERM drains: readiness turns 503, new upgrades are refused with reason
// draining, every client is told and then closed with 1012 and a retry
// hint, the closes spread over drain.duration, and the process exits 0.
func TestDrainSpreadsClosesAndExitsZero(t *testing.T) {
	leakcheck.Check(t)
	const window = 2 * time.Second
	p := start(t, "drain: {duration: 2s}\n")
	const n = 10
	clients := make([]*wstest.Conn, n)
	for i := range clients {
		clients[i] = wstest.Dial(t, p.WS())
		wstest.MustOK(t, clients[i].Call("subscribe", `{"topic":"t"}`))
	}
	type result struct {
		at     time.Time
		code   websocket.StatusCode
		reason string
		notice wstest.Frame
	}
	results := make(chan result, n)
	for _, c := range clients {
		go func() {
			f := c.Recv()
			code, reason := c.CloseStatus()
			results <- result{time.Now(), code, reason, f}
		}()
	}

	p.signal(syscall.SIGTERM)
	var ready string
	testkit.Eventually(t, 5*time.Second, "readyz 503", func() bool {
		code, body := p.get("/readyz")
		ready = body
		return code == http.StatusServiceUnavailable
	})
	if ready != "not ready: draining\n" {
		t.Errorf("readyz while draining says %q", ready)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, resp, err := websocket.Dial(ctx, p.WS(), nil)
	cancel()
	if err == nil {
		t.Fatal("an upgrade was admitted while draining")
	}
	checkRejection(t, resp, http.StatusServiceUnavailable, "OVERLOADED")
	if v := p.metric(`handshake_rejected_total{reason="draining"}`); v != 1 {
		t.Fatalf("handshake_rejected_total{draining} = %v", v)
	}

	var times []time.Time
	for range n {
		r := <-results
		if r.notice.Method != "system" || r.notice.Params.Event != "draining" || r.notice.Params.ReconnectAfterMs <= 0 {
			t.Fatalf("first frame while draining: %+v", r.notice)
		}
		if r.code != websocket.StatusServiceRestart {
			t.Fatalf("close %d %q, want 1012", r.code, r.reason)
		}
		wstest.RetryHint(t, r.reason)
		times = append(times, r.at)
	}
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	// Spread, not all at once: the closes span most of the window. A slow
	// machine only widens the span, so this lower bound cannot flake.
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	if span := times[n-1].Sub(times[0]); span < window/2 {
		t.Fatalf("closes spanned %v of a %v drain window: not spread", span, window)
	}
}

// A second signal during a drain closes what is left at once, each client
// with 1001 (going away), and the process exits 0.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	leakcheck.Check(t)
	// An hour's window: the first close of the schedule comes at once, the
	// others only after the second signal.
	p := start(t, "drain: {duration: 1h}\n")
	const n = 4
	type result struct {
		code   websocket.StatusCode
		reason string
	}
	results := make(chan result, n)
	for range n {
		c := wstest.Dial(t, p.WS())
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"t"}`))
		go func() {
			code, reason := c.CloseStatus()
			results <- result{code, reason}
		}()
	}
	p.signal(syscall.SIGTERM)
	if r := <-results; r.code != websocket.StatusServiceRestart {
		t.Fatalf("the drain's first close: %d %q, want 1012", r.code, r.reason)
	}
	p.signal(syscall.SIGTERM)
	for range n - 1 {
		if r := <-results; r.code != websocket.StatusGoingAway {
			t.Fatalf("close after the second signal: %d %q, want 1001", r.code, r.reason)
		}
	}
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
}

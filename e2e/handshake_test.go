package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
)

// rejection checks a shed upgrade's HTTP answer: status, Retry-After in
// whole seconds >= 1, and the contract's JSON body with retryAfterMs > 0.
func checkRejection(t testing.TB, resp *http.Response, status int, errWord string) {
	t.Helper()
	if resp == nil {
		t.Fatalf("no HTTP response for a rejected upgrade")
	}
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d", resp.StatusCode, status)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Fatalf("Retry-After %q, want whole seconds >= 1", resp.Header.Get("Retry-After"))
	}
	body, _ := io.ReadAll(resp.Body)
	var b struct {
		Error        string `json:"error"`
		RetryAfterMs int64  `json:"retryAfterMs"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Error != errWord || b.RetryAfterMs <= 0 {
		t.Fatalf("body %q, want {\"error\":%q,\"retryAfterMs\":N>0}", body, errWord)
	}
}

// A flood of ten times the connection cap: exactly the cap gets in, every
// other attempt gets a well-formed 503, and once the flood's connections are
// closed every slot is back: a second wave up to the cap all succeeds.
func TestConnectFloodNeverExceedsCap(t *testing.T) {
	leakcheck.Check(t)
	const limit = 20
	p := start(t, "handshake: {maxConnections: 20, perTickBudget: 0}\n")

	var (
		mu       sync.Mutex
		accepted []*websocket.Conn
		rejected int
	)
	var wg sync.WaitGroup
	for range 10 * limit {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ws, resp, err := websocket.Dial(ctx, p.WS(), nil)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				accepted = append(accepted, ws)
				return
			}
			rejected++
			checkRejection(t, resp, http.StatusServiceUnavailable, "OVERLOADED")
		}()
	}
	wg.Wait()
	if len(accepted) != limit || rejected != 9*limit {
		t.Fatalf("accepted %d, rejected %d; want %d and %d", len(accepted), rejected, limit, 9*limit)
	}
	m := p.metrics()
	if m["connections_open"] != limit || m[`handshake_rejected_total{reason="max_connections"}`] != 9*limit {
		t.Fatalf("connections_open %v, rejected{max_connections} %v", m["connections_open"], m[`handshake_rejected_total{reason="max_connections"}`])
	}
	for _, ws := range accepted {
		ws.Close(websocket.StatusNormalClosure, "")
	}
	p.waitMetric("connections_open", 10*time.Second, func(v float64) bool { return v == 0 })
	if v := p.metric("handshake_inflight"); v != 0 {
		t.Fatalf("handshake_inflight %v after the flood", v)
	}
	for i := range limit {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ws, _, err := websocket.Dial(ctx, p.WS(), nil)
		cancel()
		if err != nil {
			t.Fatalf("second wave %d: %v", i, err)
		}
		defer ws.CloseNow()
	}
}

// In close mode a shed upgrade completes and is closed at once with 1013
// and a retry hint, which a browser can read.
func TestRejectCloseMode(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "handshake: {maxConnections: 1, reject: close}\n")
	first := wstest.Dial(t, p.WS())
	wstest.MustOK(t, first.Call("subscribe", `{"topic":"t"}`))
	second := wstest.Dial(t, p.WS())
	code, reason := second.CloseStatus()
	if code != websocket.StatusTryAgainLater {
		t.Fatalf("close %d %q, want 1013", code, reason)
	}
	wstest.RetryHint(t, reason)
	// The held connection is unaffected.
	wstest.MustOK(t, first.Call("unsubscribe", `{"topic":"t"}`))
}

// The per-IP upgrade rate keys on the socket peer: X-Forwarded-For from a
// peer that is not a trusted proxy is ignored, so forging it changes
// nothing. From a trusted proxy, each forwarded client has its own limit.
func TestPerIPLimitIgnoresForgedForwardedFor(t *testing.T) {
	leakcheck.Check(t)
	dialXFF := func(p *proc, xff string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := http.Header{}
		h.Set("X-Forwarded-For", xff)
		return websocket.Dial(ctx, p.WS(), &websocket.DialOptions{HTTPHeader: h})
	}

	untrusted := start(t, "handshake: {perIP: {limit: 3, per: 1m}}\n")
	for i := range 3 {
		ws, _, err := dialXFF(untrusted, "203.0.113."+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("upgrade %d: %v", i, err)
		}
		defer ws.CloseNow()
	}
	_, resp, err := dialXFF(untrusted, "198.51.100.77")
	if err == nil {
		t.Fatal("a forged X-Forwarded-For got past the per-IP limit")
	}
	checkRejection(t, resp, http.StatusTooManyRequests, "RATE_LIMITED")
	if v := untrusted.metric(`handshake_rejected_total{reason="per_ip"}`); v != 1 {
		t.Fatalf("per_ip rejections %v, want 1", v)
	}

	trusted := start(t, "handshake: {perIP: {limit: 1, per: 1m}, trustedProxies: [127.0.0.0/8]}\n")
	for i := range 3 {
		ws, _, err := dialXFF(trusted, "203.0.113."+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("forwarded client %d: %v", i, err)
		}
		defer ws.CloseNow()
	}
	if _, resp, err := dialXFF(trusted, "203.0.113.0"); err == nil {
		t.Fatal("a forwarded client past its limit was admitted")
	} else {
		checkRejection(t, resp, http.StatusTooManyRequests, "RATE_LIMITED")
	}
}

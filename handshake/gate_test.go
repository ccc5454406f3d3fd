package handshake

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkShed verifies a 503/429 shed answer: status, Retry-After in whole
// seconds >= 1 agreeing with the body, and exactly {"error":E,"retryAfterMs":N>0}.
func checkShed(t testing.TB, status int, h http.Header, body []byte, wantStatus int, wantErr string) int64 {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d (body %s)", status, wantStatus, body)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(body, &got); err != nil || len(got) != 2 {
		t.Fatalf("body %s: want exactly error and retryAfterMs (%v)", body, err)
	}
	var e string
	var ms int64
	if json.Unmarshal(got["error"], &e) != nil || e != wantErr {
		t.Fatalf("body %s: error %q, want %q", body, e, wantErr)
	}
	if json.Unmarshal(got["retryAfterMs"], &ms) != nil || ms <= 0 {
		t.Fatalf("body %s: retryAfterMs must be a positive integer", body)
	}
	secs, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || secs < 1 || int64(secs) != (ms+999)/1000 {
		t.Fatalf("Retry-After %q for retryAfterMs %d", h.Get("Retry-After"), ms)
	}
	return ms
}

func admit(g *Gate, r *http.Request) (*Ticket, *httptest.ResponseRecorder, bool) {
	var tk Ticket
	w := httptest.NewRecorder()
	ok := g.Admit(w, r, &tk)
	return &tk, w, ok
}

func TestMaxConnectionsHoldsSlotForConnectionLife(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxConnections, cfg.PerTickBudget = 2, 0
	g, m := newGate(t, cfg)
	a, _, ok1 := admit(g, upgradeReq("203.0.113.1:1"))
	b, _, ok2 := admit(g, upgradeReq("203.0.113.2:1"))
	if !ok1 || !ok2 {
		t.Fatal("first two upgrades rejected")
	}
	a.HandshakeDone(true)
	b.HandshakeDone(true)
	if g.Inflight() != 0 || g.Open() != 2 {
		t.Fatalf("inflight %d open %d, want 0 and 2", g.Inflight(), g.Open())
	}
	// Handshakes are over but the connections hold their slots.
	_, w, ok := admit(g, upgradeReq("203.0.113.3:1"))
	if ok {
		t.Fatal("third upgrade admitted past maxConnections")
	}
	checkShed(t, w.Code, w.Header(), w.Body.Bytes(), http.StatusServiceUnavailable, "OVERLOADED")
	if rejected(m, "max_connections") != 1 {
		t.Fatal("max_connections not counted")
	}
	a.Close()
	c, _, ok := admit(g, upgradeReq("203.0.113.3:1"))
	if !ok {
		t.Fatal("upgrade rejected after a connection closed")
	}
	c.HandshakeDone(false) // failed handshake gives back both slots
	b.Close()
	assertIdle(t, g, m)
}

func TestMaxConcurrentCountsOnlyInflight(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxConcurrent, cfg.PerTickBudget = 1, 0
	g, m := newGate(t, cfg)
	a, _, ok := admit(g, upgradeReq("203.0.113.1:1"))
	if !ok {
		t.Fatal("first rejected")
	}
	_, w, ok := admit(g, upgradeReq("203.0.113.2:1"))
	if ok || rejected(m, "max_concurrent") != 1 || g.Open() != 1 {
		t.Fatalf("second: ok=%v max_concurrent=%v open=%d", ok, rejected(m, "max_concurrent"), g.Open())
	}
	checkShed(t, w.Code, w.Header(), w.Body.Bytes(), http.StatusServiceUnavailable, "OVERLOADED")
	a.HandshakeDone(true)
	b, _, ok := admit(g, upgradeReq("203.0.113.2:1"))
	if !ok {
		t.Fatal("rejected after the first handshake finished")
	}
	b.Close() // Close without HandshakeDone releases both
	a.Close()
	assertIdle(t, g, m)
}

func TestTicketReleasesExactlyOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		calls func(*Ticket)
	}{
		{"done ok, close", func(tk *Ticket) { tk.HandshakeDone(true); tk.Close() }},
		{"done ok twice, close twice", func(tk *Ticket) { tk.HandshakeDone(true); tk.HandshakeDone(true); tk.Close(); tk.Close() }},
		{"done failed, then close", func(tk *Ticket) { tk.HandshakeDone(false); tk.Close() }},
		{"done failed, done ok", func(tk *Ticket) { tk.HandshakeDone(false); tk.HandshakeDone(true); tk.Close() }},
		{"close only", func(tk *Ticket) { tk.Close() }},
		{"close, then done", func(tk *Ticket) { tk.Close(); tk.HandshakeDone(true); tk.HandshakeDone(false) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.MaxConnections = 1
			g, m := newGate(t, cfg)
			tk, _, ok := admit(g, upgradeReq("203.0.113.1:1"))
			if !ok {
				t.Fatal("rejected")
			}
			tt.calls(tk)
			assertIdle(t, g, m)
			// The slot really is free again (and not double-freed: one more fits, two do not).
			tk2, _, ok := admit(g, upgradeReq("203.0.113.1:1"))
			if !ok {
				t.Fatal("slot not released")
			}
			if _, _, ok := admit(g, upgradeReq("203.0.113.1:1")); ok {
				t.Fatal("slot released twice")
			}
			tk2.Close()
		})
	}
	var zero Ticket
	zero.HandshakeDone(true) // never admitted: nothing to release, no panic
	zero.Close()
}

func TestConcurrentDoneAndClose(t *testing.T) {
	t.Parallel()
	g, m := newGate(t, DefaultConfig())
	for range 200 {
		tk, _, ok := admit(g, upgradeReq("203.0.113.1:1"))
		if !ok {
			t.Fatal("rejected")
		}
		var wg sync.WaitGroup
		wg.Go(func() { tk.HandshakeDone(true) })
		wg.Go(func() { tk.HandshakeDone(false) })
		wg.Go(func() { tk.Close() })
		wg.Go(func() { tk.Close() })
		wg.Wait()
	}
	assertIdle(t, g, m)
}

func TestPerIPRate(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	cfg := DefaultConfig()
	cfg.PerIP.Limit, cfg.PerIP.Per, cfg.PerTickBudget = 2, 10*time.Second, 0
	cfg.TrustedProxies = prefixes("10.0.0.0/8")
	g, m := newGateAt(t, cfg, func() time.Time { return now })
	try := func(peer, xff string) *httptest.ResponseRecorder {
		r := upgradeReq(peer)
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		tk, w, ok := admit(g, r)
		if ok {
			tk.Close()
		}
		return w
	}
	for i := range 2 {
		if w := try("203.0.113.9:1", "198.51.100."+strconv.Itoa(i)); w.Code != http.StatusOK {
			t.Fatalf("upgrade %d: status %d", i, w.Code)
		}
	}
	// A forged X-Forwarded-For from an untrusted peer changes nothing.
	w := try("203.0.113.9:2", "198.51.100.77")
	ms := checkShed(t, w.Code, w.Header(), w.Body.Bytes(), http.StatusTooManyRequests, "RATE_LIMITED")
	if ms < 5000 || ms > 7500 { // RetryAfter 5s plus up to half of it as jitter
		t.Fatalf("retryAfterMs %d, want within [5000, 7500]", ms)
	}
	// Behind a trusted proxy each forwarded client has its own budget.
	if w := try("10.0.0.1:1", "198.51.100.1"); w.Code != http.StatusOK {
		t.Fatalf("proxied client: status %d", w.Code)
	}
	// IPv6 clients in one /64 share one budget.
	try("[2001:db8:1:1::1]:1", "")
	try("[2001:db8:1:1::2]:1", "")
	if w := try("[2001:db8:1:1::3]:1", ""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("third upgrade from one /64: status %d", w.Code)
	}
	if rejected(m, "per_ip") != 2 {
		t.Fatalf("per_ip rejections %v, want 2", rejected(m, "per_ip"))
	}
	now = now.Add(5 * time.Second)
	if w := try("203.0.113.9:3", ""); w.Code != http.StatusOK {
		t.Fatalf("after the refill: status %d", w.Code)
	}
	assertIdle(t, g, m)
}

func TestOriginRejectedWith403(t *testing.T) {
	t.Parallel()
	for _, mode := range []RejectMode{RejectHTTP, RejectClose} {
		cfg := DefaultConfig()
		cfg.Reject = mode
		g, m := newGate(t, cfg)
		r := upgradeReq("203.0.113.1:1")
		r.Header.Set("Origin", "https://evil.example.net")
		_, w, ok := admit(g, r)
		if ok || w.Code != http.StatusForbidden || rejected(m, "origin") != 1 {
			t.Fatalf("mode %d: ok=%v status %d", mode, ok, w.Code)
		}
		if body := w.Body.String(); body != "origin \"https://evil.example.net\" is not in handshake.allowedOrigins\n" {
			t.Fatalf("mode %d: the 403 does not say which origin and key: %q", mode, body)
		}
		assertIdle(t, g, m)
	}
}

// The 403's body names the key that decides, and never echoes an origin
// at length.
func TestOriginRefusalSaysWhy(t *testing.T) {
	if got := originRefusal(""); !strings.Contains(got, "handshake.allowNoOrigin") {
		t.Errorf("no Origin: %q", got)
	}
	long := "https://" + strings.Repeat("a", 5000)
	if got := originRefusal(long); len(got) > 300 || !strings.Contains(got, "handshake.allowedOrigins") {
		t.Errorf("a long origin: %d bytes, %.80q", len(got), got)
	}
}

func TestDrainingRejects(t *testing.T) {
	t.Parallel()
	g, m := newGate(t, DefaultConfig())
	g.SetDraining(true)
	_, w, ok := admit(g, upgradeReq("203.0.113.1:1"))
	if ok || !g.Draining() {
		t.Fatal("admitted while draining")
	}
	checkShed(t, w.Code, w.Header(), w.Body.Bytes(), http.StatusServiceUnavailable, "OVERLOADED")
	if rejected(m, "draining") != 1 {
		t.Fatal("draining not counted")
	}
	g.SetDraining(false)
	tk, _, ok := admit(g, upgradeReq("203.0.113.1:1"))
	if !ok {
		t.Fatal("rejected after draining ended")
	}
	tk.Close()
	assertIdle(t, g, m)
}

func TestRetryHint(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	cfg := DefaultConfig()
	cfg.RetryAfter, cfg.PerTickBudget, cfg.Tick = time.Second, 10, 10*time.Millisecond // capacity 1000/s
	g, _ := newGateAt(t, cfg, func() time.Time { return now })
	seen := map[int64]bool{}
	for range 50 {
		ms := g.overloadHint(g.clock())
		// The 49 rejections before the last add at most 49ms to the 1s
		// base: h <= 1.049s, hints in [h/2, 3h/2) rounded up.
		if ms < 500 || ms > 1574 {
			t.Fatalf("calm hint %dms outside [500, 1574]", ms)
		}
		seen[ms] = true
	}
	if len(seen) < 10 {
		t.Fatalf("hint barely jittered: %d distinct values in 50", len(seen))
	}
	// A storm of 20k rejections in a second: the crowd is told to spread
	// over ~20s (capacity 1000/s), so every hint is now far above the calm range.
	for range 20_000 {
		g.overloadHint(g.clock())
	}
	// Up to 20,100 rejections before each: h <= 1s + 20.1s, hints in
	// [h/2, 3h/2).
	for range 50 {
		if ms := g.overloadHint(g.clock()); ms < 10_000 || ms > 31_650 {
			t.Fatalf("storm hint %dms outside [10000, 31650]", ms)
		}
	}
	// Two quiet seconds later it is back to the base exactly (no earlier
	// rejection counts), so the hint is in [500, 1500] ms.
	now = now.Add(2 * time.Second)
	if ms := g.overloadHint(g.clock()); ms < 500 || ms > 1500 {
		t.Fatalf("hint after the storm %dms", ms)
	}
	if rateHint(time.Nanosecond) < 1 || rateHint(0) < 1 {
		t.Fatal("hint can be zero")
	}
}

// TestFloodNeverExceedsMaxConnections: many goroutines admit, hold, and
// release concurrently; slots held never exceed the cap.
func TestFloodNeverExceedsMaxConnections(t *testing.T) {
	t.Parallel()
	const K, N, rounds = 8, 64, 200
	cfg := DefaultConfig()
	cfg.MaxConnections, cfg.MaxConcurrent, cfg.PerTickBudget = K, 0, 0
	g, m := newGate(t, cfg)
	var held, maxHeld, admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range N {
		wg.Go(func() {
			for j := range rounds {
				tk, _, ok := admit(g, upgradeReq("203.0.113.1:1"))
				if o := g.Open(); o > K {
					t.Errorf("Open() = %d > %d", o, K)
				}
				if !ok {
					continue
				}
				admitted.Add(1)
				n := held.Add(1)
				for {
					mx := maxHeld.Load()
					if n <= mx || maxHeld.CompareAndSwap(mx, n) {
						break
					}
				}
				if (i+j)%3 == 0 {
					tk.HandshakeDone(false)
					held.Add(-1)
					continue
				}
				tk.HandshakeDone(true)
				held.Add(-1)
				tk.Close()
			}
		})
	}
	wg.Wait()
	if mx := maxHeld.Load(); mx > K {
		t.Fatalf("%d slots held at once, cap %d", mx, K)
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
	assertIdle(t, g, m)
}

func TestAdmitFastPathAllocatesNothing(t *testing.T) {
	for _, budget := range []int{0, 1 << 30} { // pacing off, and on with tokens to spare
		cfg := DefaultConfig()
		cfg.MaxConnections, cfg.PerTickBudget = 100, budget
		g, _ := newGate(t, cfg)
		r := upgradeReq("203.0.113.1:1")
		r.Header.Set("Origin", "http://rt.example.com")
		w := httptest.NewRecorder()
		var tk Ticket
		// AllocsPerRun rounds down, so count over many runs by hand.
		const runs = 1000
		n := testing.AllocsPerRun(1, func() {
			for range runs {
				if !g.Admit(w, r, &tk) {
					t.Fatal("rejected")
				}
				tk.HandshakeDone(true)
				tk.Close()
			}
		})
		if n > 0 {
			t.Fatalf("budget %d: %v allocs per %d admit/release", budget, n, runs)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give func(*Config)
	}{
		{"negative maxConnections", func(c *Config) { c.MaxConnections = -1 }},
		{"negative maxConcurrent", func(c *Config) { c.MaxConcurrent = -1 }},
		{"budget without tick", func(c *Config) { c.Tick = 0 }},
		{"negative wait", func(c *Config) { c.MaxQueueWait = -time.Second }},
		{"unknown reject mode", func(c *Config) { c.Reject = 7 }},
		{"negative retryAfter", func(c *Config) { c.RetryAfter = -1 }},
		{"perIP without per", func(c *Config) { c.PerIP.Limit, c.PerIP.Per = 5, 0 }},
		{"bad origin pattern", func(c *Config) { c.AllowedOrigins = []string{"[x"} }},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.give(&cfg)
		if _, err := New(cfg, Deps{}); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	if _, err := New(DefaultConfig(), Deps{}); err != nil {
		t.Fatalf("default config: %v", err)
	}
	cfg := DefaultConfig()
	cfg.RetryAfter = 0
	g, err := New(cfg, Deps{})
	if err != nil || g.base != time.Second {
		t.Fatalf("RetryAfter 0 should mean 1s: %v %v", err, g)
	}
}

var _ = context.Background

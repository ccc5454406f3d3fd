package handshake

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/rtserver/rtserver/internal/testkit"
)

// serve runs a real server whose /ws handler admits through g, accepts,
// and keeps the connection until the client closes it. The returned
// channel gets one value per admitted connection whose handler has ended.
func serve(t *testing.T, g *Gate) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	ended := make(chan struct{}, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tk Ticket
		if !g.Admit(w, r, &tk) {
			return
		}
		defer func() { ended <- struct{}{} }()
		defer tk.Close()
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			tk.HandshakeDone(false)
			return
		}
		tk.HandshakeDone(true)
		defer c.CloseNow()
		_ = c.Write(r.Context(), websocket.MessageText, []byte(tk.User))
		_, _, _ = c.Read(context.Background()) // until the client closes
	}))
	t.Cleanup(srv.Close)
	return srv, ended
}

func wsURL(srv *httptest.Server) string { return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws" }

// plainUpgrade sends an upgrade request with a plain HTTP client.
func plainUpgrade(t *testing.T, srv *httptest.Server, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// dialHeld opens a WebSocket connection and returns a func that closes it.
func dialHeld(t *testing.T, srv *httptest.Server) func() {
	t.Helper()
	c, _, err := websocket.Dial(t.Context(), wsURL(srv), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if _, _, err := c.Read(t.Context()); err != nil { // the server has finished the handshake
		t.Fatal(err)
	}
	return func() { c.Close(websocket.StatusNormalClosure, "") }
}

func TestHTTP503OverCap(t *testing.T) {
	t.Parallel()
	cfg := authed()
	cfg.MaxConnections = 1
	g, m := newGate(t, cfg)
	srv, ended := serve(t, g)
	release := dialHeld(t, srv)
	resp, body := plainUpgrade(t, srv, nil)
	checkShed(t, resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, "OVERLOADED")
	if rejected(m, "max_connections") != 1 {
		t.Fatal("not counted")
	}
	release()
	<-ended
	assertIdle(t, g, m)
}

func TestHTTP429PerIPWithForgedXFF(t *testing.T) {
	t.Parallel()
	cfg := authed()
	cfg.PerIP.Limit, cfg.PerIP.Per = 2, time.Minute
	cfg.TrustedProxies = prefixes("10.0.0.0/8") // the loopback test client is not a proxy
	g, m := newGate(t, cfg)
	srv, _ := serve(t, g)
	for range 2 {
		dialHeld(t, srv)() // allowed, closed at once
	}
	for i := range 3 {
		resp, body := plainUpgrade(t, srv, map[string]string{"X-Forwarded-For": "198.51.100." + strconv.Itoa(i)})
		checkShed(t, resp.StatusCode, resp.Header, body, http.StatusTooManyRequests, "RATE_LIMITED")
	}
	if rejected(m, "per_ip") != 3 {
		t.Fatalf("per_ip %v", rejected(m, "per_ip"))
	}
}

func TestHTTP403And401AlsoInCloseMode(t *testing.T) {
	t.Parallel()
	secret := []byte("http-test-secret-0123456789abcdef")
	for _, mode := range []RejectMode{RejectHTTP, RejectClose} {
		cfg := authed()
		cfg.Reject, cfg.JWT.HMACSecret = mode, secret
		g, m := newGate(t, cfg)
		srv, ended := serve(t, g)
		resp, _ := plainUpgrade(t, srv, map[string]string{"Origin": "https://evil.example.net"})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("mode %d, bad origin: status %d", mode, resp.StatusCode)
		}
		resp, _ = plainUpgrade(t, srv, nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("mode %d, no token: status %d", mode, resp.StatusCode)
		}
		expired := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(-time.Hour).Unix()})
		resp, _ = plainUpgrade(t, srv, map[string]string{"Authorization": "Bearer " + expired})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("mode %d, expired token: status %d", mode, resp.StatusCode)
		}
		// A valid token in the query (browsers) gets through and names the user.
		good := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "carol", "exp": time.Now().Add(time.Hour).Unix()})
		c, _, err := websocket.Dial(t.Context(), wsURL(srv)+"?token="+good, nil)
		if err != nil {
			t.Fatalf("mode %d, valid token: %v", mode, err)
		}
		_, msg, err := c.Read(t.Context())
		if err != nil || string(msg) != "carol" {
			t.Fatalf("user %q, err %v", msg, err)
		}
		c.Close(websocket.StatusNormalClosure, "")
		if rejected(m, "origin") != 1 || rejected(m, "auth") != 2 {
			t.Fatalf("mode %d: origin %v auth %v", mode, rejected(m, "origin"), rejected(m, "auth"))
		}
		<-ended
		assertIdle(t, g, m)
	}
}

func TestCloseMode1013(t *testing.T) {
	t.Parallel()
	cfg := authed()
	cfg.MaxConnections, cfg.Reject = 1, RejectClose
	cfg.PerIP.Limit, cfg.PerIP.Per = 1, time.Minute
	g, m := newGate(t, cfg)
	srv, ended := serve(t, g)
	release := dialHeld(t, srv)
	expect1013 := func(what string) {
		c, _, err := websocket.Dial(t.Context(), wsURL(srv), nil)
		if err != nil {
			t.Fatalf("%s: close mode must complete the upgrade: %v", what, err)
		}
		defer c.CloseNow()
		_, _, err = c.Read(t.Context())
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusTryAgainLater {
			t.Fatalf("%s: read error %v, want close 1013", what, err)
		}
		n, perr := strconv.ParseInt(strings.TrimPrefix(ce.Reason, "retry_after_ms="), 10, 64)
		if !strings.HasPrefix(ce.Reason, "retry_after_ms=") || perr != nil || n <= 0 {
			t.Fatalf("%s: close reason %q, want retry_after_ms=N with N > 0", what, ce.Reason)
		}
	}
	expect1013("over maxConnections")
	if rejected(m, "max_connections") != 1 {
		t.Fatal("not counted")
	}
	release()
	<-ended
	expect1013("per-IP rate") // the held connection used 127.0.0.1's one upgrade (the cap rejection came first)
	if rejected(m, "per_ip") != 1 {
		t.Fatalf("per_ip %v", rejected(m, "per_ip"))
	}
	assertIdle(t, g, m)
}

func TestHTTPDraining(t *testing.T) {
	t.Parallel()
	g, m := newGate(t, DefaultConfig())
	srv, _ := serve(t, g)
	g.SetDraining(true)
	resp, body := plainUpgrade(t, srv, nil)
	checkShed(t, resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, "OVERLOADED")
	if rejected(m, "draining") != 1 {
		t.Fatal("not counted")
	}
	assertIdle(t, g, m)
}

// TestQueuedClientHangsUp: over real TCP, a client that closes its socket
// while its upgrade waits for a pacing tick is dropped and frees its slots
// (net/http cancels the request context when the peer goes away).
func TestQueuedClientHangsUp(t *testing.T) {
	t.Parallel()
	cfg := authed()
	cfg.PerTickBudget, cfg.Tick, cfg.MaxQueueWait = 1, time.Hour, time.Hour
	g, m := newGate(t, cfg)
	srv, ended := serve(t, g)
	release := dialHeld(t, srv) // takes this hour's only token
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the upgrade is queued", func() bool { return g.QueueDepth() == 1 && g.Inflight() == 1 })
	conn.Close()
	testkit.Eventually(t, 10*time.Second, "the queued upgrade is dropped", func() bool { return g.QueueDepth() == 0 && g.Inflight() == 0 && g.Open() == 1 })
	release()
	<-ended
	assertIdle(t, g, m)
	if rejected(m, "queue_timeout") != 0 {
		t.Fatal("a client that left was counted as a rejection")
	}
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/protocol"
)

// tokens returns a TokenFunc handing out tok1, tok2, ...
func tokens() func(context.Context) (string, error) {
	var n atomic.Int64
	return func(context.Context) (string, error) { return fmt.Sprintf("tok%d", n.Add(1)), nil }
}

func (s *testServer) authHeaders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, h := range s.headers {
		out = append(out, h.Get("Authorization"))
	}
	return out
}

func TestTokenFuncOnEveryConnect(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	opts := p.options(true)
	opts.Token = "static" // TokenFunc wins
	opts.TokenFunc = tokens()
	dial(t, s.url, opts)
	s.closeAll(websocket.StatusServiceRestart, retryhint.Reason(1))
	p.waitState(t, Disconnected)
	p.waitState(t, Connected)
	if got := s.authHeaders(); len(got) != 2 || got[0] != "Bearer tok1" || got[1] != "Bearer tok2" {
		t.Fatalf("Authorization headers %q, want a fresh token per connect", got)
	}
}

func TestTokenFuncErrorFailsDial(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	boom := errors.New("idp down")
	_, err := Dial(context.Background(), s.url, &Options{TokenFunc: func(context.Context) (string, error) { return "", boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("Dial: %v, want the token error", err)
	}
	if n := len(s.authHeaders()); n != 0 {
		t.Fatalf("%d upgrades sent without a token", n)
	}
}

// tokenExpiring makes the client fetch a new token and refresh with it.
func TestTokenExpiringRefreshes(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	events := make(chan string, 4)
	opts := &Options{TokenFunc: tokens(), OnSystem: func(e string, _ json.RawMessage) { events <- e }}
	dial(t, s.url, opts)
	s.broadcast([]byte(`{"jsonrpc":"2.0","method":"system","params":{"event":"tokenExpiring","expiresInMs":30000}}`))
	if tok := <-s.refreshes; tok != "tok2" {
		t.Fatalf("refresh sent %q, want the second token", tok)
	}
	if e := <-events; e != "tokenExpiring" {
		t.Fatalf("OnSystem got %q", e)
	}
}

// Without TokenFunc the notice only reaches OnSystem.
func TestTokenExpiringWithoutTokenFunc(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	events := make(chan string, 4)
	c := dial(t, s.url, &Options{Token: "t", OnSystem: func(e string, _ json.RawMessage) { events <- e }})
	s.broadcast([]byte(`{"jsonrpc":"2.0","method":"system","params":{"event":"tokenExpiring","expiresInMs":30000}}`))
	<-events
	if err := c.Call(context.Background(), "echo", map[string]int{"n": 1}, nil); err != nil { // a round trip after the event
		t.Fatal(err)
	}
	select {
	case tok := <-s.refreshes:
		t.Fatalf("refresh sent (%q) without a TokenFunc", tok)
	default:
	}
}

// A close 1008 "token expired" is final without TokenFunc and reconnects
// with a fresh token with it.
func TestTokenExpiredClose(t *testing.T) {
	for _, withFunc := range []bool{false, true} {
		t.Run(fmt.Sprint("TokenFunc=", withFunc), func(t *testing.T) {
			checkLeaks(t)
			s := newTestServer(t)
			p := newProbe()
			opts := p.options(true)
			opts.Token = "t"
			if withFunc {
				opts.TokenFunc = tokens()
			}
			c := dial(t, s.url, opts)
			s.closeAll(websocket.StatusPolicyViolation, "token expired")
			if !withFunc {
				<-c.Done()
				var ce *CloseError
				if !errors.As(c.Err(), &ce) || ce.Code != 1008 {
					t.Fatalf("Err() = %v, want close 1008", c.Err())
				}
				return
			}
			p.waitState(t, Connected) // Dial's
			p.waitState(t, Disconnected)
			p.waitState(t, Connected)
			if got := s.authHeaders(); len(got) != 2 || got[1] != "Bearer tok2" {
				t.Fatalf("headers %q, want a reconnect with tok2", got)
			}
			// Any other 1008 stays final.
			s.closeAll(websocket.StatusPolicyViolation, "repeated invalid requests")
			<-c.Done()
		})
	}
}

// With TokenFunc a 401 on reconnect is retried once with a new token; a
// second 401 in a row is final.
func TestTokenFuncUnauthorizedTwiceIsFinal(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	opts := p.options(true)
	opts.TokenFunc = tokens()
	c := dial(t, s.url, opts)
	s.setReject(func(w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusUnauthorized)
		return true
	})
	s.closeAll(websocket.StatusServiceRestart, retryhint.Reason(1))
	<-c.Done()
	var he *HandshakeError
	if !errors.As(c.Err(), &he) || he.Status != 401 {
		t.Fatalf("Err() = %v, want 401", c.Err())
	}
	if got := s.authHeaders(); len(got) != 3 || got[1] != "Bearer tok2" || got[2] != "Bearer tok3" {
		t.Fatalf("headers %q: want the first connect and two attempts, each with a new token", got)
	}
}

// A topic the server takes away (system unsubscribed) is forgotten: not
// re-sent after a reconnect, while the others are.
func TestUnsubscribedForgetsTopic(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	opts := p.options(true)
	events := make(chan string, 4)
	opts.OnSystem = func(e string, _ json.RawMessage) { events <- e }
	c := dial(t, s.url, opts)
	ctx := context.Background()
	noop := func(string, json.RawMessage) {}
	if _, err := c.Subscribe(ctx, "kept", noop); err != nil {
		t.Fatal(err)
	}
	taken, err := c.Subscribe(ctx, "taken", noop)
	if err != nil {
		t.Fatal(err)
	}
	s.broadcast([]byte(`{"jsonrpc":"2.0","method":"system","params":{"event":"unsubscribed","topic":"taken"}}`))
	if e := <-events; e != "unsubscribed" {
		t.Fatalf("OnSystem got %q", e)
	}
	s.closeAll(websocket.StatusServiceRestart, retryhint.Reason(1))
	p.waitState(t, Disconnected)
	p.waitState(t, Connected)
	if k, tk := s.subscribeCount("kept"), s.subscribeCount("taken"); k != 2 || tk != 1 {
		t.Fatalf("subscribes: kept %d, taken %d; want 2 and 1 (not re-sent)", k, tk)
	}
	if err := taken.Unsubscribe(ctx); err != nil { // already forgotten: a no-op
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, "taken", noop); err != nil {
		t.Fatalf("subscribing again after the server's unsubscribe: %v", err)
	}
}

// -32003 on subscribe is final: returned at once, never retried, and not
// re-sent after a reconnect.
func TestSubscribeForbiddenIsFinal(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	c := dial(t, s.url, p.options(true))
	ctx := context.Background()
	_, err := c.Subscribe(ctx, "secret:x", func(string, json.RawMessage) {})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeForbidden {
		t.Fatalf("Subscribe: %v, want -32003", err)
	}
	if _, err := c.Subscribe(ctx, "open", func(string, json.RawMessage) {}); err != nil {
		t.Fatal(err)
	}
	s.closeAll(websocket.StatusServiceRestart, retryhint.Reason(1))
	p.waitState(t, Disconnected)
	p.waitState(t, Connected)
	if n := s.subscribeCount("secret:x"); n != 1 {
		t.Fatalf("secret:x subscribed %d times, want once", n)
	}
	if len(p.delays()) != 1 {
		t.Fatalf("delays %v: only the reconnect's", p.delays())
	}
}

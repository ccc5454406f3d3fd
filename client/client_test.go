package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/protocol"
)

// probe records what a client reports and chooses: states, and every
// backoff delay (the injected Sleep returns at once, so tests never wait
// the real delay and assert on the chosen one instead).
type probe struct {
	mu     sync.Mutex
	sleeps []time.Duration
	states chan stateEvent
	// block, when non-nil, makes Sleep wait for a value on it.
	block chan struct{}
}

type stateEvent struct {
	s   State
	err error
}

func newProbe() *probe { return &probe{states: make(chan stateEvent, 256)} }

func (p *probe) options(reconnect bool) *Options {
	return &Options{
		Reconnect: reconnect,
		Rand:      func() float64 { return 0.5 },
		Sleep:     p.sleep,
		OnState:   func(s State, err error) { p.states <- stateEvent{s, err} },
	}
}

func (p *probe) sleep(ctx context.Context, d time.Duration) error {
	p.mu.Lock()
	p.sleeps = append(p.sleeps, d)
	block := p.block
	p.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
		}
	}
	return ctx.Err()
}

func (p *probe) delays() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.sleeps...)
}

// waitState reads reported states until want, returning its error.
func (p *probe) waitState(t *testing.T, want State) error {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-p.states:
			if e.s == want {
				return e.err
			}
		case <-timeout:
			t.Fatalf("state %v never reported", want)
		}
	}
}

func dial(t *testing.T, url string, opts *Options) *Client {
	t.Helper()
	c, err := Dial(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCallConcurrentMatchedByID(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	c := dial(t, s.url, nil)
	ctx := context.Background()

	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			var got struct{ N int }
			if err := c.Call(ctx, "echo", map[string]int{"n": i}, &got); err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			if got.N != i {
				t.Errorf("call %d got the response of %d", i, got.N)
			}
		})
	}
	wg.Wait()
}

func TestCallResponsesOutOfOrder(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	c := dial(t, s.url, nil)
	ctx := context.Background()

	// "gate" is answered only after "open": its response arrives after a
	// later call's, and must still reach the right caller.
	gated := make(chan error, 1)
	var got struct{ Gated bool }
	go func() { gated <- c.Call(ctx, "gate", nil, &got) }()
	// The server writes open's response before gate's, whichever request
	// it reads first.
	if err := c.Call(ctx, "open", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-gated; err != nil || !got.Gated {
		t.Fatalf("gate: err %v, result %+v", err, got)
	}
}

func TestCallErrorIsProtocolError(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	c := dial(t, s.url, nil)
	ctx := context.Background()

	tests := []struct {
		give     string
		wantCode int
		wantData *protocol.OverloadedData
	}{
		{give: "fail", wantCode: protocol.CodeOverloaded, wantData: &protocol.OverloadedData{Class: "chat", Reason: "MEMORY", RetryAfterMs: 250}},
		{give: "no.such.method", wantCode: protocol.CodeMethodNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			err := c.Call(ctx, tt.give, nil, nil)
			var pe *protocol.Error
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *protocol.Error", err)
			}
			if pe.Code != tt.wantCode {
				t.Errorf("code = %d, want %d", pe.Code, tt.wantCode)
			}
			if tt.wantData == nil {
				if pe.Data != nil {
					t.Errorf("data = %v, want none", pe.Data)
				}
				return
			}
			raw, ok := pe.Data.(json.RawMessage)
			if !ok {
				t.Fatalf("data is %T, want json.RawMessage", pe.Data)
			}
			var d protocol.OverloadedData
			if err := json.Unmarshal(raw, &d); err != nil || d != *tt.wantData {
				t.Errorf("data = %s, want %+v", raw, *tt.wantData)
			}
		})
	}
	// The connection survives error responses.
	if err := c.Call(ctx, "echo", []int{1}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestSubscribePublishKeepsOrder(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	sub := dial(t, s.url, nil)
	pub := dial(t, s.url, nil)
	ctx := context.Background()

	const n = 1000
	var got []int
	all := make(chan struct{})
	_, err := sub.Subscribe(ctx, "room.1", func(topic string, data json.RawMessage) {
		var m struct{ Seq int }
		if topic != "room.1" || json.Unmarshal(data, &m) != nil {
			t.Errorf("bad delivery %q %s", topic, data)
		}
		got = append(got, m.Seq) // only the handler goroutine touches got
		if len(got) == n {
			close(all)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := pub.Publish(ctx, "room.1", map[string]int{"seq": i}); err != nil {
			t.Fatal(err)
		}
	}
	<-all
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d has seq %d: order lost", i, v)
		}
	}
}

func TestSubscribeRules(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	c := dial(t, s.url, nil)
	ctx := context.Background()
	h := func(string, json.RawMessage) {}

	if _, err := c.Subscribe(ctx, "__sys", h); !isCode(err, protocol.CodeInvalidParams) {
		t.Errorf("reserved topic: err = %v, want -32602", err)
	}
	if err := c.Publish(ctx, "bad topic", 1); !isCode(err, protocol.CodeInvalidParams) {
		t.Errorf("bad topic: err = %v, want -32602", err)
	}
	sub, err := c.Subscribe(ctx, "a", h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, "a", h); !errors.Is(err, ErrAlreadySubscribed) {
		t.Errorf("second Subscribe: err = %v, want ErrAlreadySubscribed", err)
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Errorf("second Unsubscribe: %v", err)
	}
	if _, err := c.Subscribe(ctx, "a", h); err != nil {
		t.Errorf("Subscribe after Unsubscribe: %v", err)
	}
}

func TestUnsubscribeStopsDelivery(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	c := dial(t, s.url, nil)
	ctx := context.Background()

	got := make(chan string, 16)
	h := func(topic string, _ json.RawMessage) { got <- topic }
	a, err := c.Subscribe(ctx, "a", h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, "b", h); err != nil {
		t.Fatal(err)
	}
	if err := a.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	// Publishes are answered after the fan-out is written, and one
	// connection's frames arrive in order: had "a" been delivered, it
	// would come before "b".
	if err := c.Publish(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "b", 2); err != nil {
		t.Fatal(err)
	}
	if topic := <-got; topic != "b" {
		t.Fatalf("delivered %q after Unsubscribe", topic)
	}
}

func isCode(err error, code int) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Code == code
}

func TestServerBatchFrames(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	c := dial(t, s.url, nil)
	ctx := context.Background()

	const n = 50
	var seqs []int
	all := make(chan struct{})
	if _, err := c.Subscribe(ctx, "burst", func(_ string, data json.RawMessage) {
		var m struct{ Seq int }
		json.Unmarshal(data, &m)
		seqs = append(seqs, m.Seq)
		if len(seqs) == n {
			close(all)
		}
	}); err != nil {
		t.Fatal(err)
	}
	var res struct{ N int }
	if err := c.Call(ctx, "burst", map[string]any{"topic": "burst", "n": n}, &res); err != nil {
		t.Fatal(err) // -32600 here means rt.batch was not offered by default
	}
	if res.N != n {
		t.Fatalf("result %+v", res)
	}
	<-all
	for i, v := range seqs {
		if v != i {
			t.Fatalf("element %d has seq %d", i, v)
		}
	}
}

func TestTokenAndHeaders(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	dial(t, s.url, &Options{Token: "tok", Header: http.Header{"X-App": {"demo"}}, Subprotocols: []string{}})
	s.mu.Lock()
	h := s.headers[0]
	s.mu.Unlock()
	if got := h.Get("Authorization"); got != "Bearer tok" {
		t.Errorf("Authorization = %q", got)
	}
	if got := h.Get("X-App"); got != "demo" {
		t.Errorf("X-App = %q", got)
	}
	if got := h.Get("Sec-WebSocket-Protocol"); got != "" {
		t.Errorf("empty Subprotocols offered %q", got)
	}
}

func TestDialHandshakeRejected(t *testing.T) {
	tests := []struct {
		name      string
		give      func(w http.ResponseWriter)
		wantCode  int
		wantAfter time.Duration
	}{
		{"503 Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
		}, 503, 2 * time.Second},
		{"429 body hint wins", func(w http.ResponseWriter) {
			// Retry-After says 2 (whole seconds); the body says 1500ms.
			retryhint.Answer(w, http.StatusTooManyRequests, retryhint.HeadRateLimited, 1500)
		}, 429, 1500 * time.Millisecond},
		{"401", func(w http.ResponseWriter) { w.WriteHeader(http.StatusUnauthorized) }, 401, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			s := newTestServer(t)
			s.setReject(func(w http.ResponseWriter, _ *http.Request) bool { tt.give(w); return true })
			p := newProbe()
			c, err := Dial(context.Background(), s.url, p.options(true))
			var he *HandshakeError
			if c != nil || !errors.As(err, &he) {
				t.Fatalf("Dial = %v, %v; want *HandshakeError", c, err)
			}
			if he.Status != tt.wantCode || he.RetryAfter != tt.wantAfter {
				t.Errorf("got status %d retry %v, want %d %v", he.Status, he.RetryAfter, tt.wantCode, tt.wantAfter)
			}
			if err := p.waitState(t, Closed); err != error(he) {
				t.Errorf("OnState(Closed) err = %v", err)
			}
		})
	}
}

func TestDialClosedRightAfterUpgrade(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	s.closeAfterAccept = &websocket.CloseError{Code: websocket.StatusTryAgainLater, Reason: retryhint.Reason(700)}
	_, err := Dial(context.Background(), s.url, nil)
	var ce *CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("Dial err = %v, want *CloseError", err)
	}
	if ce.Code != 1013 || ce.RetryAfter != 700*time.Millisecond {
		t.Errorf("got %+v", ce)
	}
}

func TestReconnectHonoursCloseHintAndResubscribes(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	c := dial(t, s.url, p.options(true))
	ctx := context.Background()

	got := make(chan string, 1)
	if _, err := c.Subscribe(ctx, "news", func(_ string, data json.RawMessage) { got <- string(data) }); err != nil {
		t.Fatal(err)
	}
	p.waitState(t, Connected)

	s.closeAll(websocket.StatusServiceRestart, retryhint.Reason(300))
	var ce *CloseError
	if err := p.waitState(t, Disconnected); !errors.As(err, &ce) || ce.Code != 1012 {
		t.Fatalf("Disconnected with %v, want close 1012", err)
	}
	p.waitState(t, Connected)

	d := p.delays()
	if len(d) != 1 || d[0] < 300*time.Millisecond || d[0] > 300*time.Millisecond+DefaultMinBackoff {
		t.Fatalf("backoff delays %v, want one in [300ms, 800ms]", d)
	}
	if n := s.subscribeCount("news"); n != 2 {
		t.Fatalf("server saw %d subscribes to news, want 2 (resubscribed)", n)
	}
	// Published after the reconnect: arrives on the new connection.
	if err := c.Publish(ctx, "news", "after"); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != `"after"` {
		t.Fatalf("got %s", m)
	}
}

func TestReconnectHonours503ThenConnects(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	c := dial(t, s.url, p.options(true))
	p.waitState(t, Connected)

	var once sync.Once
	s.setReject(func(w http.ResponseWriter, _ *http.Request) bool {
		rejected := false
		once.Do(func() {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			rejected = true
		})
		return rejected
	})
	s.closeAll(websocket.StatusServiceRestart, retryhint.Reason(300))
	p.waitState(t, Connected)
	d := p.delays()
	if len(d) != 2 || d[0] < 300*time.Millisecond || d[1] < time.Second {
		t.Fatalf("delays %v, want [>=300ms, >=1s]", d)
	}
	if err := c.Call(context.Background(), "echo", []int{1}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestDrainingHintIsAFallback(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	events := make(chan string, 1)
	opts := p.options(true)
	opts.OnSystem = func(event string, params json.RawMessage) { events <- event + " " + string(params) }
	dial(t, s.url, opts)
	p.waitState(t, Connected)

	s.broadcast(protocol.AppendSystem(nil, protocol.EventDraining, 4000))
	if e := <-events; e != `draining {"event":"draining","reconnectAfterMs":4000}` {
		t.Fatalf("OnSystem got %s", e)
	}
	s.closeAll(websocket.StatusServiceRestart, "") // no retry hint
	p.waitState(t, Connected)
	if d := p.delays(); len(d) != 1 || d[0] < 4*time.Second {
		t.Fatalf("delays %v, want one >= 4s (the draining hint)", d)
	}
}

func TestNoReconnect(t *testing.T) {
	tests := []struct {
		name      string
		reconnect bool
		code      websocket.StatusCode
	}{
		{"policy violation", true, websocket.StatusPolicyViolation},
		{"message too big", true, websocket.StatusMessageTooBig},
		{"unsupported data", true, websocket.StatusUnsupportedData},
		{"reconnect off", false, websocket.StatusServiceRestart},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			s := newTestServer(t)
			p := newProbe()
			c := dial(t, s.url, p.options(tt.reconnect))
			p.waitState(t, Connected)
			s.closeAll(tt.code, "bye")
			<-c.Done()
			var ce *CloseError
			if err := c.Err(); !errors.As(err, &ce) || ce.Code != int(tt.code) || ce.Reason != "bye" {
				t.Fatalf("Err() = %v, want close %d", err, tt.code)
			}
			if err := p.waitState(t, Closed); !errors.As(err, &ce) {
				t.Errorf("OnState(Closed) err = %v", err)
			}
			if d := p.delays(); len(d) != 0 {
				t.Errorf("slept %v: must not reconnect", d)
			}
			if err := c.Call(context.Background(), "echo", nil, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Call after close: %v, want ErrClosed", err)
			}
		})
	}
}

func TestReconnectStopsOnAuthFailure(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	c := dial(t, s.url, p.options(true))
	s.setReject(func(w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusUnauthorized)
		return true
	})
	s.closeAll(websocket.StatusServiceRestart, retryhint.Reason(10))
	<-c.Done()
	var he *HandshakeError
	if !errors.As(c.Err(), &he) || he.Status != 401 {
		t.Fatalf("Err() = %v, want 401", c.Err())
	}
	if d := p.delays(); len(d) != 1 {
		t.Errorf("delays %v: one attempt, then stop", d)
	}
}

func TestCallInFlightFailsOnDisconnect(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	p.block = make(chan struct{}) // hold the client in its backoff
	c := dial(t, s.url, p.options(true))

	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), "hang", nil, nil) }()
	<-s.hung
	s.closeAll(websocket.StatusInternalError, "oops")
	err := <-errc
	var ce *CloseError
	if !errors.Is(err, ErrDisconnected) || !errors.As(err, &ce) || ce.Code != 1011 {
		t.Fatalf("in-flight call: %v, want ErrDisconnected wrapping close 1011", err)
	}
	p.waitState(t, Disconnected)
	if err := c.Call(context.Background(), "echo", nil, nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("call while reconnecting: %v, want ErrDisconnected", err)
	}
	if err := c.Notify(context.Background(), "echo", nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("notify while reconnecting: %v, want ErrDisconnected", err)
	}
	close(p.block)
	p.waitState(t, Connected)
}

func TestCallContextCancelled(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	c := dial(t, s.url, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, "hang", nil, nil) }()
	<-s.hung
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// The connection is unharmed.
	if err := c.Call(context.Background(), "echo", nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestCloseFailsCallsAndStops(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	p := newProbe()
	c := dial(t, s.url, p.options(true))
	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), "hang", nil, nil) }()
	<-s.hung
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("in-flight call after Close: %v, want ErrClosed", err)
	}
	if err := p.waitState(t, Closed); err != nil {
		t.Errorf("Closed with %v, want nil after Close", err)
	}
	if c.Err() != nil || c.State() != Closed {
		t.Errorf("Err %v State %v", c.Err(), c.State())
	}
	if d := p.delays(); len(d) != 0 {
		t.Errorf("reconnected after Close: %v", d)
	}
	if err := c.CloseNow(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	s := newTestServer(t)
	before := runtime.NumGoroutine()
	ctx := context.Background()
	for range 5 {
		c, err := Dial(ctx, s.url, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Subscribe(ctx, "x", func(string, json.RawMessage) {}); err != nil {
			t.Fatal(err)
		}
		if err := c.Publish(ctx, "x", 1); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// Server-side handlers end asynchronously after each close.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), clientGoroutines())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDialUnreachable(t *testing.T) {
	checkLeaks(t)
	s := newTestServer(t)
	url := s.url
	s.srv.Close()
	if _, err := Dial(context.Background(), url, nil); err == nil {
		t.Fatal("Dial to a closed port succeeded")
	}
}

// Dial(ctx, url, nil) means the defaults, reconnection included; an
// Options value keeps its own Reconnect.
func TestNilOptionsAreTheDefaults(t *testing.T) {
	if got := (*Options)(nil).withDefaults(); !got.Reconnect || got.MinBackoff != DefaultMinBackoff || got.ReadLimit != DefaultReadLimit {
		t.Fatalf("nil options: %+v, want DefaultOptions with every default", got)
	}
	if got := (&Options{}).withDefaults(); got.Reconnect {
		t.Fatal("Options{} reconnects: its zero Reconnect must stay off")
	}
}

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/protocol"
)

func TestPublishReachesSubscribersInOrder(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{})
	sub, pub, other := wstest.Dial(t, url), wstest.Dial(t, url), wstest.Dial(t, url)
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"room:1"}`))
	wstest.MustOK(t, other.Call("subscribe", `{"topic":"room:2"}`))

	const n = 1000
	for i := range n {
		pub.Send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"room:1","data":{"i":%d}}}`, i))
	}
	for i := range n {
		m := sub.Recv()
		if m.Method != "message" || m.Params.Topic != "room:1" {
			t.Fatalf("message %d: got %+v", i, m)
		}
		if want := fmt.Sprintf(`{"i":%d}`, i); string(m.Params.Data) != want {
			t.Fatalf("message %d: data %s, want %s", i, m.Params.Data, want)
		}
	}
	// room:2's subscriber got nothing of room:1: its next frame is the
	// answer to its own request.
	other.Send(`{"jsonrpc":"2.0","id":"mine","method":"unsubscribe","params":{"topic":"room:2"}}`)
	if m := other.Recv(); string(m.ID) != `"mine"` || m.Error != nil {
		t.Fatalf("other received %+v", m)
	}
}

func TestProtocolErrors(t *testing.T) {
	leakcheck.Check(t)
	s, url := startServer(t, Deps{}, Config{MaxSubscriptionsPerConn: 1})
	s.Handle("boom", func(context.Context, *Request) (any, error) { panic("boom") })
	s.Handle("deny", func(context.Context, *Request) (any, error) {
		return nil, protocol.NewError(protocol.CodeForbidden, "", nil)
	})
	s.Handle("fail", func(context.Context, *Request) (any, error) { return nil, errors.New("secret detail") })
	c := wstest.Dial(t, url)
	tests := []struct {
		name  string
		give  string
		code  int
		id    string
		inMsg string
	}{
		{"not json", `{"jsonrpc":`, protocol.CodeParseError, "null", ""},
		{"empty batch", `[]`, protocol.CodeInvalidRequest, "null", ""},
		{"not an object", `42`, protocol.CodeInvalidRequest, "null", ""},
		{"wrong version", `{"jsonrpc":"1.0","id":7,"method":"x"}`, protocol.CodeInvalidRequest, "7", ""},
		{"method not string", `{"jsonrpc":"2.0","id":"a","method":5}`, protocol.CodeInvalidRequest, `"a"`, ""},
		{"bad id", `{"jsonrpc":"2.0","id":{},"method":"x"}`, protocol.CodeInvalidRequest, "null", ""},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"nope"}`, protocol.CodeMethodNotFound, "1", ""},
		{"bad topic", `{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topic":"a b"}}`, protocol.CodeInvalidParams, "1", "topic"},
		{"reserved topic", `{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"__sys","data":1}}`, protocol.CodeInvalidParams, "1", "reserved"},
		{"long topic", `{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topic":"` + strings.Repeat("a", 257) + `"}}`, protocol.CodeInvalidParams, "1", "topic"},
		{"missing topic", `{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{}}`, protocol.CodeInvalidParams, "1", "missing"},
		{"missing data", `{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t"}}`, protocol.CodeInvalidParams, "1", "data"},
		{"params not object", `{"jsonrpc":"2.0","id":1,"method":"publish","params":[1]}`, protocol.CodeInvalidParams, "1", ""},
		{"handler panics", `{"jsonrpc":"2.0","id":2,"method":"boom"}`, protocol.CodeInternal, "2", ""},
		{"handler error hidden", `{"jsonrpc":"2.0","id":3,"method":"fail"}`, protocol.CodeInternal, "3", ""},
		{"handler protocol error", `{"jsonrpc":"2.0","id":4,"method":"deny"}`, protocol.CodeForbidden, "4", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.T = t
			c.Send(tt.give)
			m := c.Recv()
			if m.Error == nil || m.Error.Code != tt.code {
				t.Fatalf("got %+v, want error %d", m, tt.code)
			}
			if string(m.ID) != tt.id {
				t.Errorf("id %s, want %s", m.ID, tt.id)
			}
			if !strings.Contains(m.Error.Message, tt.inMsg) {
				t.Errorf("message %q does not mention %q", m.Error.Message, tt.inMsg)
			}
			if strings.Contains(m.Error.Message, "secret") {
				t.Errorf("handler error text leaked: %q", m.Error.Message)
			}
		})
	}
	c.T = t
	// The connection survived all of it; the subscription limit answers
	// -32004 with the limit in data.
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"a"}`))
	m := c.Call("subscribe", `{"topic":"b"}`)
	if m.Error == nil || m.Error.Code != protocol.CodeLimitExceeded || string(m.Error.Data) != `{"limit":1}` {
		t.Fatalf("second subscription: %+v", m.Error)
	}
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"a"}`)) // already subscribed: not a new one
}

func TestBatchAndNotifications(t *testing.T) {
	leakcheck.Check(t)
	s, url := startServer(t, Deps{})
	var notified atomic.Int32
	ran := make(chan struct{}, 8)
	s.Handle("echo", func(_ context.Context, r *Request) (any, error) {
		if r.ID == nil {
			notified.Add(1)
			ran <- struct{}{}
		}
		return r.Params, nil
	})
	c := wstest.Dial(t, url)
	// A notification gets no response: the next frame answers the request.
	c.Send(`{"jsonrpc":"2.0","method":"echo","params":[1]}`)
	c.Send(`{"jsonrpc":"2.0","id":"req","method":"echo","params":{"x":2}}`)
	m := c.Recv()
	if string(m.ID) != `"req"` {
		t.Fatalf("the notification was answered: %+v", m)
	}
	wstest.MustOK(t, m)
	if string(m.Result) != `{"x":2}` {
		t.Fatalf("echo result %s", m.Result)
	}
	// Application calls run in goroutines of their own: the notification
	// may finish after the request it came before.
	select {
	case <-ran:
	case <-t.Context().Done():
	}
	if notified.Load() != 1 {
		t.Fatalf("notification ran %d times", notified.Load())
	}

	c.Send(`[{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topic":"t"}},` +
		`{"jsonrpc":"2.0","method":"publish","params":{"topic":"t","data":"n"}},` +
		`{"jsonrpc":"2.0","id":2,"method":"echo","params":[3]},` +
		`{"bad":true}]`)
	// The publish delivers to ourselves before the batch answer is queued.
	first := c.Recv()
	if first.Method != "message" || string(first.Params.Data) != `"n"` {
		t.Fatalf("first frame %+v", first)
	}
	var resp []wstest.Frame
	if err := json.Unmarshal(c.RecvRaw(), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp) != 3 {
		t.Fatalf("batch answered %d responses, want 3 (no answer to the notification)", len(resp))
	}
	if string(resp[0].ID) != "1" || resp[0].Error != nil {
		t.Errorf("resp[0] = %+v", resp[0])
	}
	if string(resp[1].ID) != "2" || string(resp[1].Result) != "[3]" {
		t.Errorf("resp[1] = %+v", resp[1])
	}
	if resp[2].Error == nil || resp[2].Error.Code != protocol.CodeInvalidRequest {
		t.Errorf("resp[2] = %+v", resp[2])
	}
	// A batch of notifications only gets no answer at all.
	c.Send(`[{"jsonrpc":"2.0","method":"echo","params":[1]}]`)
	c.Send(`{"jsonrpc":"2.0","id":"after","method":"echo","params":[9]}`)
	if m := c.Recv(); string(m.ID) != `"after"` || string(m.Result) != "[9]" {
		t.Fatalf("after notification batch: %+v", m)
	}
}

func TestBinaryFrameCloses1003(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{})
	c := wstest.Dial(t, url)
	if err := c.WS.Write(context.Background(), websocket.MessageBinary, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if code, _ := c.CloseStatus(); code != websocket.StatusUnsupportedData {
		t.Fatalf("close %d, want 1003", code)
	}
}

// RFC 6455 section 8.1: a text frame that is not UTF-8 fails the
// connection with 1007. Relayed, it would fail every browser subscriber's
// connection instead; they never see it.
func TestInvalidUTF8Closes1007(t *testing.T) {
	leakcheck.Check(t)
	m := metrics.NewDiscard()
	_, url := startServer(t, Deps{Metrics: m})
	sub := wstest.Dial(t, url)
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"t"}`))
	c := wstest.Dial(t, url)
	c.Send(`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":"` + "\xff\xfe" + `"}}`)
	if code, _ := c.CloseStatus(); code != websocket.StatusInvalidFramePayloadData {
		t.Fatalf("close %d, want 1007", code)
	}
	if v := testutilValue(m.ProtocolErrors.WithLabelValues("1007")); v != 1 {
		t.Fatalf("protocol_errors_total{code=1007} = %v", v)
	}
	wstest.MustOK(t, wstest.Dial(t, url).Call("publish", `{"topic":"t","data":"é"}`))
	if got := sub.ExpectMessage("t"); got != `"é"` {
		t.Fatalf("subscriber got %q first", got)
	}
}

func TestOversizeMessageCloses1009(t *testing.T) {
	leakcheck.Check(t)
	m := metrics.NewDiscard()
	_, url := startServer(t, Deps{Metrics: m}, Config{MaxMessageBytes: 1024})
	c := wstest.Dial(t, url)
	// Exactly at the limit is fine.
	at := `{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":"`
	at += strings.Repeat("x", 1024-len(at)-3) + `"}}`
	if len(at) != 1024 {
		t.Fatalf("frame is %d bytes", len(at))
	}
	c.Send(at)
	wstest.MustOK(t, c.Recv())
	c.Send(at + " ")
	if code, _ := c.CloseStatus(); code != websocket.StatusMessageTooBig {
		t.Fatalf("close %d, want 1009", code)
	}
}

// A subscriber that stops reading is cut off with 1013 once its backlog
// passes SendQueueBytes; a healthy subscriber of the same topic receives
// every message in order meanwhile.
func TestSlowConsumerIsCutOffHealthyOneGetsEverything(t *testing.T) {
	leakcheck.Check(t)
	m := metrics.NewDiscard()
	_, url := startServer(t, Deps{Metrics: m}, Config{SendQueueBytes: 256 << 10})
	stalled, healthy, pub := wstest.Dial(t, url), wstest.Dial(t, url), wstest.Dial(t, url)
	wstest.MustOK(t, stalled.Call("subscribe", `{"topic":"feed"}`))
	wstest.MustOK(t, healthy.Call("subscribe", `{"topic":"feed"}`))

	code, reason := wstest.StalledAndHealthy(t, pub, healthy, stalled, "feed", 20000, 1000, func() bool {
		return testutilValue(m.SlowConsumerDisconnects) > 0
	})
	if code != websocket.StatusTryAgainLater {
		t.Fatalf("stalled close %d %q, want 1013", code, reason)
	}
	wstest.RetryHint(t, reason)
	if v := testutilValue(m.SlowConsumerDisconnects); v != 1 {
		t.Fatalf("slow_consumer_disconnects_total = %v, want 1", v)
	}
}

func TestDrainNotifiesThenCloses1012(t *testing.T) {
	leakcheck.Check(t)
	s, url := startServer(t, Deps{})
	clients := []*wstest.Conn{wstest.Dial(t, url), wstest.Dial(t, url), wstest.Dial(t, url)}
	for _, c := range clients {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"t"}`))
	}
	if !s.Ready() {
		t.Fatal("not ready before drain")
	}
	done := make(chan struct{})
	go func() {
		s.Drain(context.Background(), 300*time.Millisecond)
		close(done)
	}()
	for _, c := range clients {
		m := c.Recv()
		if m.Method != "system" || m.Params.Event != "draining" || m.Params.ReconnectAfterMs <= 0 {
			t.Fatalf("first frame during drain: %+v", m)
		}
		code, reason := c.CloseStatus()
		if code != websocket.StatusServiceRestart {
			t.Fatalf("close %d %q, want 1012", code, reason)
		}
		wstest.RetryHint(t, reason)
	}
	<-done
	if s.Ready() {
		t.Fatal("ready while draining")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, url, nil)
	if err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("dial while draining: %v %v", resp, err)
	}
	// Without a gate the server itself refuses, with the standard answer:
	// a JSON body and a Retry-After agreeing with its hint.
	body, _ := io.ReadAll(resp.Body)
	hint := retryhint.FromBody(body)
	if resp.Header.Get("Content-Type") != "application/json" || hint <= 0 ||
		resp.Header.Get("Retry-After") != strconv.FormatInt(retryhint.RetryAfterSeconds(hint.Milliseconds()), 10) {
		t.Fatalf("503 while draining: %v %s", resp.Header, body)
	}
}

func TestDrainScheduleSpreadsCloses(t *testing.T) {
	tests := []struct {
		n    int
		d    time.Duration
		want []time.Duration
	}{
		{1, time.Second, []time.Duration{0}},
		{4, time.Second, []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}},
		{3, 0, []time.Duration{0, 0, 0}},
	}
	for _, tt := range tests {
		got := drainSchedule(tt.n, tt.d)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("drainSchedule(%d, %v) = %v, want %v", tt.n, tt.d, got, tt.want)
		}
	}
}

func TestServerSidePublish(t *testing.T) {
	leakcheck.Check(t)
	s, url := startServer(t, Deps{})
	c := wstest.Dial(t, url)
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"news"}`))
	if err := s.Publish("news", json.RawMessage(`{ "a" : 1 }`)); err != nil {
		t.Fatal(err)
	}
	if m := c.Recv(); m.Method != "message" || string(m.Params.Data) != `{"a":1}` {
		t.Fatalf("got %+v", m)
	}
	for _, bad := range []struct {
		topic string
		data  string
	}{{"__sys", "1"}, {"a b", "1"}, {"ok", "{"}, {"ok", "\"\xff\xfe\""}} {
		if err := s.Publish(bad.topic, json.RawMessage(bad.data)); err == nil {
			t.Errorf("Publish(%q, %q) accepted", bad.topic, bad.data)
		}
	}
}

// A peer that stops answering pings is dead: its connection is closed and
// its slot and subscriptions are given back, while a live peer stays.
func TestDeadPeerIsDetectedByPing(t *testing.T) {
	leakcheck.Check(t)
	s, url := startServer(t, Deps{}, Config{PingInterval: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
	dead, live := wstest.Dial(t, url), wstest.Dial(t, url)
	wstest.MustOK(t, dead.Call("subscribe", `{"topic":"t"}`))
	// live keeps reading, so its client answers pings; dead never reads
	// again, so its pongs are never sent.
	liveErr := make(chan error, 1)
	go func() {
		_, err := live.Read()
		liveErr <- err
	}()
	testkit.Eventually(t, time.Until(time.Now().Add(20*time.Second)), func() string {
		conns, subs := s.Counts()
		return fmt.Sprintf("dead peer still counted: %d connections, %d subscriptions", conns, subs)
	}, func() bool {
		conns, subs := s.Counts()
		return conns == 1 && subs == 0
	})
	select {
	case err := <-liveErr:
		t.Fatalf("live peer lost its connection: %v", err)
	default:
	}
	live.WS.CloseNow()
	<-liveErr
}

// A peer that keeps sending is alive even if it never reads, so never
// answers a ping: it stays connected through the ping rounds that cut a
// silent peer off.
func TestSendingPeerIsAliveWithoutPongs(t *testing.T) {
	leakcheck.Check(t)
	s, url := startServer(t, Deps{}, Config{PingInterval: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
	sender := wstest.Dial(t, url)
	wstest.Dial(t, url) // the silent peer: never reads, never sends
	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			// A notification: no answer comes back, so the sender needs
			// never read.
			if !sender.TrySend(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"x","data":1}}`) {
				return
			}
		}
	}()
	// The silent peer connected after the sender, so by the time its
	// missing pong has cut it off, the sender has been through at least
	// as many ping rounds.
	testkit.Eventually(t, time.Until(time.Now().Add(20*time.Second)), func() string {
		conns, _ := s.Counts()
		return fmt.Sprintf("silent peer still counted: %d connections", conns)
	}, func() bool {
		conns, _ := s.Counts()
		return conns <= 1
	})
	close(stop)
	<-sent
	if conns, _ := s.Counts(); conns != 1 {
		t.Fatalf("%d connections, want the sender's", conns)
	}
	wstest.MustOK(t, sender.Call("subscribe", `{"topic":"still-here"}`))
}

// One invalid frame is answered and the connection stays; a stream of
// them is not a client speaking the protocol: 1008, after the answers.
func TestRepeatedInvalidFramesClose1008(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{})
	c := wstest.Dial(t, url)
	for range maxInvalid - 1 {
		c.Send(`not json`)
		if f := c.Recv(); f.Error == nil || f.Error.Code != protocol.CodeParseError {
			t.Fatalf("got %+v", f)
		}
	}
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"t"}`)) // a valid request resets the count
	for range maxInvalid - 1 {
		c.Send(`{"jsonrpc":"1.0","id":1,"method":"x"}`)
		c.Recv()
	}
	c.Send(`[]`)
	if f := c.Recv(); f.Error == nil || f.Error.Code != protocol.CodeInvalidRequest {
		t.Fatalf("the last invalid frame was not answered before the close: %+v", f)
	}
	if code, reason := c.CloseStatus(); code != websocket.StatusPolicyViolation {
		t.Fatalf("close %d %q, want 1008", code, reason)
	}
}

// Close is a bounded Shutdown: a started server with a connection closes
// it (1001, going away) and stops everything it started.
func TestCloseIsBoundedShutdown(t *testing.T) {
	defer leakcheck.Check(t)
	s := mustNew(t, Deps{})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	c := wstest.Dial(t, "ws"+strings.TrimPrefix(hs.URL, "http"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if code, _ := c.CloseStatus(); code != websocket.StatusGoingAway {
		t.Fatalf("close code %d, want 1001", code)
	}
}

// The server's counts, and the pressure monitor's samples when it has
// one, follow each connection and subscription exactly: added as it is
// made (before its answer), taken as it ends, a connection's whole set at
// once when it closes; a repeated subscribe, one refused by the limit and
// an unsubscribe of nothing count nothing. With a monitor the count is
// kept in the monitor alone; without one, in the server.
func TestPressureCountsFollowTheServer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		monitor bool
	}{{"monitor", true}, {"no monitor", false}} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			var deps Deps
			if tc.monitor {
				mon, err := pressure.New(pressure.DefaultConfig(), pressure.Deps{})
				if err != nil {
					t.Fatal(err)
				}
				deps.Pressure = mon
			}
			s, url := startServer(t, deps, Config{MaxSubscriptionsPerConn: 3})
			counts := func() string {
				c, sub := s.Counts()
				if deps.Pressure == nil {
					return fmt.Sprintf("server %d/%d", c, sub)
				}
				deps.Pressure.Sample()
				snap := deps.Pressure.Snapshot()
				return fmt.Sprintf("server %d/%d, monitor %d/%d", c, sub, snap.Connections, snap.Subscriptions)
			}
			want := func(conns, subs int64) string {
				if deps.Pressure == nil {
					return fmt.Sprintf("server %d/%d", conns, subs)
				}
				return fmt.Sprintf("server %d/%d, monitor %d/%d", conns, subs, conns, subs)
			}
			// exactly: a call's count is made before its answer.
			exactly := func(conns, subs int64) {
				t.Helper()
				if got, want := counts(), want(conns, subs); got != want {
					t.Fatalf("counts %s, want %s", got, want)
				}
			}
			// soon: a close is counted when the server has seen it.
			soon := func(conns, subs int64) {
				t.Helper()
				var got string
				testkit.Eventually(t, time.Until(time.Now().Add(20*time.Second)), func() string {
					return fmt.Sprintf("counts %s, want %s", got, want(conns, subs))
				}, func() bool { got = counts(); return got == want(conns, subs) })
			}
			a, b := wstest.Dial(t, url), wstest.Dial(t, url)
			soon(2, 0)
			for _, topic := range []string{"x", "y", "z", "x"} {
				wstest.MustOK(t, a.Call("subscribe", `{"topic":"`+topic+`"}`))
			}
			if f := a.Call("subscribe", `{"topic":"w"}`); f.Error == nil || f.Error.Code != protocol.CodeLimitExceeded {
				t.Fatalf("a fourth subscription: %+v, want the limit's error", f)
			}
			wstest.MustOK(t, b.Call("subscribe", `{"topic":"x"}`))
			exactly(2, 4)
			wstest.MustOK(t, a.Call("unsubscribe", `{"topic":"y"}`))
			wstest.MustOK(t, a.Call("unsubscribe", `{"topic":"y"}`))
			exactly(2, 3)
			wstest.MustOK(t, a.Call("subscribe", `{"topic":"y"}`))
			exactly(2, 4)
			a.WS.CloseNow() // with three subscriptions
			soon(1, 1)
			b.WS.CloseNow()
			soon(0, 0)
		})
	}
}

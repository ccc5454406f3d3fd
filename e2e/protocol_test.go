package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// Every error code the binary can produce, through the real binary and a
// real HTTP RPC backend; the connection survives each of them.
func TestEveryProtocolErrorCode(t *testing.T) {
	leakcheck.Check(t)
	be := newBackend(t)
	p := start(t, fmt.Sprintf(`
limits: {maxSubscriptionsPerConn: 2}
rpc: {proxy: {url: %q, timeout: 300ms}}
admission:
  classes:
    limited: {rate: {limit: 1, per: 1m, by: conn}}
    shed: {concurrency: {max: 1}}
  methods: {"limited.*": limited, "block": shed, "echo2": shed}
`, be.URL))
	c := wstest.Dial(t, p.WS())
	tests := []struct {
		name string
		give string
		code int
	}{
		{"parse error", `{"jsonrpc":"2.0",`, protocol.CodeParseError},
		{"invalid request", `{"jsonrpc":"2.0","id":1}`, protocol.CodeInvalidRequest},
		{"method not found at the backend, relayed", `{"jsonrpc":"2.0","id":1,"method":"nope"}`, protocol.CodeMethodNotFound},
		{"invalid params", `{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topic":"no spaces"}}`, protocol.CodeInvalidParams},
		{"forbidden relayed from the backend", `{"jsonrpc":"2.0","id":1,"method":"forbid"}`, protocol.CodeForbidden},
		{"upstream status", `{"jsonrpc":"2.0","id":1,"method":"broken"}`, protocol.CodeUpstream},
		{"upstream garbage", `{"jsonrpc":"2.0","id":1,"method":"garbage"}`, protocol.CodeUpstream},
		{"upstream oversize", `{"jsonrpc":"2.0","id":1,"method":"huge"}`, protocol.CodeUpstream},
		{"upstream timeout", `{"jsonrpc":"2.0","id":1,"method":"block"}`, protocol.CodeUpstream},
	}
	for _, tt := range tests {
		c.Send(tt.give)
		f := c.Recv()
		if f.Error == nil || f.Error.Code != tt.code {
			t.Fatalf("%s: got %+v, want error %d", tt.name, f, tt.code)
		}
		if tt.code == protocol.CodeForbidden && string(f.Error.Data) != `{"why":"not yours"}` {
			t.Errorf("backend error data not relayed as is: %s", f.Error.Data)
		}
	}

	// -32004: the subscription limit, with the limit in data.
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"a"}`))
	wstest.MustOK(t, c.Call("subscribe", `{"topic":"b"}`))
	f := c.Call("subscribe", `{"topic":"c"}`)
	if f.Error == nil || f.Error.Code != protocol.CodeLimitExceeded || string(f.Error.Data) != `{"limit":2}` {
		t.Fatalf("third subscription: %+v", f.Error)
	}

	// -32002: a per-class rate limit, with its data fields.
	wstest.MustOK(t, c.Call("limited.x", `{}`))
	f = c.Call("limited.x", `{}`)
	if f.Error == nil || f.Error.Code != protocol.CodeRateLimited {
		t.Fatalf("rate-limited call: %+v", f)
	}
	var rl protocol.RateLimitedData
	if err := json.Unmarshal(f.Error.Data, &rl); err != nil || rl.Class != "limited" || rl.RetryAfterMs <= 0 || rl.Limit != 1 || rl.Remaining != 0 {
		t.Fatalf("-32002 data %s", f.Error.Data)
	}

	// -32001: a concurrency cap of one, held by a call the backend blocks.
	be2 := wstest.Dial(t, p.WS())
	be2.Send(`{"jsonrpc":"2.0","id":"held","method":"block"}`)
	p.waitMetric(`admission_accepted_total{class="shed"}`, 10*time.Second, func(v float64) bool { return v >= 2 })
	f = c.Call("echo2", `{}`)
	if f.Error == nil || f.Error.Code != protocol.CodeOverloaded {
		t.Fatalf("shed call: %+v", f)
	}
	var ov protocol.OverloadedData
	if err := json.Unmarshal(f.Error.Data, &ov); err != nil || ov.Class != "shed" || ov.Reason != "CONCURRENCY" || ov.RetryAfterMs <= 0 {
		t.Fatalf("-32001 data %s", f.Error.Data)
	}
	if v := p.metric(`admission_rejected_total{class="shed",reason="CONCURRENCY"}`); v != 1 {
		t.Fatalf("admission_rejected_total{shed,CONCURRENCY} = %v", v)
	}
	be.unblock()
	if f := be2.Recv(); string(f.ID) != `"held"` {
		t.Fatalf("held call answered %+v", f)
	}

	// The connection is still healthy after all of that, and the backend
	// saw who was calling.
	f = c.Call("echo", `{"x":1}`)
	wstest.MustOK(t, f)
	if !strings.Contains(string(f.Result), `"params":{"x":1}`) {
		t.Fatalf("echo result %s", f.Result)
	}
	be.mu.Lock()
	h := be.headers[len(be.headers)-1]
	be.mu.Unlock()
	if h.Get("X-Rtserver-Conn") == "" || h.Get("X-Rtserver-Client-Ip") == "" {
		t.Fatalf("backend headers %v", h)
	}
}

func TestBinaryAndOversizeFramesClose(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "limits: {maxMessageBytes: 1024}\n")
	bin := wstest.Dial(t, p.WS())
	if err := bin.WS.Write(context.Background(), websocket.MessageBinary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if code, _ := bin.CloseStatus(); code != websocket.StatusUnsupportedData {
		t.Fatalf("binary frame: close %d, want 1003", code)
	}
	big := wstest.Dial(t, p.WS())
	big.Send(`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"t","data":"` + strings.Repeat("x", 2000) + `"}}`)
	if code, _ := big.CloseStatus(); code != websocket.StatusMessageTooBig {
		t.Fatalf("oversize frame: close %d, want 1009", code)
	}
}

// A subscriber that stops reading is closed with 1013 once its backlog
// passes limits.sendQueueBytes, while a healthy subscriber of the same
// topic receives all 20,000 messages in order.
func TestStalledSubscriberCutOffHealthyGetsAll(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "limits: {sendQueueBytes: 262144, writeTimeout: 30s}\n")
	stalled, healthy, pub := wstest.Dial(t, p.WS()), wstest.Dial(t, p.WS()), wstest.Dial(t, p.WS())
	wstest.MustOK(t, stalled.Call("subscribe", `{"topic":"feed"}`))
	wstest.MustOK(t, healthy.Call("subscribe", `{"topic":"feed"}`))

	code, reason := wstest.StalledAndHealthy(t, pub, healthy, stalled, "feed", 20000, 1000, func() bool {
		return p.metric("slow_consumer_disconnects_total") == 1
	})
	if code != websocket.StatusTryAgainLater {
		t.Fatalf("stalled subscriber closed %d %q, want 1013", code, reason)
	}
	wstest.RetryHint(t, reason)
}

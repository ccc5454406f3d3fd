package server

import (
	"testing"
	"time"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
)

// Grants run before the message tier and the publish-attempt count: a
// refused publish spends none of a one-per-hour budget and is not a
// publish attempt; unsubscribe is never refused; refusals keep the
// connection and say which topic.
func TestGrantsBeforeMessageTier(t *testing.T) {
	leakcheck.Check(t)
	tr := newTier(t, "once", message.Rule{Rate: &message.Rate{Limit: 1, Per: time.Hour, By: "conn"}},
		map[string]string{"publish": "once", "subscribe": "once"})
	mon := tr.mon
	checker, err := access.New(access.Config{
		Namespaces: []access.Namespace{{Pattern: "secret:*"}}, // nobody
	}, access.Deps{Metrics: tr.m})
	if err != nil {
		t.Fatal(err)
	}
	_, url := startServer(t, Deps{Router: tr.router, Access: checker, Pressure: mon, Metrics: tr.m})
	c := wstest.Dial(t, url)
	for range 3 {
		f := c.Call("publish", `{"topic":"secret:x","data":1}`)
		if f.Error == nil || f.Error.Code != protocol.CodeForbidden || string(f.Error.Data) != `{"topic":"secret:x"}` {
			t.Fatalf("refused publish answered %+v", f)
		}
		if f := c.Call("subscribe", `{"topic":"secret:x"}`); f.Error == nil || f.Error.Code != protocol.CodeForbidden {
			t.Fatalf("refused subscribe answered %+v", f)
		}
		wstest.MustOK(t, c.Call("unsubscribe", `{"topic":"secret:x"}`))
	}
	wstest.MustOK(t, c.Call("publish", `{"topic":"open","data":1}`)) // the budget's one token
	if f := c.Call("publish", `{"topic":"open","data":1}`); f.Error == nil || f.Error.Code != protocol.CodeRateLimited {
		t.Fatalf("second granted publish answered %+v, want -32002", f)
	}
	mon.Sample()
	snap := mon.Snapshot()
	if snap.RateOf("open") == 0 || snap.RateOf("secret:x") != 0 {
		t.Errorf("publish attempts: open %v/s, secret:x %v/s; want only the granted topic counted", snap.RateOf("open"), snap.RateOf("secret:x"))
	}
}

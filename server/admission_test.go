package server

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
)

// A class with one concurrency slot: its lease comes back when the
// handler returns, when it panics, and when the connection dies mid-call,
// so the next call is admitted each time, and in-flight ends at zero.
func TestConcurrencyLeaseReleasedOnEveryPath(t *testing.T) {
	leakcheck.Check(t)
	tr := newTier(t, "one", message.Rule{Concurrency: &message.Concurrency{Max: 1}}, map[string]string{"work.*": "one"})
	s, url := startServer(t, Deps{Router: tr.router, Metrics: tr.m})
	entered := make(chan struct{}, 1)
	s.Handle("work.ok", func(context.Context, *Request) (any, error) { return "done", nil })
	s.Handle("work.panic", func(context.Context, *Request) (any, error) { panic("boom") })
	s.Handle("work.hang", func(ctx context.Context, _ *Request) (any, error) {
		entered <- struct{}{}
		<-ctx.Done() // until the connection dies
		return nil, ctx.Err()
	})
	class, _ := tr.adm.Class("one")

	c := wstest.Dial(t, url)
	wstest.MustOK(t, c.Call("work.ok", `{}`))
	if f := c.Call("work.panic", `{}`); f.Error == nil || f.Error.Code != protocol.CodeInternal {
		t.Fatalf("panicking handler answered %+v", f)
	}
	wstest.MustOK(t, c.Call("work.ok", `{}`)) // the panic gave the slot back

	dying := wstest.Dial(t, url)
	dying.Send(`{"jsonrpc":"2.0","id":1,"method":"work.hang"}`)
	<-entered
	f := c.Call("work.ok", `{}`)
	if f.Error == nil || f.Error.Code != protocol.CodeOverloaded {
		t.Fatalf("second call while one hangs: %+v", f)
	}
	var d protocol.OverloadedData
	if err := json.Unmarshal(f.Error.Data, &d); err != nil || d.Reason != message.ReasonConcurrency || d.Class != "one" {
		t.Fatalf("-32001 data %s", f.Error.Data)
	}
	dying.WS.CloseNow()
	testkit.Eventually(t, time.Until(time.Now().Add(10*time.Second)), func() string {
		return fmt.Sprintf("in-flight %d after the connection died", class.InFlight())
	}, func() bool { return class.InFlight() == 0 })
	wstest.MustOK(t, c.Call("work.ok", `{}`))
	if n := class.InFlight(); n != 0 {
		t.Fatalf("in-flight %d at the end", n)
	}
}

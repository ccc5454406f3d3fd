package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// TestHistoryPublishRefusedAtOnceWhileRedisDown: once the instance knows
// Redis is unreachable (/readyz 503), a burst of history publishes, more
// than a connection may have waiting for the store, is refused, each with
// -32001 HISTORY_UNAVAILABLE, and the connection is read on meanwhile (a
// call sent after the burst is answered after the refusals). The time to
// the first and to the last refusal is logged, not asserted.
func TestHistoryPublishRefusedAtOnceWhileRedisDown(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	p := start(t, fleetConfig(r.URL(), historyConfig(100, "5m", "")))
	c := wstest.Dial(t, p.WS())
	wstest.MustOK(t, c.Call("publish", `{"topic":"room:1","data":"before"}`))

	r.Stop()
	testkit.Eventually(t, 30*time.Second, "/readyz 503", func() bool { return p.status("/readyz") == 503 })

	const n = 200 // over the 64 a connection may have waiting for the store
	began := time.Now()
	for i := range n {
		c.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"publish","params":{"topic":"room:1","data":%d}}`, i+1, i))
	}
	c.Send(`{"jsonrpc":"2.0","id":"fence","method":"unsubscribe","params":{"topic":"fence"}}`)
	var first, last time.Duration
	refused := 0
	for {
		f := c.Recv()
		if string(f.ID) == `"fence"` {
			break
		}
		if f.ID == nil {
			continue
		}
		var data struct{ Reason string }
		if f.Error == nil || f.Error.Code != -32001 || json.Unmarshal(f.Error.Data, &data) != nil || data.Reason != "HISTORY_UNAVAILABLE" {
			t.Fatalf("publish %s answered %s, want -32001 HISTORY_UNAVAILABLE", f.ID, describe(f))
		}
		if refused++; refused == 1 {
			first = time.Since(began)
		}
		last = time.Since(began)
	}
	if refused != n {
		t.Fatalf("%d of %d publishes refused before the fence's answer", refused, n)
	}
	t.Logf("Redis down: first of %d history publishes refused after %v, the last after %v", n, first.Round(time.Microsecond), last.Round(time.Microsecond))

	r.Restart()
	testkit.Eventually(t, 30*time.Second, "/readyz 200", func() bool { return p.status("/readyz") == 200 })
	wstest.MustOK(t, c.Call("publish", `{"topic":"room:1","data":"after"}`))
}

// describe is a frame's answer for a failure message.
func describe(f wstest.Frame) string {
	if f.Error == nil {
		return "success " + string(f.Result)
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s %s", f.Error.Code, f.Error.Message, f.Error.Data))
}

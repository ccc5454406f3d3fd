package e2e

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/leakcheck"
)

// The Go client rides through a deploy: the instance drains (1012 with a
// retry hint), a new one starts on the same address, and the client
// reconnects on its own, resubscribes, and receives what is published on
// the new instance.
func TestGoClientReconnectsAndResubscribesAcrossRestart(t *testing.T) {
	leakcheck.Check(t)
	old := start(t, "drain: {duration: 100ms}\n")
	addr := old.Addr

	states := make(chan client.State, 16)
	opts := client.DefaultOptions()
	opts.MinBackoff, opts.MaxBackoff = 50*time.Millisecond, 500*time.Millisecond
	opts.OnState = func(s client.State, _ error) {
		select {
		case states <- s:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, old.WS(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan string, 4)
	if _, err := c.Subscribe(ctx, "deploys", func(_ string, data json.RawMessage) { got <- string(data) }); err != nil {
		t.Fatal(err)
	}

	old.signal(syscall.SIGTERM)
	if code := old.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("old instance exit %d", code)
	}
	for s := range states {
		if s == client.Disconnected {
			break
		}
	}
	fresh := startAt(t, addr, "")
	fresh.waitReady()
	for s := range states {
		if s == client.Connected {
			break
		}
	}
	// The resubscription happened before Connected was reported.
	if err := c.Publish(ctx, "deploys", "v2"); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d != `"v2"` {
			t.Fatalf("got %s", d)
		}
	case <-ctx.Done():
		t.Fatal("no message after reconnecting")
	}
}

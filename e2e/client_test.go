package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/leakcheck"
)

// dialSubscribed dials the Go client and subscribes it to topic; the
// messages' data arrive on the channel.
func dialSubscribed(t *testing.T, ctx context.Context, url string, opts *client.Options, topic string) (*client.Client, <-chan string) {
	t.Helper()
	c, err := client.Dial(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	if _, err := c.Subscribe(ctx, topic, func(_ string, data json.RawMessage) { got <- string(data) }); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c, got
}

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
	c, got := dialSubscribed(t, ctx, old.WS(), opts, "deploys")
	defer c.Close()

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

// The Go client keeps a connection alive past its token's exp: it answers
// each tokenExpiring with a token from its TokenFunc and the refresh
// method, and never reconnects.
func TestGoClientRefreshesItsToken(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, fmt.Sprintf("auth: {jwt: {hmacSecret: %q, refreshNotice: 1s}}\nhandshake: {perTickBudget: 0}\n", expirySecret))
	var issued atomic.Int64
	opts := client.DefaultOptions()
	opts.TokenFunc = func(context.Context) (string, error) {
		issued.Add(1)
		return hsToken(t, "alice", time.Now().Add(3*time.Second)), nil
	}
	notices := make(chan struct{}, 4)
	opts.OnSystem = func(event string, _ json.RawMessage) {
		if event == "tokenExpiring" {
			notices <- struct{}{}
		}
	}
	var drops atomic.Int64
	opts.OnState = func(s client.State, _ error) {
		if s == client.Disconnected {
			drops.Add(1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, got := dialSubscribed(t, ctx, p.WS(), opts, "news")
	defer c.Close()
	// Three notices on one connection: each one after the first follows a
	// refresh (an unrefreshed connection is closed at exp instead).
	for range 3 {
		select {
		case <-notices:
		case <-ctx.Done():
			t.Fatal("no tokenExpiring notice")
		}
	}
	if err := c.Publish(ctx, "news", "still here"); err != nil {
		t.Fatal(err)
	}
	if d := <-got; d != `"still here"` {
		t.Fatalf("got %s", d)
	}
	if drops.Load() != 0 || issued.Load() < 3 {
		t.Fatalf("%d disconnects, %d tokens issued; want 0 and at least 3 (connect + refreshes)", drops.Load(), issued.Load())
	}
}

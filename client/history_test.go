package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/server"
)

// A subscriber of a history topic whose connection drops recovers on its
// own: every message once, in order, and OnRecovery says so.
func TestRecoversHistoryTopicsAfterReconnect(t *testing.T) {
	defer leakcheck.Check(t)
	pol := history.Policy{Size: 100, TTL: time.Minute}
	// No store given: the server keeps the streams in its process.
	url, stop := serveServer(t, testkit.Must(server.New(server.Config{}, server.Deps{
		HistoryPolicy: func(string) history.Policy { return pol },
	})))
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	var got []string
	recoveries := make(chan bool, 4)
	opts := DefaultOptions()
	opts.MinBackoff = time.Millisecond
	opts.OnRecovery = func(topic string, recovered bool, reason string) { recoveries <- recovered }
	sub, err := Dial(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := Dial(ctx, url, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	all := make(chan struct{})
	s, err := sub.Subscribe(ctx, "room", func(_ string, data json.RawMessage) {
		mu.Lock()
		got = append(got, string(data))
		if len(got) == 10 {
			close(all)
		}
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if i == 4 {
			// The subscriber's connection drops; the publisher goes on.
			sub.mu.Lock()
			cn := sub.conn
			sub.mu.Unlock()
			_ = cn.ws.CloseNow()
		}
		pos, err := pub.PublishAt(ctx, "room", i)
		if err != nil || pos.Offset != uint64(i+1) {
			t.Fatalf("publish %d: %+v %v", i, pos, err)
		}
	}
	if !<-recoveries {
		t.Fatal("not recovered")
	}
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatal("timed out")
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8 9]" {
		t.Fatalf("got %v", got)
	}
	if p := s.Position(); p.Offset != 10 || p.Epoch == "" {
		t.Fatalf("position %+v", p)
	}
}

// A publish the server closes the connection for (1009: larger than its
// limits.maxMessageBytes) fails with that close, not with a bare
// "client closed" after a retry that could never succeed.
func TestPublishAtFailsWithTheCloseItCaused(t *testing.T) {
	defer leakcheck.Check(t)
	url, stop := serveRT(t, server.Config{}, server.Deps{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, opts := range []*Options{{}, DefaultOptions()} {
		c, err := Dial(ctx, url, opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.PublishAt(ctx, "room", strings.Repeat("x", 70000))
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Code != 1009 {
			t.Errorf("reconnect %v: publish of 70000 bytes: %v, want the 1009 close", opts.Reconnect, err)
		}
		_ = c.Close()
	}
}

// serveRT serves a real rtserver server over TCP and returns its
// WebSocket URL and how to stop it (before the test's leak check).
func serveRT(t *testing.T, cfg server.Config, deps server.Deps) (url string, stop func()) {
	t.Helper()
	srv, err := server.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return serveServer(t, srv)
}

// serveServer is serveRT for a server already built.
func serveServer(t *testing.T, srv *server.Server) (url string, stop func()) {
	t.Helper()
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	return "ws" + strings.TrimPrefix(hs.URL, "http"), func() {
		hs.CloseClientConnections()
		_ = srv.Shutdown(context.Background())
		hs.Close()
	}
}

// A PublishAt whose connection drops before the answer sends the message
// again, with the same idempotency key, on the next connection as soon as
// it is up, however many reconnect attempts the outage took: it never
// waits a backoff of its own (here one longer than its deadline) for a
// connection that is already back.
func TestPublishAtResendsOnTheNextConnection(t *testing.T) {
	s := newTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pubCtx, pubCancel := context.WithCancel(ctx)
	defer pubCancel()
	opts := DefaultOptions()
	opts.Sleep = func(sctx context.Context, d time.Duration) error {
		if sctx == pubCtx {
			<-sctx.Done() // PublishAt's own backoff: past its deadline
			return sctx.Err()
		}
		return sctx.Err() // a reconnect attempt: at once
	}
	c, err := Dial(ctx, s.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var outage atomic.Int32
	outage.Store(5)
	s.setReject(func(w http.ResponseWriter, r *http.Request) bool {
		if outage.Add(-1) < 0 {
			return false
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
		return true
	})
	s.mu.Lock()
	s.lose = 1
	s.mu.Unlock()
	if _, err := c.PublishAt(pubCtx, "room", 1); err != nil {
		t.Fatalf("PublishAt: %v", err)
	}
	s.mu.Lock()
	keys := slices.Clone(s.keys)
	s.mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("publishes' keys %q, want the same key twice", keys)
	}
	if n := outage.Load(); n >= 0 {
		t.Fatalf("the outage was not over (%d refusals left)", n)
	}
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/server"
)

// A subscriber of a history topic whose connection drops recovers on its
// own: every message once, in order, and OnRecovery says so.
func TestRecoversHistoryTopicsAfterReconnect(t *testing.T) {
	defer leakcheck.Check(t)
	pol := history.Policy{Size: 100, TTL: time.Minute}
	url, stop := serveRT(t, server.Options{
		History:       history.NewMemory(history.MemoryOptions{}),
		HistoryPolicy: func(string) history.Policy { return pol },
	})
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
	url, stop := serveRT(t, server.Options{})
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
func serveRT(t *testing.T, opts server.Options) (url string, stop func()) {
	t.Helper()
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
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

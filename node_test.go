package rtserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/leakcheck"
)

var errBroken = errors.New("listener broken")

// breakableListener is a real listener whose Accept fails for good, with
// errBroken, once breakNow is called: a listener failure Serve cannot
// retry.
type breakableListener struct {
	net.Listener
	broken atomic.Bool
}

func (l *breakableListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && l.broken.Load() {
		return nil, errBroken
	}
	return c, err
}

func (l *breakableListener) breakNow() {
	l.broken.Store(true)
	l.Listener.Close()
}

func quietConfig() rtserver.Config {
	cfg := rtserver.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// A failing listener ends everything Serve started, at once (no drain,
// though ctx is still live and the drain is an hour long), and Serve
// returns the listener's error only after every goroutine it started has
// ended.
func TestServeListenerFailureStopsEverything(t *testing.T) {
	leakcheck.Check(t)
	cfg := quietConfig()
	cfg.Drain.Duration = time.Hour
	node, err := rtserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &breakableListener{Listener: real}
	done := make(chan error, 1)
	go func() { done <- node.Serve(context.Background(), ln, nil) }()

	c, err := client.Dial(context.Background(), "ws://"+real.Addr().String()+"/ws", &client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, err := c.Subscribe(context.Background(), "room:1", func(string, json.RawMessage) {}); err != nil {
		t.Fatal(err)
	}

	ln.breakNow()
	select {
	case err := <-done:
		if !errors.Is(err, errBroken) {
			t.Fatalf("Serve = %v, want the listener's error", err)
		}
	case <-time.After(time.Minute): // a liveness bound, not a timing assertion
		t.Fatal("Serve did not return after its listener failed (drained instead of stopping?)")
	}
	select {
	case <-c.Done(): // the open connection was closed by the stop
	case <-time.After(time.Minute):
		t.Fatal("the open connection survived Serve's return")
	}
}

// An admin listener that cannot be opened fails Serve before anything
// starts: the main listener is closed, and nothing is left running.
func TestServeAdminListenFailure(t *testing.T) {
	leakcheck.Check(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := quietConfig()
	cfg.AdminListen = taken.Addr().String()
	node, err := rtserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Serve(context.Background(), ln, nil); err == nil {
		t.Fatal("Serve succeeded with its admin address taken")
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("main listener after a failed Serve: Accept = %v, want net.ErrClosed", err)
	}
}

// A stop by ctx drains and returns nil with nothing left running, the
// admin listener included.
func TestServeStopsCleanly(t *testing.T) {
	leakcheck.Check(t)
	cfg := quietConfig()
	cfg.AdminListen = "127.0.0.1:0"
	cfg.Drain.Duration = time.Millisecond
	node, err := rtserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Serve(ctx, ln, nil) }()
	c, err := client.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", &client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v after a stop", err)
	}
	<-c.Done()
}

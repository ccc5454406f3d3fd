package rtserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
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

func quietConfig() rtserver.Config { return rtserver.DefaultConfig() }

// quiet discards the node's logs.
var quiet = rtserver.Deps{Logger: slog.New(slog.DiscardHandler)}

// A failing listener ends everything Serve started, at once (no drain,
// though ctx is still live and the drain is an hour long), and Serve
// returns the listener's error only after every goroutine it started has
// ended.
func TestServeListenerFailureStopsEverything(t *testing.T) {
	leakcheck.Check(t)
	cfg := quietConfig()
	cfg.Drain.Duration = time.Hour
	node, err := rtserver.New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &breakableListener{Listener: real}
	done := make(chan error, 1)
	go func() { done <- node.Serve(ln) }()

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
	node, err := rtserver.New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Serve(ln); err == nil || errors.Is(err, rtserver.ErrNodeClosed) {
		t.Fatal("Serve succeeded with its admin address taken")
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("main listener after a failed Serve: Accept = %v, want net.ErrClosed", err)
	}
}

// Shutdown drains and Serve returns ErrNodeClosed with nothing left
// running, the admin listener included.
func TestShutdownStopsCleanly(t *testing.T) {
	leakcheck.Check(t)
	cfg := quietConfig()
	cfg.AdminListen = "127.0.0.1:0"
	cfg.Drain.Duration = time.Millisecond
	node, err := rtserver.New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- node.Serve(ln) }()
	c, err := client.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", &client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := node.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := <-done; !errors.Is(err, rtserver.ErrNodeClosed) {
		t.Fatalf("Serve = %v after Shutdown, want ErrNodeClosed", err)
	}
	<-c.Done()
	if err := node.Serve(ln); !errors.Is(err, rtserver.ErrNodeClosed) {
		t.Errorf("a second Serve = %v, want ErrNodeClosed", err)
	}
	if err := node.Shutdown(context.Background()); err != nil {
		t.Errorf("a second Shutdown = %v", err)
	}
}

// When Shutdown's context ends during the drain, the remaining connections
// are closed at once and Shutdown returns the context's error; Close does
// the same to a drain in progress.
func TestShutdownDeadlineStopsHard(t *testing.T) {
	for _, how := range []string{"deadline", "Close"} {
		t.Run(how, func(t *testing.T) {
			leakcheck.Check(t)
			cfg := quietConfig()
			cfg.Drain.Duration = time.Hour // only a hard stop ends it within the test
			node, err := rtserver.New(cfg, quiet)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- node.Serve(ln) }()
			var conns []*client.Client
			for range 3 {
				c, err := client.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", &client.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer c.CloseNow()
				conns = append(conns, c)
			}
			ctx, cancel := context.WithCancel(context.Background())
			shut := make(chan error, 1)
			go func() { shut <- node.Shutdown(ctx) }()
			// The drain has begun once /readyz says so.
			for {
				if code := getStatus(t, "http://"+ln.Addr().String()+"/readyz"); code == http.StatusServiceUnavailable {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if how == "deadline" {
				cancel()
				if err := <-shut; !errors.Is(err, context.Canceled) {
					t.Errorf("Shutdown = %v, want context.Canceled", err)
				}
			} else {
				if err := node.Close(); err != nil {
					t.Errorf("Close = %v", err)
				}
				if err := <-shut; err != nil {
					t.Errorf("Shutdown = %v after Close", err)
				}
				cancel()
			}
			if err := <-done; !errors.Is(err, rtserver.ErrNodeClosed) {
				t.Fatalf("Serve = %v, want ErrNodeClosed", err)
			}
			for _, c := range conns {
				<-c.Done()
			}
		})
	}
}

// Close stops a serving node at once; Shutdown and Close before Serve
// release the node, and Serve then refuses.
func TestCloseAndStopBeforeServe(t *testing.T) {
	leakcheck.Check(t)
	node, err := rtserver.New(quietConfig(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- node.Serve(ln) }()
	// The listener is open before Serve runs: the request waits in its
	// backlog until Serve accepts it.
	if code := getStatus(t, "http://"+ln.Addr().String()+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	if err := node.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, rtserver.ErrNodeClosed) {
		t.Fatalf("Serve = %v after Close", err)
	}

	for _, stop := range []func(*rtserver.Node) error{
		(*rtserver.Node).Close,
		func(n *rtserver.Node) error { return n.Shutdown(context.Background()) },
	} {
		unserved, err := rtserver.New(quietConfig(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		if err := stop(unserved); err != nil {
			t.Fatalf("stop before Serve = %v", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := unserved.Serve(ln); !errors.Is(err, rtserver.ErrNodeClosed) {
			t.Errorf("Serve after a stop = %v, want ErrNodeClosed", err)
		}
	}
}

// A zero Config runs: each part on its package's zero-value defaults.
func TestZeroConfigRuns(t *testing.T) {
	leakcheck.Check(t)
	node, err := rtserver.New(rtserver.Config{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- node.Serve(ln) }()
	// A zero handshake.Config refuses clients that send no Origin; the
	// client sends the server's own.
	c, err := client.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", &client.Options{Header: http.Header{"Origin": {"http://" + ln.Addr().String()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, err := c.Subscribe(context.Background(), "room:1", func(string, json.RawMessage) {}); err != nil {
		t.Fatal(err)
	}
	if err := node.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, rtserver.ErrNodeClosed) {
		t.Fatal(err)
	}
}

// getStatus is the status of a GET of url.
func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

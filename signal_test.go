package rtserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/leakcheck"
)

// The first signal drains (the connection is told and closed over the
// window), the second stops at once; runUntil then returns nil. A node
// stopped by something else returns ErrNodeClosed.
func TestRunUntilTwoSignals(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.Drain.Duration = time.Hour // only the second signal ends it within the test
	n, err := New(cfg, Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	ran := make(chan error, 1)
	go func() { ran <- n.runUntil(ln, sigs) }()
	// The drain closes connection i of n at i/n of its window: the first
	// at once, the second half an hour in.
	var conns [2]*client.Client
	for i := range conns {
		if conns[i], err = client.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", &client.Options{}); err != nil {
			t.Fatal(err)
		}
		defer conns[i].CloseNow()
	}

	sigs <- syscall.SIGTERM
	closed := 0
	select {
	case <-conns[0].Done():
	case <-conns[1].Done():
		closed = 1
	}
	select {
	case <-conns[1-closed].Done():
		t.Fatal("both connections were closed before the second signal, within an hour's drain")
	default:
	}
	sigs <- syscall.SIGINT
	if err := <-ran; err != nil {
		t.Fatalf("runUntil = %v after two signals, want nil", err)
	}
	<-conns[1-closed].Done()

	other, err := New(cfg, Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { ran <- other.runUntil(ln2, make(chan os.Signal)) }()
	resp, err := http.Get("http://" + ln2.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	other.Close()
	if err := <-ran; !errors.Is(err, ErrNodeClosed) {
		t.Fatalf("runUntil = %v after Close, want ErrNodeClosed", err)
	}
}

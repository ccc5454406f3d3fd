//go:build unix

package acceptlog

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rtserver/rtserver/internal/logx"
)

// With every descriptor in use, accept fails with EMFILE: each failure is
// counted, logged once per interval (with the number suppressed), and
// returned as it was, so the server's retry takes the connection once
// descriptors are free again. The limit is real: the process's soft
// RLIMIT_NOFILE, lowered for the test and then restored.
func TestOutOfFilesIsCountedAndLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	count := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	var logged bytes.Buffer
	log := slog.New(logx.Limit(slog.NewTextHandler(&logged, nil), time.Hour, nil))
	l := Wrap(ln, count, log)
	client, err := net.Dial("tcp", ln.Addr().String()) // waits in the accept queue
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Skip("no RLIMIT_NOFILE:", err)
	}
	var fill []*os.File
	func() {
		// Use up every descriptor below a lowered limit, then restore it
		// before anything else in the test needs one.
		lowered := saved
		lowered.Cur = 256
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
			t.Skip("cannot lower RLIMIT_NOFILE:", err)
		}
		defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved)
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				break
			}
			fill = append(fill, f)
		}
		for range 3 {
			if c, err := l.Accept(); err == nil || !OutOfFiles(err) {
				if c != nil {
					c.Close()
				}
				t.Errorf("Accept with no descriptor left: %v, want EMFILE", err)
			}
		}
	}()
	for _, f := range fill {
		f.Close()
	}
	if n := testutil.ToFloat64(count); n != 3 {
		t.Errorf("counted %v, want 3", n)
	}
	if n := strings.Count(logged.String(), "out of file descriptors"); n != 1 {
		t.Errorf("logged %d lines, want 1 (rate-limited):\n%s", n, logged.String())
	}
	c, err := l.Accept() // descriptors are back: the waiting client gets in
	if err != nil {
		t.Fatalf("Accept after the shortage: %v", err)
	}
	c.Close()
	if n := testutil.ToFloat64(count); n != 3 {
		t.Errorf("a successful accept counted: %v", n)
	}
}

// A wrapped TCP listener still takes accept deadlines, which the handshake
// tier's door needs (without them it steps aside and every upgrade goes
// through net/http); a listener without them does not gain them.
func TestWrapKeepsDeadlines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, ok := Wrap(ln, nil, nil).(deadliner); !ok {
		t.Error("a wrapped TCP listener lost SetDeadline")
	}
	if _, ok := Wrap(struct{ net.Listener }{ln}, nil, nil).(deadliner); ok {
		t.Error("a listener without SetDeadline gained one")
	}
}

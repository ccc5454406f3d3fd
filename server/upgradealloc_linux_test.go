package server

import (
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
)

// sysClient is a TCP client made of system calls alone: it allocates
// nothing in this process, so that what an upgrade allocates is counted
// for the server alone.
type sysClient struct {
	sa  syscall.SockaddrInet4
	buf [512]byte
}

const upgradeHead = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
	"Sec-WebSocket-Protocol: rtserver.batch.v1\r\n\r\n"

func newSysClient(tb testing.TB, addr string) *sysClient {
	ap := testkit.Must(net.ResolveTCPAddr("tcp", addr)).AddrPort()
	c := &sysClient{sa: syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}}
	return c
}

// upgrade connects, sends the head and reads the 101 up to its blank
// line: the socket, open, is returned.
func (c *sysClient) upgrade(tb testing.TB) int {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Connect(fd, &c.sa); err != nil {
		tb.Fatal(err)
	}
	if _, err := syscall.Write(fd, []byte(upgradeHead)); err != nil {
		tb.Fatal(err)
	}
	n := 0
	for {
		k, err := syscall.Read(fd, c.buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil || k == 0 {
			tb.Fatalf("reading the 101: %v (%q)", err, c.buf[:n])
		}
		n += k
		if n >= 4 && string(c.buf[n-4:n]) == "\r\n\r\n" {
			break
		}
	}
	if string(c.buf[:12]) != "HTTP/1.1 101" {
		tb.Fatalf("not a 101: %q", c.buf[:n])
	}
	return fd
}

// stormGate is a gate as the storm benchmark configures it.
func stormGate(tb testing.TB, m *metrics.Metrics) *handshake.Gate {
	return testkit.Must(handshake.New(handshake.Config{
		MaxConnections: 1 << 20,
		PerTickBudget:  50,
		Tick:           10 * time.Millisecond,
		MaxQueueWait:   200 * time.Millisecond,
		AllowNoOrigin:  true,
	}, handshake.Deps{Metrics: m}))
}

// upgradeAllocs serves n upgrades through the door and the server, one
// after another, and returns the objects and bytes allocated per upgrade,
// from the connect until the connection is parked and the goroutines
// that served it are gone.
func upgradeAllocs(tb *testing.T, n int) (objects, bytes float64) {
	m := metrics.NewDiscard()
	s := mustNew(tb, Deps{Metrics: m, Gate: stormGate(tb, m)})
	url := serve(tb, s)
	c := newSysClient(tb, url[len("ws://"):])
	fds := make([]int, 0, 2*n)
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	// Warm up: pools, the poller's goroutine, stacks.
	for range n {
		fds = append(fds, c.upgrade(tb))
	}
	settle(tb, s, len(fds), 1<<30)
	base := runtime.NumGoroutine()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		fds = append(fds, c.upgrade(tb))
	}
	settle(tb, s, len(fds), base)
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(n), float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
}

// settle waits, without allocating, until n connections are open and
// parked, and at most g goroutines run (those that served them end once
// their connection parks).
func settle(tb testing.TB, s *Server, n, g int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		open, _ := s.Counts()
		if open == int64(n) && s.poller.known() == n && runtime.NumGoroutine() <= g {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d connections open, %d parked and %d goroutines; want %d, %d and at most %d",
				open, s.poller.known(), runtime.NumGoroutine(), n, n, g)
		}
		runtime.Gosched()
	}
}

// A served upgrade, from the connect to the parked connection, allocates
// about 29 objects (the accepted socket's, the request's, the
// connection's; a few more under the race detector): the request the
// door parses no longer costs two or three per header field, and the 101
// is written without a closure of its own. It took 56.
func TestServedUpgradeAllocs(t *testing.T) {
	if portableRun {
		t.Skip("the door serves upgrades on the fast path only")
	}
	objs, bytes := upgradeAllocs(t, 300)
	t.Logf("%.1f objects, %.0f bytes per served upgrade", objs, bytes)
	if objs > 36 {
		t.Fatalf("a served upgrade allocates %.1f objects, want at most 36", objs)
	}
}

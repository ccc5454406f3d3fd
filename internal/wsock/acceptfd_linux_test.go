package wsock

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
)

// listenRaw is a TCP listener made by lc and its RawListener.
func listenRaw(t *testing.T, lc net.ListenConfig) (net.Listener, *RawListener) {
	t.Helper()
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rl := NewRawListener(ln)
	if rl == nil {
		t.Fatal("no RawListener for a TCP listener")
	}
	t.Cleanup(func() { rl.Close() })
	return ln, rl
}

func always() bool { return true }

// Accept waits for a connection, then takes it with the bytes its client
// sent readable without waiting; the answer and the close reach the
// client; nothing is left open.
func TestRawListenerTakesAndAnswers(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	ln, rl := listenRaw(t, net.ListenConfig{})
	before := testkit.OpenFDs(t)
	const head = "GET /ws HTTP/1.1\r\n\r\n"
	client := make(chan net.Conn, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Error(err)
			close(client)
			return
		}
		_, _ = io.WriteString(c, head)
		client <- c
	}()
	fd, err := rl.Accept(always) // waits for the dial
	if err != nil {
		t.Fatal(err)
	}
	c := <-client
	if c == nil {
		t.FailNow()
	}
	defer c.Close()
	if fl, err := fcntl(fd, syscall.F_GETFL); err != nil || fl&syscall.O_NONBLOCK == 0 {
		t.Fatalf("flags %#x, %v: not non-blocking", fl, err)
	}
	if fl, err := fcntl(fd, syscall.F_GETFD); err != nil || fl&syscall.FD_CLOEXEC == 0 {
		t.Fatalf("descriptor flags %#x, %v: not close-on-exec", fl, err)
	}
	buf := make([]byte, 64)
	n := 0
	for n < len(head) { // the dial may return before the write is in
		k := ReadFD(uintptr(fd), buf[n:])
		n += k
		if k == 0 {
			runtime.Gosched()
		}
	}
	if string(buf[:n]) != head {
		t.Fatalf("read %q", buf[:n])
	}
	if n, err := SendLastFD(uintptr(fd), []byte("no")); n != 2 || err != nil {
		t.Fatalf("send: %d, %v", n, err)
	}
	CloseFD(fd)
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "no" {
		t.Fatalf("client read %q, %v; want the answer, then the end", got, err)
	}
	if after := testkit.OpenFDs(t); after != before+1 { // the client's
		t.Fatalf("%d descriptors open, %d before and the client's", after, before)
	}
}

func fcntl(fd, cmd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// take is asked after each wait: false returns without a connection,
// which net's accept then takes.
func TestRawListenerTakeAfterWait(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	ln, rl := listenRaw(t, net.ListenConfig{})
	for {
		go func() {
			if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
				defer c.Close()
				_, _ = c.Read(make([]byte, 1))
			}
		}()
		asked := 0
		fd, err := rl.Accept(func() bool { asked++; return false })
		if asked == 0 && err == nil {
			// The dial was in before Accept looked: taken without a wait.
			CloseFD(fd)
			continue
		}
		if fd != -1 || err != nil || asked != 1 {
			t.Fatalf("declined: %d, %v, asked %d", fd, err, asked)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return
	}
}

// Wake wakes a waiting Accept with os.ErrDeadlineExceeded until Rearm;
// Close wakes it with an error, and the listening socket is closed once
// the listener is too: a dial is refused.
func TestRawListenerWakeAndClose(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	ln, rl := listenRaw(t, net.ListenConfig{})
	done := make(chan error, 1)
	go func() { _, err := rl.Accept(always); done <- err }()
	rl.Wake()
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("woken: %v", err)
	}
	if _, err := rl.Accept(always); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("before Rearm: %v", err)
	}
	rl.Rearm()
	go func() { _, err := rl.Accept(always); done <- err }()
	addr := ln.Addr().String()
	ln.Close()
	rl.Close()
	if err := <-done; err == nil {
		t.Fatal("Accept after Close: no error")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the listening socket is still open")
	}
}

// NewRawListener makes none for a Unix-socket listener (which keeps net's
// accept) and none in Portable mode.
func TestRawListenerOnlyTCP(t *testing.T) {
	skipUnlessNative(t)
	uln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	if NewRawListener(uln) != nil {
		t.Fatal("a RawListener for a Unix-socket listener")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Cleanup(Portable(true))
	if NewRawListener(ln) != nil {
		t.Fatal("a RawListener in Portable mode")
	}
}

// ConnFromFD makes the connection net's accept makes: a *net.TCPConn with
// the right addresses, TCP_NODELAY on and the listener's keep-alive (read
// off a connection net's accept returned: on by default, off with
// KeepAlive -1), that reads what the client sends and writes to it, and
// that leaves no descriptor behind once closed.
func TestConnFromFDIsNetsConn(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	for _, keep := range []time.Duration{0, -1, 7 * time.Second} {
		ln, raw := listenRaw(t, net.ListenConfig{KeepAlive: keep})
		// The keep-alive net's accept gives this listener's connections.
		c0, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s0, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		ka, ok := KeepAliveOf(s0)
		if !ok {
			t.Fatal("KeepAliveOf read nothing")
		}
		if want := keep >= 0; ka.Enable != want {
			t.Fatalf("KeepAlive %v: read %+v", keep, ka)
		}
		if keep > 0 && ka.Idle != keep {
			t.Fatalf("KeepAlive %v: read idle %v", keep, ka.Idle)
		}
		s0.Close()
		c0.Close()

		before := testkit.OpenFDs(t)
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fd, err := raw.Accept(always)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ConnFromFD(fd, ka)
		if err != nil {
			t.Fatal(err)
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			t.Fatalf("%T, want *net.TCPConn", c)
		}
		if c.RemoteAddr().String() != client.LocalAddr().String() || c.LocalAddr().String() != ln.Addr().String() {
			t.Fatalf("addresses %v <- %v, want %v <- %v", c.LocalAddr(), c.RemoteAddr(), ln.Addr(), client.LocalAddr())
		}
		sc, _ := tc.SyscallConn()
		var nodelay, alive, idle int
		_ = sc.Control(func(fd uintptr) {
			nodelay, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
			alive, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
			idle, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
		})
		if nodelay == 0 {
			t.Fatal("TCP_NODELAY off")
		}
		if (alive != 0) != ka.Enable || ka.Enable && time.Duration(idle)*time.Second != ka.Idle {
			t.Fatalf("keep-alive %d idle %ds, want %+v", alive, idle, ka)
		}
		if _, err := io.WriteString(client, "ping"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("read %q, %v", buf, err)
		}
		// A deadline works: the connection is in the netpoller.
		_ = c.SetReadDeadline(time.Now().Add(-time.Second))
		if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read past the deadline: %v", err)
		}
		if _, err := io.WriteString(c, "pong"); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if got, err := io.ReadAll(client); err != nil || string(got) != "pong" {
			t.Fatalf("client read %q, %v", got, err)
		}
		client.Close()
		if after := testkit.OpenFDs(t); after != before {
			t.Fatalf("%d descriptors open, %d before", after, before)
		}
	}
}

//go:build unix

package pollconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
)

// tcpPair is a wrapped client connection and the server's end of it,
// over real loopback TCP.
func tcpPair(t *testing.T, p Poll) (client, server net.Conn) {
	t.Helper()
	raw, server := testkit.TCPPair(t)
	client = Wrap(raw, p)
	if _, ok := client.(*conn); !ok {
		t.Fatalf("Wrap(*net.TCPConn) = %T, want a polled connection", client)
	}
	// The original is closed: only the duplicate holds the socket.
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the original connection still reads: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	return client, server
}

func TestRoundTripBothWays(t *testing.T) {
	defer leakcheck.Check(t)
	client, server := tcpPair(t, Poll{Min: time.Millisecond, Max: 4 * time.Millisecond})
	// Larger than the socket buffers, so both sides meet EAGAIN.
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	go func() { // echo
		io.Copy(server, server)
	}()
	errc := make(chan error, 1)
	go func() {
		_, err := client.Write(want)
		errc <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("echoed bytes differ")
	}
	if client.LocalAddr().String() != server.RemoteAddr().String() || client.RemoteAddr().String() != server.LocalAddr().String() {
		t.Fatalf("addresses %v -> %v, server sees %v -> %v", client.LocalAddr(), client.RemoteAddr(), server.RemoteAddr(), server.LocalAddr())
	}
}

func TestReadDeadline(t *testing.T) {
	defer leakcheck.Check(t)
	client, _ := tcpPair(t, Poll{Min: time.Millisecond, Max: time.Hour})
	client.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := client.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline = %v, want a timeout", err)
	}
	client.SetReadDeadline(time.Time{})
}

func TestWriteDeadlinePassed(t *testing.T) {
	defer leakcheck.Check(t)
	client, server := tcpPair(t, Poll{Min: time.Millisecond, Max: time.Millisecond})
	client.SetWriteDeadline(time.Now().Add(-time.Second))
	// The server never reads: the write fills both buffers, then times out.
	_, err := client.Write(make([]byte, 32<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past its deadline = %v, want a timeout", err)
	}
	server.Close()
}

func TestEOF(t *testing.T) {
	defer leakcheck.Check(t)
	client, server := tcpPair(t, Poll{Min: time.Millisecond, Max: 2 * time.Millisecond})
	server.Write([]byte("bye"))
	server.Close()
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "bye" {
		t.Fatalf("ReadAll = %q, %v; want \"bye\" then EOF", got, err)
	}
}

func TestCloseWakesRead(t *testing.T) {
	defer leakcheck.Check(t)
	// With an hour between polls, only Close can end the Read.
	client, _ := tcpPair(t, Poll{Min: time.Hour, Max: time.Hour})
	errc := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 10))
		errc <- err
	}()
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read across Close = %v, want net.ErrClosed", err)
	}
	if err := client.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close = %v, want net.ErrClosed", err)
	}
	if _, err := client.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
	}
}

func TestOtherConnsUnchanged(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a, Poll{}); got != a {
		t.Fatalf("Wrap(net.Pipe) = %T, want it unchanged", got)
	}
}

// TestPollSchedule pins when a polled read sees data: Min after a read
// that found some, doubling on each empty read up to Max, on a fake
// clock (the socket is real; only the sleeps are the bubble's).
func TestPollSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		peer := fds[1]
		defer syscall.Close(peer)
		f := os.NewFile(uintptr(fds[0]), "pair")
		raw, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		c := Wrap(raw, Poll{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond})
		defer c.Close()
		start := time.Now()
		read := func() time.Duration {
			t.Helper()
			b := make([]byte, 16)
			n, err := c.Read(b)
			if err != nil || n == 0 {
				t.Fatalf("Read = %d, %v", n, err)
			}
			return time.Since(start)
		}
		// Empty reads at 0, 10, 30, 70, 150 ms (sleeps 10, 20, 40, 80);
		// data written at 100 ms is read at 150.
		go func() {
			time.Sleep(100 * time.Millisecond)
			syscall.Write(peer, []byte("a"))
		}()
		if at := read(); at != 150*time.Millisecond {
			t.Fatalf("read at %v, want 150ms", at)
		}
		// Found data: back to Min. Empty at 150, 160, 180; data at 175
		// is read at 180.
		go func() {
			time.Sleep(25 * time.Millisecond)
			syscall.Write(peer, []byte("b"))
		}()
		if at := read(); at != 180*time.Millisecond {
			t.Fatalf("read at %v, want 180ms", at)
		}
		// Data already buffered is read at once.
		syscall.Write(peer, []byte("c"))
		if at := read(); at != 180*time.Millisecond {
			t.Fatalf("read at %v, want 180ms", at)
		}
		// A deadline cuts a sleep short and is tried once more.
		c.SetReadDeadline(start.Add(185 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != 185*time.Millisecond {
			t.Fatalf("Read = %v at %v, want a timeout at 185ms", err, time.Since(start))
		}
	})
}

package wsock

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
)

// A client that has closed before the read loop comes to wait is seen at
// once: the end is peeked for, not waited for (its readiness may already
// have been delivered).
func TestAwaitInputSeesAnEarlierEnd(t *testing.T) {
	client, server := testkit.TCPPair(t)
	defer server.Close()
	rc := NewConn(server)
	rc.br = bufio.NewReaderSize(server, ReadBufferSize)
	client.Close()
	// Let the end reach the server side, and the runtime's poller see it.
	sc, _ := server.(*net.TCPConn).SyscallConn()
	for ended := false; !ended; {
		_ = sc.Control(func(fd uintptr) {
			n, _, err := syscall.Recvfrom(int(fd), make([]byte, 1), syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			ended = n == 0 && err == nil
		})
		runtime.Gosched()
	}
	done := make(chan struct{})
	go func() {
		rc.AwaitInput(false, false)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a hang guard, not a threshold
		t.Fatal("AwaitInput waits for a client that has already closed")
	}
}

// countingFlusher counts flushes and clears the mark, as the server's
// holdSet does.
type countingFlusher struct {
	h       *Hold
	flushes atomic.Int32
}

func (f *countingFlusher) Flush() {
	f.flushes.Add(1)
	f.h.Unmark()
}

// A publisher's read (its connection has a Hold) takes what has arrived
// with a read the scheduler is not told of; one that would wait flushes
// held frames first, then waits in the poller for the client's next
// bytes, and reports the end when the client closes.
func TestPublisherReadTakesWhatArrivedThenWaits(t *testing.T) {
	leakcheck.Check(t)
	server, client := pair(t)
	defer server.Close()
	rc := NewConn(server)
	f := &countingFlusher{h: new(Hold)}
	f.h.Init(f)
	rc.SetHold(f.h)

	if _, err := client.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	awaitReadable(t, rc.sc, make([]byte, 1))
	p := make([]byte, 8)
	if n, err := rc.Read(p); err != nil || string(p[:n]) != "abc" {
		t.Fatalf("Read = %q, %v; want abc", p[:n], err)
	}
	if got := f.flushes.Load(); got != 0 {
		t.Fatalf("%d flushes with nothing held", got)
	}

	f.h.Mark() // frames held: the read that would wait flushes them first
	type result struct {
		s   string
		err error
	}
	got := make(chan result, 1)
	go func() {
		n, err := rc.Read(p)
		got <- result{string(p[:n]), err}
	}()
	testkit.Eventually(t, 10*time.Second, "the read that waits flushes the held frames", func() bool { return f.flushes.Load() == 1 })
	if _, err := client.Write([]byte("de")); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || r.s != "de" {
		t.Fatalf("Read after waiting = %q, %v; want de", r.s, r.err)
	}

	client.Close()
	if n, err := rc.Read(p); n != 0 || err != io.EOF {
		t.Fatalf("Read after the client closed = %d, %v; want 0, EOF", n, err)
	}
	if got := f.flushes.Load(); got != 1 {
		t.Fatalf("%d flushes, want 1", got)
	}
}

// A muted socket (a paced read's pause) is not readable to a poller for
// a few bytes, is for more than mutedInput, and is again for any byte
// once unmuted; the client's end is seen muted or not.
func TestMuteInputKeepsAFewBytesFromWakingThePoller(t *testing.T) {
	client, server := testkit.TCPPair(t)
	defer client.Close()
	defer server.Close()
	rc := NewConn(server)
	sc, _ := server.(*net.TCPConn).SyscallConn()
	readable := func() bool {
		var in bool
		_ = sc.Control(func(fd uintptr) {
			var fds syscall.FdSet
			fds.Bits[fd/64] |= 1 << (fd % 64)
			tv := syscall.Timeval{}
			n, err := syscall.Select(int(fd)+1, &fds, nil, nil, &tv)
			in = err == nil && n == 1
		})
		return in
	}
	// send writes n bytes and returns once the server side has them all
	// queued (a loopback write may hand them over a little later).
	queued := 0
	send := func(n int) {
		if _, err := client.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		queued += n
		testkit.Eventually(t, 10*time.Second, "the bytes sent reach the server side", func() bool {
			var q int32
			_ = sc.Control(func(fd uintptr) {
				syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&q)))
			})
			return int(q) >= queued
		})
	}
	rc.MuteInput(true)
	send(100)
	if readable() {
		t.Fatal("muted: 100 bytes make the socket readable")
	}
	rc.MuteInput(false)
	if !readable() {
		t.Fatal("unmuted: 100 bytes do not make the socket readable")
	}
	rc.MuteInput(true)
	send(mutedInput)
	if !readable() {
		t.Fatalf("muted: %d bytes do not make the socket readable", queued)
	}
	if _, err := io.ReadFull(server, make([]byte, queued)); err != nil {
		t.Fatal(err)
	}
	queued = 0
	send(1)
	if readable() {
		t.Fatal("muted: 1 byte makes the socket readable")
	}
	client.Close()
	testkit.Eventually(t, 10*time.Second, "muted: the client's end makes the socket readable", readable)
	rc.MuteInput(false)
}

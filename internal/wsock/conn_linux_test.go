package wsock

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
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

// Any connection's read (no Hold) takes what has arrived, waits for what
// has not, and reports the end, then net.ErrClosed once closed: the
// read that does not wait leaves what it cannot tell to the poller's.
func TestReadTakesWhatArrivedThenWaits(t *testing.T) {
	leakcheck.Check(t)
	server, client := pair(t)
	rc := NewConn(server)
	if _, err := client.Write([]byte("close")); err != nil {
		t.Fatal(err)
	}
	awaitReadable(t, rc.sc, make([]byte, 1))
	p := make([]byte, 8)
	if n, err := rc.Read(p); err != nil || string(p[:n]) != "close" {
		t.Fatalf("Read = %q, %v; want close", p[:n], err)
	}
	got := make(chan string, 1)
	go func() {
		n, err := rc.Read(p)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(p[:n])
	}()
	if _, err := client.Write([]byte("xy")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "xy" {
		t.Fatalf("Read after waiting = %q; want xy", s)
	}
	client.Close()
	if n, err := rc.Read(p); n != 0 || err != io.EOF {
		t.Fatalf("Read after the client closed = %d, %v; want 0, EOF", n, err)
	}
	rc.Close()
	if _, err := rc.Read(p); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v; want net.ErrClosed", err)
	}
}

// fillSocket writes to the non-blocking socket until it takes no more
// (its peer does not read), a byte at a time so that it ends full.
func fillSocket(t *testing.T, raw syscall.RawConn) {
	t.Helper()
	one := []byte{0}
	for full := false; !full; {
		if err := raw.Control(func(fd uintptr) {
			var err error
			_, full, err = WriteFD(fd, one)
			if err != nil {
				t.Error(err)
				full = true
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// unixPair is a connected pair of Unix stream sockets, whose send buffer
// stays full while the peer does not read (a TCP socket's may find room
// again as the window moves).
func unixPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return conns[0], conns[1]
}

// The answer to a client's close frame goes out whole and seals the
// connection, whether the socket takes it at once or only once the
// client reads again (what it did not take waits as the tail).
func TestCloseAnswerGoesOutWholeFullSocketOrNot(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(map[bool]string{false: "room", true: "full"}[full], func(t *testing.T) {
			leakcheck.Check(t)
			server, client := unixPair(t)
			defer server.Close()
			defer client.Close()
			rc := NewConn(server)
			answer := CloseFrame(1001, "going")
			answered := make(chan error, 1)
			if full {
				fillSocket(t, rc.sc)
				go func() { answered <- rc.WriteClose(answer, controlWait) }()
				testkit.Eventually(t, 10*time.Second, "the answer waits as the tail", rc.Pending)
			} else {
				answered <- rc.WriteClose(answer, controlWait)
			}
			// The client reads the filler (zeros), then the answer.
			var tail []byte
			filler := 0
			b := make([]byte, 512)
			for len(tail) < len(answer) {
				n, err := client.Read(b)
				for _, x := range b[:n] {
					if len(tail) == 0 && x == 0 {
						filler++
						continue
					}
					tail = append(tail, x)
				}
				if err != nil {
					t.Fatalf("the client's read: %v after %q", err, tail)
				}
			}
			if err := <-answered; err != nil {
				t.Fatalf("WriteClose = %v", err)
			}
			if string(tail) != string(answer) || full != (filler > 0) {
				t.Fatalf("the client read %q after %d filler bytes; want %q", tail, filler, answer)
			}
			if !rc.closeSent || !rc.sealed || rc.Pending() {
				t.Fatalf("closeSent %v, sealed %v, pending %v after the answer", rc.closeSent, rc.sealed, rc.Pending())
			}
			if err := rc.Send([]byte{0x81, 0}, time.Second); err != ErrSealed {
				t.Fatalf("Send after the answer = %v; want ErrSealed", err)
			}
			if err := rc.WriteClose(answer, controlWait); err != nil {
				t.Fatalf("a second WriteClose = %v; want nil (nothing written)", err)
			}
		})
	}
}

// closeWatch is a TCP socket that records, as it is closed, how many of
// the bytes written to it were still unsent.
type closeWatch struct {
	*net.TCPConn
	t        *testing.T
	unsentAt int
}

func (w *closeWatch) Close() error {
	w.unsentAt = unsentBytes(w.t, w.TCPConn)
	return w.TCPConn.Close()
}

// The answer to a client's close frame is the socket's last write: it
// waits in the socket for the close that follows at once, and leaves
// with the FIN in one segment. The client reads the whole answer, then
// the end.
func TestCloseAnswerLeavesWithTheFIN(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	server, client := pair(t)
	defer client.Close()
	w := &closeWatch{TCPConn: server.(*net.TCPConn), t: t, unsentAt: -1}
	rc := NewConn(w)
	rc.SetReader(bufio.NewReaderSize(rc, 256))
	if _, err := client.Write(clientFrame(0x88, CloseFrame(1000, "bye")[2:])); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err := rc.ReadMessage(&buf, 1<<10, false)
	var ce *CloseError
	if !errors.As(err, &ce) || !ce.Received || ce.Code != 1000 {
		t.Fatalf("ReadMessage = %v; want the client's close, received", err)
	}
	answer := CloseFrame(1000, "bye")
	if w.unsentAt != len(answer) {
		t.Fatalf("at the close %d bytes were unsent; want the %d of the answer, held for the FIN", w.unsentAt, len(answer))
	}
	got, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("the client read %q, %v; want %q then the end", got, err, answer)
	}
	// A close frame written without the close right after (WriteClose)
	// goes at once.
	server2, client2 := pair(t)
	defer client2.Close()
	defer server2.Close()
	rc2 := NewConn(server2)
	if err := rc2.WriteClose(answer, controlWait); err != nil {
		t.Fatal(err)
	}
	if n := unsentBytes(t, server2); n != 0 {
		t.Fatalf("WriteClose left %d bytes unsent", n)
	}
}

// TakeClose, a woken connection's first read on the waker's goroutine,
// takes the client's close frame when it is all that has arrived: it is
// answered, the answer held for the FIN, and the socket closed. Anything
// else stays in the read buffer, unread and unchanged, for ReadMessage.
func TestTakeCloseTakesOnlyALoneCloseFrame(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	closeBye := clientFrame(0x88, CloseFrame(1000, "bye")[2:])
	for _, tc := range []struct {
		name   string
		in     []byte
		take   CloseTake
		answer []byte // what the client reads then (taken), or after ReadMessage
		err    string // ReadMessage's error when not taken
	}{
		{"close", closeBye, CloseTaken, CloseFrame(1000, "bye"), ""},
		{"empty close", clientFrame(0x88, nil), CloseTaken, []byte{CloseHead, 0}, ""},
		{"text", clientFrame(0x81, []byte("hi")), NoClose, nil, ""},
		{"close then more", append(bytes.Clone(closeBye), clientFrame(0x81, []byte("hi"))...), NoClose, CloseFrame(1000, "bye"), "received close frame"},
		{"close code 1005", clientFrame(0x88, CloseFrame(1005, "")[2:]), NoClose, nil, "invalid status code"},
		{"reason not UTF-8", clientFrame(0x88, append(CloseFrame(1000, "")[2:], 0xff)), NoClose, CloseFrame(invalidPayload, badCloseReason), "close reason is not valid UTF-8"},
		{"fragmented close", clientFrame(0x08, CloseFrame(1000, "")[2:]), NoClose, nil, "fragmented control frame"},
		{"the end alone", nil, NoClose, nil, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := pair(t)
			defer client.Close()
			w := &closeWatch{TCPConn: server.(*net.TCPConn), t: t, unsentAt: -1}
			rc := NewConn(w)
			defer rc.Close()
			rc.SetReader(bufio.NewReaderSize(rc, 256))
			if tc.in == nil {
				_ = client.(*net.TCPConn).CloseWrite()
			} else if _, err := client.Write(tc.in); err != nil {
				t.Fatal(err)
			}
			var peek [512]byte
			for awaitReadable(t, rc.sc, peek[:]) < len(tc.in) {
			}
			if got := rc.TakeClose(); got != tc.take {
				t.Fatalf("TakeClose = %d; want %d", got, tc.take)
			}
			if tc.take == CloseTaken {
				if w.unsentAt != len(tc.answer) {
					t.Fatalf("at the close %d bytes were unsent; want the %d of the answer", w.unsentAt, len(tc.answer))
				}
				if got, err := io.ReadAll(client); err != nil || !bytes.Equal(got, tc.answer) {
					t.Fatalf("the client read %q, %v; want %q then the end", got, err, tc.answer)
				}
				return
			}
			if n := rc.br.Buffered(); n != len(tc.in) {
				t.Fatalf("after TakeClose %d bytes are in hand; want the %d that arrived", n, len(tc.in))
			}
			var buf bytes.Buffer
			op, err := rc.ReadMessage(&buf, 1<<10, false)
			if tc.err == "" {
				if err != nil || op != OpText || buf.String() != "hi" {
					t.Fatalf("ReadMessage = %d %q, %v; want the text", op, buf.String(), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ReadMessage = %v; want %q", err, tc.err)
			}
			if tc.answer != nil {
				_ = rc.Close()
				got, _ := io.ReadAll(client)
				if !bytes.Equal(got, tc.answer) {
					t.Fatalf("the client read %q; want %q", got, tc.answer)
				}
			}
		})
	}
}

// A socket that will not take the answer at once (its client stopped
// reading): TakeClose leaves the rest to FinishClose, which sends it once
// the client reads again, then closes.
func TestTakeCloseToAFullSocket(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	server, client := unixPair(t)
	defer client.Close()
	rc := NewConn(server)
	defer rc.Close()
	rc.SetReader(bufio.NewReaderSize(rc, 256))
	fillSocket(t, rc.sc)
	in := clientFrame(0x88, CloseFrame(1001, "away")[2:])
	if _, err := client.Write(in); err != nil {
		t.Fatal(err)
	}
	var peek [64]byte
	for awaitReadable(t, rc.sc, peek[:]) < len(in) {
	}
	if got := rc.TakeClose(); got != CloseUnfinished {
		t.Fatalf("TakeClose = %d; want CloseUnfinished", got)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rc.FinishClose()
	}()
	b, err := io.ReadAll(client)
	<-done
	if err != nil || !bytes.HasSuffix(b, CloseFrame(1001, "away")) || bytes.Count(b, []byte{CloseHead}) != 1 {
		t.Fatalf("the client read %d bytes ending %q, %v; want the filler, the answer, then the end", len(b), b[max(0, len(b)-8):], err)
	}
}

// A hard stop's close frame is the socket's last write too: it leaves
// with the FIN, after the rest of a data frame begun.
func TestGoAwayLeavesWithTheFIN(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	server, client := pair(t)
	defer client.Close()
	w := &closeWatch{TCPConn: server.(*net.TCPConn), t: t, unsentAt: -1}
	rc := NewConn(w)
	data := []byte{0x81, 3, 'a', 'b', 'c'}
	if sent, rest, err := rc.TryWrite(data, false); !sent || rest || err != nil {
		t.Fatalf("TryWrite = %v %v %v", sent, rest, err)
	}
	frame := CloseFrame(1001, "")
	rc.GoAway(frame)
	if w.unsentAt != len(frame) {
		t.Fatalf("at the close %d bytes were unsent; want the %d of the close frame, held for the FIN", w.unsentAt, len(frame))
	}
	got, err := io.ReadAll(client)
	if want := append(bytes.Clone(data), frame...); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the client read %q, %v; want %q then the end", got, err, want)
	}
}

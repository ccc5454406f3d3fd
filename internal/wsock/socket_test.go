package wsock

import (
	"net"
	"runtime"
	"syscall"
	"testing"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
)

// pair is a connected TCP pair over loopback.
func pair(t *testing.T) (server, client net.Conn) {
	client, server = testkit.TCPPair(t)
	return server, client
}

// awaitReadable waits in the poller until raw's socket is readable
// (bytes or the end), peeking.
func awaitReadable(t *testing.T, raw syscall.RawConn, p []byte) int {
	t.Helper()
	var n int
	if err := raw.Read(func(fd uintptr) bool {
		var wait bool
		n, wait = PeekFD(fd, p)
		return !wait
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func skipUnlessNative(t *testing.T) {
	if !native {
		t.Skip("no descriptor calls on " + runtime.GOOS + ": TestPortableIsWhatOtherSystemsDo covers what runs here")
	}
}

// The descriptor calls: a peek neither waits nor consumes what waits, a
// read without waiting takes it, and an end that came
// before anyone waited is still seen.
func TestDescriptorCalls(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	server, client := pair(t)
	raw := Descriptor(server)
	if raw == nil {
		t.Fatal("a TCP socket has no descriptor")
	}
	var two [2]byte
	_ = raw.Control(func(fd uintptr) {
		if _, wait := PeekFD(fd, two[:]); !wait {
			t.Error("PeekFD on an empty socket: want wait")
		}
	})
	if n := ReadNow(server, two[:]); n != 0 {
		t.Fatalf("ReadNow on an empty socket read %d", n)
	}
	if _, err := client.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if n := awaitReadable(t, raw, two[:]); n != 2 || string(two[:]) != "ab" {
		t.Fatalf("peeked %d %q, want 2 \"ab\"", n, two[:n])
	}
	var p [8]byte // a peek consumed nothing
	if n := ReadNow(server, p[:]); n != 3 || string(p[:3]) != "abc" {
		t.Fatalf("ReadNow read %d %q, want \"abc\"", n, p[:n])
	}
	client.Close()
	// The end came before this wait began: seen at once, not waited for.
	if !AwaitGone(server) {
		t.Fatal("AwaitGone after the client closed: false")
	}
}

// AwaitGone peeks: a client that sent bytes has not gone, and its bytes
// stay to be read.
func TestAwaitGoneKeepsTheBytes(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	server, client := pair(t)
	if _, err := client.Write([]byte("GET")); err != nil {
		t.Fatal(err)
	}
	if AwaitGone(server) {
		t.Fatal("a client that sent bytes was reported gone")
	}
	var p [3]byte
	if _, err := server.Read(p[:]); err != nil || string(p[:]) != "GET" {
		t.Fatalf("read %q %v after AwaitGone", p, err)
	}
}

// WriteFD writes what the socket takes and stops, without waiting, when
// it is full.
func TestWriteFDStopsWhenFull(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	server, _ := pair(t) // the client never reads
	raw := Descriptor(server)
	chunk := make([]byte, 1<<20)
	total := 0
	for full := false; !full; {
		var n int
		var err error
		if cerr := raw.Control(func(fd uintptr) { n, full, err = WriteFD(fd, chunk) }); cerr != nil || err != nil {
			t.Fatal(cerr, err)
		}
		total += n
		if total > 1<<30 {
			t.Fatal("1 GiB written to a peer that reads nothing")
		}
		if !full && n != len(chunk) {
			t.Fatalf("a partial write (%d) without full", n)
		}
	}
}

// Portable mode is what the callers get on other systems: no descriptor,
// nothing read without waiting, no client ever seen to go; so Linux tests
// can run their fallback paths.
func TestPortableIsWhatOtherSystemsDo(t *testing.T) {
	leakcheck.Check(t)
	server, client := pair(t)
	t.Cleanup(Portable(true))
	if _, err := client.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	client.Close()
	if Descriptor(server) != nil {
		t.Fatal("a descriptor in portable mode")
	}
	var p [8]byte
	if n := ReadNow(server, p[:]); n != 0 {
		t.Fatalf("ReadNow read %d in portable mode", n)
	}
	if AwaitGone(server) {
		t.Fatal("AwaitGone saw the client go in portable mode")
	}
	// And the bytes are still there for a plain read.
	if n, err := server.Read(p[:]); n != 3 || err != nil {
		t.Fatalf("plain read after the portable calls: %d %v", n, err)
	}
}

// HungUp never waits: a quiet peer has not gone, bytes it sent are
// dropped (it has not gone either), and its end is seen, whether or not
// anyone waited for it, as is a socket closed here.
func TestHungUp(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	server, client := pair(t)
	raw := Descriptor(server)
	if HungUp(raw) {
		t.Fatal("a quiet peer was reported gone")
	}
	if _, err := client.Write([]byte("stray bytes")); err != nil {
		t.Fatal(err)
	}
	awaitReadable(t, raw, make([]byte, 1))
	if HungUp(raw) {
		t.Fatal("a peer that sent bytes was reported gone")
	}
	if n := ReadNow(server, make([]byte, 16)); n != 0 {
		t.Fatalf("%d bytes left after HungUp, want them dropped", n)
	}
	client.Close()
	awaitReadable(t, raw, make([]byte, 1))
	if !HungUp(raw) {
		t.Fatal("a peer that closed was not reported gone")
	}
	server.Close()
	if !HungUp(raw) {
		t.Fatal("a closed socket was not reported gone")
	}
}

package wsock

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// wakes is a Waker that reports each wake-up on a channel.
type wakes chan uint64

type keyedWaker struct {
	key uint64
	ch  wakes
}

func (w keyedWaker) Wake() { w.ch <- w.key }

// hangGuard bounds a wait that must end (not a timing threshold).
const hangGuard = 10 * time.Second

func (ch wakes) next(t *testing.T) uint64 {
	t.Helper()
	select {
	case k := <-ch:
		return k
	case <-time.After(hangGuard):
		t.Fatal("no wake-up")
		return 0
	}
}

func newPoller(t *testing.T) *Poller {
	t.Helper()
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func descriptorOf(t *testing.T, c net.Conn) syscall.RawConn {
	t.Helper()
	raw := Descriptor(c)
	if raw == nil {
		t.Fatal("no descriptor")
	}
	return raw
}

// An armed socket is reported once when input comes; re-arming one whose
// input is still unread reports it at once (level triggered); one not
// re-armed is not reported again; the end of the stream is input too.
func TestPollerReportsReadinessOnce(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	p := newPoller(t)
	ch := make(wakes, 4)
	server, client := pair(t)
	raw := descriptorOf(t, server)
	w := keyedWaker{key: 7, ch: ch}
	if err := p.Arm(raw, 7, w); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if k := ch.next(t); k != 7 {
		t.Fatalf("woke key %d, want 7", k)
	}
	// Unread input, re-armed: reported at once.
	if err := p.Arm(raw, 7, w); err != nil {
		t.Fatal(err)
	}
	ch.next(t)
	// Not re-armed: more input is not reported. A second socket, armed
	// and written after, is; the first must not come before it.
	server2, client2 := pair(t)
	if err := p.Arm(descriptorOf(t, server2), 8, keyedWaker{key: 8, ch: ch}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := client2.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	if k := ch.next(t); k != 8 {
		t.Fatalf("woke key %d, want 8 (7 was not re-armed)", k)
	}
	// The end of the stream.
	var one [8]byte
	_ = ReadNow(server, one[:])
	if err := p.Arm(raw, 7, w); err != nil {
		t.Fatal(err)
	}
	client.Close()
	if k := ch.next(t); k != 7 {
		t.Fatalf("woke key %d at the end, want 7", k)
	}
	if p.Len() != 2 {
		t.Fatalf("Len %d, want 2", p.Len())
	}
	p.Forget(7)
	p.Forget(8)
	if p.Len() != 0 {
		t.Fatalf("Len %d after Forget, want 0", p.Len())
	}
}

// A socket closed while armed leaves the set: its descriptor, reused by
// the next socket, is reported under the new socket's key only.
func TestPollerKeysAreNotDescriptors(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	p := newPoller(t)
	ch := make(wakes, 4)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	old, _ := pair(t)
	if err := p.Arm(descriptorOf(t, old), 1, keyedWaker{key: 1, ch: ch}); err != nil {
		t.Fatal(err)
	}
	var oldFD uintptr
	_ = descriptorOf(t, old).Control(func(fd uintptr) { oldFD = fd })
	old.Close()
	// New sockets take the lowest free descriptors: keep making them
	// (and keep them open) until one takes old's.
	var reused, client net.Conn
	for range 64 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); a.Close() })
		for _, pr := range [][2]net.Conn{{c, a}, {a, c}} {
			var fd uintptr
			_ = descriptorOf(t, pr[0]).Control(func(f uintptr) { fd = f })
			if fd == oldFD {
				reused, client = pr[0], pr[1]
			}
		}
		if reused != nil {
			break
		}
	}
	if reused == nil {
		t.Skipf("descriptor %d not reused", oldFD)
	}
	if err := p.Arm(descriptorOf(t, reused), 2, keyedWaker{key: 2, ch: ch}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if k := ch.next(t); k != 2 {
		t.Fatalf("woke key %d, want 2", k)
	}
}

// Arming fails on a closed socket and on a closed Poller; Close ends the
// Poller's goroutine (leakcheck) and may be called twice.
func TestPollerArmFailsWhenClosed(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	p := newPoller(t)
	server, _ := pair(t)
	raw := descriptorOf(t, server)
	server.Close()
	if err := p.Arm(raw, 1, keyedWaker{}); err == nil {
		t.Fatal("armed a closed socket")
	}
	open, _ := pair(t)
	p.Close()
	p.Close()
	if err := p.Arm(descriptorOf(t, open), 2, keyedWaker{}); !errors.Is(err, ErrPollerClosed) {
		t.Fatalf("Arm after Close: %v, want ErrPollerClosed", err)
	}
}

// Many sockets armed at once, all made readable: each is reported exactly
// once (more than one wait's worth of events).
func TestPollerManySockets(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	p := newPoller(t)
	const n = 300
	ch := make(wakes, n)
	clients := make([]net.Conn, n)
	for i := range n {
		s, c := pair(t)
		clients[i] = c
		if err := p.Arm(descriptorOf(t, s), uint64(i)<<33|1, keyedWaker{key: uint64(i)<<33 | 1, ch: ch}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clients {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint64]bool{}
	for range n {
		k := ch.next(t)
		if seen[k] {
			t.Fatalf("key %x reported twice", k)
		}
		seen[k] = true
	}
}

// In the Portable mode, and on other systems, there is no Poller.
func TestNoPollerWhenPortable(t *testing.T) {
	t.Cleanup(Portable(true))
	if p, err := NewPoller(); p != nil || !errors.Is(err, ErrNoPoller) {
		t.Fatalf("NewPoller: %v, %v; want nil, ErrNoPoller", p, err)
	}
}

// Arm guesses from its keys whether a socket is in the set already; a
// wrong guess is corrected: a socket armed again after its key was
// forgotten, and a second socket armed under a key in use, are reported.
func TestPollerArmsWhateverItGuessed(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	p := newPoller(t)
	ch := make(wakes, 4)
	server, client := pair(t)
	raw := descriptorOf(t, server)
	w := keyedWaker{key: 3, ch: ch}
	if err := p.Arm(raw, 3, w); err != nil {
		t.Fatal(err)
	}
	p.Forget(3)
	if err := p.Arm(raw, 3, w); err != nil { // in the set, key unknown
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if k := ch.next(t); k != 3 {
		t.Fatalf("woke key %d, want 3", k)
	}
	other, otherClient := pair(t)
	if err := p.Arm(descriptorOf(t, other), 3, w); err != nil { // key known, socket not in the set
		t.Fatal(err)
	}
	if _, err := otherClient.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if k := ch.next(t); k != 3 {
		t.Fatalf("woke key %d, want 3", k)
	}
}

// A socket armed for the first time with input already waiting is
// reported at once: a read goroutine may park a fresh connection without
// looking for input first (the server's first park after an upgrade).
func TestPollerFirstArmReportsInputAlreadyIn(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	p := newPoller(t)
	ch := make(wakes, 1)
	server, client := pair(t)
	if _, err := client.Write([]byte("early")); err != nil {
		t.Fatal(err)
	}
	raw := descriptorOf(t, server)
	awaitReadable(t, raw, make([]byte, 1)) // in the server's socket before it is armed
	if err := p.Arm(raw, 9, keyedWaker{key: 9, ch: ch}); err != nil {
		t.Fatal(err)
	}
	if k := ch.next(t); k != 9 {
		t.Fatalf("woke key %d, want 9", k)
	}
}

// Arming allocates nothing: a connection parks each time it goes quiet.
// Re-arming a key is a modify; a forgotten key armed again is an add
// that finds the socket in the set, then a modify.
func TestPollerArmAllocatesNothing(t *testing.T) {
	skipUnlessNative(t)
	if raceBuild {
		t.Skip("the race detector allocates")
	}
	leakcheck.Check(t)
	p := newPoller(t)
	server, _ := pair(t)
	raw := descriptorOf(t, server)
	var w Waker = keyedWaker{key: 5, ch: make(wakes, 1)}
	if err := p.Arm(raw, 5, w); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := p.Arm(raw, 5, w); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("re-arming allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		p.Forget(5)
		if err := p.Arm(raw, 5, w); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("arming a forgotten key allocates %v times", n)
	}
}

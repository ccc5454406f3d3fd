package handshake

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/metrics"
)

// The door's raw accept: while it sheds, connections are taken off the
// listener as bare descriptors (acceptRaw), shed without a net.Conn, or
// made the connection net's accept would have returned.

// rawDoor is a door (not serving, no peekers: what it does not shed
// Accept returns) on a TCP listener made by lc, over a gate whose one
// connection is held (the door sheds), with its raw accepts counted. It
// skips where the door takes no connection raw.
type rawDoor struct {
	d     *door
	g     *Gate
	m     *metrics.Metrics
	held  *Ticket
	addr  string
	mu    sync.Mutex
	raws  map[string]int
	onRaw func(string) // called on each raw event, if set
}

func startRawDoor(t *testing.T, lc net.ListenConfig) *rawDoor {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	r := &rawDoor{raws: map[string]int{}, held: new(Ticket)}
	r.g, r.m = newGate(t, cfg)
	if !r.g.Admit(httptest.NewRecorder(), upgradeReq("192.0.2.1:1"), r.held) {
		t.Fatal("first upgrade not admitted")
	}
	t.Cleanup(func() { r.held.Close() })
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.d = newDoor(r.g, ln, []string{"/ws"}, time.Hour, 0).(*door)
	t.Cleanup(func() { r.d.Close() })
	if r.d.rl == nil {
		t.Skip("no raw accept here")
	}
	r.d.rawTrace = func(ev string) {
		r.mu.Lock()
		r.raws[ev]++
		r.mu.Unlock()
		if r.onRaw != nil {
			r.onRaw(ev)
		}
	}
	return r
}

func (r *rawDoor) count(ev string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.raws[ev]
}

// dial connects and sends head; on loopback it is in the server's socket
// when this returns.
func (r *rawDoor) dial(t *testing.T, head string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	write(t, c, head)
	return c
}

// accept is the door's next Accept, which must be c's connection, with
// c's bytes (want) replayed first.
func (r *rawDoor) accept(t *testing.T, c net.Conn, want string) net.Conn {
	t.Helper()
	got, err := r.d.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { got.Close() })
	if got.RemoteAddr().String() != c.LocalAddr().String() {
		t.Fatalf("Accept returned %v, want %v", got.RemoteAddr(), c.LocalAddr())
	}
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(got, buf); err != nil || string(buf) != want {
		t.Fatalf("replayed %q, %v; want %q", buf, err, want)
	}
	return got
}

// learn has the door accept a first connection through net's accept
// (nothing is taken raw before it), which Accept returns.
func (r *rawDoor) learn(t *testing.T) {
	t.Helper()
	c := r.dial(t, healthHead)
	r.accept(t, c, healthHead).Close()
	c.Close()
	if r.d.ka.Load() == nil || r.count("took") != 0 {
		t.Fatalf("after the first accept: keep-alive %v, %d taken raw", r.d.ka.Load(), r.count("took"))
	}
}

// A storm of sheds queued on the listener is shed raw, each answered with
// the whole 503 and the end, counted once; the connection after them, not
// a simple upgrade, is returned as net's accept returns it (a TCP
// connection with TCP_NODELAY, the listener's keep-alive) with its bytes
// replayed. No descriptor is left behind.
func TestDoorRawShedsStormAndReturnsTheRest(t *testing.T) {
	leakcheck.Check(t)
	for _, keep := range []time.Duration{0, -1} {
		r := startRawDoor(t, net.ListenConfig{KeepAlive: keep})
		r.learn(t)
		before := testkit.OpenFDs(t)
		const n = 64
		clients := make([]net.Conn, n)
		for i := range clients {
			clients[i] = r.dial(t, upgradeHead)
		}
		other := r.dial(t, "POST /ws HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
		got := r.accept(t, other, "POST /ws HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
		if took, shed, conn := r.count("took"), r.count("shed"), r.count("conn"); took != n+1 || shed != n || conn != 1 {
			t.Fatalf("raw: took %d shed %d conn %d; want %d, %d, 1", took, shed, conn, n+1, n)
		}
		for _, c := range clients {
			checkDoorShed(t, c)
		}
		if got := rejected(r.m, "max_connections"); got != n {
			t.Fatalf("max_connections = %v, want %d", got, n)
		}
		tc, ok := wsock.Socket(got).(*net.TCPConn)
		if !ok {
			t.Fatalf("%T under the replay, want *net.TCPConn", wsock.Socket(got))
		}
		sc, _ := tc.SyscallConn()
		var nodelay, alive int
		_ = sc.Control(func(fd uintptr) {
			nodelay, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
			alive, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		})
		if nodelay == 0 || (alive != 0) != (keep >= 0) {
			t.Fatalf("KeepAlive %v: TCP_NODELAY %d SO_KEEPALIVE %d", keep, nodelay, alive)
		}
		if _, err := io.WriteString(got, "answer"); err != nil {
			t.Fatal(err)
		}
		got.Close()
		if b, err := io.ReadAll(other); err != nil || string(b) != "answer" {
			t.Fatalf("other read %q, %v", b, err)
		}
		for _, c := range clients {
			c.Close()
		}
		other.Close()
		if after := testkit.OpenFDs(t); after != before {
			t.Fatalf("%d descriptors open, %d before the storm", after, before)
		}
	}
}

// The cap frees between the raw accept and the shed: the upgrade is not
// shed but returned, its head replayed, and nothing is counted.
func TestDoorRawCapFreesDuringAccept(t *testing.T) {
	leakcheck.Check(t)
	r := startRawDoor(t, net.ListenConfig{})
	r.learn(t)
	r.onRaw = func(ev string) {
		if ev == "took" {
			r.held.Close()
		}
	}
	c := r.dial(t, upgradeHead)
	r.accept(t, c, upgradeHead)
	if r.count("took") != 1 || r.count("conn") != 1 || r.count("shed") != 0 {
		t.Fatalf("raw: %v", r.raws)
	}
	if got := rejected(r.m, "max_connections"); got != 0 {
		t.Fatalf("max_connections = %v, want 0", got)
	}
}

// Closed while it sheds, the door's Accept reports net.ErrClosed, as
// net's accept does, and takes nothing more.
func TestDoorRawAcceptAfterClose(t *testing.T) {
	leakcheck.Check(t)
	r := startRawDoor(t, net.ListenConfig{})
	r.learn(t)
	r.d.Close()
	if c, err := r.d.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, %v", c, err)
	}
	if r.count("took") != 0 {
		t.Fatalf("raw: %v", r.raws)
	}
}

// The cap frees while the door waits for a connection to take raw: the
// next connection is not taken raw but by net's accept, and returned
// untouched.
func TestDoorRawCapFreesWhileWaiting(t *testing.T) {
	leakcheck.Check(t)
	r := startRawDoor(t, net.ListenConfig{})
	r.learn(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := r.d.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	r.held.Close()
	c := r.dial(t, upgradeHead)
	got := <-accepted
	if got == nil {
		t.FailNow()
	}
	defer got.Close()
	if _, ok := got.(*net.TCPConn); !ok || got.RemoteAddr().String() != c.LocalAddr().String() {
		t.Fatalf("Accept returned %T from %v, want net's connection from %v", got, got.RemoteAddr(), c.LocalAddr())
	}
	if r.count("took") != 0 {
		t.Fatalf("raw: %v", r.raws)
	}
}

// Closed while Accept waits to take a connection raw: Accept returns
// net.ErrClosed, and the listening socket is closed (a dial is refused).
func TestDoorRawCloseWhileWaiting(t *testing.T) {
	leakcheck.Check(t)
	r := startRawDoor(t, net.ListenConfig{})
	r.learn(t)
	done := make(chan error, 1)
	go func() {
		_, err := r.d.Accept()
		done <- err
	}()
	r.d.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept: %v, want net.ErrClosed", err)
	}
	if c, err := net.Dial("tcp", r.addr); err == nil {
		c.Close()
		t.Fatal("the listening socket is still open")
	}
}

// Through net/http while a cap is full: connections queued on the
// listener are taken raw; what the door does not shed (a health check, an
// upgrade with bytes after its head, another method, a head still
// arriving) is served exactly as before, over the connection made of the
// descriptor with the bytes read replayed.
func TestDoorRawServesWhatItDoesNotShed(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDeferringDoor(t, cfg, time.Hour)
	if e.d.rl == nil {
		t.Skip("no raw accept here")
	}
	release := e.dialHeld(t) // through net's accept: the door learns
	e.event(t, "serve")

	// The first shed holds the door's Accept while the others queue.
	// (It comes through net's accept or raw: the door may still have
	// been waiting in net's accept when the cap filled.)
	stall := make(chan struct{})
	e.stall.Store(&stall)
	first := e.raw(t)
	write(t, first, upgradeHead)
	<-e.stalled
	got := map[string]int{}
	for len(e.raws) > 0 {
		got[<-e.raws]++
	}
	firstRaw := got["took"] // its "shed" is still to come
	sheds := []net.Conn{first}
	for range 3 {
		c := e.raw(t)
		write(t, c, upgradeHead)
		sheds = append(sheds, c)
	}
	health := e.raw(t)
	write(t, health, healthHead)
	trailing := e.raw(t)
	write(t, trailing, upgradeHead+"x")
	post := e.raw(t)
	write(t, post, "POST /sse HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
	split := e.raw(t)
	write(t, split, upgradeHead[:20])
	close(stall)

	for _, c := range sheds {
		checkDoorShed(t, c)
	}
	if resp, body := readResp(t, health); resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}
	// Not the door's to shed: net/http's handler admits it, and Admit
	// refuses it over the cap.
	resp, body := readResp(t, trailing)
	checkShed(t, resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, "OVERLOADED")
	if resp, body := readResp(t, post); resp.StatusCode != 200 || string(body) != "posted" {
		t.Fatalf("POST /sse: %d %q", resp.StatusCode, body)
	}
	// 7 more taken raw: 3 shed, 4 made connections. The split upgrade
	// was taken with its first bytes only (its rest is sent once the
	// door has decided on it: "took" comes before the door reads, so
	// the rest sent at "took" could be read with the first bytes), and
	// is shed by the door's peek when the rest comes.
	rawEvent := func() {
		select {
		case ev := <-e.raws:
			got[ev]++
		case <-t.Context().Done():
			t.Fatalf("raw events %v", got)
		}
	}
	for got["shed"]+got["conn"] < 7+firstRaw {
		rawEvent()
	}
	write(t, split, upgradeHead[20:])
	resp, body = readResp(t, split)
	checkShed(t, resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, "OVERLOADED")
	if got["took"] != 7+firstRaw || got["shed"] != 3+firstRaw || got["conn"] != 4 {
		t.Fatalf("raw events %v", got)
	}
	if h := e.handled.Load(); h != 2 { // the held one, trailing
		t.Fatalf("handled %d", h)
	}
	if got := rejected(e.m, "max_connections"); got != 6 {
		t.Fatalf("max_connections = %v, want 6", got)
	}
	release()
	<-e.ended
	assertIdle(t, e.g, e.m)
}

// Closed in the middle of a storm of sheds: every client gets the whole
// 503 or the end (never part of an answer), Serve returns, and no
// goroutine is left.
func TestDoorRawCloseDuringSheds(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDoor(t, cfg, time.Hour, maxPeekers)
	if e.d.rl == nil {
		t.Skip("no raw accept here")
	}
	release := e.dialHeld(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := 0
	for range 8 {
		wg.Go(func() {
			for {
				c, err := net.Dial("tcp", e.addr)
				if err != nil {
					return // closed
				}
				_, _ = io.WriteString(c, upgradeHead)
				b, _ := io.ReadAll(c) // a reset is an end too
				c.Close()
				if len(b) == 0 {
					continue
				}
				resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
				if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("answer %q", b)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				if !shedBody.Match(body) {
					t.Errorf("answer %q", b)
					return
				}
				mu.Lock()
				answers++
				mu.Unlock()
			}
		})
	}
	for shed := 0; shed < 50; {
		select {
		case ev := <-e.events:
			if ev == "shed" {
				shed++
			}
		case <-t.Context().Done():
			t.Fatalf("%d sheds", shed)
		}
	}
	e.srv.Close()
	wg.Wait()
	release()
	<-e.ended
	if answers < 50 {
		t.Fatalf("%d answers", answers)
	}
}

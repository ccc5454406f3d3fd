package handshake

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/metrics"
)

// doorEnv is a real server (TCP on loopback, http.Server over the door)
// whose GET /ws handler admits through the gate and upgrades, like
// server.ServeHTTP, and whose GET /healthz answers 200.
type doorEnv struct {
	g       *Gate
	m       *metrics.Metrics
	d       *door
	srv     *http.Server
	addr    string
	handled atomic.Int64                  // /ws handler runs: a door shed leaves it alone
	ended   chan struct{}                 // one per admitted connection whose handler ended
	events  chan string                   // the door's trace
	raws    chan string                   // the door's raw accepts (rawTrace)
	stall   atomic.Pointer[chan struct{}] // when set, the next "shed" event waits for it to close
	stalled chan struct{}                 // one when a "shed" event starts waiting (stall)
	admitd  chan struct{}                 // one per admitted upgrade (before Accept)
	hold    atomic.Pointer[chan struct{}] // when set, admitted upgrades wait for it to close

	netHTTPConns atomic.Int64                     // connections net/http served
	netHTTPNew   chan struct{}                    // one per connection net/http got
	special      atomic.Pointer[http.HandlerFunc] // when set, serves GET /ws?query
}

func startDoor(t *testing.T, cfg Config, timeout time.Duration, max int32) *doorEnv {
	t.Helper()
	return startDoorWith(t, cfg, timeout, max, false)
}

// startDoorWith is startDoor; serve: the door also serves GET /ws itself
// (ServingListener), and netHTTPConns counts the connections net/http got.
func startDoorWith(t *testing.T, cfg Config, timeout time.Duration, max int32, serve bool, log ...*slog.Logger) *doorEnv {
	t.Helper()
	return startDoorOn(t, cfg, timeout, max, serve, []string{"/ws"}, log...)
}

// startDoorOn is startDoorWith for a door on paths (ServingListener's
// path and more). GET /sse admits through the gate and hijacks, as an
// event stream does; POST /sse answers "posted".
func startDoorOn(t *testing.T, cfg Config, timeout time.Duration, max int32, serve bool, paths []string, log ...*slog.Logger) *doorEnv {
	t.Helper()
	return startDoorEnv(t, cfg, timeout, max, serve, paths, false, log...)
}

// startDeferringDoor is a serving door on a listener whose accepts wait
// for the client's first bytes (wsock.DeferAccept, as ServingListener
// sets it), behind a server whose ReadHeaderTimeout is short; it skips
// where the kernel has no such option.
func startDeferringDoor(t *testing.T, cfg Config, timeout time.Duration) *doorEnv {
	t.Helper()
	e := startDoorEnv(t, cfg, timeout, maxPeekers, true, []string{"/ws"}, true)
	if !e.d.headIn {
		t.Skip("no deferred accept here")
	}
	return e
}

// startDoorEnv is startDoorOn; deferAccept: the listener defers accepts
// (startDeferringDoor).
func startDoorEnv(t *testing.T, cfg Config, timeout time.Duration, max int32, serve bool, paths []string, deferAccept bool, log ...*slog.Logger) *doorEnv {
	t.Helper()
	e := &doorEnv{netHTTPNew: make(chan struct{}, 64), ended: make(chan struct{}, 64), events: make(chan string, 256), raws: make(chan string, 1024), stalled: make(chan struct{}, 1), admitd: make(chan struct{}, 64)}
	e.g, e.m = newGate(t, cfg, log...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.d = newDoor(e.g, ln, paths, timeout, max).(*door)
	e.d.trace = func(ev string) {
		select {
		case e.events <- ev:
		default:
		}
		if ev == "shed" {
			if p := e.stall.Swap(nil); p != nil {
				e.stalled <- struct{}{}
				<-*p
			}
		}
	}
	e.d.rawTrace = func(ev string) {
		select {
		case e.raws <- ev:
		default:
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		if f := e.special.Load(); f != nil && r.URL.RawQuery != "" {
			(*f)(w, r)
			return
		}
		e.handled.Add(1)
		var tk Ticket
		if !e.g.Admit(w, r, &tk) {
			return
		}
		defer func() { e.ended <- struct{}{} }()
		defer tk.Close()
		e.admitd <- struct{}{}
		if h := e.hold.Load(); h != nil {
			<-*h
		}
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			tk.HandshakeDone(false)
			return
		}
		tk.HandshakeDone(true)
		defer c.CloseNow()
		_ = c.Write(r.Context(), websocket.MessageText, []byte("hi"))
		_, _, _ = c.Read(context.Background()) // until the client closes
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		e.handled.Add(1)
		var tk Ticket
		if !e.g.Admit(w, r, &tk) {
			return
		}
		defer func() { e.ended <- struct{}{} }()
		defer tk.Close()
		nc, _, err := http.NewResponseController(w).Hijack()
		tk.HandshakeDone(err == nil)
		if err != nil {
			return
		}
		defer nc.Close()
		_, _ = io.WriteString(nc, sseHead)
		_, _ = io.Copy(io.Discard, nc) // until the client closes
	})
	mux.HandleFunc("POST /sse", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("posted")) })
	if serve {
		e.d.h = mux
	}
	readHeaderTimeout := 10 * time.Second
	if deferAccept {
		e.d.headIn = wsock.DeferAccept(ln, timeout)
		readHeaderTimeout = 100 * time.Millisecond
	}
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				e.netHTTPConns.Add(1)
				select {
				case e.netHTTPNew <- struct{}{}:
				default: // a test that does not wait for them
				}
			}
		}}
	done := make(chan struct{})
	go func() { e.srv.Serve(e.d); close(done) }()
	t.Cleanup(func() { e.srv.Close(); <-done })
	return e
}

// event waits for the door's next trace event and checks it.
func (e *doorEnv) event(t *testing.T, want string) {
	t.Helper()
	select {
	case ev := <-e.events:
		if ev != want {
			t.Fatalf("door event %q, want %q", ev, want)
		}
	case <-t.Context().Done():
		t.Fatalf("no door event %q", want)
	}
}

// dialHeld opens a WebSocket connection and returns its closer.
func (e *doorEnv) dialHeld(t *testing.T) func() {
	t.Helper()
	c, _, err := websocket.Dial(t.Context(), "ws://"+e.addr+"/ws", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if _, _, err := c.Read(t.Context()); err != nil { // the handshake is done
		t.Fatal(err)
	}
	return func() { c.Close(websocket.StatusNormalClosure, "") }
}

func (e *doorEnv) raw(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const upgradeHead = "GET /ws HTTP/1.1\r\nHost: rt.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
	"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

// sseHead is what the test's GET /sse writes on the connection it hijacked.
const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\nevent: hi\n\n"

const streamHead = "GET /sse?topic=a HTTP/1.1\r\nHost: rt.example.com\r\n\r\n"

const healthHead = "GET /healthz HTTP/1.1\r\nHost: rt.example.com\r\n\r\n"

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

func readResp(t *testing.T, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp, body
}

var shedBody = regexp.MustCompile(`^\{"error":"OVERLOADED","retryAfterMs":[1-9][0-9]*\}$`)

// checkDoorShed checks the door's whole answer and that the server then
// closed the connection.
func checkDoorShed(t *testing.T, c net.Conn) {
	t.Helper()
	resp, body := readResp(t, c)
	checkShed(t, resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, "OVERLOADED")
	if !shedBody.Match(body) {
		t.Fatalf("body %q", body)
	}
	if !resp.Close { // ReadResponse takes "Connection: close" out of the header into Close
		t.Fatal("no Connection: close")
	}
	if resp.ContentLength != int64(len(body)) {
		t.Fatalf("Content-Length %d for %d bytes", resp.ContentLength, len(body))
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the 503: %d bytes, %v; want EOF", n, err)
	}
}

func TestDoorShedsOverCapAndServesHealth(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDoor(t, cfg, 10*time.Second, maxPeekers)
	release := e.dialHeld(t) // cap not full: untouched by the door
	if e.handled.Load() != 1 || len(e.events) != 0 {
		t.Fatalf("handled %d, events %d", e.handled.Load(), len(e.events))
	}

	for i := range 3 {
		c := e.raw(t)
		write(t, c, upgradeHead)
		checkDoorShed(t, c)
		e.event(t, "peek")
		e.event(t, "shed")
		if got := rejected(e.m, "max_connections"); got != float64(i+1) {
			t.Fatalf("max_connections = %v, want %d", got, i+1)
		}
	}
	if e.handled.Load() != 1 || e.g.Open() != 1 || e.g.Inflight() != 0 {
		t.Fatalf("handled %d open %d inflight %d: the door must not reach net/http or hold slots",
			e.handled.Load(), e.g.Open(), e.g.Inflight())
	}

	// Health is never shed, and a query string still matches /ws.
	c := e.raw(t)
	write(t, c, healthHead)
	if resp, body := readResp(t, c); resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}
	e.event(t, "peek")
	e.event(t, "pass")
	c = e.raw(t)
	write(t, c, strings.Replace(upgradeHead, "/ws ", "/ws?token=abc ", 1))
	checkDoorShed(t, c)
	e.event(t, "peek")
	e.event(t, "shed")

	release()
	<-e.ended
	release = e.dialHeld(t) // through again
	release()
	<-e.ended
	if got := rejected(e.m, "max_connections"); got != 4 {
		t.Fatalf("max_connections = %v, want 4", got)
	}
	assertIdle(t, e.g, e.m)
}

func TestDoorShedsMaxConcurrent(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConcurrent = 1
	e := startDoor(t, cfg, 10*time.Second, maxPeekers)
	hold := make(chan struct{})
	e.hold.Store(&hold)
	a := e.raw(t)
	write(t, a, upgradeHead)
	<-e.admitd // a is in flight

	b := e.raw(t)
	write(t, b, upgradeHead)
	checkDoorShed(t, b)
	if rejected(e.m, "max_concurrent") != 1 || rejected(e.m, "max_connections") != 0 {
		t.Fatal("not counted as max_concurrent")
	}
	close(hold)
	if resp, _ := readHead(t, a); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("held upgrade: %d", resp.StatusCode)
	}
	a.Close()
	<-e.ended
	if e.handled.Load() != 1 {
		t.Fatalf("handled %d", e.handled.Load())
	}
}

// readHead reads a response head (no body: a 101) and returns the reader
// positioned at the WebSocket stream.
func readHead(t *testing.T, c net.Conn) (*http.Response, *bufio.Reader) {
	t.Helper()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, br
}

func TestDoorSilentClientDoesNotBlockOthers(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDoor(t, cfg, time.Hour, maxPeekers)
	defer e.dialHeld(t)()

	silent := e.raw(t)
	e.event(t, "peek")
	c := e.raw(t)
	write(t, c, upgradeHead)
	checkDoorShed(t, c)
	e.event(t, "peek")
	e.event(t, "shed")

	// The silent client leaves: the door closes it without an answer.
	silent.Close()
	e.event(t, "gone")
}

func TestDoorHandsOnAfterPeekDeadlineWithBytesIntact(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDoor(t, cfg, 20*time.Millisecond, maxPeekers)
	defer e.dialHeld(t)()

	c := e.raw(t)
	cut := strings.Index(upgradeHead, "Upgrade:")
	write(t, c, upgradeHead[:cut])
	e.event(t, "peek")
	e.event(t, "pass") // the deadline passed with the head unfinished
	write(t, c, upgradeHead[cut:])
	resp, body := readResp(t, c)
	checkShed(t, resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, "OVERLOADED")
	if e.handled.Load() != 2 { // net/http parsed the replayed head and ran the handler
		t.Fatalf("handled %d, want 2", e.handled.Load())
	}
	if rejected(e.m, "max_connections") != 1 {
		t.Fatal("Admit's shed not counted once")
	}
}

func TestDoorSplitRequests(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDoor(t, cfg, time.Hour, maxPeekers)
	release := e.dialHeld(t)

	// An upgrade in pieces is still shed at the door.
	c := e.raw(t)
	write(t, c, "GET /w")
	e.event(t, "peek")
	write(t, c, "s HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r")
	write(t, c, "\n\r\n")
	checkDoorShed(t, c)
	e.event(t, "shed")

	// /healthz in pieces is handed on whole.
	c = e.raw(t)
	write(t, c, "GET /ws")
	e.event(t, "peek")
	write(t, c, "x HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, _ := readResp(t, c); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/wsx: %d", resp.StatusCode)
	}
	e.event(t, "pass")
	c = e.raw(t)
	write(t, c, healthHead[:9])
	e.event(t, "peek")
	write(t, c, healthHead[9:])
	if resp, body := readResp(t, c); resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}
	e.event(t, "pass")

	// The cap frees while the head is arriving: handed on, and the
	// upgrade works over the replayed bytes.
	c = e.raw(t)
	write(t, c, upgradeHead[:20])
	e.event(t, "peek")
	release()
	<-e.ended
	write(t, c, upgradeHead[20:])
	resp, br := readHead(t, c)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade after the cap freed: %d", resp.StatusCode)
	}
	e.event(t, "pass")
	frame := make([]byte, 4)
	if _, err := io.ReadFull(br, frame); err != nil || string(frame) != "\x81\x02hi" {
		t.Fatalf("first frame %q, %v", frame, err)
	}
	c.Close()
	<-e.ended
	if rejected(e.m, "max_connections") != 1 {
		t.Fatalf("max_connections = %v", rejected(e.m, "max_connections"))
	}
	assertIdle(t, e.g, e.m)
}

func TestDoorCloseModeNeverSheds(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections, cfg.Reject = 1, RejectClose
	e := startDoor(t, cfg, time.Hour, maxPeekers)
	release := e.dialHeld(t)
	c, _, err := websocket.Dial(t.Context(), "ws://"+e.addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Read(t.Context())
	if websocket.CloseStatus(err) != websocket.StatusTryAgainLater {
		t.Fatalf("close mode: %v", err)
	}
	c.CloseNow()
	if e.handled.Load() != 2 || len(e.events) != 0 {
		t.Fatalf("handled %d, door events %d: close mode must bypass the door", e.handled.Load(), len(e.events))
	}
	release()
	<-e.ended
}

func TestDoorPeekerBound(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDoor(t, cfg, time.Hour, 1)
	defer e.dialHeld(t)()
	silent := e.raw(t)
	e.event(t, "peek")
	<-e.netHTTPNew // the held connection's
	c := e.raw(t)  // past the bound: straight to net/http, where Admit sheds it
	// Its head is sent only once net/http has it: a head already in at
	// the accept is shed there, without a peeker (TestDoorShedsHeadAlreadyIn).
	<-e.netHTTPNew
	write(t, c, upgradeHead)
	resp, body := readResp(t, c)
	checkShed(t, resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, "OVERLOADED")
	if e.handled.Load() != 2 || rejected(e.m, "max_connections") != 1 {
		t.Fatalf("handled %d, rejected %v", e.handled.Load(), rejected(e.m, "max_connections"))
	}
	silent.Close()
}

// While shedding, a head that is already in when the connection is
// accepted is shed by Accept itself: no goroutine, no peeker slot. (A
// bound of 0 peekers returns every other connection to the caller.)
func TestDoorShedsHeadAlreadyIn(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	g, m := newGate(t, cfg)
	var held Ticket
	if !g.Admit(httptest.NewRecorder(), upgradeReq("192.0.2.1:1"), &held) {
		t.Fatal("first upgrade not admitted")
	}
	defer held.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := newDoor(g, ln, []string{"/ws"}, time.Hour, 0)
	defer d.Close()

	shed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer shed.Close()
	write(t, shed, upgradeHead) // on loopback, in the server's socket when this returns
	other, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	got, err := d.Accept() // sheds the first, returns the second
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.RemoteAddr().String() != other.LocalAddr().String() {
		t.Fatalf("Accept returned %v, want the second connection %v", got.RemoteAddr(), other.LocalAddr())
	}
	checkDoorShed(t, shed)
	if rejected(m, "max_connections") != 1 {
		t.Fatalf("rejected %v", rejected(m, "max_connections"))
	}
}

func TestDoorCloseWhilePeeking(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDoor(t, cfg, time.Hour, maxPeekers)
	release := e.dialHeld(t)
	silent := e.raw(t)
	e.event(t, "peek")
	e.srv.Close() // closes the door: the peeking connection is closed too
	if n, err := silent.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("peeked connection after Close: %d, %v", n, err)
	}
	release()
	<-e.ended
}

func TestDoorNeedsDeadline(t *testing.T) {
	g, _ := newGate(t, DefaultConfig())
	var ln plainListener
	if got := g.Listener(ln, "/ws"); got != net.Listener(ln) {
		t.Fatal("a listener without SetDeadline must be returned as is")
	}
	for _, p := range []string{"", "ws", "/a b", "/ws?x", "/\x01"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("path %q accepted", p)
				}
			}()
			g.Listener(ln, p)
		}()
	}
}

type plainListener struct{}

func (plainListener) Accept() (net.Conn, error) { return nil, errors.New("none") }
func (plainListener) Close() error              { return nil }
func (plainListener) Addr() net.Addr            { return nil }

func TestAppendDoor503(t *testing.T) {
	for _, give := range []int64{1, 999, 1000, 1001, 123456} {
		b := appendDoor503(nil, give)
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b))), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		ms := checkShed(t, resp.StatusCode, resp.Header, body, 503, "OVERLOADED")
		if ms != give || resp.ContentLength != int64(len(body)) || !strings.Contains(string(b), "\r\nConnection: close\r\n") {
			t.Fatalf("ms %d: %q", give, b)
		}
	}
}

// While the pacing queue holds as many upgrades as can be served within
// MaxQueueWait, the door sheds a newcomer (it would only wait to be
// refused queue_timeout) without net/http, counted as queue_timeout.
func TestDoorShedsWhenPacingQueueIsFull(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.PerTickBudget = 1
	cfg.Tick = time.Hour
	cfg.MaxQueueWait = time.Hour // one tick: the queue holds one waiter
	e := startDoor(t, cfg, 10*time.Second, maxPeekers)
	hold := make(chan struct{})
	e.hold.Store(&hold)
	a := e.raw(t)
	write(t, a, upgradeHead)
	<-e.admitd // a took this tick's token
	b := e.raw(t)
	write(t, b, upgradeHead)
	for e.g.QueueDepth() != 1 { // b waits for the next tick
		time.Sleep(time.Millisecond)
	}

	c := e.raw(t)
	write(t, c, upgradeHead)
	checkDoorShed(t, c)
	e.event(t, "peek")
	e.event(t, "shed")
	if got := rejected(e.m, metrics.RejectQueueTimeout); got != 1 {
		t.Fatalf("queue_timeout = %v, want 1", got)
	}
	if e.handled.Load() != 2 {
		t.Fatalf("handled %d, want 2: the shed upgrade must not reach net/http", e.handled.Load())
	}

	close(hold)
	if resp, _ := readHead(t, a); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("admitted upgrade: %d", resp.StatusCode)
	}
	a.Close()
	<-e.ended
	b.Close() // gone from the queue: the door stops shedding
	for e.g.QueueDepth() != 0 {
		time.Sleep(time.Millisecond)
	}
	if _, full := e.g.doorFull(); full {
		t.Fatal("the door still sheds with an empty queue")
	}
}

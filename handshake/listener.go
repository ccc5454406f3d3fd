package handshake

import (
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/internal/wsock"
)

// The door: shedding upgrades before net/http sees them.
//
// In a connect storm most of a shed upgrade's cost is not the gate (~4%)
// but net/http's per-connection machinery: a goroutine, 4 KiB read and
// write buffers, request parsing, the response object. While a cap is full
// the door reads the request head itself and, when it is a well-formed
// `GET <path>` with nothing after it, writes the same 503 Admit would and
// closes. Everything else goes on to net/http with the bytes already read
// replayed first. When no cap is full (or in close mode) a connection is
// returned exactly as the inner listener gave it.
//
// While it sheds, the door takes a TCP listener's connections itself, as
// bare descriptors (wsock.RawListener): a shed costs accept4, read, send and
// close, without the socket options net's accept sets on every
// connection, its netpoller registration and removal, or a net.Conn. A
// connection it does not shed after all becomes the one net's accept
// would have returned, and goes on as above. When none is waiting, the
// door waits for the next in the netpoller, as net's accept does.

const (
	// peekSize bounds the request head the door reads. A head that does not
	// end within it (large cookies) goes on to net/http, which is correct,
	// only not cheaper. The whole head must be read before answering: closing
	// a socket with unread bytes makes the kernel send RST, which can destroy
	// the 503 before the client reads it.
	peekSize = wsock.MaxHead
	// peekTimeout bounds how long a silent or slow client is peeked at
	// before it is handed on to net/http (which then applies its own
	// ReadHeaderTimeout).
	peekTimeout = time.Second
	// maxPeekers bounds the goroutines peeking at once; past it connections
	// go straight to net/http, so a crowd of silent clients costs the door
	// nothing more than it costs net/http.
	maxPeekers = 256
)

// Listener wraps inner with the door: while the gate's reject mode is
// RejectHTTP and a cap (MaxConnections or MaxConcurrent) is full, or the
// pacing queue holds as many upgrades as can be served within
// MaxQueueWait (a newcomer would only wait to time out), a new
// connection whose request is `GET path` (path exactly, or path?query;
// HTTP/1.0 or 1.1) is answered here with the documented 503 (docs/handshake.md), counted in
// handshake_rejected_total under the same reason Admit would give, and
// closed, without net/http. Anything else (another path, another method, a
// head it does not fully understand, a cap no longer full) is handed to
// the server with the bytes already read replayed. The door never reserves
// a slot and never sheds for draining, rate, origin or auth: those stay in
// Admit, which the handler for path must call first. (While the door
// sheds, an upgrade that would have failed origin or auth is answered 503
// too: under overload the cheapest answer comes first, as with caps.)
//
// Connections are accepted from inner by the caller's Accept loop as
// usual; a handed-on connection is returned by a later Accept, which is
// woken through inner's SetDeadline. An inner listener without SetDeadline
// (not TCP or Unix) is returned unchanged. path must start with '/' and
// contain no space, '?' or control character. Close the door, not inner:
// on Linux the door holds a second descriptor of a TCP listener's socket
// (it takes connections to shed from it), and the socket stops listening
// once both are closed.
func (g *Gate) Listener(inner net.Listener, path string) net.Listener {
	return newDoor(g, inner, []string{path}, peekTimeout, maxPeekers)
}

type deadliner interface{ SetDeadline(time.Time) error }

type door struct {
	net.Listener
	g       *Gate
	dl      deadliner
	paths   []string // the first is Listener's path; more: ServingListener's
	timeout time.Duration
	max     int32
	h       http.Handler // ServingListener: serves GET path itself

	peekers atomic.Int32 // goroutines peeking
	pending atomic.Int32 // len(ready), read without the lock by Accept

	mu      sync.Mutex
	closed  bool
	ready   []net.Conn            // handed on, waiting for Accept
	peeking map[net.Conn]struct{} // woken by Close

	trace func(event string) // tests: "peek", "shed", "pass", "gone", "serve"
	// rawTrace, tests: acceptRaw "took" a connection, and "shed" it or
	// made a "conn" of it.
	rawTrace func(event string)

	// headIn: inner hands over a connection only once its first bytes
	// are in (wsock.DeferAccept), so Accept reads the head at once.
	headIn bool

	// rl takes inner's connections raw while the door sheds (acceptRaw);
	// nil: always net's accept (not TCP, or no descriptor calls).
	rl *wsock.RawListener
	// ka is the keep-alive of the connections inner's accept returns,
	// read off the first: a connection taken raw and not shed is given
	// it. nil until then, and no raw accept before.
	ka atomic.Pointer[net.KeepAliveConfig]
}

func newDoor(g *Gate, inner net.Listener, paths []string, timeout time.Duration, max int32) net.Listener {
	for _, path := range paths {
		if len(path) == 0 || path[0] != '/' {
			panic("handshake: door path must start with '/': " + strconv.Quote(path))
		}
		for i := 0; i < len(path); i++ {
			if c := path[i]; c <= ' ' || c == '?' || c >= 0x7f {
				panic("handshake: invalid door path " + strconv.Quote(path))
			}
		}
	}
	dl, ok := inner.(deadliner)
	if !ok {
		return inner
	}
	return &door{Listener: inner, g: g, dl: dl, paths: paths, timeout: timeout, max: max,
		peeking: map[net.Conn]struct{}{}, rl: wsock.NewRawListener(inner)}
}

// aLongTimeAgo is a deadline in the past: it wakes a blocked call at once.
var aLongTimeAgo = time.Unix(1, 0)

// Accept returns inner's next connection untouched unless the door should
// look at it, and the connections peeking has handed on.
func (d *door) Accept() (net.Conn, error) {
	for {
		if d.pending.Load() > 0 {
			if c := d.pop(); c != nil {
				return c, nil
			}
		}
		var c net.Conn
		var bp *[peekSize]byte
		n := 0
		if d.rl != nil && d.shedding() {
			var again bool
			var err error
			c, bp, n, again, err = d.acceptRaw()
			if err != nil {
				return nil, err
			}
			if again {
				continue
			}
		}
		if c == nil {
			var err error
			c, err = d.Listener.Accept()
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					// A hand-on woke us (only the door sets inner's deadline).
					// Clear it before looking at the queue: a hand-on queued
					// after the look sets it again and wakes the next Accept.
					_ = d.dl.SetDeadline(time.Time{})
					continue
				}
				return nil, err
			}
			d.learn(c)
		}
		shedding := d.shedding()
		if d.h == nil && !shedding {
			if bp != nil {
				c = wsock.Replay(c, bp[:n])
				peekBufs.Put(bp)
			}
			return c, nil
		}
		if bp == nil && (shedding || d.headIn) {
			// In a storm the head is usually in by now (and always, but
			// for a client that sent nothing for a second, when the
			// kernel defers the accept): shed it here, without a
			// goroutine, so that all shedding is one goroutine among the
			// connections being served, however many dial.
			bp = peekBufs.Get().(*[peekSize]byte)
			n = wsock.ReadNow(c, bp[:])
		}
		if n > 0 && shedding && d.shedNow(c, bp[:n]) {
			peekBufs.Put(bp)
			wsock.Yield() // let the served connections run between sheds
			continue
		}
		if n > 0 && d.h != nil && d.simple(bp[:n]) {
			// The whole head is in: serve it without waiting for more,
			// so without a read deadline or a place among the peekers.
			go d.serveIn(c, bp, n)
			continue
		}
		if d.peekers.Add(1) > d.max {
			d.peekers.Add(-1)
			if n > 0 {
				c = wsock.Replay(c, bp[:n])
			}
			if bp != nil {
				peekBufs.Put(bp)
			}
			return c, nil
		}
		// The peek deadline is set before c is registered, never by the
		// peeker: Close wakes registered connections by moving their
		// deadline to the past, and a deadline set after that would undo
		// the wake-up (the peeker would then sleep until the timeout).
		_ = c.SetReadDeadline(time.Now().Add(d.timeout))
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			d.peekers.Add(-1)
			c.Close()
			if bp != nil {
				peekBufs.Put(bp)
			}
			return nil, net.ErrClosed
		}
		d.peeking[c] = struct{}{}
		d.mu.Unlock()
		go d.peek(c, bp, n)
	}
}

// acceptRaw takes inner's next connection as a bare descriptor
// (wsock.RawListener: waiting in the netpoller, as net's accept does,
// while none is waiting) and, when its head is in and is a sheddable upgrade
// and a cap is still full, sheds it there: no net.Conn, no netpoller
// registration, none of the socket options net's accept sets. Any other
// connection becomes the one net's accept would have returned, c, with
// the bytes read, bp[:n], for Accept to go on with as usual.
//
// again: a connection was shed, or a hand-on woke the wait; Accept looks
// again. A nil c otherwise: the door stopped shedding while it waited,
// the listener is closed, or the raw accept failed; net's accept then
// takes the connection, or reports what it finds, as it would have
// without the door. err is for net/http: out of descriptors for the
// connection's net.Conn (which is lost).
func (d *door) acceptRaw() (c net.Conn, bp *[peekSize]byte, n int, again bool, err error) {
	ka := d.ka.Load()
	if ka == nil {
		// No connection of inner's seen yet to make one like it.
		return nil, nil, 0, false, nil
	}
	fd, err := d.rl.Accept(d.shedding)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// A hand-on woke us: rearm before looking at the queue, as
			// Accept does for inner.
			d.rl.Rearm()
			return nil, nil, 0, true, nil
		}
		return nil, nil, 0, false, nil
	}
	if fd < 0 {
		return nil, nil, 0, false, nil
	}
	d.rawEvent("took")
	bp = peekBufs.Get().(*[peekSize]byte)
	n = wsock.ReadFD(uintptr(fd), bp[:])
	if n > 0 && d.simple(bp[:n]) {
		if why, full := d.g.doorFull(); full {
			d.event("peek")
			var b [256]byte
			// A fresh socket takes the whole answer at once.
			_, _ = wsock.SendLastFD(uintptr(fd), d.refusal(why, b[:0]))
			wsock.CloseFD(fd)
			d.event("shed")
			d.rawEvent("shed")
			peekBufs.Put(bp)
			wsock.Yield() // let the served connections run between sheds
			return nil, nil, 0, true, nil
		}
	}
	c, err = wsock.ConnFromFD(fd, *ka)
	if err != nil {
		peekBufs.Put(bp)
		if acceptFailed(err) {
			return nil, nil, 0, false, err
		}
		return nil, nil, 0, false, nil
	}
	d.rawEvent("conn")
	return c, bp, n, false, nil
}

// acceptFailed reports whether err, making a net.Conn of a connection
// taken raw, is one net's accept could have returned and net/http
// retries after a pause: the process or the system out of descriptors.
func acceptFailed(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// learn records the keep-alive of c, the first connection inner's accept
// returned, for the connections the door takes raw (acceptRaw).
func (d *door) learn(c net.Conn) {
	if d.rl == nil || d.ka.Load() != nil {
		return
	}
	if ka, ok := wsock.KeepAliveOf(c); ok {
		d.ka.Store(&ka)
	}
}

// shedNow sheds c if head, the bytes it has sent so far, is a complete
// sheddable upgrade and the door still sheds; else it leaves c alone.
func (d *door) shedNow(c net.Conn, head []byte) bool {
	if !d.simple(head) {
		return false
	}
	why, full := d.g.doorFull()
	if !full {
		return false
	}
	d.event("peek")
	var b [256]byte
	d.shed(c, why, b[:0])
	return true
}

// shed answers c, whose head was a complete sheddable upgrade, with the
// documented 503 under reason why (counted as Admit would), and closes it.
// scratch is room for the answer.
func (d *door) shed(c net.Conn, why reason, scratch []byte) {
	_, _ = wsock.WriteLast(c, d.refusal(why, scratch))
	c.Close()
	d.event("shed")
}

// refusal counts a shed under reason why, as Admit would, and appends
// the 503 that answers it to scratch.
func (d *door) refusal(why reason, scratch []byte) []byte {
	g := d.g
	g.rejected[why].Inc()
	return appendDoor503(scratch, g.overloadHint(g.clock()))
}

// simple reports whether head is a complete, well-formed GET of one of
// the door's paths (wsock.HeadSimple).
func (d *door) simple(head []byte) bool {
	for _, path := range d.paths {
		if v, _ := wsock.ClassifyHead(head, path, 0, peekSize); v == wsock.HeadSimple {
			return true
		}
	}
	return false
}

// shedding reports whether the door sheds well-formed upgrades now.
func (d *door) shedding() bool {
	if d.g.cfg.Reject != RejectHTTP {
		return false
	}
	_, full := d.g.doorFull()
	return full
}

// Close closes inner, the connections waiting for Accept, and wakes the
// peeking goroutines (which then close theirs).
func (d *door) Close() error {
	d.mu.Lock()
	ready := d.ready
	if !d.closed {
		d.closed = true
		d.ready = nil
		d.pending.Store(0)
		for c := range d.peeking {
			_ = c.SetReadDeadline(aLongTimeAgo)
		}
	}
	d.mu.Unlock()
	for _, c := range ready {
		c.Close()
	}
	err := d.Listener.Close()
	if d.rl != nil {
		// The listening socket closes with its last descriptor.
		d.rl.Close()
	}
	return err
}

func (d *door) pop() net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ready) == 0 {
		return nil
	}
	c := d.ready[0]
	d.ready[0] = nil
	d.ready = d.ready[1:]
	d.pending.Add(-1)
	return c
}

var peekBufs = sync.Pool{New: func() any { return new([peekSize]byte) }}

// peek reads the request head of c and sheds it, serves it (ServingListener)
// or hands it on.
// bp and n: a buffer (or nil) and how many bytes of it Accept already read.
func (d *door) peek(c net.Conn, bp *[peekSize]byte, n int) {
	peeking := true
	defer func() {
		if peeking {
			d.peekers.Add(-1)
		}
	}()
	d.event("peek")
	if bp == nil {
		bp = peekBufs.Get().(*[peekSize]byte)
	}
	defer func() {
		if bp != nil {
			peekBufs.Put(bp)
		}
	}()
	buf := bp[:]

	n, v, err := wsock.ReadHead(c, buf, n, d.paths[0])
	for i := 1; v == wsock.HeadOther && err == nil && i < len(d.paths); i++ {
		// Not a simple head for the first path: another path's, perhaps
		// (ReadHead reads on from the bytes in, if it needs more).
		n, v, err = wsock.ReadHead(c, buf, n, d.paths[i])
	}
	if v == wsock.HeadSimple {
		d.forget(c) // nothing more is read: Close need not wake it
		if d.shedOrParse(c, buf[:n]) {
			return
		}
		if w, req := d.parse(c, buf[:n]); req != nil {
			if !d.take(c) {
				return
			}
			// The head is in: from here on the gate bounds this
			// goroutine (caps, pacing queue), not the peeker bound,
			// and the request holds copies of what it needs.
			d.peekers.Add(-1)
			peeking = false
			peekBufs.Put(bp)
			bp = nil
			_ = c.SetReadDeadline(time.Time{})
			d.serve(c, w, req)
			return
		}
	}
	if n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		// Gone before saying anything: net/http would close it silently.
		d.forget(c)
		c.Close()
		d.event("gone")
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	d.handOn(c, wsock.Replay(c, buf[:n]))
}

// shedOrParse starts the door's work on c, whose head is the complete,
// simple head: it yields, then sheds c and reports true if a cap is full.
func (d *door) shedOrParse(c net.Conn, head []byte) (shed bool) {
	// Door work yields first: Gosched moves this goroutine to the back
	// of the global run queue, behind the connections already served
	// (readied into the local queues by the poller), and breaks the
	// chain of door goroutines handing each other the processor. In a
	// storm the door's work then fills the time established clients
	// leave, instead of making them wait behind a run queue of
	// upgrades (BENCHMARKS.md, storm isolation).
	wsock.Yield()
	if why, full := d.g.doorFull(); full && d.g.cfg.Reject == RejectHTTP {
		d.shed(c, why, head[:0])
		return true
	}
	return false
}

// parse makes the request of c's simple head for d.h, and its response
// writer; a nil request when the door does not serve (or ParseHead would
// not), and the connection is then handed on.
func (d *door) parse(c net.Conn, head []byte) (*wsock.Response, *http.Request) {
	if d.h == nil {
		return nil, nil
	}
	// Parsing, the handler and the WebSocket accept go deep: grow the
	// stack once, while it is shallow.
	wsock.GrowStack()
	w := wsock.NewResponse(c)
	return w, wsock.ParseHead(w.Context(), head)
}

// serveIn sheds or serves c, whose whole simple head, bp[:n], was in
// when it was accepted: nothing more is read, and c is never among the
// peekers (Close closes it here or when its handler is done).
func (d *door) serveIn(c net.Conn, bp *[peekSize]byte, n int) {
	defer func() {
		if bp != nil {
			peekBufs.Put(bp)
		}
	}()
	if d.shedOrParse(c, bp[:n]) {
		return
	}
	w, req := d.parse(c, bp[:n])
	if req == nil {
		d.handOn(c, wsock.Replay(c, bp[:n]))
		return
	}
	peekBufs.Put(bp)
	bp = nil
	if !d.take(c) {
		return
	}
	d.serve(c, w, req)
}

// take removes c from the peeking set to serve it; false when the door
// has closed (c is then closed).
func (d *door) take(c net.Conn) bool {
	d.mu.Lock()
	delete(d.peeking, c)
	closed := d.closed
	d.mu.Unlock()
	if closed {
		c.Close()
	}
	return !closed
}

func (d *door) forget(c net.Conn) {
	d.mu.Lock()
	delete(d.peeking, c)
	d.mu.Unlock()
}

// handOn queues hc for Accept and wakes a blocked Accept.
func (d *door) handOn(c, hc net.Conn) {
	d.mu.Lock()
	delete(d.peeking, c)
	if d.closed {
		d.mu.Unlock()
		c.Close()
		return
	}
	d.ready = append(d.ready, hc)
	d.pending.Add(1)
	d.mu.Unlock()
	d.event("pass")
	_ = d.dl.SetDeadline(aLongTimeAgo)
	if d.rl != nil {
		d.rl.Wake() // Accept may be waiting there instead
	}
}

func (d *door) rawEvent(e string) {
	if d.rawTrace != nil {
		d.rawTrace(e)
	}
}

func (d *door) event(e string) {
	if d.trace != nil {
		d.trace(e)
	}
}

// door503 is the fixed part of the door's answer: the same status,
// headers and body as retryhint.Answer through net/http, and
// Connection: close.
const door503 = "HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Type: application/json\r\n" +
	"Cache-Control: no-store\r\n" +
	"Connection: close\r\n" +
	"Retry-After: "

// appendDoor503 appends the whole 503 response for a hint of ms (> 0).
func appendDoor503(b []byte, ms int64) []byte {
	var scratch [64]byte
	body := retryhint.EndBody(append(scratch[:0], retryhint.HeadOverloaded...), ms)
	b = append(b, door503...)
	b = strconv.AppendInt(b, retryhint.RetryAfterSeconds(ms), 10)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rtserver/rtserver/internal/wsock"
)

// Buffer sizes of a hijacked connection (wsock.SmallBuffers).
const (
	readBufferSize  = wsock.ReadBufferSize
	writeBufferSize = wsock.WriteBufferSize
)

// upgradeWriter wraps the ResponseWriter of an upgrade so the hijacked
// connection gets small buffers and a shared, locked socket.
type upgradeWriter struct {
	http.ResponseWriter
	conn *rawConn
}

func (u *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(u.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	rc := newRawConn(nc)
	u.conn = rc
	r, rw := wsock.SmallBuffers(nc, brw.Reader, rc)
	rc.br = r
	return rc, rw, nil
}

// rawConn is the socket under a WebSocket connection, shared by two
// writers: the WebSocket library, which writes control frames (each in one
// Write, see writeBufferSize), and our write path, which frames data
// messages itself. A mutex keeps the two from interleaving mid-frame.
//
// When the socket has a file descriptor (TCP, Unix), data frames are
// written with write(2) through syscall.RawConn: tryWrite never waits (a
// publisher writes to an idle connection's socket itself and hands only
// what the socket would not take to a writer goroutine), and send, the
// writer's blocking write, records while it waits for the socket to drain
// (stalled): the send queue limit is enforced against bytes the socket
// would not take, not bytes that merely wait for a goroutine to run.
type rawConn struct {
	net.Conn
	sc syscall.RawConn // nil: no descriptor, plain blocking writes

	mu        sync.Mutex
	sealed    bool        // a close frame is on its way: no more data frames
	closeSent bool        // a close frame went to the socket (ours or the library's): nothing may follow it
	rest      atomic.Bool // len(tail) > 0, read without mu (beside the bools: rawConn stays in the 240-byte size class)
	tail      []byte      // the unsent rest of a frame tryWrite began: written before anything else

	// The write(2) callbacks' arguments and results, under mu (each
	// callback made once per connection: a write allocates nothing).
	// fn waits for the socket to drain (send); tryFn never waits
	// (tryWrite) and runs under RawConn.Control, which only pins the
	// descriptor: no write lock and no poller reset per delivery, which
	// a non-blocking write under mu needs neither of.
	fn    func(fd uintptr) bool
	tryFn func(fd uintptr)
	pend  []byte
	n     int
	err   error

	stalled atomic.Bool // send is waiting for the socket to drain

	// The read goroutine's parking (conn.park): whether one runs, and
	// the connection to resume when the socket is closed while none does.
	parking wsock.Parking
	owner   *conn

	// A hard stop is under way (goAway): every write gives up, and a
	// write already waiting on the socket ends by goAway's deadline.
	stopping atomic.Bool
	// A close frame is due (writeClose): data writes not yet begun give
	// up; one under way may finish within the close frame's deadline.
	closing atomic.Bool

	// Frames held while the read goroutine runs the input it has in hand
	// (write.go, holdSet): flushed before a read waits for the client
	// (awaitFD, Read). Made on the first publish, by the read goroutine;
	// atomic because the library's close handshake reads from another.
	hold atomic.Pointer[holdSet]

	// Keepalive: our pings are written here and their pongs are taken
	// here (awaitInput) or reported by the WebSocket library (pong).
	pingState atomic.Uint32 // pingIdle, pingSent or pingAnswered
	pongs     atomic.Uint32 // pongs seen, for tests

	// Read side, used by the read goroutine only; br also under brMu
	// (the library's close handshake reads it from another goroutine).
	brMu       sync.Mutex
	readClosed bool                  // a close has begun: br is the library's alone
	mayPark    bool                  // awaitFD returns rather than wait (awaitInput)
	wouldWait  bool                  // and it found nothing to read
	quiet      bool                  // awaitFD waits at most quietBeforePark (awaitInput)
	quietSet   bool                  // and has set the read deadline for it
	br         *bufio.Reader         // what the WebSocket library reads from
	inputFn    func(fd uintptr)      // made on first use: most clients never publish
	input      int                   // its result
	awaitFn    func(fd uintptr) bool // awaitInput's callback, made on first use
	peek       [2]byte               // the socket's first bytes, as awaitFD last peeked them
	peeked     int                   // how many of them
}

func newRawConn(nc net.Conn) *rawConn {
	c := &rawConn{Conn: nc, sc: wsock.Descriptor(nc)}
	if c.sc != nil {
		c.fn, c.tryFn = c.writeFD, c.tryFD
	}
	return c
}

// Close closes the socket, then resumes the connection if its read
// goroutine is parked (conn.park): a closed socket is out of the poller's
// set, and its connection would otherwise never run its cleanup. Every
// way a connection ends closes the socket through here: the WebSocket
// library's Close and CloseNow, abort and goAway.
func (c *rawConn) Close() error {
	err := c.Conn.Close()
	if c.owner != nil {
		c.owner.Wake()
	}
	return err
}

// errSealed reports a batch dropped because the connection is closing.
var errSealed = errors.New("server: connection is closing")

// Write is the WebSocket library's path (control frames, each in one
// Write). A frame must not start inside another: the rest of a data frame
// goes first. Nothing follows a close frame: when ours went first
// (writeClose), the library's own is taken and dropped, so its close
// handshake goes on as if it had sent it.
func (c *rawConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping.Load() {
		return 0, net.ErrClosed
	}
	if c.closeSent {
		if len(p) > 0 && p[0] == wsock.CloseHead {
			return len(p), nil
		}
		return 0, net.ErrClosed
	}
	if len(c.tail) > 0 {
		_, err := c.Conn.Write(c.tail)
		c.setTail(nil)
		if err != nil {
			return 0, err
		}
	}
	if len(p) > 0 && p[0] == wsock.CloseHead {
		c.closeSent = true
	}
	return c.Conn.Write(p)
}

// tryWrite writes the whole data frame f if the socket takes it at once,
// without waiting. It reports sent false when f must be queued instead:
// no descriptor, the socket in use by another writer, or full. When the
// socket takes only part of f, the rest becomes the tail (sent and rest
// true): a writer must send it before anything else; with copyRest the
// tail is a copy (f is a buffer its caller reuses).
func (c *rawConn) tryWrite(f []byte, copyRest bool) (sent, rest bool, err error) {
	if c == nil || c.sc == nil || !c.mu.TryLock() {
		return false, false, nil
	}
	defer c.mu.Unlock()
	if c.sealed {
		return false, false, errSealed
	}
	if len(c.tail) > 0 {
		return false, false, nil
	}
	n, err := c.rawWrite(f, false)
	if err != nil {
		return false, false, err
	}
	if n == 0 {
		return false, false, nil // the socket is full: queue it whole
	}
	if n < len(f) {
		if copyRest {
			c.setTail(bytes.Clone(f[n:]))
			return true, true, nil
		}
		c.setTail(f[n:])
		return true, true, nil
	}
	return true, false, nil
}

func (c *rawConn) setTail(t []byte) {
	c.tail = t
	c.rest.Store(len(t) > 0)
}

// pending reports whether the rest of a frame waits to be sent.
func (c *rawConn) pending() bool { return c != nil && c.rest.Load() }

// send writes the tail, if any, then b (whole data frames), bounded by
// timeout. Once sealed only the tail is written: a close frame follows.
func (c *rawConn) send(b []byte, timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed && len(c.tail) == 0 {
		return errSealed
	}
	if !c.setDeadline(timeout) {
		return errSealed
	}
	defer c.Conn.SetWriteDeadline(time.Time{})
	if err := c.finishTail(); err != nil {
		return err
	}
	if c.sealed {
		return errSealed
	}
	if len(b) == 0 {
		return nil
	}
	return c.write(b)
}

// write writes all of b (whole frames), waiting for the socket as
// needed. When it fails partway through a frame, the rest of that frame
// becomes the tail, so that a close frame written next still starts on a
// frame boundary. c.mu held.
func (c *rawConn) write(b []byte) error {
	n, err := c.put(b)
	if err != nil && n > 0 {
		if end := wsock.FrameEnd(b, n); end > n {
			c.setTail(bytes.Clone(b[n:end]))
		}
	}
	return err
}

// put writes all of b, waiting for the socket as needed, and returns how
// much went. c.mu held.
func (c *rawConn) put(b []byte) (int, error) {
	if c.sc == nil {
		return c.Conn.Write(b)
	}
	return c.rawWrite(b, true)
}

// full reports whether the socket would not take more data: a send is
// waiting for it to drain. Without a descriptor it cannot tell, and says
// yes: the send queue limit then counts every queued byte.
func (c *rawConn) full() bool {
	return c == nil || c.sc == nil || c.stalled.Load()
}

// rawWrite runs a write(2) callback: one that waits for the socket to
// drain when block, else one that takes what the socket takes now. c.mu
// held.
func (c *rawConn) rawWrite(b []byte, block bool) (int, error) {
	c.pend, c.n, c.err = b, 0, nil
	var err error
	if block {
		err = c.sc.Write(c.fn)
	} else {
		err = c.sc.Control(c.tryFn)
	}
	if c.stalled.Load() {
		c.stalled.Store(false)
	}
	n := c.n
	if err == nil {
		err = c.err
	}
	c.pend, c.err = nil, nil
	return n, err
}

// awaitInput returns when the client has sent the start of a frame other
// than a pong (or the socket is closed or failed), and reports whether
// that frame is a close frame (as closeFrameNext, under the same lock).
//
// With park it may return wait instead: nothing has arrived, and the
// caller may hand the socket to the poller and end its goroutine
// (conn.park). Without quiet it returns wait at once; with quiet it first
// waits up to quietBeforePark (a client that has just sent is likely to
// send again soon: parking and resuming costs more than waiting). Without
// park it waits in the runtime's poller, as a read goroutine does where
// there is no poller of ours, a few frames deep: it then keeps the
// smallest stack, where a read parked inside the WebSocket library's
// frame reader needs twice that.
//
// Pongs to our keepalive pings are taken here, between messages, so that
// answering a ping does not leave the goroutine parked in the library.
// Read goroutine only; it touches the read buffer only under brMu and
// never once a close has begun (the library then reads it itself).
func (c *rawConn) awaitInput(park, quiet bool) (closeNext, wait bool) {
	if c == nil || c.br == nil {
		return false, false
	}
	if c.sc == nil {
		return c.closeFrameNext(), false
	}
	for {
		c.brMu.Lock()
		if c.readClosed {
			c.brMu.Unlock()
			return false, false
		}
		buffered := c.br.Buffered()
		c.brMu.Unlock()
		c.peeked = 0
		if buffered == 0 {
			if c.awaitFn == nil {
				c.awaitFn = c.awaitFD
			}
			c.mayPark, c.quiet, c.wouldWait = park && !quiet, park && quiet, false
			err := c.sc.Read(c.awaitFn)
			c.mayPark, c.quiet = false, false
			if c.quietSet {
				c.quietSet = false
				_ = c.Conn.SetReadDeadline(time.Time{})
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return false, true // quiet for quietBeforePark: park
				}
			}
			if err != nil {
				return false, false // the read that follows reports it
			}
			if c.wouldWait {
				return false, true
			}
			quiet = false // input came: the next wait after a pong parks at once
		}
		c.brMu.Lock()
		if c.readClosed || !c.takePong() {
			closeNext = !c.readClosed && c.closeHead()
			c.brMu.Unlock()
			return closeNext, false
		}
		c.brMu.Unlock()
	}
}

// quietBeforePark is how long a read goroutine that has just read a
// frame waits for the next before it parks its connection (awaitInput):
// a connection that sends steadily (a publisher) keeps its goroutine,
// one that has gone quiet (a subscriber after its subscribe) gives it up.
const quietBeforePark = time.Second

// closeFrameNext reports whether the next input is a close frame, by its
// first byte (buffered, or as awaitFD last peeked it). Read goroutine only.
func (c *rawConn) closeFrameNext() bool {
	if c == nil || c.br == nil {
		return false
	}
	c.brMu.Lock()
	defer c.brMu.Unlock()
	return !c.readClosed && c.closeHead()
}

// head is the first bytes of the input, at most two: from the read
// buffer, or, when it is empty, as awaitFD last peeked them from the
// socket. c.brMu held.
func (c *rawConn) head() []byte {
	b := c.br.Buffered()
	if b == 0 {
		return c.peek[:c.peeked]
	}
	h, _ := c.br.Peek(min(b, 2))
	return h
}

// closeHead reports whether the input starts with a close frame (FIN|close).
// c.brMu held.
func (c *rawConn) closeHead() bool {
	return wsock.IsClose(c.head())
}

// takePong consumes a whole pong frame at the head of the input, if that
// is what is there and all of it has arrived (it never waits), and
// reports whether it did. c.brMu held.
func (c *rawConn) takePong() bool {
	n := wsock.ClientPongLen(c.head())
	if n == 0 || !c.available(n) {
		return false
	}
	if _, err := c.br.Peek(n); err != nil {
		return false
	}
	_, _ = c.br.Discard(n)
	c.pong()
	return true
}

// available reports whether n bytes can be read without waiting: in the
// read buffer, or in the buffer and the socket. c.brMu held.
func (c *rawConn) available(n int) bool {
	b := c.br.Buffered()
	return b >= n || b+c.socketInput() >= n
}

// socketInput is how many bytes wait in the socket (0 when unknown).
func (c *rawConn) socketInput() int {
	if c.inputFn == nil {
		c.inputFn = c.inputFD
	}
	c.input = 0
	if c.sc.Control(c.inputFn) != nil {
		return 0
	}
	return c.input
}

// closeRead hands the read buffer to the WebSocket library for good: its
// close handshake reads the client's close frame itself.
func (c *rawConn) closeRead() {
	if c == nil {
		return
	}
	c.brMu.Lock()
	c.readClosed = true
	c.brMu.Unlock()
}

// Keepalive states.
const (
	pingIdle uint32 = iota
	pingSent
	pingAnswered
)

// finishTail writes the unsent rest of a frame, if any, so that whatever
// follows starts on a frame boundary. c.mu must be held.
func (c *rawConn) finishTail() error {
	if len(c.tail) == 0 {
		return nil
	}
	n, err := c.put(c.tail)
	c.setTail(c.tail[n:]) // what did not go stays first in line
	return err
}

// pingFrame is an unmasked ping with no payload.
var pingFrame = wsock.PingFrame

// ping writes a ping frame (after the rest of a data frame, if one is
// unfinished), bounded by timeout, and marks a pong as due.
func (c *rawConn) ping(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed {
		return errSealed
	}
	if !c.setDeadline(timeout) {
		return errSealed
	}
	defer c.Conn.SetWriteDeadline(time.Time{})
	if err := c.finishTail(); err != nil {
		return err
	}
	c.pingState.Store(pingSent) // before the write: the pong may come at once
	return c.write(pingFrame)
}

// pong records a pong from the client.
func (c *rawConn) pong() {
	c.pongs.Add(1)
	c.pingState.CompareAndSwap(pingSent, pingAnswered)
}

// heard records a message from the client: a peer that sends is alive,
// whether or not its library answers pings while it is not reading (a
// publisher that never reads answers none).
func (c *rawConn) heard() {
	if c.pingState.Load() == pingSent {
		c.pingState.CompareAndSwap(pingSent, pingAnswered)
	}
}

// onPong is the WebSocket library's pong callback (pongs it reads while
// it is inside a read).
func (u *upgradeWriter) onPong(context.Context, []byte) {
	if u.conn != nil {
		u.conn.pong()
	}
}

// Read is what the WebSocket library reads frames through (its Accept
// resets the hijacked reader to read the net.Conn it got, this one):
// before a read that would wait for the client, held frames go out.
func (c *rawConn) Read(p []byte) (int, error) {
	if h := c.hold.Load(); h.pending() && c.sc != nil {
		if n := h.readNow(c.sc, p); n > 0 {
			return n, nil
		}
		// Nothing yet (or the end, or an error: the read below reports
		// it): flush before waiting.
		h.flush()
	}
	return c.Conn.Read(p)
}

// flushBeforeWait flushes held frames: the read is about to wait.
func (c *rawConn) flushBeforeWait() {
	if h := c.hold.Load(); h.pending() {
		h.flush()
	}
}

// bigReadBuffer is the read buffer of a publisher while it has input in
// hand: 64 publishes of ~170 bytes then take 3 reads instead of 43 with
// the 256 bytes an idle connection keeps.
const bigReadBuffer = 4 << 10

// bigReaders holds the large read buffers between bursts.
var bigReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bigReadBuffer) }}

// prefixReader yields rest, then reads from c.
type prefixReader struct {
	rest []byte
	c    *rawConn
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.rest) > 0 {
		n := copy(b, p.rest)
		p.rest = p.rest[n:]
		return n, nil
	}
	return p.c.Read(b)
}

// growReader gives a publisher that has more input in hand a large read
// buffer, in place: the WebSocket library holds br itself, so the
// reader's contents are swapped, not the pointer (the small reader is
// kept in the holdSet). Bytes already buffered move over first. Read
// goroutine only, between frames.
func (c *rawConn) growReader() {
	h := c.hold.Load()
	if h == nil || h.big != nil {
		return
	}
	c.brMu.Lock()
	defer c.brMu.Unlock()
	n := c.br.Buffered()
	if c.readClosed || n == 0 || c.br.Size() >= bigReadBuffer {
		return
	}
	rest, _ := c.br.Peek(n)
	big := bigReaders.Get().(*bufio.Reader)
	h.prefix = prefixReader{rest: rest, c: c}
	big.Reset(&h.prefix)
	if _, err := big.Peek(n); err != nil { // cannot fail: rest holds n bytes
		big.Reset(nil)
		bigReaders.Put(big)
		return
	}
	_, _ = c.br.Discard(n)
	h.small = *c.br
	*c.br = *big
	h.big = big
}

// shrinkReader gives the small read buffer back once the large one is
// empty: the read is about to wait, the burst is over. Read goroutine
// only.
func (c *rawConn) shrinkReader() {
	h := c.hold.Load()
	if h == nil || h.big == nil {
		return
	}
	c.brMu.Lock()
	defer c.brMu.Unlock()
	if c.readClosed || c.br.Buffered() > 0 {
		return // a closing connection keeps the large one
	}
	big := h.big
	*big = *c.br
	*c.br = h.small
	h.small, h.big = bufio.Reader{}, nil
	big.Reset(nil)
	bigReaders.Put(big)
}

// holdSet is the read goroutine's holdSet, made on first use. Read
// goroutine only.
func (c *rawConn) holdSet() *holdSet {
	h := c.hold.Load()
	if h == nil {
		h = new(holdSet)
		c.hold.Store(h)
	}
	return h
}

// setDeadline bounds the writes that follow by timeout, and reports false
// when a hard stop or a close has begun: the caller then writes nothing.
// It checks after setting, so that either the caller sees the stop or
// goAway's (writeClose's) deadline is set after this one and wins. c.mu
// held.
func (c *rawConn) setDeadline(timeout time.Duration) bool {
	c.Conn.SetWriteDeadline(time.Now().Add(timeout))
	return !c.stopping.Load() && !c.closing.Load()
}

// goAwayWait bounds what a hard stop waits for one socket: a write under
// way that holds the socket, then the close frame itself. A client whose
// socket will not take a close frame by then gets none.
const goAwayWait = 250 * time.Millisecond

// goAway is a hard stop: it writes frame (a close frame) after the rest
// of a data frame begun, unless a close frame went already, and closes
// the socket at once, without waiting for the client's answer. Queued
// data frames are not sent. It waits at most about twice goAwayWait.
func (c *rawConn) goAway(frame []byte) {
	c.stopping.Store(true)
	// A writer waiting on a full socket gives up by then, and lets go of mu.
	c.Conn.SetWriteDeadline(time.Now().Add(goAwayWait))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closeSent {
		c.closeSent, c.sealed = true, true
		c.Conn.SetWriteDeadline(time.Now().Add(goAwayWait))
		if c.finishTail() == nil {
			_ = c.write(frame)
		}
	}
	_ = c.Close()
}

// writeClose seals the connection and writes frame (a close frame) after
// the rest of a data frame begun, all within wait: a client that stopped
// reading gets it once it reads again, if it does so in time. A writer
// already waiting on the socket may finish its write within the same
// bound (its data comes before the close frame); one not yet begun gives
// up. The library's own close frame, written next, is dropped (Write). It
// returns errSealed when a hard stop came first, or the write's error.
func (c *rawConn) writeClose(frame []byte, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	c.closing.Store(true)
	c.Conn.SetWriteDeadline(deadline) // the bound of a write under way, too
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sealed = true
	if c.stopping.Load() {
		return errSealed
	}
	if c.closeSent {
		return nil
	}
	c.Conn.SetWriteDeadline(deadline)
	defer c.Conn.SetWriteDeadline(time.Time{})
	c.closeSent = true
	if err := c.finishTail(); err != nil {
		return err
	}
	return c.write(frame)
}

// seal stops data frames before the close frame is written: nothing may
// follow a close frame.
func (c *rawConn) seal() {
	c.mu.Lock()
	c.sealed = true
	c.mu.Unlock()
}

// closeFrame is an unmasked close frame (wsock.CloseFrame).
func closeFrame(code uint16, reason string) []byte { return wsock.CloseFrame(code, reason) }

// appendTextHeader appends a text frame's header (wsock.AppendTextHeader).
// A function, not a variable: a call through a variable makes the
// caller's header array escape to the heap.
func appendTextHeader(b []byte, n int) []byte { return wsock.AppendTextHeader(b, n) }

// writeFD writes c.pend to the non-blocking descriptor. It returns false
// (wait until writable, then call again) while the socket is full.
func (c *rawConn) writeFD(fd uintptr) bool {
	if c.stalled.Load() {
		c.stalled.Store(false)
	}
	n, full, err := wsock.WriteFD(fd, c.pend)
	c.pend = c.pend[n:]
	c.n += n
	switch {
	case err != nil:
		c.err = err
	case full:
		c.stalled.Store(true)
		return false
	}
	return true
}

// tryFD writes what of c.pend the non-blocking descriptor takes now.
func (c *rawConn) tryFD(fd uintptr) {
	n, _, err := wsock.WriteFD(fd, c.pend)
	c.n, c.err = n, err
}

// inputFD stores how many bytes wait to be read in the socket.
func (c *rawConn) inputFD(fd uintptr) { c.input = wsock.InqFD(fd) }

// awaitFD returns true once something can be read: bytes, the end (EOF)
// or an error; else false, to wait for readiness and be called again. It
// peeks (the first two bytes, kept in c.peek for takePong) rather than
// asking how many bytes wait: an end that arrived before the wait began
// must not be waited for, its readiness edge is already spent.
func (c *rawConn) awaitFD(fd uintptr) bool {
	n, wait := wsock.PeekFD(fd, c.peek[:])
	if wait {
		c.flushBeforeWait()
		c.shrinkReader()
		if c.mayPark {
			c.wouldWait = true
			return true // the caller parks instead
		}
		if c.quiet && !c.quietSet {
			// Bounds this wait only: awaitInput clears it before any
			// other read.
			c.quietSet = true
			_ = c.Conn.SetReadDeadline(time.Now().Add(quietBeforePark))
		}
		return false // nothing yet: wait
	}
	c.peeked = n
	return true // bytes, the end, or an error: the read reports it
}

// readFD reads what the non-blocking descriptor has now into h.rp.
func (h *holdSet) readFD(fd uintptr) { h.rn = wsock.ReadFD(fd, h.rp) }

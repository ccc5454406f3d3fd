package wsock

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Conn is the socket under a WebSocket connection after the upgrade,
// shared by two writers: the WebSocket library, which writes control
// frames (each in one Write, see WriteBufferSize), and the server's write
// path, which frames data messages itself. A mutex keeps the two from
// interleaving mid-frame.
//
// When the socket has a file descriptor (TCP, Unix), data frames are
// written with write(2) through syscall.RawConn: TryWrite never waits (a
// publisher writes to an idle connection's socket itself and hands only
// what the socket would not take to a writer goroutine), and Send, the
// writer's blocking write, records while it waits for the socket to drain
// (Full): the send queue limit is enforced against bytes the socket
// would not take, not bytes that merely wait for a goroutine to run.
type Conn struct {
	net.Conn
	sc syscall.RawConn // nil: no descriptor, plain blocking writes

	mu        sync.Mutex
	sealed    bool        // a close frame is on its way: no more data frames
	parkable  bool        // Conn is a Parkable (in memory): it parks and wsock reads it, without a descriptor
	closeSent bool        // a close frame went to the socket (ours or the library's): nothing may follow it
	last      bool        // the write under way is the socket's last, its close follows at once: it waits to leave with the FIN (SendLastFD)
	rest      atomic.Bool // len(tail) > 0, read without mu (beside the bools: Conn stays in the 240-byte size class)
	tail      []byte      // the unsent rest of a frame TryWrite began: written before anything else

	// The write(2) callbacks' arguments and results, under mu (each
	// callback made once per connection: a write allocates nothing).
	// fn waits for the socket to drain (Send); tryFn never waits
	// (TryWrite) and runs under RawConn.Control, which only pins the
	// descriptor: no write lock and no poller reset per delivery, which
	// a non-blocking write under mu needs neither of.
	fn    func(fd uintptr) bool
	tryFn func(fd uintptr)
	pend  []byte
	n     int
	err   error

	stalled atomic.Bool // Send is waiting for the socket to drain

	// The read goroutine's parking (Park): whether one runs, and the
	// owner to resume when the socket is closed while none does.
	parking Parking
	owner   Waker

	// A hard stop is under way (GoAway): every write gives up, and a
	// write already waiting on the socket ends by GoAway's deadline.
	stopping atomic.Bool
	// A close frame is due (WriteClose): data writes not yet begun give
	// up; one under way may finish within the close frame's deadline.
	closing atomic.Bool

	// Frames held while the read goroutine runs the input it has in hand
	// (Hold): flushed before a read waits for the client (awaitFD, Read).
	// Set on the first publish, by the read goroutine; atomic because the
	// library's close handshake reads from another.
	hold atomic.Pointer[Hold]

	// Keepalive: pings are written here and their pongs are taken here
	// (AwaitInput) or reported by the WebSocket library (Upgrade.OnPong).
	pingState atomic.Uint32 // low two bits: PingIdle, PingSent or PingAnswered; above: pongs seen (tests)

	// A message is being read (MessageBegins), and when the keepalive
	// first saw it so (MessageOverdue): bit 0 set while one is, bits 1-31
	// that time in milliseconds (+1, so 0 is "not yet seen").
	msg atomic.Uint32

	// Read side, used by the read goroutine only; br also under brMu
	// (the library's close handshake reads it from another goroutine).
	brMu       sync.Mutex
	readClosed bool                  // a close has begun: br is the library's alone
	mayPark    bool                  // awaitFD returns rather than wait (AwaitInput)
	wouldWait  bool                  // and it found nothing to read
	quiet      bool                  // awaitFD waits at most QuietBeforePark (AwaitInput)
	quietSet   bool                  // and has set the read deadline for it
	noWait     bool                  // Read returns errWouldWait rather than wait (TakeClose)
	peek       [1]byte               // awaitFD's peek
	br         *bufio.Reader         // what frames are read from (ReadMessage; the WebSocket library's on the portable path)
	unread     int64                 // what is left of the frame a read ended in (Drain skips it)
	awaitFn    func(fd uintptr) bool // AwaitInput's callback, made on first use
}

// NewConn wraps nc, the socket of a hijacked upgrade.
func NewConn(nc net.Conn) *Conn { return newConn(nc, Descriptor(nc)) }

// newConn wraps nc, whose descriptor is sc (nil: none).
func newConn(nc net.Conn, sc syscall.RawConn) *Conn {
	c := &Conn{Conn: nc, sc: sc}
	if sc != nil {
		c.fn, c.tryFn = c.writeFD, c.tryFD
	}
	if _, ok := nc.(Parkable); ok && !portable.Load() {
		c.parkable = true
	}
	return c
}

// SetReader sets the buffered reader the WebSocket library reads frames
// from (tests; Upgrade sets it).
func (c *Conn) SetReader(br *bufio.Reader) { c.br = br }

// Native reports whether the socket has a descriptor this package calls
// directly: writes that stop at a full socket, reads that take what has
// arrived without waiting (Hold).
func (c *Conn) Native() bool { return c != nil && c.sc != nil }

// Parks reports whether the connection's read goroutine may park (Park)
// and this package reads its frames (ReadMessage, Drain): a socket with a
// descriptor, or a Parkable. Otherwise (the portable path) the WebSocket
// library reads them, and a read goroutine waits on each connection.
func (c *Conn) Parks() bool { return c != nil && (c.sc != nil || c.parkable) }

// SetOwner names who is resumed when the socket is closed while no read
// goroutine runs (Park).
func (c *Conn) SetOwner(w Waker) { c.owner = w }

// Park hands the socket to p (a Parkable arms itself), to wake the owner
// (SetOwner) when it turns readable, and reports whether it did: the
// calling read goroutine must then return at once, owning nothing. False
// means carry on reading (no poller for a socket, the socket closed, or a
// wake-up came meanwhile).
func (c *Conn) Park(p *Poller, key uint64) bool {
	c.parking.Begin()
	var err error
	switch {
	case c.parkable:
		err = c.Conn.(Parkable).Arm(p, key, c.owner)
	case p == nil || c.sc == nil:
		err = ErrNoPoller
	default:
		err = p.Arm(c.sc, key, c.owner)
	}
	return c.parking.Settle(err == nil)
}

// Resume reports whether a wake-up (the poller's, or Close's) is the one
// that must start a read goroutine (Parking.Wake).
func (c *Conn) Resume() bool { return c.parking.Wake() }

// Parked reports whether the connection is parked (tests).
func (c *Conn) Parked() bool { return c.parking.Parked() }

// Close closes the socket, then resumes the owner if its read goroutine
// is parked (Park): a closed socket is out of the poller's set, and its
// connection would otherwise never run its cleanup. Every way a
// connection ends closes the socket through here: the WebSocket library's
// Close and CloseNow, an abort and GoAway.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	if c.owner != nil {
		c.owner.Wake()
	}
	return err
}

// ErrSealed reports a write dropped because the connection is closing.
var ErrSealed = errors.New("wsock: connection is closing")

// Write is the WebSocket library's path (control frames, each in one
// Write). A frame must not start inside another: the rest of a data frame
// goes first. Nothing follows a close frame: when ours went first
// (WriteClose), the library's own is taken and dropped, so its close
// handshake goes on as if it had sent it.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping.Load() {
		return 0, net.ErrClosed
	}
	if c.closeSent {
		if len(p) > 0 && p[0] == CloseHead {
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
	if len(p) > 0 && p[0] == CloseHead {
		c.closeSent = true
	}
	return c.Conn.Write(p)
}

// TryWrite writes the whole data frame f if the socket takes it at once,
// without waiting. It reports sent false when f must be queued instead:
// no descriptor, the socket in use by another writer, or full. When the
// socket takes only part of f, the rest becomes the tail (sent and rest
// true): a writer must send it before anything else (Send); with copyRest
// the tail is a copy (f is a buffer its caller reuses).
func (c *Conn) TryWrite(f []byte, copyRest bool) (sent, rest bool, err error) {
	if c == nil || c.sc == nil || !c.mu.TryLock() {
		return false, false, nil
	}
	defer c.mu.Unlock()
	if c.sealed {
		return false, false, ErrSealed
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

func (c *Conn) setTail(t []byte) {
	c.tail = t
	c.rest.Store(len(t) > 0)
}

// Pending reports whether the rest of a frame waits to be sent.
func (c *Conn) Pending() bool { return c != nil && c.rest.Load() }

// Send writes the tail, if any, then b (whole data frames), bounded by
// timeout. Once sealed only the tail is written: a close frame follows.
func (c *Conn) Send(b []byte, timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed && len(c.tail) == 0 {
		return ErrSealed
	}
	if !c.setDeadline(timeout) {
		return ErrSealed
	}
	defer c.Conn.SetWriteDeadline(time.Time{})
	if err := c.finishTail(); err != nil {
		return err
	}
	if c.sealed {
		return ErrSealed
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
func (c *Conn) write(b []byte) error {
	n, err := c.put(b)
	if err != nil && n > 0 {
		if end := FrameEnd(b, n); end > n {
			c.setTail(bytes.Clone(b[n:end]))
		}
	}
	return err
}

// put writes all of b, waiting for the socket as needed, and returns how
// much went. c.mu held.
func (c *Conn) put(b []byte) (int, error) {
	if c.sc == nil {
		return c.Conn.Write(b)
	}
	return c.rawWrite(b, true)
}

// Full reports whether the socket would not take more data: a Send is
// waiting for it to drain. Without a descriptor it cannot tell, and says
// yes: a send queue limit then counts every queued byte.
func (c *Conn) Full() bool {
	return c == nil || c.sc == nil || c.stalled.Load()
}

// rawWrite runs a write(2) callback: one that waits for the socket to
// drain when block, else one that takes what the socket takes now. c.mu
// held.
func (c *Conn) rawWrite(b []byte, block bool) (int, error) {
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

// AwaitInput returns when the client has sent something (or the socket
// is closed or failed): the read that follows (ReadMessage) will not wait
// for a frame's first byte.
//
// With park it may return wait instead: nothing has arrived, and the
// caller may Park the socket and end its goroutine. Without quiet it
// returns wait at once; with quiet it first waits up to QuietBeforePark
// (a client that has just sent is likely to send again soon: parking and
// resuming costs more than waiting). Without park it waits in the
// runtime's poller, as a read goroutine does where there is no poller of
// ours, a few frames deep: it then keeps the smallest stack.
//
// A Parkable returns wait at once, quiet or not, when park and nothing
// has arrived (parking it costs no system call), else false at once: the
// read waits. Without a descriptor (the portable path) it returns at
// once: the WebSocket library's read waits. Read goroutine only.
func (c *Conn) AwaitInput(park, quiet bool) (wait bool) {
	if c == nil || c.br == nil || (c.sc == nil && !c.parkable) {
		return false
	}
	c.brMu.Lock()
	ready := c.readClosed || c.br.Buffered() > 0
	c.brMu.Unlock()
	if ready {
		return false
	}
	if c.parkable {
		return park && !c.Conn.(Parkable).Ready()
	}
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
			return true // quiet for QuietBeforePark: park
		}
	}
	return err == nil && c.wouldWait
}

// QuietBeforePark is how long a read goroutine that has just read a frame
// waits for the next before it parks its connection (AwaitInput): a
// connection that sends steadily (a publisher) keeps its goroutine, one
// that has gone quiet (a subscriber after its subscribe) gives it up.
const QuietBeforePark = time.Second

// CloseRead hands the read buffer to the WebSocket library for good: its
// close handshake reads the client's close frame itself.
func (c *Conn) CloseRead() {
	if c == nil {
		return
	}
	c.brMu.Lock()
	c.readClosed = true
	c.brMu.Unlock()
}

// Keepalive states (PingState).
const (
	PingIdle uint32 = iota
	PingSent
	PingAnswered
)

// pingStateMask is the keepalive state's bits of pingState.
const pingStateMask = 3

// PingState is PingIdle, PingSent (a pong is due) or PingAnswered.
func (c *Conn) PingState() uint32 { return c.pingState.Load() & pingStateMask }

// SetPingState sets the keepalive state; PingSent before a ping is
// written (its pong may come at once).
func (c *Conn) SetPingState(s uint32) {
	for {
		old := c.pingState.Load()
		if c.pingState.CompareAndSwap(old, old&^pingStateMask|s) {
			return
		}
	}
}

// answer moves PingSent to PingAnswered, adding add to the pong count.
func (c *Conn) answer(add uint32) {
	for {
		old := c.pingState.Load()
		s := old & pingStateMask
		if s == PingSent {
			s = PingAnswered
		}
		if add == 0 && s == old&pingStateMask {
			return
		}
		if c.pingState.CompareAndSwap(old, (old&^pingStateMask)+add<<2|s) {
			return
		}
	}
}

// Pongs is how many pongs were seen (tests).
func (c *Conn) Pongs() uint32 { return c.pingState.Load() >> 2 }

// MessageBegins records that the read goroutine has begun reading a
// message (its first frame's header is in), MessageEnds that it is done
// with it. A message that stays begun is found by MessageOverdue.
func (c *Conn) MessageBegins() { c.msg.Store(1) }

// MessageEnds: see MessageBegins.
func (c *Conn) MessageEnds() { c.msg.Store(0) }

// MessageOverdue reports whether a message has been in progress for at
// least limit, as seen by the calls of this function (the keepalive's
// steps): now is a millisecond clock, wrapping at 2^31. The first call
// that finds a message begun records now; a later one, while the same
// message is still begun, compares. So the message has taken at least
// limit when it reports true, and at most limit plus the time between two
// calls when it first could.
func (c *Conn) MessageOverdue(now uint32, limit time.Duration) bool {
	w := c.msg.Load()
	if w&1 == 0 {
		return false
	}
	if w == 1 {
		c.msg.CompareAndSwap(1, (now+1)<<1|1) // the read goroutine may have moved on: fine
		return false
	}
	seen := (w >> 1) - 1
	return time.Duration((now-seen)&(1<<31-1))*time.Millisecond >= limit
}

// finishTail writes the unsent rest of a frame, if any, so that whatever
// follows starts on a frame boundary. c.mu held.
func (c *Conn) finishTail() error {
	if len(c.tail) == 0 {
		return nil
	}
	n, err := c.put(c.tail)
	c.setTail(c.tail[n:]) // what did not go stays first in line
	return err
}

// Ping writes a ping frame (after the rest of a data frame, if one is
// unfinished), bounded by timeout, and marks a pong as due.
func (c *Conn) Ping(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed {
		return ErrSealed
	}
	if !c.setDeadline(timeout) {
		return ErrSealed
	}
	defer c.Conn.SetWriteDeadline(time.Time{})
	if err := c.finishTail(); err != nil {
		return err
	}
	c.SetPingState(PingSent) // before the write: the pong may come at once
	return c.write(PingFrame)
}

// pong records a pong from the client.
func (c *Conn) pong() { c.answer(1) }

// Heard records a message from the client: a peer that sends is alive,
// whether or not its library answers pings while it is not reading (a
// publisher that never reads answers none).
func (c *Conn) Heard() {
	if c.pingState.Load()&pingStateMask == PingSent {
		c.answer(0)
	}
}

// Read is what frames are read through (the WebSocket library's Accept
// resets the hijacked reader to read the net.Conn it got, this one):
// before a read that would wait for the client, held frames go out. With
// a descriptor it reads what has arrived with one non-blocking read(2)
// that the scheduler is not told of (ReadFD): a publish, or the close
// frame of a client that leaves; only a read that finds nothing (or the
// end, or an error) goes through the runtime's poller, which reports it.
func (c *Conn) Read(p []byte) (int, error) {
	if c.sc != nil {
		if n := readNow(c.sc, p); n > 0 {
			return n, nil
		}
		if c.noWait {
			return 0, errWouldWait
		}
		// Nothing yet (or the end, or an error: the read below reports
		// it): flush before waiting.
		if h := c.hold.Load(); h.Pending() {
			h.f.Flush()
		}
	}
	return c.Conn.Read(p)
}

// readNow reads into p what the socket sc has now, without waiting: one
// read(2) where asking first (TIOCINQ) and then reading would take two.
func readNow(sc syscall.RawConn, p []byte) int {
	r := nowReads.Get().(*nowRead)
	r.p, r.n = p, 0
	if sc.Control(r.fn) != nil {
		r.n = 0
	}
	n := r.n
	r.p = nil
	nowReads.Put(r)
	return n
}

// A nowRead is readNow's callback with its argument and result: pooled,
// so that a connection keeps no bytes for it and a read allocates none.
type nowRead struct {
	fn func(fd uintptr)
	p  []byte
	n  int
}

var nowReads = sync.Pool{New: func() any {
	r := new(nowRead)
	r.fn = func(fd uintptr) { r.n = ReadFD(fd, r.p) }
	return r
}}

// FlushHeld flushes held frames: the read is about to wait, or the
// connection ends.
func (c *Conn) FlushHeld() {
	if h := c.hold.Load(); h.Pending() {
		h.f.Flush()
	}
}

// setDeadline bounds the writes that follow by timeout, and reports false
// when a hard stop or a close has begun: the caller then writes nothing.
// It checks after setting, so that either the caller sees the stop or
// GoAway's (WriteClose's) deadline is set after this one and wins. c.mu
// held.
func (c *Conn) setDeadline(timeout time.Duration) bool {
	c.Conn.SetWriteDeadline(time.Now().Add(timeout))
	return !c.stopping.Load() && !c.closing.Load()
}

// goAwayWait bounds what a hard stop waits for one socket: a write under
// way that holds the socket, then the close frame itself. A client whose
// socket will not take a close frame by then gets none.
const goAwayWait = 250 * time.Millisecond

// GoAway is a hard stop: it writes frame (a close frame) after the rest
// of a data frame begun, unless a close frame went already, and closes
// the socket at once, without waiting for the client's answer. It waits
// at most about twice goAwayWait.
func (c *Conn) GoAway(frame []byte) {
	c.stopping.Store(true)
	// A writer waiting on a full socket gives up by then, and lets go of mu.
	c.Conn.SetWriteDeadline(time.Now().Add(goAwayWait))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closeSent {
		c.closeSent, c.sealed = true, true
		c.Conn.SetWriteDeadline(time.Now().Add(goAwayWait))
		if c.finishTail() == nil {
			c.last = true // the close follows at once: the frame leaves with the FIN
			_ = c.write(frame)
			c.last = false
		}
	}
	_ = c.Close()
}

// WriteClose seals the connection and writes frame (a close frame) after
// the rest of a data frame begun, all within wait: a client that stopped
// reading gets it once it reads again, if it does so in time. A writer
// already waiting on the socket may finish its write within the same
// bound (its data comes before the close frame); one not yet begun gives
// up. The library's own close frame, written next, is dropped (Write). It
// returns ErrSealed when a hard stop came first, or the write's error.
//
// With nobody writing and nothing due before it (the rule, as for the
// answer to a client's close), the frame goes out by a write that does not
// wait, so with no deadline to set and clear; only what the socket did not
// take then waits, within the same bound.
func (c *Conn) WriteClose(frame []byte, wait time.Duration) error {
	return c.writeClose(frame, wait, false)
}

// writeClose is WriteClose; with last, the caller closes the socket at
// once after it (the answer to a client's close frame): what the socket
// takes at once then leaves with the FIN, in one segment instead of two
// (SendLastFD). A rest the socket did not take goes as before, by a write
// that pushes what was held.
func (c *Conn) writeClose(frame []byte, wait time.Duration, last bool) error {
	deadline := time.Now().Add(wait)
	c.closing.Store(true)
	if c.sc == nil || !c.mu.TryLock() {
		c.Conn.SetWriteDeadline(deadline) // the bound of a write under way, too
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	c.sealed = true
	if c.stopping.Load() {
		return ErrSealed
	}
	if c.closeSent {
		return nil
	}
	c.closeSent = true
	if c.sc != nil && len(c.tail) == 0 {
		if kept, err := c.writeOrKeep(frame, last); err != nil || !kept {
			return err
		}
		frame = nil
	}
	c.Conn.SetWriteDeadline(deadline)
	defer c.Conn.SetWriteDeadline(time.Time{})
	if err := c.finishTail(); err != nil || frame == nil {
		return err
	}
	return c.write(frame)
}

// Seal stops data frames before a close frame is written: nothing may
// follow a close frame.
func (c *Conn) Seal() {
	c.mu.Lock()
	c.sealed = true
	c.mu.Unlock()
}

// writeOrKeep writes what of frame the socket takes at once, without
// waiting (held for the FIN when last), and keeps the rest as the tail:
// kept reports that there is one. c.mu held, no tail before.
func (c *Conn) writeOrKeep(frame []byte, last bool) (kept bool, err error) {
	c.last = last
	n, err := c.rawWrite(frame, false)
	c.last = false
	if err != nil || n == len(frame) {
		return false, err
	}
	c.setTail(bytes.Clone(frame[n:]))
	return true, nil
}

// writeFD writes c.pend to the non-blocking descriptor (held for the FIN
// when c.last). It returns false (wait until writable, then call again)
// while the socket is full.
func (c *Conn) writeFD(fd uintptr) bool {
	if c.stalled.Load() {
		c.stalled.Store(false)
	}
	var n int
	var full bool
	var err error
	if c.last {
		n, err = SendLastFD(fd, c.pend)
		full = err == nil && n < len(c.pend)
	} else {
		n, full, err = WriteFD(fd, c.pend)
	}
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

// tryFD writes what of c.pend the non-blocking descriptor takes now
// (held for the FIN when c.last).
func (c *Conn) tryFD(fd uintptr) {
	if c.last {
		c.n, c.err = SendLastFD(fd, c.pend)
		return
	}
	n, _, err := WriteFD(fd, c.pend)
	c.n, c.err = n, err
}

// awaitFD returns true once something can be read: bytes, the end (EOF)
// or an error; else false, to wait for readiness and be called again. It
// peeks (a byte) rather than asking how many bytes wait: an end that arrived before the wait began
// must not be waited for, its readiness edge is already spent.
func (c *Conn) awaitFD(fd uintptr) bool {
	_, wait := PeekFD(fd, c.peek[:])
	if wait {
		c.FlushHeld()
		c.shrinkReader()
		if c.mayPark {
			c.wouldWait = true
			return true // the caller parks instead
		}
		if c.quiet && !c.quietSet {
			// Bounds this wait only: AwaitInput clears it before any
			// other read.
			c.quietSet = true
			_ = c.Conn.SetReadDeadline(time.Now().Add(QuietBeforePark))
		}
		return false // nothing yet: wait
	}
	return true // bytes, the end, or an error: the read reports it
}

// HasReader reports whether the connection has its read buffer (the
// upgrade gave it one).
func (c *Conn) HasReader() bool { return c != nil && c.br != nil }

// InputInHand reports whether the read buffer holds input not yet read.
// Read goroutine only.
func (c *Conn) InputInHand() bool {
	c.brMu.Lock()
	defer c.brMu.Unlock()
	return !c.readClosed && c.br.Buffered() > 0
}

// mutedInput is the SO_RCVLOWAT of a muted socket: more than a paced
// client sends in a pause (16 publishes in flight of ~100 bytes are
// 1.6 KiB), and small enough that the kernel neither grows the receive
// buffer nor clamps the window for it (it does so only for a mark over
// half the buffer, 64 KiB by default).
const mutedInput = 8 << 10

// MuteInput stops (on) or restarts input from waking the runtime's
// poller while the read goroutine sleeps without reading (a paced
// refusal): every segment a client sends to a socket nobody waits on
// otherwise wakes an idle thread for nothing, a wake-up per request of a
// hammering client. Muted, bytes wake it only past mutedInput (or at the
// end, or on an error). Read goroutine only; unmute before the next read.
func (c *Conn) MuteInput(on bool) {
	if c == nil || c.sc == nil {
		return
	}
	n := int32(1)
	if on {
		n = mutedInput
	}
	_ = c.sc.Control(func(fd uintptr) { setRcvLowat(fd, n) })
}

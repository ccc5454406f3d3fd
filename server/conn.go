package server

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/internal/bufpool"
	"github.com/rtserver/rtserver/internal/deadlines"
	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/protocol"
)

// conn is one WebSocket connection.
type conn struct {
	s      *Server
	ticket handshake.Ticket // embedded: admitting allocates nothing
	ws     *websocket.Conn
	raw    *wsock.Conn // the socket under ws: data frames are written here directly
	id     uint64
	ctx    lifeContext // ends when the connection does

	// Send queue (write.go). Frames are whole WebSocket frames, shared
	// between subscribers and never modified.
	mu      sync.Mutex
	idle    chan struct{} // under mu: made by a close waiting for the writer, closed as the writer exits (a sync.Cond costs every connection 56 bytes)
	queue   [][]byte
	queued  int         // bytes queued and not yet written to the socket
	writing bool        // a writer goroutine owns the queue
	closed  bool        // nothing more is queued
	batch   bool        // the client offered rt.batch: queued frames may be sent as one array
	young   uint8       // inputs read so far, up to youngInputs (read goroutine)
	closing atomic.Bool // a close with a status code is under way
	heldBy  *holdSet    // the last holdSet this queue was added to

	// (writing, closed, batch, young and closing share one word: conn
	// stays in the 352-byte size class, which every idle connection pays.)

	pingAt  deadlines.Handle // the next keepalive step, in the server's ping heap (keepalive)
	invalid int16            // invalid requests since the last frame without one, up to maxInvalid (read goroutine)
	refused uint8            // built-in requests refused in a row by admission, up to 255 (read goroutine; shedpace.go); with invalid, in pingAt's word
	binary  bool             // the client chose the binary protocol (binary.go); in pingAt's word too
	expiry  *tokenExpiry     // nil while the token has no exp; owned by the read goroutine

	// Read-goroutine state.
	subsMu  sync.Mutex          // guards subs: the server API's Unsubscribe edits them too
	subs    map[string]struct{} // topics subscribed (control.go)
	calls   atomic.Int32        // application RPC goroutines in flight
	holding atomic.Bool         // the read goroutine runs a publish in hand: what it queues is held (write.go, holdSet)
	hist    *connHistory        // history calls' state (history.go): made at the first; a pointer keeps conn in its size class

	callsMu  sync.Mutex
	inflight map[*message.Call]struct{} // leases to release if the connection dies
}

// start registers the connection, upgraded with subprotocol (by the
// WebSocket library, ws, or on the fast path by wsock alone, ws nil);
// false when the server has closed (the connection is then closed). The
// caller runs readLoop next.
func (c *conn) start(ws *websocket.Conn, subprotocol string) bool {
	s := c.s
	c.ws = ws
	c.id = s.nextID.Add(1)
	c.batch = subprotocol == protocol.BatchSubprotocol
	c.binary = subprotocol == protocol.BinarySubprotocol
	if ws != nil {
		// One byte of slack for the library: the limit is enforced by
		// readLoop, which closes with a reason in rtserver's words.
		ws.SetReadLimit(s.cfg.MaxMessageBytes + 1)
	}
	if !s.addConn(c) {
		if c.raw.Parks() {
			_ = c.raw.WriteClose(goingAwayFrame, s.cfg.WriteTimeout)
			c.raw.Drain(wsock.CloseHandshakeWait)
			c.closeNow()
		} else {
			ws.Close(websocket.StatusGoingAway, "")
		}
		c.ctx.end()
		c.ticket.Close()
		return false
	}
	s.wg.Add(1) // until cleanup, however many read goroutines it takes
	s.pings.After(c, s.cfg.PingInterval)
	if !c.ticket.Expires.IsZero() {
		c.watchExpiry(c.ticket.Expires)
	}
	return true
}

// youngInputs is how many of a connection's first inputs yield to the
// established connections (readLoop).
const youngInputs = 4

// readLoop reads frames until the connection ends, then cleans up; or
// until it would wait for input, when it parks the connection in the
// server's poller and returns: readiness, or a close, starts it again
// (Wake). An idle connection then costs no goroutine.
func (c *conn) readLoop() { c.readFrom(awaitFirst) }

// readFrom runs the read loop from start, then cleans up unless it
// parked.
func (c *conn) readFrom(start readStart) {
	if c.read(start) {
		return // parked: Wake starts the next read goroutine
	}
	c.cleanup()
}

// readStart is how a read goroutine begins.
type readStart uint8

const (
	awaitFirst readStart = iota // look for input, park if none (AwaitInput)
	// parkFirst: a connection just upgraded, whose client has as a rule
	// sent nothing yet: park without looking (arming a socket that has
	// input reports it at once), which spares a system call.
	parkFirst
	// readFirst: woken by the poller, which saw input (or the end, or a
	// close): read without looking, which spares another.
	readFirst
)

// read is readLoop's loop. It reports parked true when it handed the
// connection to the poller: the goroutine then owns nothing and must end.
func (c *conn) read(start readStart) (parked bool) {
	mayPark := c.raw.Parks()
	quiet := false // a frame was read since this goroutine began or last failed to park
	for {
		// A connection with nothing to read parks (park) where it can:
		// at once, unless it has just sent a frame, then once it has been
		// quiet for a while. Otherwise it waits here, a few frames deep,
		// rather than inside a frame's read: its goroutine then keeps the
		// smallest stack (see wsock.Conn.AwaitInput).
		if c.refused >= refusedBeforePause {
			c.pauseRefused()
		}
		first := start
		start = awaitFirst
		if first == parkFirst && mayPark || first != readFirst && c.raw.AwaitInput(mayPark, quiet) {
			if c.park() {
				return true
			}
			// The poller is gone, the socket closed, or a wake-up came
			// while arming: wait here this once (a closed socket fails
			// the wait at once).
			mayPark, quiet = false, false
			continue
		}
		mayPark = c.raw.Parks()
		quiet = true
		if c.young < youngInputs {
			// A new connection's first inputs (its first calls, or the
			// close of a client that only connected) yield first: in a
			// reconnect storm the newcomers' work then runs after the
			// work of connections already established, not ahead of it.
			c.young++
			wsock.Yield()
		}
		buf := bufpool.Get()
		op, err := c.readMessage(buf)
		switch {
		case err != nil:
			bufpool.Put(buf)
			c.readFailed(err)
			return false
		case op == 0:
			// Only control frames (a pong): the next wait parks at once.
			bufpool.Put(buf)
			quiet = false
			continue
		}
		if c.refusesFrame(op) {
			bufpool.Put(buf)
			return false
		}
		if !c.closing.Load() { // a closing connection's messages are dropped
			c.handleMessage(buf.Bytes())
		}
		bufpool.Put(buf)
	}
}

// readMessage reads the client's next message into buf: by wsock's frame
// reader, or on the portable path by the WebSocket library's, to the same
// rules (wsock.ReadPayload): at most limits.maxMessageBytes, text checked
// UTF-8 as it arrives. Op 0 and no error: only control frames came.
func (c *conn) readMessage(buf *bytes.Buffer) (wsock.Opcode, error) {
	limit := c.s.cfg.MaxMessageBytes
	if c.raw.Parks() {
		return c.raw.ReadMessage(buf, limit, c.binary)
	}
	// A plain context: a cancelable one costs the WebSocket library a
	// context.AfterFunc per read. Every way a connection ends closes the
	// socket, which ends the read.
	typ, r, err := c.ws.Reader(context.Background())
	if err != nil {
		return 0, err
	}
	c.raw.Heard()
	op := wsock.Opcode(typ)
	if op == wsock.OpBinary && !c.binary {
		return op, wsock.ErrBinary
	}
	c.raw.MessageBegins() // until it is read whole: limits.messageTimeout (keepalive)
	err = wsock.ReadPayload(buf, r, limit, op == wsock.OpText)
	c.raw.MessageEnds()
	return op, err
}

// park hands the connection to the server's poller (an in-memory socket,
// wsock.Parkable, arms itself), to be resumed when its socket turns
// readable, and reports whether it did: the calling read goroutine must
// then return at once, owning nothing. False means carry on reading (no
// poller, the socket closed, or a wake-up came meanwhile).
func (c *conn) park() bool {
	return c.raw.Park(c.s.poller.get(), c.id)
}

// Wake resumes a parked connection: its socket turned readable (the
// poller), or was closed (wsock.Conn.Close). Exactly one of the wake-ups
// that race for one park starts a read goroutine; the others, and any
// while a read goroutine runs, do nothing (it sees for itself).
//
// The one that does first reads what has arrived, here: a client that
// leaves (its close frame and nothing more) is answered and its
// connection ends on this goroutine, the poller's as a rule, without
// starting one (a goroutine started wakes an idle thread, a futex call
// and a context switch each time), when that end is short work: no
// subscriptions to drop, no calls in flight.
func (c *conn) Wake() {
	if !c.raw.Resume() {
		return
	}
	if !c.endsShort() {
		go c.readFrom(readFirst)
		return
	}
	switch c.raw.TakeClose() {
	case wsock.CloseTaken:
		c.cleanup()
	case wsock.CloseUnfinished: // the socket is full: the rest of the answer may wait
		go func() {
			c.raw.FinishClose()
			c.cleanup()
		}()
	default:
		go c.readFrom(readFirst) // what was read waits in the read buffer
	}
}

// endsShort reports whether the connection's end (cleanup) is short
// work: it has no subscriptions, no calls in flight and no history
// calls' state.
func (c *conn) endsShort() bool {
	if c.calls.Load() != 0 || c.hist != nil || c.raw.Hold().Pending() {
		return false
	}
	c.subsMu.Lock()
	n := len(c.subs)
	c.subsMu.Unlock()
	if n != 0 {
		return false
	}
	c.callsMu.Lock()
	n = len(c.inflight)
	c.callsMu.Unlock()
	return n == 0
}

// holder is the holdSet for what is queued now: the read goroutine's
// while it runs a publish it had in hand, else nil (write at once).
func (c *conn) holder() *holdSet {
	if c.holding.Load() {
		if h := c.raw.Hold(); h != nil {
			return h.Flusher().(*holdSet)
		}
	}
	return nil
}

// builtinCalls hold the message.Calls built-in methods are admitted
// with. A built-in runs inline on the read goroutine and releases its
// call before it returns, so a call is needed only while one runs: one
// kept inside each conn cost every connection 152 bytes, and its size
// class 128 more.
var builtinCalls = sync.Pool{New: func() any { return new(message.Call) }}

// builtinCallOf gives a call for a built-in method on c, from the pool:
// give it back with endBuiltinCall once it is released.
func (c *conn) builtinCallOf(method, topic string) *message.Call {
	call := builtinCalls.Get().(*message.Call)
	call.Method, call.Topic = method, topic
	call.User, call.IP, call.ConnID = c.ticket.User, c.ticket.IPKey, c.id
	call.Bytes, call.Subscribers, call.Params = 0, 0, nil
	return call
}

// endBuiltinCall returns a released call to the pool, holding no
// connection's strings.
func endBuiltinCall(call *message.Call) {
	call.User, call.IP, call.Topic, call.Params = "", "", "", nil
	builtinCalls.Put(call)
}

// readFailed ends a read that failed: a message the server refuses is
// answered with its close code (counted), anything else (the client's
// close, a protocol error answered by the frame reader, a socket error)
// needs nothing more here.
func (c *conn) readFailed(err error) {
	switch {
	case errors.Is(err, wsock.ErrBinary):
		c.refuse(websocket.StatusUnsupportedData, "binary frames are not supported")
	case errors.Is(err, wsock.ErrTooBig):
		c.refuse(websocket.StatusMessageTooBig, c.s.tooBigReason)
	case errors.Is(err, wsock.ErrInvalidUTF8):
		// RFC 6455 section 8.1: a text frame must be UTF-8. Relaying
		// these bytes would make every browser subscriber fail its
		// connection.
		c.refuse(websocket.StatusInvalidFramePayloadData, "text frame is not valid UTF-8")
	case errors.Is(err, websocket.ErrMessageTooBig):
		// Over the library's own read limit (it has closed with 1009;
		// the tighter check above normally closes first).
		c.s.m.ProtocolErrors.WithLabelValues("1009").Inc()
	}
}

// refuse closes, from the read goroutine, a connection whose message the
// server refuses, and counts the code.
func (c *conn) refuse(code websocket.StatusCode, reason string) {
	c.s.m.ProtocolErrors.WithLabelValues(strconv.Itoa(int(code))).Inc()
	if !c.raw.Parks() {
		c.closeWith(code, reason, false)
		return
	}
	// The client's answer, and whatever comes before it, is read here,
	// where the read stopped (also when another close went first: this
	// goroutine is the one that reads).
	c.sendClose(code, reason, false)
	c.raw.Drain(wsock.CloseHandshakeWait)
}

// handleFrame decodes and answers one frame. Frames of built-ins only run
// inline; a frame with an application RPC runs in its own goroutine (the
// frame is copied: buf goes back to the pool).
func (c *conn) handleFrame(frame []byte) {
	maxDepth := c.s.cfg.MaxJSONDepth
	f, ferr := protocol.DecodeDepth(frame, maxDepth)
	if ferr != nil {
		c.s.m.ProtocolErrors.WithLabelValues(strconv.Itoa(ferr.Code)).Inc()
		c.enqueue(protocol.AppendError(nil, nil, ferr))
		if c.countInvalid(1) {
			c.closeInvalid()
		}
		return
	}
	async, builtin, publish := false, false, false
	invalid := 0
	for i := range f.Requests {
		r := &f.Requests[i]
		if r.Err != nil {
			invalid++
			continue
		}
		if isBuiltin(r.Method) {
			builtin = true
		} else {
			async = true
		}
		publish = publish || r.Method == MethodPublish
	}
	if c.countInvalid(invalid) {
		if invalid == len(f.Requests) {
			c.runFrame(f, frame) // only answers: nothing in it runs
		}
		c.closeInvalid()
		return
	}
	// Built-ins touch state only the read goroutine may (subscriptions,
	// the reused call, the token's expiry and claims), so a batch mixing
	// them with application methods runs here too: the read waits for
	// its application calls, as when maxCallsPerConn is reached.
	if !async || builtin {
		if publish && c.raw.Native() {
			// Only where every read that would wait flushes first
			// (wsock.Conn.Read, AwaitInput): a socket with a descriptor.
			c.holdSet()
			c.holding.Store(true)
			c.runFrame(f, frame)
			c.holding.Store(false)
			c.raw.GrowReader() // when more input is in hand
			return
		}
		c.runFrame(f, frame)
		return
	}
	own := append([]byte(nil), frame...)
	f, _ = protocol.DecodeDepth(own, maxDepth)
	if c.calls.Add(1) > maxCallsPerConn {
		// Too many calls in flight: run this one here, which stops reading
		// from this client until it is done (backpressure, not a drop).
		c.runFrame(f, own)
		c.calls.Add(-1)
		return
	}
	c.s.wg.Add(1)
	go func() {
		defer c.s.wg.Done()
		defer c.calls.Add(-1)
		c.runFrame(f, own)
	}()
}

// maxInvalid is how many invalid requests (parse errors, invalid requests
// and batch elements, frames refused as a whole) may come in a row: until
// a frame holds no invalid request. One is a bug to answer; a stream of
// them is a client that is not speaking the protocol, and it is closed
// with 1008. Elements count one by one, so a frame that carries one
// valid request beside many invalid ones does not reset the count.
const maxInvalid = 32

// countInvalid tracks invalid requests, n in the frame just decoded, and
// reports whether they reached maxInvalid: the caller then answers the
// frame if it holds nothing valid (a frame with valid requests is not
// run), and closes the connection with closeInvalid.
func (c *conn) countInvalid(n int) bool {
	if n == 0 {
		c.invalid = 0
		return false
	}
	c.invalid = int16(min(int(c.invalid)+n, maxInvalid))
	return c.invalid >= maxInvalid
}

// closeInvalid closes with 1008 after what is queued (the answers).
func (c *conn) closeInvalid() {
	c.s.m.ProtocolErrors.WithLabelValues("1008").Inc()
	c.closeLater(websocket.StatusPolicyViolation, "repeated invalid requests", true, nil)
}

// runFrame answers every request of a frame: one response, or one array
// for a batch, or nothing when all were notifications. The answer to one
// frame is at most SendQueueBytes of responses: a response that would take
// it past that is answered -32004 instead (answerBudget), so no frame can
// ask the server to hold more for a client than its send queue may.
func (c *conn) runFrame(f protocol.Frame, raw []byte) {
	var out []byte
	n := 0
	for i := range f.Requests {
		r := &f.Requests[i]
		var whole []byte
		if !f.Batch && r.Plain {
			// Only a plain object is forwarded as sent: any other one is
			// re-encoded from what was decoded and admitted.
			whole = raw
		}
		// A single request's answer is encoded after room for its frame
		// header, and framed where it is (enqueueFramed): not copied.
		framed := !f.Batch
		resp := c.handle(r, whole, framed)
		if resp == nil {
			continue
		}
		size := len(resp)
		if framed {
			size -= maxHeader
		}
		if len(out)+size > c.s.cfg.SendQueueBytes {
			resp = protocol.AppendError(answerDst(framed), r.ID, protocol.NewError(protocol.CodeLimitExceeded, "response too large",
				protocol.LimitData{Limit: c.s.cfg.SendQueueBytes}))
		}
		switch {
		case !f.Batch:
			out = resp
		case n == 0:
			out = append(append(out, '['), resp...)
		default:
			out = append(append(out, ','), resp...)
		}
		n++
	}
	switch {
	case n > 0 && f.Batch:
		c.enqueue(append(out, ']'))
	case n > 0:
		c.enqueueFramed(out)
	}
	if c.hist != nil {
		c.runReplays()
	}
}

// handle runs one request and returns its encoded response, or nil; when
// framed, after room for its frame header (answerDst).
func (c *conn) handle(r *protocol.Request, raw []byte, framed bool) []byte {
	if r.Err != nil {
		c.s.m.ProtocolErrors.WithLabelValues(strconv.Itoa(r.Err.Code)).Inc()
		return protocol.AppendError(answerDst(framed), r.ID, r.Err)
	}
	result, perr := c.dispatch(r, raw)
	if isBuiltin(r.Method) {
		// A frame with a built-in runs on the read goroutine, which
		// alone reads and writes the count.
		c.countRefused(perr)
	}
	if r.IsNotification() || (perr == nil && isAnsweredLater(result)) {
		return nil
	}
	if perr != nil {
		return protocol.AppendError(answerDst(framed), r.ID, perr)
	}
	return protocol.AppendResult(answerDst(framed), r.ID, result)
}

// answerDst is what an answer is appended to: room for a frame header
// when framed (frameRoom), else nothing.
func answerDst(framed bool) []byte {
	if framed {
		return frameRoom(answerRoom)
	}
	return nil
}

// closeWith closes the connection with a status code. With flush, frames
// already queued (a draining notice) are written first, bounded by the
// write timeout. The close frame is written by wsock.Conn.WriteClose,
// after the rest of a data frame begun, waiting for the socket at most
// closeWait; then the client's answer is awaited (the closing handshake,
// at most wsock.CloseHandshakeWait), by the WebSocket library on the
// portable path. A client whose socket does not take the close frame in
// time is dropped without one.
func (c *conn) closeWith(code websocket.StatusCode, reason string, flush bool) {
	c.closeBy(code, reason, flush, time.Time{})
}

// closeBy is closeWith whose wait for the client's answer ends by by at
// the latest (zero: the handshake's own bound only). The close frame is
// written first either way.
func (c *conn) closeBy(code websocket.StatusCode, reason string, flush bool, by time.Time) {
	if !c.sendClose(code, reason, flush) {
		return
	}
	wait := wsock.CloseHandshakeWait
	if !by.IsZero() {
		wait = max(0, min(wait, time.Until(by)))
		if h := c.s.closeWaitHook; h != nil {
			h(wait)
		}
	}
	if !c.raw.Parks() {
		// The library waits for the answer itself, up to the handshake's
		// bound; closing the socket under it ends that wait sooner.
		if wait < wsock.CloseHandshakeWait {
			t := time.AfterFunc(wait, func() { _ = c.raw.Close() })
			defer t.Stop()
		}
		_ = c.ws.Close(code, reason)
		return
	}
	// The read goroutine (running, or woken by the client's answer) reads
	// the client's close frame and closes the socket (wsock.Conn's
	// ReadMessage); a client that does not answer in time is cut off.
	t := time.NewTimer(wait)
	select {
	case <-c.ctx.Done():
	case <-t.C:
		_ = c.raw.Close()
	}
	t.Stop()
}

// sendClose is closeWith up to its close frame, and reports whether that
// went: false when a close was already under way, or the socket failed
// (then aborted).
func (c *conn) sendClose(code websocket.StatusCode, reason string, flush bool) bool {
	if !c.closing.CompareAndSwap(false, true) {
		return false
	}
	c.mu.Lock()
	c.closed = true
	if !flush {
		c.queue = nil
	}
	if flush && c.writing {
		deadline := time.AfterFunc(c.s.cfg.WriteTimeout, func() {
			c.mu.Lock()
			c.queue = nil
			c.mu.Unlock()
		})
		// Until the writer is idle, not merely until the queue is empty:
		// the writer takes the whole queue before writing it, and sealing
		// while it writes would drop what it took (a draining notice lost
		// before its 1012). The deadline above empties the queue; the
		// writer's own writes are bounded by the write timeout.
		c.awaitWriter()
		deadline.Stop()
	}
	c.mu.Unlock()
	c.raw.CloseRead()
	if err := c.raw.WriteClose(closeFrame(uint16(code), reason), c.closeWait(code)); err != nil {
		if !errors.Is(err, errSealed) { // sealed: a hard stop is closing it
			c.abort()
		}
		return false
	}
	return true
}

// closeWait is how long a close frame may wait for the client's socket to
// take it. A client cut off because it stopped reading (1013) gets its
// close frame after what its socket already holds, once it reads again:
// it has limits.pingInterval to do so, as long as keepalive would give
// it. Every other close frame waits at most limits.writeTimeout.
func (c *conn) closeWait(code websocket.StatusCode) time.Duration {
	if code == websocket.StatusTryAgainLater {
		return c.s.cfg.PingInterval
	}
	return c.s.cfg.WriteTimeout
}

// closeLater runs closeWith in its own goroutine, owned by the server's
// WaitGroup (and by done, when given): the close handshake may wait on a
// slow peer, and the caller (a publisher, the read loop, the drain
// schedule) must not.
func (c *conn) closeLater(code websocket.StatusCode, reason string, flush bool, done *sync.WaitGroup) {
	c.closeLaterBy(code, reason, flush, done, time.Time{})
}

// closeLaterBy is closeLater with closeBy's bound on the wait for the
// client's answer.
func (c *conn) closeLaterBy(code websocket.StatusCode, reason string, flush bool, done *sync.WaitGroup, by time.Time) {
	c.s.wg.Add(1)
	if done != nil {
		done.Add(1)
	}
	go func() {
		defer c.s.wg.Done()
		if done != nil {
			defer done.Done()
		}
		c.closeBy(code, reason, flush, by)
	}()
}

// abort closes the connection at once, without a close handshake.
func (c *conn) abort() {
	c.mu.Lock()
	c.closed = true
	c.queue = nil
	c.mu.Unlock()
	// A close handshake in progress (the WebSocket library's Close waits
	// up to 5s for the peer's answer, and a hostile or stuck peer never
	// sends one) makes CloseNow wait for it too; closing the socket under
	// it first ends that wait now, so a hard stop is at once.
	if c.raw != nil {
		_ = c.raw.Close()
	}
	c.closeNow()
}

// goAway is the hard stop's close: a 1001 close frame, if the socket
// takes it within a short bound, then the socket closed at once, without
// the close handshake. Queued frames are dropped.
func (c *conn) goAway() {
	c.mu.Lock()
	c.closed = true
	c.queue = nil
	c.mu.Unlock()
	if c.raw != nil {
		c.raw.GoAway(goingAwayFrame)
	}
	c.closeNow()
}

// closeNow closes the socket at once, reading and writing nothing: through
// the WebSocket library when it made the connection (it then knows it is
// closed), else directly.
func (c *conn) closeNow() {
	if c.ws != nil {
		_ = c.ws.CloseNow()
		return
	}
	_ = c.raw.Close()
}

// goingAwayFrame is the hard stop's close frame: 1001, no reason.
var goingAwayFrame = closeFrame(uint16(websocket.StatusGoingAway), "")

// keepalive checks the peer every PingInterval: a ping, then a check
// PingInterval/2+WriteTimeout later that its pong came. A peer that did
// not answer in time is dead and its connection is closed. The pong is
// noted by the frame reader (wsock.Conn.ReadMessage; the WebSocket
// library's pong callback on the portable path): nothing waits for it.
//
// It is the server's ping heap's callback, one call per due connection on
// the heap's goroutine, so it never blocks: the ping is written only if
// the socket takes it at once, and a socket in use or full gets a
// goroutine that waits for it (bounded by the write timeout). A timer per
// connection cost every idle connection ~0.13 KiB; the heap costs it one
// entry.
func (c *conn) keepalive() {
	if c.closing.Load() {
		return // the close ends the connection, within its own bound (closeWith)
	}
	s := c.s
	if c.raw.MessageOverdue(s.millis(), s.cfg.MessageTimeout) {
		// A client that answers pings but never finishes a message
		// (a fragmented one) would otherwise hold its connection, and
		// up to limits.maxMessageBytes of it, for ever.
		s.m.ProtocolErrors.WithLabelValues("1008").Inc()
		c.closeLater(websocket.StatusPolicyViolation, MessageTimeoutReason, false, nil)
		return
	}
	switch c.raw.PingState() {
	case wsock.PingSent:
		go c.abort() // its close may wait: not on the heap's goroutine
		return
	case wsock.PingAnswered:
		c.raw.SetPingState(wsock.PingIdle)
		if rest := s.cfg.PingInterval - c.pongWait(); rest > 0 {
			c.schedulePing(rest)
			return
		}
	}
	c.raw.SetPingState(wsock.PingSent) // before the write: the pong may come at once
	sent, rest, err := c.raw.TryWrite(pingFrame, false)
	switch {
	case err != nil:
		c.pinged(err)
	case !sent:
		go c.pinged(c.raw.Ping(s.cfg.WriteTimeout))
	case rest: // the socket took one byte of two: the writer path sends the other
		go c.pinged(c.raw.Send(nil, s.cfg.WriteTimeout))
	default:
		c.pinged(nil)
	}
}

// MessageTimeoutReason is the reason of the 1008 close of a client
// whose message took longer than limits.messageTimeout to arrive.
const MessageTimeoutReason = "message not completed in time"

// pongWait is how long a ping's pong may take.
func (c *conn) pongWait() time.Duration {
	return c.s.cfg.PingInterval/2 + c.s.cfg.WriteTimeout
}

// pinged schedules the pong check of a ping written (err nil), or ends a
// connection whose socket failed.
func (c *conn) pinged(err error) {
	if err != nil {
		if !errors.Is(err, errSealed) { // a close is under way: let it finish
			go c.abort()
		}
		return
	}
	c.schedulePing(c.pongWait())
}

// schedulePing sets the next keepalive step d from now, unless the
// connection is closing: under c.mu, so that cleanup, which cancels after
// setting closed, leaves nothing in the heap.
func (c *conn) schedulePing(d time.Duration) {
	c.mu.Lock()
	if !c.closed {
		c.s.pings.After(c, d)
	}
	c.mu.Unlock()
}

// cleanup runs once when the read loop ends.
func (c *conn) cleanup() {
	s := c.s
	if c.raw != nil {
		c.raw.FlushHeld() // deliveries held for other clients still go
	}
	if c.expiry != nil {
		c.expiry.stop()
	}
	c.mu.Lock()
	c.closed = true
	c.queue = nil
	c.mu.Unlock()
	s.pings.Cancel(c)  // after closed: schedulePing adds nothing more
	if c.raw.Parks() { // an in-memory socket may have armed the socket it stands for
		s.poller.forget(c.id)
	}
	c.ctx.end()
	c.dropSubs()
	c.callsMu.Lock()
	for call := range c.inflight {
		call.ReleaseWith(message.Dropped) // the client is gone mid-call
	}
	c.inflight = nil
	c.callsMu.Unlock()
	s.removeConn(c)
	if !c.closing.Load() || c.raw.Parks() {
		// (On the fast path the library only holds the socket: its
		// CloseNow closes it, reading and writing nothing.)
		c.closeNow()
	}
	c.ticket.Close()
	s.wg.Done()
}

// track registers an application call's lease so that it is released if
// the connection dies mid-call. It reports false when the connection is
// already gone.
func (c *conn) track(call *message.Call) bool {
	c.callsMu.Lock()
	defer c.callsMu.Unlock()
	if c.ctx.Err() != nil {
		return false
	}
	if c.inflight == nil {
		c.inflight = map[*message.Call]struct{}{}
	}
	c.inflight[call] = struct{}{}
	return true
}

func (c *conn) untrack(call *message.Call) {
	c.callsMu.Lock()
	delete(c.inflight, call)
	c.callsMu.Unlock()
}

package server

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/bufpool"
	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/protocol"
)

// The write path. Every queued item is a whole WebSocket frame (header and
// payload), built once and shared by every connection it goes to: a
// publish is framed once for all its subscribers.
//
// A connection with nothing queued has no writer goroutine. Whoever queues
// a frame for it (a publisher's read loop, the bus) writes the frame to
// the socket itself if the socket takes it at once, without waiting; only
// what it would not take goes to a writer goroutine, which exists until
// the queue is empty. So a delivery to a client that keeps up costs one
// write(2), no goroutine and no allocation.
//
// Coalescing without a delay: while a publisher's read goroutine runs the
// frames it already has in hand, what it queues (its deliveries, its own
// replies) is held in the connections' queues, and each connection it
// touched is flushed with one write when the read would wait for more
// input (holdSet). Sparse publishes are flushed as soon as they are
// handled; a burst of 64 publishes to a subscriber leaves in one write
// instead of 64. Held frames belong to nobody in particular: whoever
// writes to a connection next (a direct write, a writer goroutine) sends
// them first, so a publisher that stalls mid-burst delays only what it
// published itself.

// maxHeader is the longest header of an unmasked frame.
const maxHeader = wsock.MaxHeader

// frameText frames payload as one text frame (copying it).
func frameText(payload []byte) []byte {
	var hdr [maxHeader]byte
	h := appendTextHeader(hdr[:0], len(payload))
	return append(append(make([]byte, 0, len(h)+len(payload)), h...), payload...)
}

// frameMessage builds the frame of a "message" notification with one
// allocation: the payload is encoded after room for the longest header,
// and the real header is written just before it.
func frameMessage(topic string, data []byte) []byte {
	b := frameRoom(protocol.MessageOverhead + len(topic) + len(data))
	return frameIn(protocol.AppendMessage(b, topic, data))
}

// frameRoom is an empty payload with room for the longest header before
// it and n bytes of capacity after: append the payload, then frameIn.
func frameRoom(n int) []byte { return make([]byte, maxHeader, maxHeader+n) }

// frameIn frames a payload appended to frameRoom, in place: the real
// header goes just before the payload.
func frameIn(b []byte) []byte {
	var hdr [maxHeader]byte
	h := appendTextHeader(hdr[:0], len(b)-maxHeader)
	start := maxHeader - len(h)
	copy(b[start:], h)
	return b[start:]
}

// answerRoom is the payload room of a single request's answer: a
// publish's or a subscribe's fits.
const answerRoom = 64

// framePayload is the payload of a frame built by frameText or
// frameMessage.
func framePayload(f []byte) []byte { return wsock.TextPayload(f) }

// enqueue frames payload (a response or a notice to this client alone)
// and queues it: held while the read goroutine runs a frame in hand.
func (c *conn) enqueue(payload []byte) { c.enqueueOwn(frameText(payload)) }

// enqueueFramed is enqueue for a payload appended to frameRoom: it is
// framed in place.
func (c *conn) enqueueFramed(b []byte) { c.enqueueOwn(frameIn(b)) }

// enqueueOwn queues a frame for this client alone: held while the read
// goroutine runs a frame in hand.
func (c *conn) enqueueOwn(frame []byte) {
	var ok bool
	if h := c.holder(); h != nil {
		ok = c.hold(frame, h, true)
	} else {
		ok = c.enqueueFrame(frame, true)
	}
	if ok {
		c.s.m.MessagesSent.Inc()
	}
}

// queueSlack is how far past SendQueueBytes a queue may grow while its
// socket still takes bytes (the writer is only waiting to be scheduled):
// at least 1 MiB, or 4x the limit.
func queueSlack(limit int) int { return max(4*limit, limit+1<<20) }

// enqueueFrame sends or queues a whole frame for the client and reports
// whether it was taken. With direct, a connection without a writer gets
// the frame written to its socket here if the socket takes it at once. A client whose backlog would pass SendQueueBytes
// while its socket is full is closed with 1013: it is too slow to read,
// and holding more for it would let one client cost the server unbounded
// memory. (Bytes that wait only for the writer goroutine to be scheduled
// are not its fault; they are bounded by queueSlack.)
func (c *conn) enqueueFrame(frame []byte, direct bool) bool {
	s := c.s
	frame = c.outbound(frame)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	if direct && !c.writing && len(c.queue) > 0 {
		// Frames held for a flush go first, in the same write.
		if !c.queueFrame(frame) {
			c.mu.Unlock()
			return false
		}
		c.flushLocked()
		return true
	}
	if direct && !c.writing {
		sent, rest, err := c.raw.TryWrite(frame, false)
		if err != nil {
			c.mu.Unlock()
			c.writeFailed(err)
			return false
		}
		if sent {
			if rest {
				// The socket took part of it: a writer sends the rest.
				c.writing = true
				s.wg.Add(1)
				c.mu.Unlock()
				go c.writeLoop()
				return true
			}
			c.mu.Unlock()
			return true
		}
	}
	if !c.queueFrame(frame) {
		c.mu.Unlock()
		return false
	}
	start := !c.writing
	if start {
		c.writing = true
		s.wg.Add(1)
	}
	c.mu.Unlock()
	if start {
		go c.writeLoop()
	}
	return true
}

// queueFrame appends frame to the queue, or closes a client too slow to
// read it (1013) and reports false. c.mu held.
func (c *conn) queueFrame(frame []byte) bool {
	s := c.s
	if n := c.queued + len(frame); n > s.cfg.SendQueueBytes && (c.raw.Full() || n > queueSlack(s.cfg.SendQueueBytes)) {
		c.closed = true
		c.queue = nil
		c.cutSlow()
		return false
	}
	c.queue = append(c.queue, frame)
	c.queued += len(frame)
	return true
}

// cutSlow closes a client too slow to read with 1013: what is queued for
// it is dropped, and the close frame follows what its socket already
// holds, once it reads again (closeWait).
func (c *conn) cutSlow() {
	c.s.m.SlowConsumerDisconnects.Inc()
	c.closeLater(websocket.StatusTryAgainLater, retryhint.Reason(hintMillis(time.Second)), false, nil)
}

// enqueueHeld queues frame for the client and holds it for h's flush
// (unless a writer goroutine already owns the queue: it sends the frame).
// It reports whether the frame was taken.
func (c *conn) enqueueHeld(frame []byte, h *holdSet) bool { return c.hold(frame, h, false) }

// hold is enqueueHeld; own says c is the connection whose read goroutine
// fills h (its answers), which h flushes first.
func (c *conn) hold(frame []byte, h *holdSet, own bool) bool {
	frame = c.outbound(frame)
	c.mu.Lock()
	if c.closed || !c.queueFrame(frame) {
		c.mu.Unlock()
		return false
	}
	if !c.writing && c.heldBy != h {
		c.heldBy = h
		h.add(c, own)
	}
	c.mu.Unlock()
	return true
}

// flushHeld writes what is held in c's queue, if a writer has not taken
// it meanwhile.
func (c *conn) flushHeld(h *holdSet) {
	c.mu.Lock()
	if c.heldBy == h {
		c.heldBy = nil
	}
	if c.closed || c.writing || len(c.queue) == 0 {
		c.mu.Unlock()
		return
	}
	c.flushLocked()
}

// flushLocked writes the whole queue in one write if the socket takes it
// at once; what it does not take goes to a writer goroutine. c.mu held;
// it is released.
func (c *conn) flushLocked() {
	c.heldBy = nil
	frames := c.queue
	var (
		sent, rest bool
		err        error
		n          int
	)
	if len(frames) == 1 {
		n = len(frames[0])
		sent, rest, err = c.raw.TryWrite(frames[0], false)
	} else {
		buf := bufpool.Get()
		_, n = c.gather(buf, frames, 0, -1)
		sent, rest, err = c.raw.TryWrite(buf.Bytes(), true)
		bufpool.Put(buf)
	}
	if err != nil {
		c.mu.Unlock()
		c.writeFailed(err)
		return
	}
	if sent {
		clear(frames)
		c.queue = frames[:0]
		c.queued -= n
		if !rest {
			c.mu.Unlock()
			return
		}
	}
	// The socket took nothing (the queue stays), or part (the rest is
	// the tail): a writer sends the rest.
	c.writing = true
	c.s.wg.Add(1)
	c.mu.Unlock()
	go c.writeLoop()
}

// holdSet is the connections a read goroutine has held frames for while
// it runs the input it has in hand, flushed before the read waits for
// more (awaitInput, holdReader) or after maxHeldPublishes publishes. The
// read goroutine fills it; its own application calls, in their
// goroutines, may add their replies while a frame runs inline (mu).
type holdSet struct {
	mu    sync.Mutex
	conns []*conn
	spare []*conn
	// own is the publisher's own connection when its answers are held:
	// flushed before a large fan-out (ownFirst), so that its client,
	// which sends more once answered, does so while the rest are
	// written; after a small one.
	own       *conn
	publishes int

	// Marked while len(conns) > 0 || own != nil; the socket's side of
	// holding (the read that does not wait, the large read buffer).
	wsock.Hold
}

// holdSet is the read goroutine's holdSet, made on first use and given to
// its socket, which flushes it before a read waits. Read goroutine only.
func (c *conn) holdSet() *holdSet {
	if h := c.raw.Hold(); h != nil {
		return h.Flusher().(*holdSet)
	}
	h := new(holdSet)
	h.Init(h)
	c.raw.SetHold(&h.Hold)
	return h
}

// Flush is flush, for the socket (wsock.Flusher).
func (h *holdSet) Flush() { h.flush() }

// maxHeldPublishes bounds how many publishes a busy publisher's
// deliveries wait for: a client that keeps its input full is flushed
// every so many publishes, not only when it pauses.
const maxHeldPublishes = 64

func (h *holdSet) add(c *conn, own bool) {
	h.mu.Lock()
	h.Mark()
	if own && h.own == nil {
		h.own = c
	} else {
		h.conns = append(h.conns, c)
	}
	h.mu.Unlock()
}

// published counts a publish whose deliveries were held, and flushes
// after maxHeldPublishes of them.
func (h *holdSet) published() {
	h.publishes++
	if h.publishes >= maxHeldPublishes {
		h.flush()
	}
}

// ownFirst is the fewest other connections held for which a flush writes
// the publisher's answers first. Writing a large fan-out takes long
// enough that its client's next publishes, sent once answered, arrive
// meanwhile: the next burst is in hand when the flush ends (1 -> 1,000:
// 0.76-0.84x server CPU per delivery, 64 in flight). A small one's flush
// is short, with little to overlap, and answering first measured worse
// there (100 topics x 10: 1.03-1.07x), so its answers go last.
// A flush of a single publish answers last too: its client has one
// publish in flight and waits for the answer before the next, so an
// early answer only moves the next publish into this fan-out's writing
// and adds that wait to its latency (window 1, 1 -> 1,000: median
// latency 0.33 publish cycles answering last against 1.22 answering
// first, at the same CPU per delivery; docs/journal/latency-and-shedding.md).
const ownFirst = queuedFanout

// maxSpareHeld bounds the list of held connections kept for the next
// burst: one huge burst must not pin its list forever.
const maxSpareHeld = 1 << 14

// pending reports whether frames wait for a flush.
func (h *holdSet) pending() bool { return h != nil && h.Pending() }

// flush writes what each held connection has queued, one write each.
func (h *holdSet) flush() {
	h.mu.Lock()
	own, conns, publishes := h.own, h.conns, h.publishes
	h.own, h.conns = nil, h.spare[:0]
	h.publishes = 0
	h.Unmark()
	h.mu.Unlock()
	if own != nil && len(conns) >= ownFirst && publishes > 1 {
		own.flushHeld(h)
		own = nil
	}
	for _, c := range conns {
		c.flushHeld(h)
	}
	if own != nil {
		own.flushHeld(h)
	}
	clear(conns)
	if cap(conns) > maxSpareHeld {
		conns = nil
	}
	h.mu.Lock()
	h.spare = conns
	h.mu.Unlock()
}

// writeFailed ends a connection whose socket failed under a direct write.
func (c *conn) writeFailed(err error) {
	c.mu.Lock()
	c.closed = true
	c.queue = nil
	c.mu.Unlock()
	if errors.Is(err, errSealed) { // a close is under way: let it finish
		return
	}
	c.s.wg.Add(1)
	go func() {
		defer c.s.wg.Done()
		c.abort()
	}()
}

// writerExits marks the writer goroutine gone and wakes a close waiting
// for it. c.mu held.
func (c *conn) writerExits() {
	c.writing = false
	if c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// awaitWriter returns once no writer goroutine runs. c.mu held (released
// while it waits).
func (c *conn) awaitWriter() {
	for c.writing {
		if c.idle == nil {
			c.idle = make(chan struct{})
		}
		idle := c.idle
		c.mu.Unlock()
		<-idle
		c.mu.Lock()
	}
}

// writeLoop writes queued frames (and the rest of a frame a direct write
// began) until there are none, then exits.
func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	var spare [][]byte
	for {
		c.mu.Lock()
		if len(c.queue) == 0 && !c.raw.Pending() {
			c.writerExits()
			c.mu.Unlock()
			return
		}
		frames := c.queue
		c.queue = spare[:0]
		c.mu.Unlock()

		n, err := c.write(frames)
		clear(frames)
		spare = frames

		c.mu.Lock()
		c.queued -= n
		if err != nil {
			c.closed = true
			c.queue = nil
			c.writerExits()
			c.mu.Unlock()
			switch {
			case errors.Is(err, errSealed): // a close is under way: let it finish
			case errors.Is(err, os.ErrDeadlineExceeded) && !c.closing.Load():
				// The socket took nothing for limits.writeTimeout: the
				// client has stopped reading, as a queue past its limit
				// would say.
				c.cutSlow()
			default:
				c.abort()
			}
			return
		}
		c.mu.Unlock()
	}
}

// maxCoalesced bounds one coalesced batch frame, so a client's read limit
// is not surprised by a huge array.
const maxCoalesced = 64 << 10

// maxSend is the most bytes gathered before they go to the socket.
const maxSend = 256 << 10

// write sends queued frames in as few writes as it can, each bounded by
// the write timeout, and returns the bytes of queued frames written.
func (c *conn) write(frames [][]byte) (int, error) {
	buf := bufpool.Get()
	defer bufpool.Put(buf)
	written := 0
	for i := 0; ; {
		// At least one send, with no frames: the rest of a frame a direct
		// write began goes first (send).
		var n int
		i, n = c.gather(buf, frames, i, maxSend)
		if err := c.raw.Send(buf.Bytes(), c.s.cfg.WriteTimeout); err != nil {
			return written, err
		}
		buf.Reset()
		written += n
		if i == len(frames) {
			return written, nil
		}
	}
}

// gather appends frames[i:] to buf until it holds at least limit bytes
// (all of them when limit < 0), and returns the index of the first frame
// left and the bytes of queued frames taken. With rt.batch, queued
// messages go out as JSON arrays of up to maxCoalesced bytes: fewer
// frames for the client to parse.
func (c *conn) gather(buf *bytes.Buffer, frames [][]byte, i, limit int) (next, taken int) {
	var hdr [maxHeader]byte
	for i < len(frames) && (limit < 0 || buf.Len() < limit) {
		if !c.batch || i == len(frames)-1 {
			buf.Write(frames[i])
			taken += len(frames[i])
			i++
			continue
		}
		// rt.batch: as many queued messages as fit one array frame. A
		// batch response is already an array: its elements are spliced.
		j, size := i, 1
		for j < len(frames) {
			n := len(arrayElems(framePayload(frames[j]))) + 1 // with its ',' or ']'
			if j > i && size+n > maxCoalesced {
				break
			}
			size += n
			j++
		}
		buf.Write(appendTextHeader(hdr[:0], size))
		buf.WriteByte('[')
		for k := i; k < j; k++ {
			if k > i {
				buf.WriteByte(',')
			}
			buf.Write(arrayElems(framePayload(frames[k])))
			taken += len(frames[k])
		}
		buf.WriteByte(']')
		i = j
	}
	return i, taken
}

// arrayElems is what a queued message contributes to a batch array: the
// message itself, or a batch response's elements without their brackets.
func arrayElems(f []byte) []byte {
	if len(f) >= 2 && f[0] == '[' {
		return f[1 : len(f)-1]
	}
	return f
}

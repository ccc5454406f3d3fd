package server

import (
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/bufpool"
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

// maxHeader is the longest header of an unmasked frame (RFC 6455 5.2).
const maxHeader = 10

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
	b := make([]byte, maxHeader, maxHeader+protocol.MessageOverhead+len(topic)+len(data))
	b = protocol.AppendMessage(b, topic, data)
	var hdr [maxHeader]byte
	h := appendTextHeader(hdr[:0], len(b)-maxHeader)
	start := maxHeader - len(h)
	copy(b[start:], h)
	return b[start:]
}

// framePayload is the payload of a frame built by frameText or
// frameMessage.
func framePayload(f []byte) []byte {
	switch f[1] {
	case 126:
		return f[4:]
	case 127:
		return f[10:]
	}
	return f[2:]
}

// enqueue frames payload (a response or a notice to this client alone)
// and queues it.
func (c *conn) enqueue(payload []byte) {
	if c.enqueueFrame(frameText(payload), true) {
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
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	if direct && !c.writing {
		sent, rest, err := c.raw.tryWrite(frame)
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
	if n := c.queued + len(frame); n > s.cfg.SendQueueBytes && (c.raw.full() || n > queueSlack(s.cfg.SendQueueBytes)) {
		c.closed = true
		c.queue = nil
		c.mu.Unlock()
		s.m.SlowConsumerDisconnects.Inc()
		c.closeLater(websocket.StatusTryAgainLater, retryReason(s.jitter(time.Second)), false, nil)
		return false
	}
	c.queue = append(c.queue, frame)
	c.queued += len(frame)
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

// writeLoop writes queued frames (and the rest of a frame a direct write
// began) until there are none, then exits.
func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	var spare [][]byte
	for {
		c.mu.Lock()
		if len(c.queue) == 0 && !c.raw.pending() {
			c.writing = false
			c.idle.Broadcast()
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
		c.idle.Broadcast() // a replay waiting for room (awaitRoom)
		if err != nil {
			c.closed = true
			c.queue = nil
			c.writing = false
			c.idle.Broadcast()
			c.mu.Unlock()
			if !errors.Is(err, errSealed) { // a close is under way: let it finish
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
// the write timeout, and returns the bytes of queued frames written. With
// rt.batch, queued messages go out as JSON arrays of up to maxCoalesced
// bytes: fewer frames for the client to parse.
func (c *conn) write(frames [][]byte) (int, error) {
	buf := bufpool.Get()
	defer bufpool.Put(buf)
	written, sent := 0, 0
	send := func() error {
		err := c.raw.send(buf.Bytes(), c.s.cfg.WriteTimeout)
		buf.Reset()
		if err == nil {
			sent = written
		}
		return err
	}
	var hdr [maxHeader]byte
	for i := 0; i < len(frames); {
		if buf.Len() >= maxSend {
			if err := send(); err != nil {
				return sent, err
			}
		}
		if !c.batch || i == len(frames)-1 {
			buf.Write(frames[i])
			written += len(frames[i])
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
			written += len(frames[k])
		}
		buf.WriteByte(']')
		i = j
	}
	return written, send()
}

// arrayElems is what a queued message contributes to a batch array: the
// message itself, or a batch response's elements without their brackets.
func arrayElems(f []byte) []byte {
	if len(f) >= 2 && f[0] == '[' {
		return f[1 : len(f)-1]
	}
	return f
}

// deliveryPool holds the subscriber lists a publish copies out of the hub,
// so the socket writes happen without the hub's lock held.
var deliveryPool = sync.Pool{New: func() any { s := make([]*conn, 0, 64); return &s }}

package wsock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// The frame reader: a client's frames after the upgrade, read by this
// package alone (RFC 6455 section 5). Where the RFC leaves a choice (the
// reason of a close frame that fails the connection, which framing errors
// get a close frame at all), it does what github.com/coder/websocket does
// on the portable path, byte for byte: a differential fuzz target
// (FuzzReaderMatchesLibrary) holds the two to the same messages, frames
// written and ends.

// Opcode is the kind of a data message (RFC 6455 section 5.6).
type Opcode uint8

// The data opcodes.
const (
	OpText   Opcode = 1
	OpBinary Opcode = 2
)

// Frame opcodes (RFC 6455 section 5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// Ends of a message read that the caller answers with a close frame of
// its own (and then Drain).
var (
	// ErrTooBig: the message is longer than the limit (1009).
	ErrTooBig = errors.New("wsock: message over the limit")
	// ErrInvalidUTF8: a text message is not UTF-8 (1007).
	ErrInvalidUTF8 = errors.New("wsock: text message is not valid UTF-8")
	// ErrBinary: a binary message where none is accepted (1003); none of
	// its payload was read.
	ErrBinary = errors.New("wsock: binary message")
)

// CloseError ends the read side with a close frame: the client's
// (Received: it was answered, and the socket closed), or the one this
// package sent for a protocol error (1002: the caller closes the socket).
type CloseError struct {
	Code     uint16
	Reason   string
	Received bool
}

func (e *CloseError) Error() string {
	if e.Received {
		return fmt.Sprintf("wsock: received close frame: %d %q", e.Code, e.Reason)
	}
	return fmt.Sprintf("wsock: failed the connection: %d %q", e.Code, e.Reason)
}

// Framing errors that end the read side without a close frame, as the
// WebSocket library ends it.
var (
	errUnmasked       = errors.New("wsock: received unmasked frame from client")
	errNegativeLength = errors.New("wsock: received negative payload length")
)

// header is a frame's header (RFC 6455 section 5.2).
type header struct {
	fin    bool
	rsv    byte // the three reserved bits, in place
	op     byte
	masked bool
	length int64
	key    uint32 // the mask key, its first byte lowest
}

// readHeader reads a frame header from the read buffer (at most 14
// bytes: it fits the smallest).
func (c *Conn) readHeader() (header, error) {
	b, err := c.br.Peek(2)
	if err != nil {
		return header{}, err
	}
	h := header{fin: b[0]&0x80 != 0, rsv: b[0] & 0x70, op: b[0] & 0x0F, masked: b[1]&0x80 != 0}
	n := 2
	switch b[1] & 0x7F {
	case 126:
		n = 4
	case 127:
		n = 10
	}
	if h.masked {
		n += 4
	}
	if b, err = c.br.Peek(n); err != nil {
		return header{}, err
	}
	switch l := b[1] & 0x7F; l {
	case 126:
		h.length = int64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		h.length = int64(binary.BigEndian.Uint64(b[2:]))
		if h.length < 0 {
			return header{}, errNegativeLength
		}
	default:
		h.length = int64(l)
	}
	if h.masked {
		h.key = binary.LittleEndian.Uint32(b[n-4:])
	}
	_, _ = c.br.Discard(n)
	return h, nil
}

// ReadMessage reads the client's next data message into dst, answering
// the control frames before and among its fragments: a ping with its pong,
// a pong noted for the keepalive, a close answered (the closing
// handshake). A text message is checked UTF-8 as it arrives; dst takes at
// most limit+1 bytes. It returns
//   - the message's opcode and nil: dst holds it whole;
//   - 0 and nil: only control frames came, and nothing more is in hand:
//     the caller may wait for input (AwaitInput) or park;
//   - ErrBinary (a binary message, with binary false), ErrTooBig or
//     ErrInvalidUTF8: the caller closes the connection (WriteClose) and
//     reads until the client's answer (Drain);
//   - a *CloseError: the client closed (answered, socket closed), or
//     broke the protocol and was sent a 1002 close frame;
//   - any other error: the socket failed, or a framing error the WebSocket
//     library ends without a close frame (an unmasked frame, a length
//     over 2^63): the caller closes the socket.
//
// Read goroutine only. It allocates nothing but dst's growth.
func (c *Conn) ReadMessage(dst *bytes.Buffer, limit int64, binary bool) (Opcode, error) {
	var op Opcode
	var p Payload
	for {
		h, err := c.readHeader()
		if err != nil {
			return op, c.endMessage(op, err)
		}
		if h.rsv != 0 {
			return op, c.endMessage(op, c.fail(fmt.Sprintf("received header with unexpected rsv bits set: %v:%v:%v",
				h.rsv&0x40 != 0, h.rsv&0x20 != 0, h.rsv&0x10 != 0)))
		}
		if !h.masked {
			return op, c.endMessage(op, errUnmasked)
		}
		switch h.op {
		case opClose, opPing, opPong:
			if err := c.control(h); err != nil {
				return op, c.endMessage(op, err)
			}
			if op == 0 && c.br.Buffered() == 0 {
				return 0, nil
			}
			continue
		case opContinuation, opText, opBinary:
		default:
			return op, c.endMessage(op, c.fail("received unknown opcode opcode("+strconv.Itoa(int(h.op))+")"))
		}
		if op == 0 {
			if h.op == opContinuation {
				return 0, c.fail("received continuation frame without text or binary frame")
			}
			op = Opcode(h.op)
			c.Heard()
			c.MessageBegins() // until it is read whole: limits.messageTimeout
			if op == OpBinary && !binary {
				c.unread = h.length
				return op, c.endMessage(op, ErrBinary)
			}
			p = NewPayload(limit, op == OpText)
		} else if h.op != opContinuation {
			return op, c.endMessage(op, c.fail("received new data message without finishing the previous message"))
		}
		if err := c.readPayload(dst, &p, h); err != nil {
			return op, c.endMessage(op, err)
		}
		if h.fin {
			return op, c.endMessage(op, p.End())
		}
	}
}

// endMessage ends the mark of a message begun (op not 0), and passes err.
func (c *Conn) endMessage(op Opcode, err error) error {
	if op != 0 {
		c.MessageEnds()
	}
	return err
}

// readPayload appends a data frame's payload to dst, unmasked, by the rule
// of p. Reads take what has arrived: an invalid byte is seen before the
// rest of its frame comes. What is left unread of the frame is c.unread
// (Drain skips it).
func (c *Conn) readPayload(dst *bytes.Buffer, p *Payload, h header) error {
	rest, key := h.length, h.key
	for rest > 0 {
		if cap(dst.AvailableBuffer()) < minRead {
			dst.Grow(minRead)
		}
		b := dst.AvailableBuffer()
		b = b[:min(int64(cap(b)), rest, p.Room(dst))]
		n, err := c.br.Read(b)
		rest -= int64(n)
		key = mask(b[:n], key)
		dst.Write(b[:n])
		if err == nil {
			err = p.Took(dst, n)
		}
		if err != nil {
			c.unread = rest
			return err
		}
	}
	return nil
}

// control handles a control frame (RFC 6455 section 5.5).
func (c *Conn) control(h header) error {
	if h.length > maxControl {
		return c.fail(fmt.Sprintf("received control frame payload with invalid length: %d", h.length))
	}
	if !h.fin {
		return c.fail("received fragmented control frame")
	}
	b, err := c.br.Peek(int(h.length)) // the read buffer holds a whole one
	if err != nil {
		return err
	}
	mask(b, h.key) // in place: discarded next
	switch h.op {
	case opPing:
		err = c.writePong(b)
	case opPong:
		c.pong()
	default:
		err = c.closeReceived(b)
	}
	_, _ = c.br.Discard(len(b))
	return err
}

// maxControl is the longest payload of a control frame.
const maxControl = 125

// controlWait bounds the write of a pong or a close frame answering the
// client's, and how long Drain waits for the client's close frame: the
// WebSocket library's bounds (5s each).
const controlWait = 5 * time.Second

// CloseHandshakeWait is how long a close frame sent waits for the
// client's answer before the socket is closed anyway.
const CloseHandshakeWait = controlWait

// pongFrames hold the pong being written (most clients never ping).
var pongFrames = sync.Pool{New: func() any { return new([2 + maxControl]byte) }}

// writePong answers a ping with its payload. Nothing follows a close frame
// sent: the read side then ends, as the WebSocket library's does.
func (c *Conn) writePong(payload []byte) error {
	f := pongFrames.Get().(*[2 + maxControl]byte)
	defer pongFrames.Put(f)
	f[0], f[1] = PongHead, byte(len(payload))
	n := 2 + copy(f[2:], payload)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeSent || !c.setDeadline(controlWait) {
		return net.ErrClosed
	}
	defer c.Conn.SetWriteDeadline(time.Time{})
	if err := c.finishTail(); err != nil {
		return err
	}
	return c.write(f[:n])
}

// closeReceived answers the client's close frame with its code and reason
// (an empty one with an empty one), unless a close frame went already,
// and closes the socket: the closing handshake is over.
func (c *Conn) closeReceived(b []byte) error {
	code, reason := uint16(noStatus), ""
	switch {
	case len(b) == 1:
		return c.fail(fmt.Sprintf("received invalid close payload: close payload %q too small, cannot even contain the 2 byte status code", b))
	case len(b) >= 2:
		code = binary.BigEndian.Uint16(b)
		if !validCloseCode(code) {
			return c.fail("received invalid close payload: invalid status code " + statusName(code))
		}
		reason = string(b[2:])
		if !utf8.ValidString(reason) {
			// RFC 6455 section 8.1: bytes to be read as UTF-8 that are
			// not fail the connection, with 1007 (the library this
			// reader replaces echoes them).
			_ = c.WriteClose(CloseFrame(invalidPayload, badCloseReason), controlWait)
			return &CloseError{Code: invalidPayload, Reason: badCloseReason}
		}
	}
	answer := emptyClose
	if code != noStatus {
		answer = CloseFrame(code, reason)
	}
	_ = c.writeClose(answer, controlWait, true) // the close follows at once
	_ = c.Close()
	return &CloseError{Code: code, Reason: reason, Received: true}
}

// A CloseTake is what TakeClose did.
type CloseTake uint8

// What TakeClose did.
const (
	// NoClose: the input is not the client's close frame alone (or there
	// is none yet, or the socket is in use): what was read waits in the
	// read buffer, and the read goroutine reads as usual.
	NoClose CloseTake = iota
	// CloseTaken: the client's close frame was answered and the socket
	// closed, as ReadMessage does (its *CloseError, Received).
	CloseTaken
	// CloseUnfinished: as CloseTaken, but the socket took only part of
	// the answer: FinishClose, on a goroutine that may wait, sends the
	// rest and closes the socket.
	CloseUnfinished
)

// errWouldWait is Read's error while TakeClose reads: nothing has
// arrived, and it must not wait.
var errWouldWait = errors.New("wsock: read would wait")

// TakeClose is the first read of a connection woken from its park
// (Park), made on the waker's goroutine without waiting for anything:
// when what has arrived is the client's close frame and nothing more, it
// answers it (the answer left with the FIN) and closes the socket, so
// that the close of a client that leaves starts no goroutine. Otherwise
// what it read stays in the read buffer for the read goroutine (NoClose).
// Only the owner of the read side (right after Resume said so) may call
// it. It allocates nothing.
func (c *Conn) TakeClose() CloseTake {
	if c.sc == nil || c.br == nil || c.br.Buffered() > 0 {
		return NoClose
	}
	c.noWait = true
	_, _ = c.br.Peek(1) // one read(2) of what has arrived
	c.noWait = false
	b, _ := c.br.Peek(c.br.Buffered())
	payload, ok := loneClose(b)
	if !ok || !c.mu.TryLock() {
		return NoClose
	}
	if c.stopping.Load() || len(c.tail) > 0 {
		c.mu.Unlock()
		return NoClose
	}
	take := CloseTaken
	if !c.closeSent {
		c.closing.Store(true)
		c.sealed, c.closeSent = true, true
		var answer []byte
		if len(payload) == 0 {
			answer = emptyClose
		} else {
			f := pongFrames.Get().(*[2 + maxControl]byte)
			defer pongFrames.Put(f)
			f[0], f[1] = CloseHead, byte(len(payload))
			answer = f[:2+copy(f[2:], payload)]
		}
		if kept, err := c.writeOrKeep(answer, true); err == nil && kept {
			take = CloseUnfinished
		}
	}
	c.mu.Unlock()
	_, _ = c.br.Discard(len(b))
	if take == CloseTaken {
		_ = c.Close()
	}
	return take
}

// FinishClose sends the rest of the answer TakeClose began, within the
// bound of an answer to a close frame, and closes the socket.
func (c *Conn) FinishClose() {
	c.mu.Lock()
	c.Conn.SetWriteDeadline(time.Now().Add(controlWait))
	_ = c.finishTail()
	c.mu.Unlock()
	_ = c.Close()
}

// loneClose reports whether b is one whole client close frame, masked,
// with a valid payload (a code the client may send, a UTF-8 reason, or
// none), and nothing more; payload is it, unmasked in place.
func loneClose(b []byte) (payload []byte, ok bool) {
	if len(b) < 6 || b[0] != 0x80|opClose || b[1]&0x80 == 0 {
		return nil, false
	}
	n := int(b[1] & 0x7F)
	if n > maxControl || len(b) != 6+n || n == 1 {
		return nil, false
	}
	key := binary.LittleEndian.Uint32(b[2:])
	payload = b[6:]
	if n >= 2 {
		// Checked on a copy of the head: b stays masked until it is known
		// to be taken (the read goroutine reads it otherwise).
		var head [2]byte
		copy(head[:], payload)
		mask(head[:], key)
		if !validCloseCode(binary.BigEndian.Uint16(head[:])) {
			return nil, false
		}
		mask(payload, key)
		if !utf8.Valid(payload[2:]) {
			mask(payload, key) // back as it was
			return nil, false
		}
	}
	return payload, true
}

// badCloseReason is the reason of the 1007 that answers a close reason
// that is not UTF-8.
const badCloseReason = "close reason is not valid UTF-8"

// emptyClose is a close frame without a code: the answer to one.
var emptyClose = []byte{CloseHead, 0}

// fail sends a 1002 close frame with reason (none when the reason is
// too long for one, as the WebSocket library does) and returns it as the
// read's end.
func (c *Conn) fail(reason string) error {
	if len(reason) <= maxControl-2 {
		_ = c.WriteClose(CloseFrame(protocolError, reason), controlWait)
	}
	return &CloseError{Code: protocolError, Reason: reason}
}

// Close codes this package sends or reads (RFC 6455 section 7.4.1).
const (
	protocolError  = 1002
	noStatus       = 1005
	invalidPayload = 1007
)

// validCloseCode reports whether a client may send code in a close frame:
// the codes the RFC defines for the wire (1000-1014 less 1004-1006) and
// those for libraries and applications (3000-4999).
func validCloseCode(code uint16) bool {
	switch code {
	case 1004, 1005, 1006, 1015:
		return false
	}
	return code >= 1000 && code <= 1014 || code >= 3000 && code <= 4999
}

// statusName is how the WebSocket library names an invalid close code.
func statusName(code uint16) string {
	switch code {
	case 1004:
		return "statusReserved"
	case 1005:
		return "StatusNoStatusRcvd"
	case 1006:
		return "StatusAbnormalClosure"
	case 1015:
		return "StatusTLSHandshake"
	}
	return "StatusCode(" + strconv.Itoa(int(code)) + ")"
}

// Drain reads and drops the client's input after this side sent a close
// frame (ErrTooBig and the like): the rest of the frame begun, then frames
// until the client's close frame, the end of the input or wait, reading
// nothing into memory. Then it closes the socket. Closing at once instead
// would reset a connection with unread input, and the client might lose
// the close frame it is owed.
func (c *Conn) Drain(wait time.Duration) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(wait))
	ok := c.discard(c.unread)
	c.unread = 0
	for ok {
		h, err := c.readHeader()
		if err != nil || h.op == opClose {
			break
		}
		ok = c.discard(h.length)
	}
	_ = c.Close()
}

// discard drops n bytes of input, and reports whether it could.
func (c *Conn) discard(n int64) bool {
	for n > 0 {
		d, err := c.br.Discard(int(min(n, 1<<30)))
		n -= int64(d)
		if err != nil {
			return false
		}
	}
	return true
}

// mask applies a mask key to b (RFC 6455 section 5.3), key's first byte
// lowest, and returns the key turned for the bytes after b.
func mask(b []byte, key uint32) uint32 {
	if len(b) >= 8 {
		k := uint64(key)<<32 | uint64(key)
		for len(b) >= 8 {
			binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)^k)
			b = b[8:]
		}
	}
	for i := range b {
		b[i] ^= byte(key)
		key = key>>8 | key<<24
	}
	return key
}

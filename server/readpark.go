package server

import (
	"bufio"
	"sync"
)

// An idle connection's read buffer is lent out while its read goroutine
// waits for the client: the buffer is needed only while bytes are read,
// and idle connections wait nearly all the time. Parked, br holds no
// buffer (its Size is 0); the read goroutine takes one from the pool when
// the socket turns readable, before anything reads br (awaitInput), and a
// close takes one before the WebSocket library reads br for the close
// handshake (closeRead). Saves readBufferSize bytes per idle connection.
//
// Invariant: br is parked only while the read goroutine waits in awaitFD,
// and only under brMu with readClosed false; every reader of br unparks
// it first under brMu. A publisher's large reader during a burst is not
// parked (shrinkReader gives it back first); a reader of another size
// (net/http's 4 KiB one, kept for bytes a client sent ahead of the 101) is
// dropped once empty, and the connection borrows small ones from then on.

var (
	// lentReadBuffers hold lent buffers, each in a bufio.Reader of
	// readBufferSize reading nothing.
	lentReadBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}
	// emptyReaders are the bufio.Readers a lent buffer travels in, once
	// it is back in a connection's br.
	emptyReaders = sync.Pool{New: func() any { return new(bufio.Reader) }}
)

// parkReader lends br's buffer out when nothing is buffered: the read
// goroutine is about to wait for the client (awaitFD). Read goroutine only.
func (c *rawConn) parkReader() {
	c.brMu.Lock()
	defer c.brMu.Unlock()
	if c.readClosed || c.br.Size() == 0 || c.br.Buffered() != 0 {
		return
	}
	if h := c.hold.Load(); h != nil && h.big != nil {
		return
	}
	if c.br.Size() != readBufferSize {
		*c.br = bufio.Reader{}
		return
	}
	box := emptyReaders.Get().(*bufio.Reader)
	*box = *c.br
	box.Reset(nil) // keeps the buffer, drops the socket
	*c.br = bufio.Reader{}
	lentReadBuffers.Put(box)
}

// unparkReader gives br a buffer again if it was lent out.
func (c *rawConn) unparkReader() {
	if c == nil || c.br == nil {
		return
	}
	c.brMu.Lock()
	c.unparkReaderLocked()
	c.brMu.Unlock()
}

// unparkReaderLocked is unparkReader with brMu held.
func (c *rawConn) unparkReaderLocked() {
	if c.br == nil || c.br.Size() != 0 {
		return
	}
	box := lentReadBuffers.Get().(*bufio.Reader)
	box.Reset(c)
	*c.br = *box
	*box = bufio.Reader{}
	emptyReaders.Put(box)
}

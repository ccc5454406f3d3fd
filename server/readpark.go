package server

import "bufio"

// An idle connection's read buffer is lent out while its read goroutine
// waits for the client: the buffer is needed only while bytes are read,
// and idle connections wait nearly all the time. Parked, br holds no
// buffer (its Size is 0); the read goroutine takes one from the pool when
// the socket turns readable, before anything reads br (awaitInput), and a
// close takes one before the WebSocket library reads br for the close
// handshake (closeRead). Saves readBufferSize bytes per idle connection.
//
// Invariant: br is parked only while the read goroutine waits in
// awaitInput, and only under brMu with readClosed false; every reader of br unparks
// it first under brMu. Only the small reader is lent, which reads the
// socket itself: a publisher's large reader during a burst is not
// (shrinkReader gives the small one back first), nor net/http's 4 KiB one,
// kept when a client's bytes came ahead of the 101, which reads them from
// Accept's io.MultiReader (empty as the bufio.Reader may look, it can
// still hold some).

// spareReaders is how many lent buffers are kept for connections that
// wake; past it a parked connection's buffer is simply dropped (a pool
// would keep every idle connection's buffer until the next two GCs, and
// an idle server allocates nothing that would start one).
const spareReaders = 256

var (
	// spareReadBufs hold lent buffers, each in a bufio.Reader of
	// readBufferSize reading nothing.
	spareReadBufs = make(chan *bufio.Reader, spareReaders)
	// spareBoxes are empty bufio.Readers for a parked buffer to travel in.
	spareBoxes = make(chan *bufio.Reader, spareReaders)
)

// parkReader lends br's buffer out when nothing is buffered: the read
// goroutine is about to wait for the client (awaitInput). Read goroutine
// only.
func (c *rawConn) parkReader() {
	if c == nil || c.br == nil {
		return
	}
	c.brMu.Lock()
	defer c.brMu.Unlock()
	if c.readClosed || c.br.Size() != readBufferSize || c.br.Buffered() != 0 {
		return
	}
	if h := c.hold.Load(); h != nil && h.big != nil {
		return
	}
	if len(spareReadBufs) < spareReaders {
		var box *bufio.Reader
		select {
		case box = <-spareBoxes:
		default:
			box = new(bufio.Reader)
		}
		*box = *c.br
		box.Reset(nil) // keeps the buffer, drops the socket
		select {
		case spareReadBufs <- box:
		default: // filled up meanwhile: the buffer goes with the box
		}
	}
	*c.br = bufio.Reader{}
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
	select {
	case box := <-spareReadBufs:
		box.Reset(c)
		*c.br = *box
		*box = bufio.Reader{}
		select {
		case spareBoxes <- box:
		default:
		}
	default:
		*c.br = *bufio.NewReaderSize(c, readBufferSize)
	}
}

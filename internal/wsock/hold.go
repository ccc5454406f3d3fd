package wsock

import (
	"bufio"
	"sync"
	"sync/atomic"
)

// A Flusher writes the frames held for a read goroutine (Hold).
type Flusher interface{ Flush() }

// Hold is what a read goroutine keeps while it runs the input it has in
// hand and frames it queues are held (its caller's Flusher knows which
// connections hold them): the mark that some are held (a read that would
// wait flushes first: Conn.Read, AwaitInput), and the large read buffer
// of a burst (Conn.GrowReader). Made on a connection's first publish;
// most connections never have one.
type Hold struct {
	f    Flusher
	held atomic.Bool // frames wait for f.Flush

	// While a burst has the large read buffer (GrowReader): its husk,
	// the small reader set aside, and what feeds the move.
	big    *bufio.Reader
	small  bufio.Reader
	prefix prefixReader
}

// Init makes h flush through f.
func (h *Hold) Init(f Flusher) { h.f = f }

// Flusher is what h flushes through.
func (h *Hold) Flusher() Flusher { return h.f }

// Pending reports whether frames wait for a flush.
func (h *Hold) Pending() bool { return h != nil && h.held.Load() }

// Mark records that frames wait for a flush.
func (h *Hold) Mark() {
	if !h.held.Load() {
		h.held.Store(true)
	}
}

// Unmark records that none do (the flush took them).
func (h *Hold) Unmark() { h.held.Store(false) }

// Hold is the connection's Hold, nil until SetHold.
func (c *Conn) Hold() *Hold { return c.hold.Load() }

// SetHold gives the connection its Hold. Read goroutine only.
func (c *Conn) SetHold(h *Hold) { c.hold.Store(h) }

// bigReadBuffer is the read buffer of a publisher while it has input in
// hand: a window of 64 publishes of ~200 bytes fits in one read, where
// the 256 bytes an idle connection keeps take 50. (At 4 KiB, 100 topics
// x 10 read 0.55 times per subscriber write; at 16 KiB 0.31-0.34.) It is
// pooled between bursts: only publishers in a burst hold one.
const bigReadBuffer = 16 << 10

// bigReaders holds the large read buffers between bursts.
var bigReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bigReadBuffer) }}

// prefixReader yields rest, then reads from c.
type prefixReader struct {
	rest []byte
	c    *Conn
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.rest) > 0 {
		n := copy(b, p.rest)
		p.rest = p.rest[n:]
		return n, nil
	}
	return p.c.Read(b)
}

// GrowReader gives a publisher that has more input in hand a large read
// buffer, in place: the WebSocket library holds br itself, so the
// reader's contents are swapped, not the pointer (the small reader is
// kept in the Hold). Bytes already buffered move over first. Read
// goroutine only, between frames.
func (c *Conn) GrowReader() {
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
func (c *Conn) shrinkReader() {
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

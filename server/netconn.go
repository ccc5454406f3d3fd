package server

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"sync"
	"time"
)

// Buffer sizes of a hijacked connection. net/http hands over 4 KiB for
// reading and 4 KiB for writing, held for the life of the connection:
// most of what an idle connection costs. The reader only needs room for
// frame headers (payloads larger than the buffer are read straight into
// the caller's slice); the writer only collects a frame header before the
// payload reaches corkConn, which buffers whole batches from a pool.
const (
	readBufferSize  = 512
	writeBufferSize = 64
)

// upgradeWriter wraps the ResponseWriter of an upgrade so the hijacked
// connection gets small buffers and a corkable writer.
type upgradeWriter struct {
	http.ResponseWriter
	conn *corkConn
}

func (u *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(u.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	cc := &corkConn{Conn: nc}
	u.conn = cc
	r := brw.Reader
	if r.Buffered() == 0 {
		// Nothing read ahead: the 4 KiB reader can go. (Bytes a client
		// sent before our 101 must be kept, so then it stays.)
		r = bufio.NewReaderSize(nc, readBufferSize)
	}
	return cc, bufio.NewReadWriter(r, bufio.NewWriterSize(cc, writeBufferSize)), nil
}

// corkConn is a net.Conn whose writes can be held back and sent as one:
// the writer corks it, writes every queued frame through the WebSocket
// library (which flushes per frame), and uncorks, so N queued messages
// cost one syscall instead of N. While corked, writes go to a pooled
// buffer; an idle connection holds none.
type corkConn struct {
	net.Conn
	mu     sync.Mutex // writes come from the writer and from the read loop (pongs)
	corked bool
	buf    *bytes.Buffer
}

// maxCork is the most bytes held before a corked write goes out anyway.
const maxCork = 64 << 10

var corkPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return c.Conn.Write(p)
	}
	if c.buf == nil {
		c.buf = corkPool.Get().(*bytes.Buffer)
	}
	c.buf.Write(p)
	if c.buf.Len() >= maxCork {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork sends what was held, bounded by timeout: the WebSocket library's
// own write timeout covered only the copy into the buffer.
func (c *corkConn) uncork(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if c.buf == nil {
		return nil
	}
	c.Conn.SetWriteDeadline(time.Now().Add(timeout))
	err := c.flushLocked()
	c.Conn.SetWriteDeadline(time.Time{})
	if b := c.buf; b != nil {
		c.buf = nil
		if b.Cap() <= 4*maxCork {
			b.Reset()
			corkPool.Put(b)
		}
	}
	return err
}

func (c *corkConn) flushLocked() error {
	if c.buf == nil || c.buf.Len() == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf.Bytes())
	c.buf.Reset()
	return err
}

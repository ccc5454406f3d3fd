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
	mu      sync.Mutex // writes come from the writer and from the read loop (pongs)
	corked  bool
	timeout time.Duration // bounds each socket write made for a corked batch
	buf     *bytes.Buffer
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

// cork holds writes back until uncork; each socket write made for the
// batch is bounded by timeout.
func (c *corkConn) cork(timeout time.Duration) {
	c.mu.Lock()
	c.corked = true
	c.timeout = timeout
	c.mu.Unlock()
}

// uncork sends what was held.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if c.buf == nil {
		return nil
	}
	err := c.flushLocked()
	if b := c.buf; b != nil {
		c.buf = nil
		if b.Cap() <= 4*maxCork {
			b.Reset()
			corkPool.Put(b)
		}
	}
	return err
}

// flushLocked writes the held bytes under the write timeout: the frames
// were written into memory, so this is the write that can block on a slow
// client.
func (c *corkConn) flushLocked() error {
	if c.buf == nil || c.buf.Len() == 0 {
		return nil
	}
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := c.Conn.Write(c.buf.Bytes())
	c.Conn.SetWriteDeadline(time.Time{})
	c.buf.Reset()
	return err
}

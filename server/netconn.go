package server

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Buffer sizes of a hijacked connection. net/http hands over 4 KiB for
// reading and 4 KiB for writing, held for the life of the connection:
// most of what an idle connection costs. The reader only needs room for
// frame headers (payloads larger than the buffer are read straight into
// the caller's slice). The writer carries only the WebSocket library's
// control frames (ping, pong, close: at most 2+125 bytes, we never mask),
// and must hold a whole one so that each leaves in a single Write.
const (
	readBufferSize  = 512
	writeBufferSize = 256
)

// upgradeWriter wraps the ResponseWriter of an upgrade so the hijacked
// connection gets small buffers and a shared, locked socket.
type upgradeWriter struct {
	http.ResponseWriter
	conn *rawConn
}

func (u *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(u.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	rc := &rawConn{Conn: nc}
	u.conn = rc
	r := brw.Reader
	if r.Buffered() == 0 {
		// Nothing read ahead: the 4 KiB reader can go. (Bytes a client
		// sent before our 101 must be kept, so then it stays.)
		r = bufio.NewReaderSize(nc, readBufferSize)
	}
	return rc, bufio.NewReadWriter(r, bufio.NewWriterSize(rc, writeBufferSize)), nil
}

// rawConn is the socket under a WebSocket connection, shared by two
// writers: the WebSocket library, which writes control frames (each in one
// Write, see writeBufferSize), and our writer, which frames data messages
// itself and sends a whole batch of them with one send. A mutex keeps the
// two from interleaving mid-frame.
type rawConn struct {
	net.Conn
	mu     sync.Mutex
	sealed bool // a close frame is on its way: no more data frames
}

// errSealed reports a batch dropped because the connection is closing.
var errSealed = errors.New("server: connection is closing")

// Write is the WebSocket library's path (control frames).
func (c *rawConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.Write(p)
}

// send writes b (whole data frames) in one write bounded by timeout.
func (c *rawConn) send(b []byte, timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed {
		return errSealed
	}
	c.Conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.Conn.Write(b)
	c.Conn.SetWriteDeadline(time.Time{})
	return err
}

// seal stops data frames before the close frame is written: nothing may
// follow a close frame.
func (c *rawConn) seal() {
	c.mu.Lock()
	c.sealed = true
	c.mu.Unlock()
}

// appendTextHeader appends the header of an unmasked, final text frame
// with an n-byte payload (RFC 6455 section 5.2).
func appendTextHeader(b []byte, n int) []byte {
	b = append(b, 0x81) // FIN, opcode 1 (text)
	switch {
	case n < 126:
		return append(b, byte(n))
	case n <= 0xFFFF:
		return append(b, 126, byte(n>>8), byte(n))
	}
	return append(b, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

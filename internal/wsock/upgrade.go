package wsock

import (
	"bufio"
	"context"
	"net"
	"net/http"
)

// Upgrade wraps the ResponseWriter of an upgrade handed to the WebSocket
// library's Accept, so the hijacked connection gets small buffers
// (SmallBuffers) and a shared, locked socket (Conn).
type Upgrade struct {
	http.ResponseWriter
	Conn *Conn // set by Hijack
	// Portable gives the Conn no descriptor: it makes no socket call of
	// its own, as on a system without them (Portable, the function), and
	// an in-memory connection (Parkable) does not park either.
	Portable bool
}

// Hijack hijacks the connection and wraps its socket in a Conn.
func (u *Upgrade) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(u.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	var c *Conn
	if u.Portable {
		c = &Conn{Conn: nc}
	} else {
		c = NewConn(nc)
	}
	u.Conn = c
	r, rw := SmallBuffers(nc, brw.Reader, c)
	c.br = r
	return c, rw, nil
}

// OnPong is the WebSocket library's pong callback (pongs it reads while
// it is inside a read).
func (u *Upgrade) OnPong(context.Context, []byte) {
	if u.Conn != nil {
		u.Conn.pong()
	}
}

// Accepted readies the connection once the library's Accept returned.
func (c *Conn) Accepted() {
	if br := c.br; br.Size() == ReadBufferSize && br.Buffered() == 0 {
		// Accept wrapped the reader Hijack made in an io.MultiReader of
		// what it held (nothing: it is fresh) and the socket; reading the
		// socket directly spares every connection those two readers.
		br.Reset(c)
	} else {
		// net/http's reader, kept because the client's first bytes came
		// with the request head (SmallBuffers): Accept moved them into an
		// io.MultiReader in front of the socket, where the read loop,
		// which waits on the socket when the reader's buffer is empty,
		// would not see them. One read takes them all back into the
		// buffer (they came from it) without touching the socket.
		_, _ = br.Peek(1)
	}
}

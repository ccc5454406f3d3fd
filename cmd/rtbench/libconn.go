package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// What a library client costs rtbench per message. Through the WebSocket
// library, rtbench's subscribers and publishers are the load generator
// that every server is compared with (bench/regimes.sh), and on a
// machine of two cores what it spends is taken from the server it
// measures. So the hot loops use the library as cheaply as its API
// allows, for every server alike:
//
//   - a message is read with Conn.Reader into one buffer the connection
//     keeps (msgBuf), not with Conn.Read, which allocates a new slice for
//     every message;
//   - the TCP connection under the library (bufConn) reads what the
//     socket holds, up to its buffer, in one system call, where the
//     library's own 4 KiB reader would make several, and notes when the
//     bytes arrived: one clock reading per read, not one per message;
//   - a publish is written without a context of its own: its bound is a
//     write deadline on the TCP connection, moved at most once a second
//     (libPub.publish), where a context.WithTimeout per write would cost
//     a timer and a callback registration each.
//
// The frames on the wire are the library's, byte for byte.

// msgBuf reads whole data messages into one buffer that it reuses and
// grows to the largest message seen.
type msgBuf struct{ b []byte }

// msgBufStart is a new msgBuf's size: a few messages of the matrix's
// 100-byte payloads; larger ones grow it.
const msgBufStart = 1 << 10

// read reads the next data message of c (the library answers pings and
// close frames meanwhile). The bytes are valid until the next read.
// Errors are the library's, as Conn.Read returns them (a close frame's
// code is in websocket.CloseStatus).
func (m *msgBuf) read(ctx context.Context, c *websocket.Conn) (websocket.MessageType, []byte, error) {
	typ, r, err := c.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	if m.b == nil {
		m.b = make([]byte, msgBufStart)
	}
	n := 0
	for {
		if n == len(m.b) {
			m.b = slices.Grow(m.b, len(m.b))[:2*len(m.b)]
		}
		k, err := r.Read(m.b[n:])
		n += k
		if err == io.EOF { // the library returns io.EOF itself, unwrapped
			return typ, m.b[:n], nil
		}
		if err != nil {
			return 0, nil, err
		}
	}
}

// epoch is the origin of bufConn's arrival times.
var epoch = time.Now()

// bufConn is the TCP connection under a library client's WebSocket.
// Reads are serialised by the library (one reader at a time, its close
// handshake included), so buf needs no lock; at is read by the client's
// goroutine while another may be closing the connection.
type bufConn struct {
	net.Conn
	buf  []byte // unread input is buf[r:w]; nil: reads go straight to the socket
	r, w int
	err  error        // what the read that filled buf returned with its bytes
	at   atomic.Int64 // when the last read of the socket returned bytes, ns since epoch
	// wdl is the write deadline set, ns since epoch (0: none); only the
	// publishing goroutine sets it (libPub.publish).
	wdl int64
}

func (b *bufConn) Read(p []byte) (int, error) {
	if b.r == b.w {
		if b.err != nil {
			err := b.err
			b.err = nil
			return 0, err
		}
		if len(p) >= len(b.buf) {
			n, err := b.Conn.Read(p)
			if n > 0 {
				b.at.Store(int64(time.Since(epoch)))
			}
			return n, err
		}
		n, err := b.Conn.Read(b.buf)
		if n == 0 {
			return 0, err
		}
		b.at.Store(int64(time.Since(epoch)))
		b.r, b.w, b.err = 0, n, err
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// arrived is when the bytes last read from the socket arrived, as an
// offset from base (the run's clock: fanout's timestamps).
func (b *bufConn) arrived(base time.Time) int64 {
	return b.at.Load() - int64(base.Sub(epoch))
}

// writeBound bounds a publish write; writeSlack is how far before it
// runs out the deadline is moved again, so that one deadline serves the
// writes of a second.
const (
	writeBound = 10 * time.Second
	writeSlack = time.Second
)

// bound makes sure the next write fails if it is stuck for about
// writeBound (between writeBound-writeSlack and writeBound); now is ns
// since epoch.
func (b *bufConn) bound(now int64) error {
	if b.wdl-now >= int64(writeBound-writeSlack) {
		return nil
	}
	b.wdl = now + int64(writeBound)
	return b.SetWriteDeadline(epoch.Add(time.Duration(b.wdl)))
}

// unbound clears the write deadline: writes after the run (the close
// handshake) are bounded by their own contexts.
func (b *bufConn) unbound() {
	b.wdl = 0
	b.SetWriteDeadline(time.Time{})
}

type connSlotKey struct{}

// connSlot carries a bufConn out of the HTTP transport that dials it
// (dialer.tcp wraps each connection whose dial context holds a slot).
type connSlot struct {
	size int // read buffer; 0: none
	c    *bufConn
}

// wrapConn is what dialer.tcp returns: c itself, or wrapped in a bufConn
// when the dial context asks for one (dialBuffered).
func wrapConn(ctx context.Context, c net.Conn, err error) (net.Conn, error) {
	slot, _ := ctx.Value(connSlotKey{}).(*connSlot)
	if err != nil || slot == nil {
		return c, err
	}
	bc := &bufConn{Conn: c}
	if slot.size > 0 {
		bc.buf = make([]byte, slot.size)
	}
	slot.c = bc
	return bc, nil
}

// libConn is a library client's connection and the TCP connection under
// it.
type libConn struct {
	ws *websocket.Conn
	nc *bufConn
}

// dialBuffered opens a WebSocket whose TCP connection is a bufConn
// reading up to size bytes at a time.
func (d *dialer) dialBuffered(ctx context.Context, size int) (*libConn, error) {
	slot := &connSlot{size: size}
	c, _, err := d.dial(context.WithValue(ctx, connSlotKey{}, slot))
	if err != nil {
		return nil, err
	}
	if slot.c == nil { // a transport that did not dial through d.tcp
		c.CloseNow()
		return nil, errors.New("dial: no connection of rtbench's own under the WebSocket")
	}
	return &libConn{ws: c, nc: slot.c}, nil
}

// libReadBuf is a library subscriber's read buffer: the server writes up
// to 64 held messages at once (about 14 KiB of the matrix's messages),
// which then arrive in one read.
const libReadBuf = 16 << 10

// libPub is a publisher through the library.
type libPub struct{ *libConn }

func (p libPub) answers(fn func(id uint64, code int, failed bool)) {
	plain := !binaryMode.Load() && !engineIOOn() && !centrifugoOn()
	readMessages(p.ws, func(b []byte) bool {
		if plain {
			if id, code, failed, ok := scanAnswer(b); ok {
				fn(id, code, failed)
				return true
			}
		}
		fs, err := frames(b)
		if err != nil {
			return true
		}
		for _, f := range fs {
			answerOf(f, fn)
		}
		return true
	})
}

// publish writes one request as one message, bounded by the TCP
// connection's write deadline (bufConn.bound); a write that runs into it
// fails as one whose context ran out did.
func (p libPub) publish(_ context.Context, req []byte) error {
	if err := p.nc.bound(int64(time.Since(epoch))); err != nil {
		return err
	}
	if binaryMode.Load() {
		req = toWire(req)
	}
	typ := websocket.MessageText
	if binaryMode.Load() {
		typ = websocket.MessageBinary
	}
	err := p.ws.Write(context.Background(), typ, req)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// done clears the write deadline once the publisher has stopped.
func (p libPub) done() { p.nc.unbound() }

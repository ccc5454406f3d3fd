package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// libServer serves one WebSocket per connection with the library and
// hands it to serve; the connection is closed when serve returns.
func libServer(t *testing.T, serve func(ctx context.Context, c *websocket.Conn)) *dialer {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer c.CloseNow()
		serve(r.Context(), c)
	}))
	t.Cleanup(srv.Close)
	u, err := checkURL("ws" + strings.TrimPrefix(srv.URL, "http") + "/ws")
	if err != nil {
		t.Fatal(err)
	}
	return newDialer(u, nil)
}

// A message is read whole into the reused buffer whatever its size
// against the buffer (and against the TCP connection's read buffer, which
// then cuts frames anywhere), in one frame or in several; pings between
// messages are answered, and the close code at the end is the server's.
func TestMsgBufReadsEveryMessageWhole(t *testing.T) {
	leakcheck.Check(t)
	sizes := []int{0, 1, msgBufStart - 1, msgBufStart, msgBufStart + 1, 3 * msgBufStart, libReadBuf + 7, 70_000, 5}
	msg := func(i, size int) []byte {
		b := bytes.Repeat([]byte{byte('a' + i)}, size)
		if size > 0 {
			b[size-1] = '.' // a message cut short would end in the next one's bytes
		}
		return b
	}
	pinged := make(chan error, 1)
	d := libServer(t, func(ctx context.Context, c *websocket.Conn) {
		ctx = c.CloseRead(ctx) // reads the client's pongs
		for i, size := range sizes {
			if i == 3 {
				// A ping in the middle: answered by the client's read.
				pinged <- c.Ping(ctx)
			}
			b := msg(i, size)
			if i%2 == 1 && size > 2 { // in three frames
				w, err := c.Writer(ctx, websocket.MessageText)
				if err != nil {
					return
				}
				w.Write(b[:size/3])
				w.Write(b[size/3 : size/2])
				w.Write(b[size/2:])
				if w.Close() != nil {
					return
				}
				continue
			}
			if c.Write(ctx, websocket.MessageBinary, b) != nil {
				return
			}
		}
		c.Close(4001, "bye")
	})
	for _, readBuf := range []int{0, 64, libReadBuf} {
		c, err := d.dialBuffered(testCtx(t), readBuf)
		if err != nil {
			t.Fatal(err)
		}
		var m msgBuf
		var last int64
		for i, size := range sizes {
			typ, b, err := m.read(testCtx(t), c.ws)
			if err != nil {
				t.Fatalf("read buffer %d, message %d: %v", readBuf, i, err)
			}
			if !bytes.Equal(b, msg(i, size)) {
				t.Fatalf("read buffer %d, message %d: %d bytes, want %d", readBuf, i, len(b), size)
			}
			want := websocket.MessageBinary
			if i%2 == 1 && size > 2 {
				want = websocket.MessageText
			}
			if typ != want {
				t.Fatalf("read buffer %d, message %d: type %v, want %v", readBuf, i, typ, want)
			}
			at := c.nc.at.Load()
			if at <= 0 || at < last {
				t.Fatalf("read buffer %d, message %d: arrived at %d after %d", readBuf, i, at, last)
			}
			last = at
		}
		if err := <-pinged; err != nil {
			t.Fatalf("read buffer %d: server's ping: %v", readBuf, err)
		}
		_, _, err = m.read(testCtx(t), c.ws)
		if got := websocket.CloseStatus(err); got != 4001 {
			t.Fatalf("read buffer %d: after the last message: %v (close status %d), want 4001", readBuf, err, got)
		}
		if cap(m.b) < 70_000 {
			t.Errorf("read buffer %d: message buffer %d bytes, want grown to the largest message", readBuf, cap(m.b))
		}
		c.ws.CloseNow()
	}
}

// A message over the read limit fails the read as Conn.Read does.
func TestMsgBufReadLimit(t *testing.T) {
	leakcheck.Check(t)
	d := libServer(t, func(ctx context.Context, c *websocket.Conn) {
		c.Write(ctx, websocket.MessageText, make([]byte, 100))
		c.Read(ctx) // until the client closes
	})
	c, err := d.dialBuffered(testCtx(t), libReadBuf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.ws.CloseNow()
	c.ws.SetReadLimit(99)
	var m msgBuf
	if _, _, err := m.read(testCtx(t), c.ws); !errors.Is(err, websocket.ErrMessageTooBig) {
		t.Fatalf("read: %v, want ErrMessageTooBig", err)
	}
}

// The write deadline moves only when it is within writeSlack of running
// out, and then to writeBound ahead.
func TestBufConnBound(t *testing.T) {
	s := int64(time.Second)
	steps := []struct {
		now, want int64
	}{
		{5 * s, 15 * s},                    // none yet
		{5*s + s/2, 15 * s},                // 9.5 s left: kept
		{6 * s, 15 * s},                    // exactly writeBound-writeSlack left: kept
		{6*s + 1, 16*s + 1},                // less: moved
		{20 * s, 30 * s},                   // run out: moved
		{20*s + int64(writeSlack), 30 * s}, // kept
	}
	d := libServer(t, func(ctx context.Context, c *websocket.Conn) { c.Read(ctx) })
	c, err := d.dialBuffered(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.ws.CloseNow()
	for _, st := range steps {
		if err := c.nc.bound(st.now); err != nil {
			t.Fatal(err)
		}
		if c.nc.wdl != st.want {
			t.Errorf("bound(%v): deadline %v, want %v", time.Duration(st.now), time.Duration(c.nc.wdl), time.Duration(st.want))
		}
	}
	c.nc.unbound()
	if c.nc.wdl != 0 {
		t.Errorf("unbound: deadline %v", time.Duration(c.nc.wdl))
	}
}

// A publish whose write runs into the deadline fails as a timeout, as one
// whose context ran out did.
func TestLibPubWriteDeadlineIsATimeout(t *testing.T) {
	leakcheck.Check(t)
	d := libServer(t, func(ctx context.Context, c *websocket.Conn) { c.Read(ctx) })
	c, err := d.dialBuffered(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.ws.CloseNow()
	p := libPub{c}
	c.nc.wdl = int64(time.Since(epoch) + time.Hour) // bound keeps it
	c.nc.SetWriteDeadline(time.Now().Add(-time.Second))
	err = p.publish(testCtx(t), []byte(`{}`))
	if !errors.Is(err, context.DeadlineExceeded) || errKind(err) != "timeout" {
		t.Fatalf("publish past the deadline: %v (kind %q), want a timeout", err, errKind(err))
	}
}

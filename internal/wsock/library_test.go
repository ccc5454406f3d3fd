package wsock

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// recorder is a hijacked connection that records what the WebSocket
// library does with it.
type recorder struct {
	net.Conn
	mu        sync.Mutex
	writes    [][]byte
	reads     int
	deadlines int
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, append([]byte(nil), p...))
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recorder) Read(p []byte) (int, error) {
	r.mu.Lock()
	r.reads++
	r.mu.Unlock()
	return r.Conn.Read(p)
}

func (r *recorder) SetDeadline(t time.Time) error     { r.deadline(); return r.Conn.SetDeadline(t) }
func (r *recorder) SetReadDeadline(t time.Time) error { r.deadline(); return r.Conn.SetReadDeadline(t) }
func (r *recorder) SetWriteDeadline(t time.Time) error {
	r.deadline()
	return r.Conn.SetWriteDeadline(t)
}
func (r *recorder) deadline() { r.mu.Lock(); r.deadlines++; r.mu.Unlock() }

// hijacker hands the library a recorder on small buffers, as the server
// does.
type hijacker struct {
	http.ResponseWriter
	rec *recorder
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.rec = &recorder{Conn: nc}
	_, rw := SmallBuffers(nc, brw.Reader, h.rec)
	return h.rec, rw, nil
}

// upgraded is one server-side connection accepted by the library over a
// recorder, and its client.
type upgraded struct {
	server *websocket.Conn
	rec    *recorder
	client *websocket.Conn
}

func upgrade(t *testing.T) upgraded {
	t.Helper()
	got := make(chan upgraded, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := &hijacker{ResponseWriter: w}
		ws, err := websocket.Accept(h, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		got <- upgraded{server: ws, rec: h.rec}
	}))
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	client.SetReadLimit(1 << 20)
	u := <-got
	u.client = client
	t.Cleanup(func() { client.CloseNow(); u.server.CloseNow() })
	return u
}

// Frames we write beneath the library, unmasked, are read by a
// coder/websocket peer as what they encode: text messages of every header
// size, a ping it answers with a pong we can parse, and a close frame
// with its code and reason.
func TestFramesWeWriteAreReadByTheLibrary(t *testing.T) {
	leakcheck.Check(t)
	u := upgrade(t)
	sizes := []int{0, 1, 125, 126, 127, 65535, 65536, 70000}
	go func() {
		for _, n := range sizes {
			f := AppendTextHeader(nil, n)
			if len(TextPayload(append(f, make([]byte, n)...))) != n {
				t.Errorf("TextPayload of a %d-byte frame is wrong", n)
			}
			if _, err := u.rec.Conn.Write(append(f, strings.Repeat("x", n)...)); err != nil {
				t.Errorf("write: %v", err)
			}
		}
	}()
	ctx := context.Background()
	for _, n := range sizes {
		typ, b, err := u.client.Read(ctx)
		if err != nil || typ != websocket.MessageText || len(b) != n {
			t.Fatalf("want a %d-byte text message: %v %d %v", n, typ, len(b), err)
		}
	}

	// A ping: the client answers with a pong while it reads.
	if _, err := u.rec.Conn.Write(PingFrame); err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() { _, _, err := u.client.Read(ctx); readErr <- err }()
	head := make([]byte, 6)
	if _, err := u.rec.Conn.Read(head); err != nil {
		t.Fatal(err)
	}
	if head[0] != PongHead || head[1] != 0x80 { // masked, empty: 2+4 bytes
		t.Fatalf("the client's pong % x, want an empty masked pong", head)
	}

	// A close frame ends the client's read with its code and reason.
	if _, err := u.rec.Conn.Write(CloseFrame(uint16(websocket.StatusGoingAway), "bye")); err != nil {
		t.Fatal(err)
	}
	var ce websocket.CloseError
	if err := <-readErr; !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway || ce.Reason != "bye" {
		t.Fatalf("client read ended with %v, want close 1001 bye", err)
	}
	if CloseFrame(1000, strings.Repeat("r", 200))[0] != CloseHead || len(CloseFrame(1000, strings.Repeat("r", 200))) != 2+125 {
		t.Fatal("a close frame's payload must be cut to 125 bytes")
	}
}

// As a server, the library writes each control frame (a pong, a close) in
// one Write on the connection it got from Hijack, unmasked, starting with
// the frame's head; it reads the client through that connection; and it
// sets no deadline on it.
func TestLibraryWritesEachControlFrameInOneWrite(t *testing.T) {
	leakcheck.Check(t)
	u := upgrade(t)
	ctx := context.Background()
	serverRead := make(chan error, 1)
	go func() { _, _, err := u.server.Read(ctx); serverRead <- err }()
	closed := make(chan error, 1) // the client reads (and so sees its pong) until the close
	go func() { _, _, err := u.client.Read(ctx); closed <- err }()
	// The client's ping is answered by the server library, inside its read.
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := u.client.Ping(pingCtx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := u.client.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := <-serverRead; err != nil {
		t.Fatal(err)
	}
	reason := strings.Repeat("r", 123) // the longest close frame: 2+125 bytes
	if err := u.server.Close(websocket.StatusNormalClosure, reason); err != nil {
		t.Fatal(err)
	}
	<-closed

	u.rec.mu.Lock()
	defer u.rec.mu.Unlock()
	var heads []byte
	for _, w := range u.rec.writes {
		if len(w) < 2 || w[1]&0x80 != 0 || nextFrame(w, 0) != len(w) {
			t.Fatalf("a library write is not one whole unmasked frame: % x", w[:min(len(w), 16)])
		}
		heads = append(heads, w[0])
	}
	if string(heads) != string([]byte{PongHead, CloseHead}) {
		t.Fatalf("library writes started % x, want a pong then a close", heads)
	}
	if u.rec.reads == 0 {
		t.Fatal("the library read the client without going through the hijacked connection")
	}
	if u.rec.deadlines != 0 {
		t.Fatalf("the library set %d deadlines on the connection", u.rec.deadlines)
	}
}

// net/http's Hijack hands over the bytes a client sent right after the
// request head in the reader it returns; SmallBuffers keeps that reader,
// and replaces an empty one by a small one.
func TestHijackHandsOverBytesSentAfterTheHead(t *testing.T) {
	leakcheck.Check(t)
	type seen struct {
		size, buffered int
		ahead          string
	}
	got := make(chan seen, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer nc.Close()
		br, _ := SmallBuffers(nc, brw.Reader, nc)
		s := seen{size: br.Size(), buffered: br.Buffered()}
		b, _ := br.Peek(br.Buffered())
		s.ahead = string(b)
		got <- s
	}))
	defer hs.Close()
	for _, ahead := range []string{"", "EARLY"} {
		c, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + ahead)); err != nil {
			t.Fatal(err)
		}
		s := <-got
		c.Close()
		if s.buffered != len(ahead) || s.ahead != ahead {
			t.Fatalf("sent %q after the head; the hijacked reader holds %d bytes %q", ahead, s.buffered, s.ahead)
		}
		if ahead == "" && s.size != ReadBufferSize {
			t.Fatalf("an empty hijacked reader was not replaced by a small one (size %d)", s.size)
		}
		if ahead != "" && s.size == ReadBufferSize {
			t.Fatal("a hijacked reader holding early bytes was replaced")
		}
	}
}

package handshake

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wsock"
)

// handle makes GET /ws?query (any query) run f.
func (e *doorEnv) handle(f http.HandlerFunc) { e.special.Store(&f) }

// headFor is upgradeHead for /ws?query.
func headFor(query string) string { return strings.Replace(upgradeHead, "/ws", "/ws?"+query, 1) }

// The door serves a well-formed upgrade itself: the WebSocket works, and
// net/http never sees the connection. Other requests still go to net/http.
func TestServingDoorUpgradesWithoutNetHTTP(t *testing.T) {
	leakcheck.Check(t)
	e := startDoorWith(t, DefaultConfig(), 10*time.Second, maxPeekers, true)

	c, _, err := websocket.Dial(t.Context(), "ws://"+e.addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.event(t, "peek")
	e.event(t, "serve")
	if _, msg, err := c.Read(t.Context()); err != nil || string(msg) != "hi" {
		t.Fatalf("read %q, %v", msg, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
	<-e.ended
	if n := e.netHTTPConns.Load(); n != 0 {
		t.Fatalf("net/http saw %d connections, want 0", n)
	}

	h := e.raw(t)
	write(t, h, healthHead)
	e.event(t, "peek")
	e.event(t, "pass")
	resp, body := readResp(t, h)
	if resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}
	if n := e.netHTTPConns.Load(); n != 1 {
		t.Fatalf("net/http saw %d connections, want 1", n)
	}
	assertIdle(t, e.g, e.m)
}

// A refused upgrade the door serves is a complete HTTP/1.1 response: the
// handler's status, headers and body, a Content-Length, Connection: close,
// then the end of the stream.
func TestServingDoorRefusalIsACompleteResponse(t *testing.T) {
	leakcheck.Check(t)
	e := startDoorWith(t, DefaultConfig(), 10*time.Second, maxPeekers, true)
	e.handle(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "silent" {
			return
		}
		w.Header().Set("X-Why", "line\r\nbreak")
		w.Header().Set("Connection", "keep-alive") // not ours to keep
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})

	c := e.raw(t)
	write(t, c, headFor("refuse"))
	e.event(t, "peek")
	e.event(t, "serve")
	resp, body := readResp(t, c)
	if resp.StatusCode != http.StatusUnauthorized || string(body) != "unauthorized\n" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if resp.ContentLength != int64(len(body)) || !resp.Close {
		t.Fatalf("Content-Length %d, close %v", resp.ContentLength, resp.Close)
	}
	if got := resp.Header.Get("X-Why"); got != "line break" {
		t.Fatalf("X-Why %q", got)
	}
	if resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || resp.Header.Get("Date") == "" {
		t.Fatalf("header %v", resp.Header)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the response: %d bytes, %v; want EOF", n, err)
	}

	// A handler that writes nothing answers 200 with an empty body.
	c = e.raw(t)
	write(t, c, headFor("silent"))
	e.event(t, "peek")
	e.event(t, "serve")
	resp, body = readResp(t, c)
	if resp.StatusCode != 200 || len(body) != 0 || resp.ContentLength != 0 {
		t.Fatalf("%d %q %d", resp.StatusCode, body, resp.ContentLength)
	}
	if e.netHTTPConns.Load() != 0 {
		t.Fatal("net/http served a request the door should have")
	}
}

// A long body streams after the head and ends with the connection.
func TestServingDoorStreamsLongBody(t *testing.T) {
	leakcheck.Check(t)
	e := startDoorWith(t, DefaultConfig(), 10*time.Second, maxPeekers, true)
	long := bytes.Repeat([]byte("0123456789abcdef"), 3*wsock.ResponseBufferLimit/16)
	e.handle(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(long[:100])
		w.Write(long[100:])
	})
	c := e.raw(t)
	write(t, c, headFor("long"))
	resp, body := readResp(t, c)
	if resp.StatusCode != 200 || !bytes.Equal(body, long) || resp.ContentLength != -1 || !resp.Close {
		t.Fatalf("%d, %d bytes, Content-Length %d, close %v", resp.StatusCode, len(body), resp.ContentLength, resp.Close)
	}
}

// The context of a request the door serves ends when the client goes
// away: an upgrade waiting in the pacing queue gives its place up.
func TestServingDoorContextEndsWhenClientLeaves(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the door watches sockets on Linux only")
	}
	leakcheck.Check(t)
	e := startDoorWith(t, DefaultConfig(), 10*time.Second, maxPeekers, true)
	waiting, ended := make(chan struct{}), make(chan error, 1)
	e.handle(func(w http.ResponseWriter, r *http.Request) {
		done := r.Context().Done()
		close(waiting)
		<-done
		ended <- r.Context().Err()
	})
	c := e.raw(t)
	write(t, c, headFor("wait"))
	<-waiting
	c.Close()
	if err := <-ended; err != context.Canceled {
		t.Fatalf("Err %v, want context.Canceled", err)
	}
}

// Bytes a client sends before the 101 neither end the context nor get
// lost: after Hijack they are read from the socket.
func TestServingDoorKeepsEarlyBytes(t *testing.T) {
	leakcheck.Check(t)
	e := startDoorWith(t, DefaultConfig(), 10*time.Second, maxPeekers, true)
	waiting, sent := make(chan struct{}), make(chan struct{})
	type result struct {
		got string
		err error
	}
	res := make(chan result, 1)
	e.handle(func(w http.ResponseWriter, r *http.Request) {
		_ = r.Context().Done() // starts the watch
		close(waiting)
		<-sent
		w.WriteHeader(http.StatusSwitchingProtocols)
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer nc.Close()
		if brw.Reader.Buffered() != 0 {
			res <- result{err: io.ErrUnexpectedEOF}
			return
		}
		b := make([]byte, 5)
		_, err = io.ReadFull(nc, b)
		if err == nil {
			err = r.Context().Err()
		}
		res <- result{string(b), err}
	})
	c := e.raw(t)
	write(t, c, headFor("early"))
	<-waiting
	write(t, c, "early")
	close(sent)
	r := <-res
	if r.err != nil || r.got != "early" {
		t.Fatalf("after Hijack: %q, %v", r.got, r.err)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 101 Switching Protocols\r\n" {
		t.Fatalf("status line %q, %v", line, err)
	}
}

// A panicking handler closes its connection, is logged, and the door goes
// on serving.
func TestServingDoorRecoversPanic(t *testing.T) {
	leakcheck.Check(t)
	logged := &testkit.LogBuffer{}
	e := startDoorWith(t, DefaultConfig(), 10*time.Second, maxPeekers, true, slog.New(slog.NewTextHandler(logged, nil)))
	e.handle(func(http.ResponseWriter, *http.Request) { panic("boom") })
	c := e.raw(t)
	write(t, c, headFor("panic"))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("after a panic: %d bytes, %v", n, err)
	}
	defer e.dialHeld(t)()
	if !strings.Contains(logged.String(), "boom") {
		t.Fatalf("log %q", logged.String())
	}
}

// Once its head is in, a served upgrade no longer counts against the
// peeker bound: with a bound of 1, an upgrade waiting in its handler does
// not send the next connection past the door.
func TestServingDoorServedUpgradeLeavesPeekerBound(t *testing.T) {
	leakcheck.Check(t)
	e := startDoorWith(t, DefaultConfig(), 10*time.Second, 1, true)
	hold := make(chan struct{})
	e.hold.Store(&hold)
	c := e.raw(t)
	write(t, c, upgradeHead)
	e.event(t, "peek")
	e.event(t, "serve")
	<-e.admitd // held in the handler
	e.hold.Store(nil)
	defer e.dialHeld(t)()
	e.event(t, "peek")
	e.event(t, "serve")
	close(hold)
	if e.netHTTPConns.Load() != 0 {
		t.Fatal("the second upgrade went to net/http")
	}
	c.Close()
	<-e.ended
}

// A door given more paths serves and sheds GET on each as on the first
// (an event stream's head arriving in two pieces included), and still
// hands other methods on them to net/http.
func TestServingDoorMorePaths(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDoorOn(t, cfg, 10*time.Second, maxPeekers, true, []string{"/ws", "/sse"})

	c := e.raw(t)
	write(t, c, streamHead[:6]) // "GET /s": not /ws, and not yet known to be /sse
	e.event(t, "peek")
	write(t, c, streamHead[6:])
	e.event(t, "serve")
	got := make([]byte, len(sseHead))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != sseHead {
		t.Fatalf("stream: %q, %v", got, err)
	}
	if n := e.netHTTPConns.Load(); n != 0 {
		t.Fatalf("net/http saw %d connections, want 0", n)
	}

	// The stream holds the one connection: the next is shed at the door.
	s := e.raw(t)
	write(t, s, streamHead)
	checkDoorShed(t, s)
	e.event(t, "peek")
	e.event(t, "shed")
	if got := rejected(e.m, "max_connections"); got != 1 || e.handled.Load() != 1 {
		t.Fatalf("max_connections = %v, handled %d; want 1, 1", got, e.handled.Load())
	}

	p := e.raw(t)
	write(t, p, "POST /sse HTTP/1.1\r\nHost: rt.example.com\r\nContent-Length: 2\r\n\r\n{}")
	e.event(t, "peek")
	e.event(t, "pass")
	if resp, body := readResp(t, p); resp.StatusCode != 200 || string(body) != "posted" {
		t.Fatalf("POST /sse: %d %q", resp.StatusCode, body)
	}
	if n := e.netHTTPConns.Load(); n != 1 {
		t.Fatalf("net/http saw %d connections, want 1", n)
	}

	c.Close()
	<-e.ended
	assertIdle(t, e.g, e.m)
}

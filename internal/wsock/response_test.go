package wsock

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"weak"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// A server may keep a hijacked request's context for its values as long
// as the connection is open: the context must not keep the response (and
// its head) alive, or every open connection keeps its handshake's
// headers.
func TestHijackedRequestContextLetsTheResponseGo(t *testing.T) {
	a, b := net.Pipe()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(io.Discard, b) // the client side: takes the 101
	}()
	defer func() { a.Close(); b.Close(); <-copied }()
	ctx, resp := hijackedResponse(t, a)
	runtime.GC()
	if resp.Value() != nil {
		t.Fatal("the response is still reachable from its request's context")
	}
	if ctx.Value(http.LocalAddrContextKey) == nil {
		t.Fatal("the context lost its value")
	}
}

// hijackedResponse serves a 101 on c and returns the request's context
// and a weak pointer to the finished response.
func hijackedResponse(t *testing.T, c net.Conn) (context.Context, weak.Pointer[Response]) {
	w := NewResponse(c)
	w.Header().Set("Upgrade", "websocket")
	w.WriteHeader(http.StatusSwitchingProtocols)
	if _, _, err := w.Hijack(); err != nil {
		t.Fatal(err)
	}
	w.Finish()
	return w.Context(), weak.Make(w)
}

// What Response writes is read by net/http's client as the response it
// means: a 101 whose socket is handed over with nothing after the head,
// and a refusal that is complete (Content-Length) and closes.
func TestResponseHeadsAreWhatNetHTTPReads(t *testing.T) {
	leakcheck.Check(t)
	t.Run("upgrade", func(t *testing.T) {
		server, client := pair(t)
		w := NewResponse(server)
		w.Header().Set("Upgrade", "websocket")
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("X-Bad\r\nName", "dropped")
		w.Header().Set("X-Folded", "a\r\nb")
		w.WriteHeader(http.StatusSwitchingProtocols)
		nc, brw, err := w.Hijack()
		if err != nil || nc != server || brw.Reader.Buffered() != 0 {
			t.Fatalf("Hijack: %v, %v, %d buffered", err, nc == server, brw.Reader.Buffered())
		}
		if _, err := nc.Write([]byte("after")); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(client)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "websocket" ||
			resp.Header.Get("X-Folded") != "a b" || len(resp.Header) != 3 {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
		rest := make([]byte, 5)
		if _, err := io.ReadFull(r, rest); err != nil || string(rest) != "after" {
			t.Fatalf("after the head: %q, %v", rest, err)
		}
		w.Finish() // a no-op once hijacked: the socket stays open
		if _, err := server.Write([]byte("x")); err != nil {
			t.Fatalf("Finish closed a hijacked socket: %v", err)
		}
	})
	t.Run("refusal", func(t *testing.T) {
		server, client := pair(t)
		w := NewResponse(server)
		w.Header().Set("Connection", "keep-alive") // net/http overrides it too
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, "no")
		w.Finish()
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != "no" || resp.StatusCode != 403 || resp.ContentLength != 2 || !resp.Close ||
			resp.Header.Get("Date") == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("%d %v %q %v", resp.StatusCode, resp.Header, body, err)
		}
	})
}

// The request's context ends when the client goes away while the
// response is under way, and a watch that ran is stopped by Finish.
func TestResponseContextEndsWhenClientLeaves(t *testing.T) {
	leakcheck.Check(t)
	server, client := pair(t)
	w := NewResponse(server)
	ctx := w.Context()
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
	client.Close()
	<-ctx.Done()
	if ctx.Err() != context.Canceled {
		t.Fatal(ctx.Err())
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Finish()
}

// Gone tells, without waiting and without a goroutine, that the client
// of a request not yet answered has gone, and ends its context; bytes the
// client sent are not an end, and nothing is consumed. Once the response
// is handed on (Hijack) it says no, whatever the client does.
func TestResponseContextGone(t *testing.T) {
	if !native {
		t.Skip("no descriptor calls here")
	}
	leakcheck.Check(t)
	server, client := pair(t)
	w := NewResponse(server)
	x := w.Context()
	probe := x.(interface{ Gone() bool })
	if probe.Gone() {
		t.Fatal("gone while the client is there")
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if probe.Gone() {
		t.Fatal("gone after the client sent a byte")
	}
	client.Close()
	if probe.Gone() {
		t.Fatal("gone with a byte still unread before the end")
	}
	var b [1]byte
	if n, err := server.Read(b[:]); n != 1 || err != nil {
		t.Fatalf("the byte was consumed: %d, %v", n, err)
	}
	if n := awaitReadable(t, Descriptor(server), b[:]); n != 0 {
		t.Fatalf("%d more bytes before the end", n)
	}
	if !probe.Gone() || x.Err() != context.Canceled {
		t.Fatalf("after the client left: gone false or Err %v", x.Err())
	}
	select {
	case <-x.Done():
	default:
		t.Fatal("Done is not closed")
	}
	w.Finish()

	server, client = pair(t)
	w = NewResponse(server)
	probe = w.Context().(interface{ Gone() bool })
	w.WriteHeader(http.StatusSwitchingProtocols)
	nc, _, err := w.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client.Close()
	if probe.Gone() || w.Context().Err() != nil {
		t.Fatal("a hijacked response's context ended")
	}
}

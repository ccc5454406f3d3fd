package handshake

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// A server may keep a hijacked request's context for its values, and that
// context lives in the response: once the handler has returned, the
// response's head and body must be let go, or every open connection
// keeps its handshake's headers.
func TestHijackedResponseLetsItsHeadGo(t *testing.T) {
	a, b := net.Pipe()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(io.Discard, b) // the client side: takes the 101
	}()
	defer func() { a.Close(); b.Close(); <-copied }()
	w := &doorResponse{c: a}
	w.ctx.c = a
	w.Header().Set("Upgrade", "websocket")
	w.WriteHeader(http.StatusSwitchingProtocols)
	if _, _, err := w.Hijack(); err != nil {
		t.Fatal(err)
	}
	w.finish()
	if w.header != nil || w.body != nil {
		t.Fatalf("after the handler returned: header %v, body %q still held", w.header, w.body)
	}
}

package handshake

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"weak"
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

// hijackedResponse serves a 101 on c, as the door does, and returns the
// request's context and a weak pointer to the finished response.
func hijackedResponse(t *testing.T, c net.Conn) (context.Context, weak.Pointer[doorResponse]) {
	w := &doorResponse{c: c, ctx: &goneContext{c: c}}
	w.Header().Set("Upgrade", "websocket")
	w.WriteHeader(http.StatusSwitchingProtocols)
	if _, _, err := w.Hijack(); err != nil {
		t.Fatal(err)
	}
	w.finish()
	return w.ctx, weak.Make(w)
}

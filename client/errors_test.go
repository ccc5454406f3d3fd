package client

import (
	"context"
	"net/http"
	"testing"
)

func TestPermanent(t *testing.T) {
	tests := []struct {
		give error
		want bool
	}{
		{&HandshakeError{Status: 401}, true},
		{&HandshakeError{Status: 403}, true},
		{&HandshakeError{Status: 404}, true},
		{&HandshakeError{Status: 429}, false},
		{&HandshakeError{Status: 503}, false},
		{&CloseError{Code: 1008}, true},
		{&CloseError{Code: 1003}, true},
		{&CloseError{Code: 1009}, true},
		{&CloseError{Code: 1011}, false},
		{&CloseError{Code: 1012}, false},
		{&CloseError{Code: 1013}, false},
		{wrapCause(ErrDisconnected, &CloseError{Code: 1008}), true},
		{http.ErrServerClosed, false},
	}
	for _, tt := range tests {
		if got := permanent(tt.give); got != tt.want {
			t.Errorf("permanent(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// FuzzHandleFrame: server frames are untrusted bytes; none may panic.
func FuzzHandleFrame(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"x","data":{"retryAfterMs":5}}}`,
		`[{"jsonrpc":"2.0","method":"message","params":{"topic":"a","data":1}},{"jsonrpc":"2.0","id":1,"result":{}}]`,
		`{"jsonrpc":"2.0","method":"system","params":{"event":"draining","reconnectAfterMs":100}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
		`[`, `[1,"x",null]`, `{"method":"message","params":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &Client{opts: (*Options)(nil).withDefaults(), deliver: make(chan delivery, deliverBuffer)}
		c.ctx, c.cancel = context.WithCancel(context.Background())
		defer c.cancel()
		cn := &conn{pending: map[uint64]chan response{1: make(chan response, 1), 2: make(chan response, 1)}}
		drained := make(chan struct{})
		go func() {
			for range c.deliver {
			}
			close(drained)
		}()
		c.handleFrame(cn, b)
		close(c.deliver)
		<-drained
	})
}

package client

import (
	"context"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfterMs(t *testing.T) {
	tests := []struct {
		give string
		want time.Duration
	}{
		{"retry_after_ms=300", 300 * time.Millisecond},
		{"draining retry_after_ms=1500 bye", 1500 * time.Millisecond},
		{"retry_after_ms=", 0},
		{"retry_after_ms=-5", 0},
		{"retry_after_ms=0", 0},
		{"retry_after_ms=99999999999999999999", 0},
		{"retry_after_ms=999999999", maxHint},
		{"", 0},
		{"slow consumer", 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfterMs(tt.give); got != tt.want {
			t.Errorf("parseRetryAfterMs(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestParseRetryAfterHeader(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		give string
		want time.Duration
	}{
		{"2", 2 * time.Second},
		{" 1 ", time.Second},
		{"0", 0},
		{"-1", 0},
		{"soon", 0},
		{"", 0},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"86400", maxHint},
	}
	for _, tt := range tests {
		if got := parseRetryAfterHeader(tt.give, now); got != tt.want {
			t.Errorf("parseRetryAfterHeader(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

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

// FuzzParseRetryAfterMs: close reasons are untrusted bytes.
func FuzzParseRetryAfterMs(f *testing.F) {
	for _, s := range []string{"retry_after_ms=300", "retry_after_ms=", "x retry_after_ms=1e9", "retry_after_ms=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d := parseRetryAfterMs(s); d < 0 || d > maxHint {
			t.Fatalf("parseRetryAfterMs(%q) = %v", s, d)
		}
	})
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

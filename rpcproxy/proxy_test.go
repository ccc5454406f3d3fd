package rpcproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver/protocol"
	"github.com/rtserver/rtserver/server"
)

func TestProxyRelaysAndFailsClosed(t *testing.T) {
	// The handler of a timed-out call may still run when the next call's
	// starts: what they saw is kept under a lock.
	var mu sync.Mutex
	var gotHeader http.Header
	var gotBody string
	seen := func() (http.Header, string) {
		mu.Lock()
		defer mu.Unlock()
		return gotHeader, gotBody
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body := string(b)
		mu.Lock()
		gotHeader, gotBody = r.Header.Clone(), body
		mu.Unlock()
		switch {
		case strings.Contains(body, `"ok"`):
			w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"n":1}}`))
		case strings.Contains(body, `"denied"`):
			w.Write([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32003,"message":"no","data":{"why":"x"}}}`))
		case strings.Contains(body, `"status"`):
			w.WriteHeader(http.StatusBadGateway)
		case strings.Contains(body, `"noresult"`):
			w.Write([]byte(`{"jsonrpc":"2.0","id":1}`))
		case strings.Contains(body, `"big"`):
			w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":"` + strings.Repeat("x", 2048) + `"}`))
		case strings.Contains(body, `"slow"`):
			<-r.Context().Done()
		}
	}))
	defer backend.Close()
	h, err := New(Config{URL: backend.URL, Timeout: 200 * time.Millisecond, maxResponseBytes: 1024}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	call := func(method string) (any, error) {
		raw := `{"jsonrpc":"2.0","id":1,"method":"` + method + `"}`
		return h(context.Background(), &server.Request{Method: method, ID: json.RawMessage("1"), Raw: json.RawMessage(raw), User: "u1", IP: "10.0.0.1", ConnID: 7})
	}

	v, err := call("ok")
	if err != nil || string(v.(json.RawMessage)) != `{"n":1}` {
		t.Fatalf("ok: %v %v", v, err)
	}
	header, body := seen()
	if header.Get(HeaderUser) != "u1" || header.Get(HeaderConn) != "7" || header.Get(HeaderClientIP) != "10.0.0.1" {
		t.Fatalf("identity headers %v", header)
	}
	if !strings.Contains(body, `"method":"ok"`) {
		t.Fatalf("the request was not forwarded as sent: %s", body)
	}

	_, err = call("denied")
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeForbidden || pe.Message != "no" || string(pe.Data.(json.RawMessage)) != `{"why":"x"}` {
		t.Fatalf("backend error not relayed as is: %v", err)
	}
	for _, m := range []string{"status", "noresult", "big", "slow"} {
		_, err := call(m)
		if !errors.As(err, &pe) || pe.Code != protocol.CodeUpstream {
			t.Fatalf("%s: %v, want -32005", m, err)
		}
	}
	// A notification is forwarded and its answer ignored.
	if v, err := h(context.Background(), &server.Request{Method: "ok", Params: json.RawMessage(`[1]`)}); v != nil || err != nil {
		t.Fatalf("notification: %v %v", v, err)
	}
	if _, body := seen(); !strings.Contains(body, `"params":[1]`) || strings.Contains(body, `"id"`) {
		t.Fatalf("rebuilt notification body %s", body)
	}
}

func TestNewNeedsURL(t *testing.T) {
	if _, err := New(Config{}, Deps{}); err == nil {
		t.Fatal("a proxy without a URL was built")
	}
}

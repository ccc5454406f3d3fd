package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// backend is a real HTTP JSON-RPC backend for the RPC proxy.
type backend struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
	release chan struct{} // closed to let "block" calls return
}

func newBackend(t testing.TB) *backend {
	b := &backend{release: make(chan struct{})}
	b.Server = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(func() {
		b.unblock()
		b.Close()
	})
	return b
}

func (b *backend) unblock() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad request", 400)
		return
	}
	b.mu.Lock()
	b.headers = append(b.headers, r.Header.Clone())
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	reply := func(v string) { w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,` + v + `}`)) }
	switch req.Method {
	case "nope":
		reply(`"error":{"code":-32601,"message":"method not found"}`)
	case "forbid":
		reply(`"error":{"code":-32003,"message":"FORBIDDEN","data":{"why":"not yours"}}`)
	case "broken":
		http.Error(w, "backend exploded", http.StatusInternalServerError)
	case "garbage":
		w.Write([]byte("<html>not json</html>"))
	case "huge":
		reply(`"result":"` + string(make([]byte, 0)) + stringOf('x', 2<<20) + `"`)
	case "block":
		select {
		case <-b.release:
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		reply(`"result":{}`)
	default:
		reply(`"result":{"method":"` + req.Method + `","params":` + orNull(req.Params) + `,"user":"` + r.Header.Get("X-Rtserver-User") + `"}`)
	}
}

func orNull(p json.RawMessage) string {
	if p == nil {
		return "null"
	}
	return string(p)
}

func stringOf(c byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

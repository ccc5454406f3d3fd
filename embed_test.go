package rtserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/leakcheck"
)

// Handler mounted without starting the node refuses every request with
// ErrNotStarted's text: no /readyz 200 while nothing runs behind it.
func TestHandlerRefusesUntilStarted(t *testing.T) {
	leakcheck.Check(t)
	node, err := rtserver.New(quietConfig(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	for _, path := range []string{"/readyz", "/healthz", "/ws", "/metrics"} {
		w := httptest.NewRecorder()
		node.Handler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), rtserver.ErrNotStarted.Error()) {
			t.Errorf("GET %s before Start: %d %q, want 503 with %q", path, w.Code, w.Body.String(), rtserver.ErrNotStarted)
		}
	}
}

// The embedding path: the program's own mux (the node under /rt/, a page
// of its own beside it), its own TLS, its own middleware; Start runs the
// parts without a listener of the node's own, a client publishes and
// receives through it, and Shutdown stops it.
func TestEmbeddingOwnMuxTLSMiddleware(t *testing.T) {
	leakcheck.Check(t)
	cfg := quietConfig()
	node, err := rtserver.New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/rt/", http.StripPrefix("/rt", node.Handler()))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "home") })
	// The program's middleware: counts and tags every request, and wraps
	// the ResponseWriter as logging middleware does (with Unwrap, as
	// docs/embedding.md asks, so that upgrades reach the connection).
	var seen atomic.Int64
	withMiddleware := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		w.Header().Set("X-App", "1")
		mux.ServeHTTP(&statusWriter{ResponseWriter: w}, r)
	})
	srv := httptest.NewUnstartedServer(withMiddleware)
	srv.EnableHTTP2 = false // WebSocket upgrades are HTTP/1.1
	srv.StartTLS()
	defer srv.Close()
	https := srv.Client()

	get := func(path string) (int, string, string) {
		t.Helper()
		resp, err := https.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("X-App")
	}
	if code, body, _ := get("/rt/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "has not started") {
		t.Fatalf("/rt/readyz before Start: %d %q", code, body)
	}

	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if err := node.Start(); !errors.Is(err, rtserver.ErrNodeClosed) {
		t.Fatalf("second Start: %v, want ErrNodeClosed", err)
	}
	if code, body, tag := get("/rt/readyz"); code != http.StatusOK || body != "ready\n" || tag != "1" {
		t.Fatalf("/rt/readyz after Start: %d %q X-App %q", code, body, tag)
	}
	if code, body, _ := get("/"); code != http.StatusOK || body != "home" {
		t.Fatalf("the program's own page: %d %q", code, body)
	}

	ctx := context.Background()
	wss := "wss" + strings.TrimPrefix(srv.URL, "https") + "/rt/ws"
	c, err := client.Dial(ctx, wss, &client.Options{HTTPClient: https})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	got := make(chan string, 1)
	if _, err := c.Subscribe(ctx, "room:1", func(_ string, data json.RawMessage) { got <- string(data) }); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "room:1", json.RawMessage(`{"text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	if data := <-got; data != `{"text":"hi"}` {
		t.Fatalf("received %s", data)
	}
	if seen.Load() < 4 {
		t.Fatalf("the middleware saw %d requests, want every one (at least 4)", seen.Load())
	}

	if err := node.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if code, _, _ := get("/rt/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/rt/readyz after Shutdown: %d, want 503", code)
	}
}

// statusWriter is a logging middleware's ResponseWriter: it records the
// status and unwraps to the one it wraps.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

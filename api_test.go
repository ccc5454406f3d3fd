package rtserver_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/history"
)

// The server API on a main listener beyond loopback is allowed (the key
// guards it) but said once at start-up; on loopback, or with adminListen,
// nothing is said.
func TestAPIWarnsBeyondLoopback(t *testing.T) {
	for _, tt := range []struct {
		listen, admin string
		warn          bool
	}{
		{"0.0.0.0:8080", "", true},
		{"10.1.2.3:8080", "", true},
		{"127.0.0.1:8080", "", false},
		{"localhost:8080", "", false},
		{"[::1]:8080", "", false},
		{"0.0.0.0:8080", "127.0.0.1:9090", false},
	} {
		var buf bytes.Buffer
		cfg := rtserver.DefaultConfig()
		cfg.Listen, cfg.AdminListen, cfg.API.Key = tt.listen, tt.admin, "k"
		deps := rtserver.Deps{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
		if _, err := rtserver.New(cfg, deps); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(buf.String(), "server API is served on the main listener"); got != map[bool]int{true: 1, false: 0}[tt.warn] {
			t.Errorf("listen %s admin %q: %d warnings, want warn=%v\n%s", tt.listen, tt.admin, got, tt.warn, buf.String())
		}
	}
}

// The server API's routes leave an application's own "GET /" free: an
// app serving pages at the root and the API on one listener must not
// panic on conflicting patterns, and each request reaches its handler.
func TestAPIBesideApplicationRoutes(t *testing.T) {
	cfg := rtserver.DefaultConfig()
	cfg.API.Key = "k"
	deps := rtserver.Deps{Logger: slog.New(slog.DiscardHandler)}
	n, err := rtserver.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.HandleHTTP("GET /", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("page")) }))
	for _, tt := range []struct {
		method, path, body string
		want               int
		contains           string
	}{
		{"POST", "/api/info", `{}`, 200, `"instances":1`},
		{"GET", "/", "", 200, "page"},
		{"GET", "/api/info", "", 200, "page"}, // the application's route
		{"POST", "/api/nope", `{}`, 404, `-32601`},
	} {
		req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
		req.Header.Set("Authorization", "apikey k")
		w := httptest.NewRecorder()
		n.Handler().ServeHTTP(w, req)
		if w.Code != tt.want || !strings.Contains(w.Body.String(), tt.contains) {
			t.Errorf("%s %s: %d %q, want %d containing %q", tt.method, tt.path, w.Code, w.Body.String(), tt.want, tt.contains)
		}
	}
}

// The server API on history topics: publish answers the position, the
// same idempotencyKey answers it again without a second message,
// broadcast lists the history topics' positions, history reads them.
func TestAPIOnHistoryTopics(t *testing.T) {
	cfg := rtserver.DefaultConfig()
	cfg.API.Key = "k"
	deps := rtserver.Deps{Logger: slog.New(slog.DiscardHandler)}
	cfg.Topics.Namespaces = []access.Namespace{{Pattern: "room:*", Rule: access.Rule{
		Subscribe: []string{access.GrantAny}, Publish: []string{access.GrantAny},
		History: history.Policy{Size: 10, TTL: time.Minute},
	}}}
	n, err := rtserver.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, tt := range []struct {
		path, body string
		want       int
		contains   string
	}{
		{"/api/publish", `{"topic":"room:1","data":1,"idempotencyKey":"a"}`, 200, `{"result":{"epoch":`},
		{"/api/publish", `{"topic":"room:1","data":1,"idempotencyKey":"a"}`, 200, `"offset":1}}`},
		{"/api/publish", `{"topic":"plain","data":1}`, 200, `"result":{}`},
		{"/api/broadcast", `{"topics":["plain","room:1","room:2"],"data":2}`, 200, `{"result":{"positions":[{"topic":"room:1","epoch":`},
		{"/api/history", `{"topic":"room:1"}`, 200, `"offset":2,"messages":[{"offset":1,"data":1},{"offset":2,"data":2}]}}`},
		{"/api/history", `{"topic":"plain"}`, 400, `no history`},
		{"/api/publish", `{"topic":"room:1","data":1,"idempotencyKey":"` + strings.Repeat("k", 65) + `"}`, 400, `idempotencyKey`},
	} {
		req := httptest.NewRequest("POST", tt.path, strings.NewReader(tt.body))
		req.Header.Set("Authorization", "apikey k")
		w := httptest.NewRecorder()
		n.Handler().ServeHTTP(w, req)
		if w.Code != tt.want || !strings.Contains(w.Body.String(), tt.contains) {
			t.Errorf("%s %s: %d %q, want %d containing %q", tt.path, tt.body, w.Code, w.Body.String(), tt.want, tt.contains)
		}
	}
}

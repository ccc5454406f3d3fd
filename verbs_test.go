package rtserver_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/server"
)

// Node's verbs answer what the server API answers, on Redis, and while
// Redis is down: a publish is refused (bus.ErrDegraded, the API's 503
// BUS) rather than delivered here only.
func TestNodeVerbsMatchTheAPI(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	cfg := rtserver.DefaultConfig()
	cfg.Redis.URL = r.URL()
	cfg.API.Key = "k"
	cfg.Topics.Namespaces = []access.Namespace{{Pattern: "room:*", Rule: access.Rule{
		Subscribe: []string{access.GrantAny}, Publish: []string{access.GrantAny},
		History: history.Policy{Size: 10, TTL: time.Minute}, Presence: true,
	}}}
	n, err := rtserver.New(cfg, rtserver.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	api := func(method, body string) (int, string) {
		req := httptest.NewRequest("POST", "/api/"+method, strings.NewReader(body))
		req.Header.Set("Authorization", "apikey k")
		w := httptest.NewRecorder()
		n.Handler().ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	ctx := context.Background()

	for range 2 { // the same key stores once
		pos, err := n.PublishAt(ctx, "room:1", []byte(`1`), "a")
		if err != nil || pos == nil || pos.Offset != 1 {
			t.Fatalf("PublishAt = %+v, %v; want offset 1", pos, err)
		}
	}
	if pos, err := n.PublishAt(ctx, "plain", []byte(`1`), ""); err != nil || pos != nil {
		t.Fatalf("PublishAt on a topic without history = %+v, %v; want nil, nil", pos, err)
	}
	res, err := n.History(ctx, "room:1", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := api("history", `{"topic":"room:1"}`); code != 200 || body != `{"result":`+string(res)+`}` {
		t.Errorf("history: Node %s, API %d %s", res, code, body)
	}
	if _, err := n.History(ctx, "plain", nil, 0); !errors.Is(err, server.ErrNoHistory) {
		t.Errorf("History on a topic without history: %v, want server.ErrNoHistory", err)
	}
	if page, err := n.Presence(ctx, "room:1", ""); err != nil || len(page.Clients) != 0 {
		t.Errorf("Presence = %+v, %v; want an empty page", page, err)
	}
	if st, err := n.PresenceStats(ctx, "room:1"); err != nil || st != (presence.Stats{}) {
		t.Errorf("PresenceStats = %+v, %v; want zero", st, err)
	}
	if _, err := n.Presence(ctx, "plain", ""); !errors.Is(err, presence.ErrOff) {
		t.Errorf("Presence on a topic without presence: %v, want presence.ErrOff", err)
	}
	if code, _ := api("presence", `{"topic":"plain"}`); code != 400 {
		t.Errorf("API presence on a topic without presence: %d, want 400", code)
	}

	r.Stop()
	testkit.Eventually(t, 15*time.Second, "Node.Publish refused while Redis is down", func() bool {
		return errors.Is(n.Publish("plain", []byte(`1`)), bus.ErrDegraded)
	})
	if _, err := n.PublishAt(ctx, "room:1", []byte(`2`), ""); !errors.Is(err, bus.ErrDegraded) {
		t.Errorf("PublishAt while degraded: %v, want bus.ErrDegraded", err)
	}
	for _, body := range []string{`{"topic":"plain","data":1}`, `{"topic":"room:1","data":1}`} {
		if code, got := api("publish", body); code != 503 || !strings.Contains(got, `"reason":"BUS"`) {
			t.Errorf("API publish %s while degraded: %d %s, want 503 BUS", body, code, got)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/cdptest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/protocol"
	"github.com/rtserver/rtserver/server"
)

// One Chromium for the whole package, started by the first test that needs
// it and closed after the last.
var (
	browserOnce sync.Once
	theBrowser  *browser
	browserErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theBrowser != nil {
		theBrowser.Close()
	}
	os.Exit(code)
}

// needBrowser returns the package's Chromium. A missing browser skips the
// test, saying so, or fails it under RTSERVER_REQUIRE_INTEGRATION=1
// (scripts/test.sh sets it).
func needBrowser(t *testing.T) *browser {
	t.Helper()
	testkit.Program(t, cdptest.ChromiumPath, "apt-get install chromium")
	browserOnce.Do(func() { theBrowser, browserErr = cdptest.Start() })
	if browserErr != nil {
		t.Fatal(browserErr)
	}
	return theBrowser
}

// testApp is the example running in-process on a loopback port.
type testApp struct {
	*app
	addr      string
	drainOnce sync.Once
	done      chan struct{} // Serve returned
	serveErr  error         // nil when Serve stopped by Shutdown
}

func (a *testApp) url(path string) string { return "http://" + a.addr + path }

// startApp serves the example with o on addr (empty: a free port). Beside
// the app it serves /test/blank.html, a same-origin page that connects to
// nothing by itself, for tests that load the client into a page.
func startApp(t *testing.T, o options, addr string) *testApp {
	t.Helper()
	if o.Assets == "" {
		o.Assets = "../../clients/js"
	}
	if o.Reject == "" {
		o.Reject = "http"
	}
	if o.Drain == 0 {
		o.Drain = time.Second
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	a, err := newApp(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a.node.HandleHTTP("GET /test/blank.html", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte("<!doctype html><title>blank</title>\n"))
	}))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ta := &testApp{app: a, addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		if err := a.node.Serve(ln); !errors.Is(err, rtserver.ErrNodeClosed) {
			ta.serveErr = err
		}
		close(ta.done)
	}()
	t.Cleanup(func() {
		if err := ta.stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	// Serve answers at once and says ready once the node's parts have
	// started: the tests start from a ready app.
	testkit.Eventually(t, 10*time.Second, "the app to say ready", func() bool {
		resp, err := http.Get(ta.url("/readyz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return ta
}

// cancel starts the drain (once); the node's Shutdown runs until Serve
// has returned.
func (a *testApp) cancel() {
	a.drainOnce.Do(func() { go a.node.Shutdown(context.Background()) })
}

// stop drains the app (if it is still running) and returns Serve's error.
func (a *testApp) stop() error {
	a.cancel()
	<-a.done
	return a.serveErr
}

func TestSayValidates(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		user     string
		wantCode int // 0: published
		want     chatMessage
	}{
		{name: "ok", give: `{"room":"lobby","text":" hi ","name":"ann"}`, want: chatMessage{Room: "lobby", From: "ann", Text: "hi"}},
		{name: "user beats name", give: `{"room":"r","text":"x","name":"ann"}`, user: "u1", want: chatMessage{Room: "r", From: "u1", Text: "x"}},
		{name: "no name", give: `{"room":"r","text":"x"}`, want: chatMessage{Room: "r", From: "anonymous", Text: "x"}},
		{name: "long name", give: `{"room":"r","text":"x","name":"` + strings.Repeat("n", maxNameBytes+1) + `"}`, want: chatMessage{Room: "r", From: "anonymous", Text: "x"}},
		{name: "no params", give: ``, wantCode: protocol.CodeInvalidParams},
		{name: "array params", give: `["lobby","hi"]`, wantCode: protocol.CodeInvalidParams},
		{name: "room not a string", give: `{"room":1,"text":"hi"}`, wantCode: protocol.CodeInvalidParams},
		{name: "empty room", give: `{"room":"","text":"hi"}`, wantCode: protocol.CodeInvalidParams},
		{name: "room with space", give: `{"room":"a b","text":"hi"}`, wantCode: protocol.CodeInvalidParams},
		{name: "room too long", give: `{"room":"` + strings.Repeat("r", 256-len(roomPrefix)+1) + `","text":"hi"}`, wantCode: protocol.CodeInvalidParams},
		{name: "longest room", give: `{"room":"` + strings.Repeat("r", 256-len(roomPrefix)) + `","text":"hi"}`, want: chatMessage{Room: strings.Repeat("r", 256-len(roomPrefix)), From: "anonymous", Text: "hi"}},
		{name: "blank text", give: `{"room":"r","text":"  "}`, wantCode: protocol.CodeInvalidParams},
		{name: "text too long", give: `{"room":"r","text":"` + strings.Repeat("t", maxTextBytes+1) + `"}`, wantCode: protocol.CodeInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotTopic string
			var gotData json.RawMessage
			h := say(func(topic string, data json.RawMessage) error {
				gotTopic, gotData = topic, data
				return nil
			})
			res, err := h(context.Background(), &server.Request{Method: "chat.say", Params: json.RawMessage(tt.give), User: tt.user})
			if tt.wantCode != 0 {
				var pe *protocol.Error
				if !errors.As(err, &pe) || pe.Code != tt.wantCode {
					t.Fatalf("err = %v, want code %d", err, tt.wantCode)
				}
				if gotTopic != "" {
					t.Fatalf("published to %q on a refused call", gotTopic)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			msg := res.(chatMessage)
			if msg.At == 0 {
				t.Fatal("no timestamp")
			}
			msg.At = 0
			if msg != tt.want {
				t.Fatalf("result %+v, want %+v", msg, tt.want)
			}
			if gotTopic != roomPrefix+tt.want.Room {
				t.Fatalf("published to %q", gotTopic)
			}
			var pub chatMessage
			if err := json.Unmarshal(gotData, &pub); err != nil {
				t.Fatal(err)
			}
			pub.At = 0
			if pub != tt.want {
				t.Fatalf("published %+v, want %+v", pub, tt.want)
			}
		})
	}
}

func TestSayPublishFailureIsAnError(t *testing.T) {
	h := say(func(string, json.RawMessage) error { return errors.New("bus down") })
	_, err := h(context.Background(), &server.Request{Params: json.RawMessage(`{"room":"r","text":"x"}`)})
	if err == nil {
		t.Fatal("a failed publish answered success")
	}
}

func TestNewAppRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		give options
	}{
		{"unknown reject mode", options{Reject: "drop", Assets: "../../clients/js"}},
		{"no client at -assets", options{Reject: "http", Assets: t.TempDir()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := newApp(tt.give, slog.New(slog.DiscardHandler)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// The app serves the node's endpoints beside the page and the client.
func TestServesPageClientAndEndpoints(t *testing.T) {
	a := startApp(t, options{}, "")
	for _, tt := range []struct {
		path string
		want int
		body string
	}{
		{"/", 200, "rtclient.js"},
		{"/clients/js/rtclient.js", 200, "export function connect"},
		{"/healthz", 200, "ok"},
		{"/readyz", 200, "ready"},
		{"/metrics", 200, "connections_open"},
		{"/ws", 426, ""}, // a plain GET is not an upgrade
		{"/clients/js/nope.js", 404, ""},
	} {
		code, body := get(t, a.url(tt.path))
		if code != tt.want || !strings.Contains(body, tt.body) {
			t.Errorf("GET %s: %d %.80q, want %d containing %q", tt.path, code, body, tt.want, tt.body)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

package serverapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/presence"
	"github.com/rtserver/rtserver/protocol"
)

const testKey = "k3y-for-tests"

// recorder is a Backend that records the calls it carries out.
type recorder struct {
	mu       sync.Mutex
	calls    []string
	draining bool
	err      error
}

func (r *recorder) add(call string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
	return r.err
}

func (r *recorder) Publish(topic string, data json.RawMessage) error {
	return r.add("publish " + topic + " " + string(data))
}
func (r *recorder) Disconnect(user string) error { return r.add("disconnect " + user) }
func (r *recorder) Unsubscribe(user, topic string) error {
	return r.add("unsubscribe " + user + " " + topic)
}
func (r *recorder) Info() Info {
	return Info{InstanceID: "i-1", Connections: 3, Topics: 2, Instances: 4}
}
func (r *recorder) Presence(_ context.Context, topic, cursor string) (presence.Page, error) {
	if err := r.add("presence " + topic + " " + cursor); err != nil {
		return presence.Page{}, err
	}
	if topic == "off" {
		return presence.Page{}, presence.ErrOff
	}
	return presence.Page{Clients: []presence.Entry{{Client: "i-1.7", User: "alice"}}, Cursor: "i-1.7"}, nil
}
func (r *recorder) PresenceStats(_ context.Context, topic string) (presence.Stats, error) {
	if err := r.add("presenceStats " + topic); err != nil {
		return presence.Stats{}, err
	}
	return presence.Stats{Clients: 3, Users: 2}, nil
}
func (r *recorder) Draining() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.draining
}

func (r *recorder) set(err error, draining bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err, r.draining = err, draining
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func newTestServer(t *testing.T, max int64) (*httptest.Server, *recorder, *metrics.Metrics) {
	t.Helper()
	rec := &recorder{}
	m := metrics.NewDiscard()
	h, err := New(Config{Key: testKey, MaxBodyBytes: max}, Deps{Backend: rec, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, rec, m
}

type answer struct {
	status     int
	retryAfter string
	Result     json.RawMessage `json:"result"`
	Error      *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    *struct {
			Reason string `json:"reason"`
		} `json:"data"`
	} `json:"error"`
}

func call(t *testing.T, srv *httptest.Server, httpMethod, method, auth, body string) answer {
	t.Helper()
	req, err := http.NewRequest(httpMethod, srv.URL+Prefix+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", httpMethod, method, b, err)
	}
	if (a.Error == nil) == (a.Result == nil) {
		t.Fatalf("%s %s: body %s has not exactly one of result and error", httpMethod, method, b)
	}
	return a
}

func TestMethods(t *testing.T) {
	srv, rec, m := newTestServer(t, 0)
	auth := "apikey " + testKey
	tests := []struct {
		method, body string
		want         []string
		result       string
	}{
		{"publish", `{"topic":"room","data":{"a":1}}`, []string{`publish room {"a":1}`}, `{}`},
		{"publish", `{"topic":"room","data":null}`, []string{`publish room null`}, `{}`},
		{"broadcast", `{"topics":["a","b"],"data":"x"}`, []string{`publish a "x"`, `publish b "x"`}, `{}`},
		{"disconnect", `{"user":"alice"}`, []string{"disconnect alice"}, `{}`},
		{"unsubscribe", `{"user":"alice","topic":"room"}`, []string{"unsubscribe alice room"}, `{}`},
		{"info", `{}`, nil, `{"instanceId":"i-1","connections":3,"topics":2,"instances":4}`},
		{"info", " \n{\"ignored\":1}\n", nil, `{"instanceId":"i-1","connections":3,"topics":2,"instances":4}`},
		{"presence", `{"topic":"room"}`, []string{"presence room "}, `{"clients":[{"client":"i-1.7","user":"alice"}],"cursor":"i-1.7"}`},
		{"presence", `{"topic":"room","cursor":"i-1.7"}`, []string{"presence room i-1.7"}, `{"clients":[{"client":"i-1.7","user":"alice"}],"cursor":"i-1.7"}`},
		{"presenceStats", `{"topic":"room"}`, []string{"presenceStats room"}, `{"clients":3,"users":2}`},
	}
	for _, tt := range tests {
		a := call(t, srv, "POST", tt.method, auth, tt.body)
		if a.status != 200 || string(a.Result) != tt.result {
			t.Errorf("%s %s: %d %s, want 200 %s", tt.method, tt.body, a.status, a.Result, tt.result)
		}
		if got := rec.take(); strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: backend got %q, want %q", tt.method, got, tt.want)
		}
	}
	if got := testutil.ToFloat64(m.APIRequests.WithLabelValues("info", "200")); got != 2 {
		t.Errorf(`api_requests_total{method="info",code="200"} = %v, want 2`, got)
	}
	// Scheme and surrounding spaces are forgiven, as HTTP allows.
	if a := call(t, srv, "POST", "info", "ApiKey   "+testKey+" ", `{}`); a.status != 200 {
		t.Errorf("case-insensitive scheme: %d", a.status)
	}
}

// Every error status of docs/server-api.md, with its JSON-RPC code; none
// reaches the backend.
func TestErrors(t *testing.T) {
	srv, rec, m := newTestServer(t, 128)
	auth := "apikey " + testKey
	big := `{"topic":"room","data":"` + strings.Repeat("x", 200) + `"}`
	tests := []struct {
		name, httpMethod, method, auth, body string
		status, code                         int
		label                                string
	}{
		{"no key", "POST", "publish", "", `{}`, 401, -32003, "publish"},
		{"wrong key", "POST", "publish", "apikey nope", `{}`, 401, -32003, "publish"},
		{"bearer instead", "POST", "info", "Bearer " + testKey, `{}`, 401, -32003, "info"},
		{"key prefix", "POST", "info", "apikey " + testKey[:4], `{}`, 401, -32003, "info"},
		{"unknown method", "POST", "nope", auth, `{}`, 404, -32601, "unknown"},
		{"nested path", "POST", "publish/x", auth, `{}`, 404, -32601, "unknown"},
		{"GET", "GET", "info", auth, ``, 405, -32600, "info"},
		{"oversize", "POST", "publish", auth, big, 413, -32004, "publish"},
		{"empty body", "POST", "info", auth, ``, 400, -32700, "info"},
		{"not JSON", "POST", "publish", auth, `{"topic":`, 400, -32700, "publish"},
		{"array", "POST", "publish", auth, `[{"topic":"a","data":1}]`, 400, -32600, "publish"},
		{"string", "POST", "info", auth, `"x"`, 400, -32600, "info"},
		{"two values", "POST", "info", auth, `{} {}`, 400, -32700, "info"},
		{"invalid UTF-8", "POST", "publish", auth, "{\"topic\":\"a\",\"data\":\"\xff\"}", 400, -32700, "publish"},
		{"missing topic", "POST", "publish", auth, `{"data":1}`, 400, -32602, "publish"},
		{"bad topic", "POST", "publish", auth, `{"topic":"a b","data":1}`, 400, -32602, "publish"},
		{"reserved topic", "POST", "publish", auth, `{"topic":"__sys","data":1}`, 400, -32602, "publish"},
		{"missing data", "POST", "publish", auth, `{"topic":"a"}`, 400, -32602, "publish"},
		{"topic not string", "POST", "publish", auth, `{"topic":5,"data":1}`, 400, -32602, "publish"},
		{"no topics", "POST", "broadcast", auth, `{"topics":[],"data":1}`, 400, -32602, "broadcast"},
		{"topics not array", "POST", "broadcast", auth, `{"topics":"a","data":1}`, 400, -32602, "broadcast"},
		{"one bad topic", "POST", "broadcast", auth, `{"topics":["a","__b"],"data":1}`, 400, -32602, "broadcast"},
		{"missing user", "POST", "disconnect", auth, `{}`, 400, -32602, "disconnect"},
		{"unsubscribe no topic", "POST", "unsubscribe", auth, `{"user":"u"}`, 400, -32602, "unsubscribe"},
		// One decoding rule, the client protocol's: names exact, a
		// repeated member refused, nesting bounded.
		{"case-folded name", "POST", "publish", auth, `{"Topic":"a","data":1}`, 400, -32602, "publish"},
		{"repeated topic", "POST", "publish", auth, `{"topic":"a","topic":"b","data":1}`, 400, -32600, "publish"},
		{"repeated user", "POST", "disconnect", auth, `{"user":"a","user":"b"}`, 400, -32600, "disconnect"},
		{"null user", "POST", "disconnect", auth, `{"user":null}`, 400, -32602, "disconnect"},
		{"topics of numbers", "POST", "broadcast", auth, `{"topics":[1],"data":1}`, 400, -32602, "broadcast"},
		{"presence no topic", "POST", "presence", auth, `{}`, 400, -32602, "presence"},
		{"presence cursor not string", "POST", "presence", auth, `{"topic":"a","cursor":1}`, 400, -32602, "presence"},
		{"presenceStats reserved topic", "POST", "presenceStats", auth, `{"topic":"__a"}`, 400, -32602, "presenceStats"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(m.APIRequests.WithLabelValues(tt.label, itoa(tt.status)))
			a := call(t, srv, tt.httpMethod, tt.method, tt.auth, tt.body)
			if a.status != tt.status || a.Error == nil || a.Error.Code != tt.code || a.Error.Message == "" {
				t.Errorf("got %d %+v, want %d code %d", a.status, a.Error, tt.status, tt.code)
			}
			if got := testutil.ToFloat64(m.APIRequests.WithLabelValues(tt.label, itoa(tt.status))); got != before+1 {
				t.Errorf("api_requests_total{method=%q,code=\"%d\"} moved by %v, want 1", tt.label, tt.status, got-before)
			}
		})
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("rejected calls reached the backend: %q", got)
	}
	// Too many topics in a broadcast (the body limit above is too small
	// for 1001 topics).
	srv2, rec2, _ := newTestServer(t, 1<<20)
	topics := strings.TrimSuffix(strings.Repeat(`"t",`, 1001), ",")
	if a := call(t, srv2, "POST", "broadcast", auth, `{"topics":[`+topics+`],"data":1}`); a.status != 400 || a.Error.Code != -32602 {
		t.Errorf("1001 topics: %d %+v", a.status, a.Error)
	}
	if a := call(t, srv2, "POST", "disconnect", auth, `{"user":"`+strings.Repeat("u", MaxUserLen+1)+`"}`); a.status != 400 || a.Error.Code != -32602 {
		t.Errorf("long user: %d %+v", a.status, a.Error)
	}
	deep := func(n int) string {
		return `{"topic":"a","data":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
	}
	if a := call(t, srv2, "POST", "publish", auth, deep(64)); a.status != 400 || a.Error.Code != -32600 {
		t.Errorf("data 65 levels deep: %d %+v", a.status, a.Error)
	}
	if got := rec2.take(); len(got) != 0 {
		t.Errorf("rejected calls reached the backend: %d calls", len(got))
	}
	if a := call(t, srv2, "POST", "publish", auth, deep(63)); a.status != 200 {
		t.Errorf("data 64 levels deep: %d %+v", a.status, a.Error)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestDrainingAndBackendFailure(t *testing.T) {
	srv, rec, _ := newTestServer(t, 0)
	auth := "apikey " + testKey
	rec.set(errors.New("cross-instance delivery is down"), false)
	a := call(t, srv, "POST", "publish", auth, `{"topic":"a","data":1}`)
	if a.status != 503 || a.Error.Code != -32603 || !strings.Contains(a.Error.Message, "down") || a.retryAfter == "" {
		t.Errorf("backend failure: %d %+v Retry-After %q", a.status, a.Error, a.retryAfter)
	}
	// The bus could not take the message: shed like the message tier
	// sheds, and nothing was delivered.
	for _, err := range []error{bus.ErrQueueFull, bus.ErrDegraded} {
		rec.set(fmt.Errorf("server: %w", err), false)
		a = call(t, srv, "POST", "publish", auth, `{"topic":"a","data":1}`)
		if a.status != 503 || a.Error.Code != -32001 || a.retryAfter != "1" || a.Error.Data == nil || a.Error.Data.Reason != "BUS" {
			t.Errorf("bus refusal %v: %d %+v Retry-After %q, want 503 -32001 reason BUS with Retry-After 1", err, a.status, a.Error, a.retryAfter)
		}
	}
	// A history store that cannot be reached: the reason a client gets.
	rec.set(fmt.Errorf("server: %w", protocol.NewError(protocol.CodeOverloaded, "", protocol.OverloadedData{Reason: protocol.ReasonHistoryUnavailable})), false)
	a = call(t, srv, "POST", "publish", auth, `{"topic":"a","data":1}`)
	if a.status != 503 || a.Error.Code != -32001 || a.Error.Data == nil || a.Error.Data.Reason != protocol.ReasonHistoryUnavailable {
		t.Errorf("history refusal: %d %+v, want 503 -32001 reason HISTORY_UNAVAILABLE", a.status, a.Error)
	}
	rec.set(errors.New("cross-instance delivery is down"), false)
	a = call(t, srv, "POST", "broadcast", auth, `{"topics":["a","b"],"data":1}`)
	if a.status != 503 || !strings.Contains(a.Error.Message, "0 of 2") {
		t.Errorf("broadcast failure: %d %+v", a.status, a.Error)
	}
	a = call(t, srv, "POST", "presenceStats", auth, `{"topic":"a"}`)
	if a.status != 503 || a.Error.Code != -32603 {
		t.Errorf("presenceStats failure: %d %+v", a.status, a.Error)
	}
	rec.set(nil, false)
	a = call(t, srv, "POST", "presence", auth, `{"topic":"off"}`)
	if a.status != 400 || a.Error.Code != -32602 || !strings.Contains(a.Error.Message, "presence is off") {
		t.Errorf("presence of a topic without: %d %+v", a.status, a.Error)
	}
	rec.take()
	rec.set(nil, true)
	for _, method := range []string{"publish", "info", "nope"} {
		a := call(t, srv, "POST", method, auth, `{"topic":"a","data":1}`)
		if a.status != 503 || a.Error.Code != -32001 {
			t.Errorf("%s while draining: %d %+v", method, a.status, a.Error)
		}
	}
	// The key is checked first: a caller without it learns nothing.
	if a := call(t, srv, "POST", "info", "", `{}`); a.status != 401 {
		t.Errorf("no key while draining: %d", a.status)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("calls while draining reached the backend: %q", got)
	}
}

func TestNewRefusesMissingParts(t *testing.T) {
	if _, err := New(Config{}, Deps{Backend: &recorder{}}); err == nil {
		t.Error("empty key accepted")
	}
	if _, err := New(Config{Key: "k"}, Deps{}); err == nil {
		t.Error("nil backend accepted")
	}
}

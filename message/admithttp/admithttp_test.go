package admithttp_test

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admithttp"
	"github.com/rtserver/rtserver/pressure"
)

// newClass registers one class with rule r on a fresh Admission.
func newClass(t testing.TB, r message.Rule) *message.Class {
	t.Helper()
	a := testkit.Must(message.New(message.Config{}, message.Deps{}))
	if err := a.Register("api", r); err != nil {
		t.Fatal(err)
	}
	c, _ := a.Class("api")
	return c
}

type shedBody struct {
	Error        string `json:"error"`
	Class        string `json:"class"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retryAfterMs"`
}

// decodeShed checks the shed answer's status, headers and body shape and
// returns the body.
func decodeShed(t *testing.T, rec *httptest.ResponseRecorder, wantStatus int) shedBody {
	t.Helper()
	if rec.Code != wantStatus {
		t.Fatalf("status %d, want %d (body %q)", rec.Code, wantStatus, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var b shedBody
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("body: %v", err)
	}
	secs, err := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
	if err != nil || secs < 1 {
		t.Fatalf("Retry-After %q: want whole seconds >= 1", rec.Header().Get("Retry-After"))
	}
	if b.RetryAfterMs < 1 || secs != max((b.RetryAfterMs+999)/1000, 1) {
		t.Errorf("Retry-After %ds does not match retryAfterMs %d (rounded up, >= 1)", secs, b.RetryAfterMs)
	}
	return b
}

func TestShedConcurrencyIs503(t *testing.T) {
	c := newClass(t, message.Rule{Concurrency: &message.Concurrency{Max: 1}})
	entered, unblock := make(chan struct{}), make(chan struct{})
	var calls int
	h := admithttp.Middleware(c)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		close(entered)
		<-unblock
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/a", nil))
	}()
	<-entered
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/a", nil))
	b := decodeShed(t, rec, http.StatusServiceUnavailable)
	if b.Error != "OVERLOADED" || b.Class != "api" || b.Reason != message.ReasonConcurrency {
		t.Errorf("body %+v", b)
	}
	close(unblock)
	<-done
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1 (the shed request must not reach it)", calls)
	}
	if n := c.InFlight(); n != 0 {
		t.Errorf("in flight %d after the handler returned", n)
	}
}

func TestShedRateIs429WithTheLimitersWait(t *testing.T) {
	c := newClass(t, message.Rule{Rate: &message.Rate{Limit: 1, Per: time.Minute, By: "ip"}})
	h := admithttp.Middleware(c)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	if rec := req("192.0.2.1:1000"); rec.Code != 200 {
		t.Fatalf("first request: %d", rec.Code)
	}
	b := decodeShed(t, req("192.0.2.1:2000"), http.StatusTooManyRequests)
	if b.Error != "RATE_LIMITED" || b.Reason != message.ReasonRate || b.RetryAfterMs < 59_000 {
		t.Errorf("body %+v: want RATE_LIMITED, reason RATE, about a minute", b)
	}
	if rec := req("192.0.2.2:1000"); rec.Code != 200 {
		t.Errorf("another client IP shares the budget: %d", rec.Code)
	}
}

func TestKeyOptionAndTrustedProxies(t *testing.T) {
	tests := []struct {
		name     string
		opts     []admithttp.Option
		remote   [2]string
		xff      [2]string
		user     [2]string
		wantShed bool
	}{
		{name: "default: same IP shares", remote: [2]string{"192.0.2.1:1", "192.0.2.1:2"}, wantShed: true},
		{name: "default: forged XFF ignored", remote: [2]string{"192.0.2.1:1", "192.0.2.1:2"}, xff: [2]string{"198.51.100.1", "198.51.100.2"}, wantShed: true},
		{name: "trusted proxy: XFF client", opts: []admithttp.Option{admithttp.TrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))}, remote: [2]string{"10.0.0.1:1", "10.0.0.1:2"}, xff: [2]string{"198.51.100.1", "198.51.100.2"}},
		{name: "IPv6 keyed by /64", remote: [2]string{"[2001:db8::1]:1", "[2001:db8::2]:1"}, wantShed: true},
		{name: "key option: users apart", opts: []admithttp.Option{admithttp.Key(func(r *http.Request) string { return r.Header.Get("X-User") })}, remote: [2]string{"192.0.2.1:1", "192.0.2.1:2"}, user: [2]string{"ann", "bob"}},
		{name: "key option: one user across IPs", opts: []admithttp.Option{admithttp.Key(func(r *http.Request) string { return r.Header.Get("X-User") })}, remote: [2]string{"192.0.2.1:1", "192.0.2.9:2"}, user: [2]string{"ann", "ann"}, wantShed: true},
		{name: "key option: empty key falls back to IP", opts: []admithttp.Option{admithttp.Key(func(*http.Request) string { return "" })}, remote: [2]string{"192.0.2.1:1", "192.0.2.1:2"}, wantShed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClass(t, message.Rule{Rate: &message.Rate{Limit: 1, Per: time.Hour}})
			h := admithttp.Middleware(c, tt.opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			var codes [2]int
			for i := range 2 {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = tt.remote[i]
				if tt.xff[i] != "" {
					r.Header.Set("X-Forwarded-For", tt.xff[i])
				}
				if tt.user[i] != "" {
					r.Header.Set("X-User", tt.user[i])
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				codes[i] = rec.Code
			}
			want := [2]int{200, 200}
			if tt.wantShed {
				want[1] = http.StatusTooManyRequests
			}
			if codes != want {
				t.Errorf("codes %v, want %v", codes, want)
			}
		})
	}
}

func TestPanicIsReleasedThenRepanicked(t *testing.T) {
	c := newClass(t, message.Rule{Concurrency: &message.Concurrency{Max: 1}})
	var outcomes []message.Outcome
	boom := errors.New("boom")
	h := admithttp.Middleware(c, admithttp.OnReleased(func(o message.Outcome) {
		outcomes = append(outcomes, o)
	}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		if c.InFlight() != 1 {
			t.Errorf("in flight %d inside the handler", c.InFlight())
		}
		panic(boom)
	}))
	func() {
		defer func() {
			if p := recover(); p != boom {
				t.Errorf("recovered %v, want the handler's own panic value", p)
			}
			if n := c.InFlight(); n != 0 {
				t.Errorf("in flight %d when the panic reached the caller: release must come first", n)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	if len(outcomes) != 1 || outcomes[0] != message.Dropped {
		t.Errorf("outcomes %v, want one Dropped", outcomes)
	}
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		name   string
		opts   []admithttp.Option
		status int
		want   message.Outcome
	}{
		{name: "200", status: 200, want: message.Completed},
		{name: "500 counts as completed by default", status: 500, want: message.Completed},
		{name: "503 with DropOn5xx", opts: []admithttp.Option{admithttp.DropOn5xx()}, status: 503, want: message.Dropped},
		{name: "404 with DropOn5xx", opts: []admithttp.Option{admithttp.DropOn5xx()}, status: 404, want: message.Completed},
		{name: "implicit 200 with DropOn5xx", opts: []admithttp.Option{admithttp.DropOn5xx()}, status: 0, want: message.Completed},
		{name: "103 then 500 with DropOn5xx", opts: []admithttp.Option{admithttp.DropOn5xx()}, status: 103, want: message.Dropped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClass(t, message.Rule{Concurrency: &message.Concurrency{Max: 1}})
			var got []message.Outcome
			opts := append(tt.opts, admithttp.OnReleased(func(o message.Outcome) { got = append(got, o) }))
			h := admithttp.Middleware(c, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch tt.status {
				case 0:
				case 103:
					w.WriteHeader(103)
					w.WriteHeader(500)
				default:
					w.WriteHeader(tt.status)
				}
				_, _ = io.WriteString(w, "ok")
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("outcomes %v, want [%v]", got, tt.want)
			}
			if rec.Body.String() != "ok" {
				t.Errorf("body %q: the wrapper lost the handler's write", rec.Body)
			}
		})
	}
}

// TestDropOn5xxKeepsFlushAndUnwrap: a streaming handler behind the status
// wrapper can still flush and reach the server's writer.
func TestDropOn5xxKeepsFlushAndUnwrap(t *testing.T) {
	c := newClass(t, message.Rule{})
	h := admithttp.Middleware(c, admithttp.DropOn5xx())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Flusher); !ok {
			t.Error("wrapper is not a Flusher")
		}
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("ResponseController.Flush: %v", err)
		}
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if !rec.Flushed {
		t.Error("flush did not reach the recorder")
	}
}

func TestShedBodyEscapesClassName(t *testing.T) {
	name := `we"ird\name`
	a := testkit.Must(message.New(message.Config{Classes: map[string]message.Rule{name: {}}}, message.Deps{
		Predicates: map[string]message.Predicate{name: func(*pressure.Snapshot, *message.Call) (bool, error) { return false, nil }},
	}))
	c, _ := a.Class(name)
	rec := httptest.NewRecorder()
	admithttp.Middleware(c)(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	b := decodeShed(t, rec, http.StatusServiceUnavailable)
	if b.Class != name || b.Reason != message.ReasonPredicate {
		t.Errorf("body %+v", b)
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	for _, tt := range []struct {
		ra   time.Duration
		want string
	}{{time.Millisecond, "1"}, {999 * time.Millisecond, "1"}, {1001 * time.Millisecond, "2"}, {20 * time.Minute, "1200"}} {
		rec := httptest.NewRecorder()
		admithttp.WriteShed(rec, "c", message.Decision{Reason: message.ReasonCost, RetryAfter: tt.ra, Limit: math.MaxInt64})
		if got := rec.Header().Get("Retry-After"); got != tt.want {
			t.Errorf("RetryAfter %v: header %q, want %q", tt.ra, got, tt.want)
		}
		b := decodeShed(t, rec, http.StatusTooManyRequests)
		if b.Error != "RATE_LIMITED" || b.Reason != message.ReasonCost {
			t.Errorf("COST denial: body %+v, want RATE_LIMITED", b)
		}
	}
}

// TestConcurrentRequestsNeverExceedMax: many goroutines through one
// middleware; the handler sees at most Max at once and all are released.
func TestConcurrentRequestsNeverExceedMax(t *testing.T) {
	const maxN = 3
	c := newClass(t, message.Rule{Concurrency: &message.Concurrency{Max: maxN}})
	var mu sync.Mutex
	cur, peak := 0, 0
	h := admithttp.Middleware(c)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		cur++
		peak = max(peak, cur)
		mu.Unlock()
		mu.Lock()
		cur--
		mu.Unlock()
	}))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", strings.NewReader("x")))
			}
		})
	}
	wg.Wait()
	if peak > maxN {
		t.Errorf("peak %d > Max %d", peak, maxN)
	}
	if n := c.InFlight(); n != 0 {
		t.Errorf("in flight %d at the end", n)
	}
}

// TestCostParts: a cost part priced by bytes reads Content-Length, one
// priced by a param reads what Describe puts in Params; either denial is
// 429 RATE_LIMITED with reason COST.
func TestCostParts(t *testing.T) {
	tests := []struct {
		name string
		cost message.Cost
		opts []admithttp.Option
	}{
		{name: "bytes", cost: message.Cost{Budget: 10, Per: time.Hour, Of: "bytes", By: "ip"}},
		{name: "param via Describe", cost: message.Cost{Budget: 10, Per: time.Hour, Of: "param:maxTokens", By: "ip"},
			opts: []admithttp.Option{admithttp.Describe(func(r *http.Request, c *message.Call) {
				c.Params = []byte(`{"maxTokens":` + r.Header.Get("X-Max-Tokens") + `}`)
			})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClass(t, message.Rule{Cost: &tt.cost})
			h := admithttp.Middleware(c, tt.opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			serve := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/v1/complete", strings.NewReader("12345678")) // 8 bytes
				r.Header.Set("X-Max-Tokens", "8")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				return rec
			}
			if rec := serve(); rec.Code != 200 {
				t.Fatalf("first request (8 of 10): %d %s", rec.Code, rec.Body)
			}
			b := decodeShed(t, serve(), http.StatusTooManyRequests)
			if b.Error != "RATE_LIMITED" || b.Reason != message.ReasonCost {
				t.Errorf("second request: %+v, want RATE_LIMITED COST", b)
			}
		})
	}
}

package access

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/metrics"
)

// backend is a real HTTP grant backend on loopback. answer decides each
// question; every request is counted and recorded.
type backend struct {
	*httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	got      []question
}

func newBackend(t *testing.T, answer func(w http.ResponseWriter, q question)) *backend {
	t.Helper()
	b := &backend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		var q question
		body, _ := io.ReadAll(r.Body)
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || dec.Decode(&q) != nil {
			t.Errorf("backend got %s %q %s", r.Method, r.Header.Get("Content-Type"), body)
		}
		b.mu.Lock()
		b.got = append(b.got, q)
		b.mu.Unlock()
		answer(w, q)
	}))
	t.Cleanup(b.Close)
	return b
}

func proxyChecker(t *testing.T, p Proxy) (*Checker, *metrics.Metrics) {
	t.Helper()
	return proxyCheckerAt(t, p, nil)
}

// proxyCheckerAt is proxyChecker with its answers' cache on the clock now.
func proxyCheckerAt(t *testing.T, p Proxy, now func() time.Time) (*Checker, *metrics.Metrics) {
	t.Helper()
	m := metrics.NewDiscard()
	c, err := New(Config{
		Namespaces: []Namespace{{Pattern: "p:*", Rule: Rule{Subscribe: []string{"proxy"}, Publish: []string{"proxy"}}}},
		Default:    &Rule{},
		Proxy:      p,
	}, Deps{Metrics: m, now: now})
	if err != nil {
		t.Fatal(err)
	}
	return c, m
}

var alice = Question{Topic: "p:room", User: "alice", ConnID: 42, IP: netip.MustParseAddr("2001:db8::7")}

func ask(c *Checker, a Action, q Question) Decision {
	q.Action = a
	return c.Check(context.Background(), q)
}

func TestProxyAllowDeny(t *testing.T) {
	leakcheck.Check(t)
	b := newBackend(t, func(w http.ResponseWriter, q question) {
		io.WriteString(w, `{"allow":`+map[bool]string{true: "true", false: "false"}[q.User == "alice"]+`,"extra":1}`)
	})
	c, m := proxyChecker(t, Proxy{URL: b.URL, Timeout: time.Minute})
	if d := ask(c, Subscribe, alice); d != Allow {
		t.Errorf("alice = %v", d)
	}
	bob := alice
	bob.User, bob.IP = "", netip.Addr{}
	if d := ask(c, Publish, bob); d != Deny {
		t.Errorf("anonymous = %v", d)
	}
	want := []question{
		{Action: "subscribe", Topic: "p:room", User: "alice", ConnID: 42, ClientIP: "2001:db8::7"},
		{Action: "publish", Topic: "p:room", User: "", ConnID: 42, ClientIP: ""},
	}
	if len(b.got) != 2 || b.got[0] != want[0] || b.got[1] != want[1] {
		t.Errorf("backend got %+v, want %+v", b.got, want)
	}
	if got := testutil.ToFloat64(m.TopicDenied.WithLabelValues("publish")); got != 1 {
		t.Errorf("denied publish = %v", got)
	}
}

// Every way the backend can fail is counted by reason and decided by the
// fail policy; nothing else is disturbed (the next question works).
func TestProxyFailures(t *testing.T) {
	leakcheck.Check(t)
	release := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, q question) {
		switch q.Topic {
		case "p:html":
			io.WriteString(w, "<html>oops</html>")
		case "p:500":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"allow":true}`)
		case "p:redirect":
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusFound)
		case "p:noallow":
			io.WriteString(w, `{"allowed":true}`)
		case "p:string":
			io.WriteString(w, `{"allow":"yes"}`)
		case "p:huge":
			io.WriteString(w, `{"allow":true,"pad":"`+strings.Repeat("x", maxProxyAnswer)+`"}`)
		case "p:slow":
			<-release
		default:
			io.WriteString(w, `{"allow":true}`)
		}
	})
	t.Cleanup(func() { close(release) }) // before b.Close, which waits for the handler
	closed := httptest.NewServer(http.NotFoundHandler())
	deadURL := closed.URL
	closed.Close()

	for _, failOpen := range []bool{false, true} {
		// Only p:slow may time out: the others get a timeout no busy
		// machine reaches, so their reason is never "timeout" by accident.
		c, m := proxyChecker(t, Proxy{URL: b.URL, Timeout: time.Minute, Fail: failPolicy(failOpen)})
		slow, sm := proxyChecker(t, Proxy{URL: b.URL, Timeout: 50 * time.Millisecond, Fail: failPolicy(failOpen)})
		dead, dm := proxyChecker(t, Proxy{URL: deadURL, Timeout: time.Minute, Fail: failPolicy(failOpen)})
		want := Unavailable
		if failOpen {
			want = Allow
		}
		for _, tt := range []struct {
			c      *Checker
			m      *metrics.Metrics
			topic  string
			reason string
		}{
			{c, m, "p:html", metrics.ProxyErrorBadResponse},
			{c, m, "p:500", metrics.ProxyErrorStatus},
			{c, m, "p:redirect", metrics.ProxyErrorStatus},
			{c, m, "p:noallow", metrics.ProxyErrorBadResponse},
			{c, m, "p:string", metrics.ProxyErrorBadResponse},
			{c, m, "p:huge", metrics.ProxyErrorBadResponse},
			{slow, sm, "p:slow", metrics.ProxyErrorTimeout},
			{dead, dm, "p:any", metrics.ProxyErrorTransport},
		} {
			q := alice
			q.Topic = tt.topic
			before := testutil.ToFloat64(tt.m.TopicProxyErrors.WithLabelValues(tt.reason))
			if d := ask(tt.c, Publish, q); d != want {
				t.Errorf("failOpen=%v %s = %v, want %v", failOpen, tt.topic, d, want)
			}
			if got := testutil.ToFloat64(tt.m.TopicProxyErrors.WithLabelValues(tt.reason)) - before; got != 1 {
				t.Errorf("failOpen=%v %s: topic_proxy_errors_total{reason=%q} grew by %v, want 1", failOpen, tt.topic, tt.reason, got)
			}
		}
		if d := ask(c, Publish, alice); d != Allow {
			t.Errorf("a healthy answer after the failures = %v", d)
		}
		if got := testutil.ToFloat64(m.TopicDenied.WithLabelValues("publish")); got != 0 {
			t.Errorf("failures counted as denials: %v", got)
		}
	}
}

// N concurrent identical questions reach the backend once; a different
// question is asked on its own.
func TestProxySingleflight(t *testing.T) {
	leakcheck.Check(t)
	const n = 20
	release := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, q question) {
		<-release
		io.WriteString(w, `{"allow":true}`)
	})
	c, _ := proxyChecker(t, Proxy{URL: b.URL, Timeout: time.Minute})
	var waiting sync.WaitGroup
	waiting.Add(n)
	c.proxy.waiting = waiting.Done
	results := make(chan Decision, n+1)
	for range n {
		go func() { results <- ask(c, Subscribe, alice) }()
	}
	waiting.Wait() // every caller is waiting for an answer
	if got := b.requests.Load(); got > 1 {
		t.Fatalf("%d backend requests before any answer", got)
	}
	close(release)
	for range n {
		if d := <-results; d != Allow {
			t.Errorf("shared answer = %v", d)
		}
	}
	if got := b.requests.Load(); got != 1 {
		t.Errorf("backend asked %d times for %d identical questions, want 1", got, n)
	}
	other := alice
	other.ConnID++
	c.proxy.waiting = nil
	if d := ask(c, Subscribe, other); d != Allow || b.requests.Load() != 2 {
		t.Errorf("another connection's question: %v, %d requests", d, b.requests.Load())
	}
}

// A caller whose connection ends stops waiting; the shared request goes on
// for the others and ends within its timeout.
func TestProxyCallerGoneWhileWaiting(t *testing.T) {
	leakcheck.Check(t)
	release := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, q question) {
		<-release
		io.WriteString(w, `{"allow":true}`)
	})
	c, m := proxyChecker(t, Proxy{URL: b.URL, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan struct{})
	c.proxy.waiting = func() { close(waited) }
	done := make(chan Decision)
	go func() {
		q := alice
		q.Action = Subscribe
		done <- c.Check(ctx, q)
	}()
	<-waited
	cancel()
	if d := <-done; d != Unavailable {
		t.Errorf("caller gone: %v", d)
	}
	close(release)
	if got := testutil.ToFloat64(m.TopicDenied.WithLabelValues("subscribe")); got != 0 {
		t.Errorf("a caller that left counted as denied")
	}
}

func TestProxyCache(t *testing.T) {
	leakcheck.Check(t)
	var allow atomic.Bool
	allow.Store(true)
	b := newBackend(t, func(w http.ResponseWriter, q question) {
		if q.Topic == "p:500" {
			w.WriteHeader(500)
			return
		}
		json.NewEncoder(w).Encode(map[string]bool{"allow": allow.Load()})
	})
	var now atomic.Int64
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	c, _ := proxyCheckerAt(t, Proxy{URL: b.URL, Timeout: time.Minute, CacheTTL: 10 * time.Second}, clock)
	asks := func() int64 { return b.requests.Load() }

	// Publish answers are reused per (user, topic) until they expire...
	ask(c, Publish, alice)
	allow.Store(false)
	for range 3 {
		if d := ask(c, Publish, alice); d != Allow {
			t.Fatalf("cached allow = %v", d)
		}
	}
	otherConn := alice
	otherConn.ConnID, otherConn.IP = 99, netip.MustParseAddr("192.0.2.9")
	if d := ask(c, Publish, otherConn); d != Allow || asks() != 1 {
		t.Fatalf("same user, another connection: %v after %d requests", d, asks())
	}
	now.Add(int64(10 * time.Second))
	if d := ask(c, Publish, alice); d != Deny || asks() != 2 {
		t.Fatalf("after the TTL: %v after %d requests", d, asks())
	}
	// ...denials too.
	if d := ask(c, Publish, alice); d != Deny || asks() != 2 {
		t.Fatalf("cached deny: %v after %d requests", d, asks())
	}
	// Subscribe answers, anonymous connections and failures are never cached.
	ask(c, Subscribe, alice)
	ask(c, Subscribe, alice)
	anon := alice
	anon.User = ""
	ask(c, Publish, anon)
	ask(c, Publish, anon)
	failing := alice
	failing.Topic = "p:500"
	ask(c, Publish, failing)
	ask(c, Publish, failing)
	if asks() != 8 {
		t.Errorf("%d requests, want 8", asks())
	}
	// Another user, another topic: their own entries.
	bob := alice
	bob.User = "bob"
	ask(c, Publish, bob)
	ask(c, Publish, bob)
	if asks() != 9 {
		t.Errorf("%d requests, want 9", asks())
	}
}

func TestAnswerCacheBounded(t *testing.T) {
	t.Parallel()
	c := newAnswerCache(8)
	now := time.Unix(0, 0)
	later := now.Add(time.Hour)
	for i := range 1000 {
		c.put("u", strings.Repeat("t", i%50+1), i%2 == 0, later)
		if n := c.len(); n > 8 {
			t.Fatalf("after %d puts the cache holds %d entries, bound 8", i+1, n)
		}
	}
	// A recent entry is found; an entry read from the old generation is
	// carried forward and survives the next turnover.
	c.put("u", "hot", true, later)
	for i := range 100 {
		if allow, ok := c.get("u", "hot", now); !ok || !allow {
			t.Fatalf("hot entry lost after %d more puts", i)
		}
		c.put("u", "cold"+strings.Repeat("x", i), false, later)
	}
	if _, ok := c.get("u", "hot", later); ok {
		t.Error("an expired entry was returned")
	}
}

func failPolicy(open bool) FailPolicy {
	if open {
		return FailOpen
	}
	return FailClosed
}

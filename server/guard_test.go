package server

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
)

// serverGoroutines counts goroutines running this package's code.
func serverGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("rtserver/server.(*conn)")) {
			n++
		}
	}
	return n
}

// An idle connection costs at most one goroutine: the read loop. The
// writer exists only while something is queued, pings run on a timer.
func TestIdleConnectionHasOneGoroutine(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Options{})
	const n = 50
	for range n {
		c := wstest.Dial(t, url)
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"idle"}`))
	}
	// Writers exit once the subscribe answers are written: wait for that.
	deadline := time.Now().Add(10 * time.Second)
	for serverGoroutines() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d server goroutines for %d idle connections, want at most %d", serverGoroutines(), n, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g := serverGoroutines(); g != n {
		t.Fatalf("%d server goroutines for %d idle connections, want exactly one each", g, n)
	}
}

// A publish encodes its frame once, whatever the number of subscribers:
// the allocations of the publish path do not grow with the fan-out.
func TestPublishAllocatesOncePerPublish(t *testing.T) {
	s := New(Options{Metrics: metrics.NewDiscard()})
	data := []byte(`{"text":"hello"}`)
	allocs := func(subs int) float64 {
		topic := "fan:" + strings.Repeat("x", subs%7)
		conns := make([]*conn, subs)
		for i := range conns {
			c := &conn{s: s, queue: make([][]byte, 0, 2048)}
			c.idle.L = &c.mu
			c.writing = true // no writer goroutine: the test drains the queue
			conns[i] = c
			s.hub.subscribe(c, topic)
		}
		defer func() {
			for _, c := range conns {
				s.hub.unsubscribe(c, topic)
			}
		}()
		return testing.AllocsPerRun(1000, func() {
			s.hub.publish(topic, data)
			for _, c := range conns {
				c.mu.Lock()
				c.queue, c.queued = c.queue[:0], 0
				c.mu.Unlock()
			}
		})
	}
	one, hundred := allocs(1), allocs(100)
	if one != 1 || hundred != 1 {
		t.Fatalf("publish allocates %v with 1 subscriber and %v with 100; want 1 (the shared frame) each", one, hundred)
	}
}

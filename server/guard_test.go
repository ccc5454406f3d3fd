package server

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
)

// serverGoroutines counts goroutines running this package's code.
func serverGoroutines() int {
	n := 0
	for _, g := range bytes.Split(allStacks(), []byte("\n\n")) {
		if bytes.Contains(g, []byte("rtserver/server.(*conn)")) {
			n++
		}
	}
	return n
}

// An idle connection costs no goroutine: its socket waits in the
// server's poller (conn.park). The writer exists only while something is
// queued; its keepalive is one entry in the server's ping heap, not a
// timer of its own.
func TestIdleConnectionHasNoGoroutine(t *testing.T) {
	fastPathOnly(t)
	leakcheck.Check(t)
	s, url := startServer(t, Deps{})
	const n = 50
	for range n {
		c := wstest.Dial(t, url)
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"idle"}`))
	}
	// Read goroutines end once they park, writers once the subscribe
	// answers are written: wait for that.
	deadline := time.Now().Add(10 * time.Second)
	testkit.Eventually(t, time.Until(deadline), func() string {
		return fmt.Sprintf("%d server goroutines and %d parked for %d idle connections, want 0 and %d", serverGoroutines(), parkedConns(s), n, n)
	}, func() bool { return serverGoroutines() == 0 && parkedConns(s) == n })
	if k := s.poller.known(); k != n {
		t.Fatalf("the poller knows %d connections, want %d", k, n)
	}
	if p := s.pings.Len(); p != n {
		t.Fatalf("%d keepalive steps pending for %d idle connections, want one each", p, n)
	}
}

// parkedConns counts s's connections parked in its poller.
func parkedConns(s *Server) int {
	n := 0
	for _, c := range s.snapshotConns() {
		if c.raw.Parked() {
			n++
		}
	}
	return n
}

// A publish encodes its frame once, whatever the number of subscribers:
// the allocations of the publish path do not grow with the fan-out.
func TestPublishAllocatesOncePerPublish(t *testing.T) {
	s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
	data := []byte(`{"text":"hello"}`)
	allocs := func(subs int) float64 {
		topic := "fan:" + strings.Repeat("x", subs%7)
		conns := make([]*conn, subs)
		for i := range conns {
			c := &conn{s: s, queue: make([][]byte, 0, 2048)}
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
			s.hub.publish(topic, data, nil)
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

// A delivery to a subscriber whose socket takes the frame at once is one
// write from the publishing goroutine when it flushes what it held: no
// writer goroutine, no allocation. The publish allocates its frame once,
// whatever the fan-out.
func TestDirectDeliveryAllocatesNothing(t *testing.T) {
	s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const runs = 200
	data := []byte(`{"text":"hello"}`)
	allocs := func(subs int) float64 {
		topic := "direct:" + strconv.Itoa(subs)
		conns := make([]*conn, subs)
		for i := range conns {
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close() // never read: runs+1 small frames fit the socket buffers
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			c := &conn{s: s, raw: wsock.NewConn(server)}
			conns[i] = c
			s.hub.subscribe(c, topic)
		}
		var held holdSet
		n := testing.AllocsPerRun(runs, func() {
			s.hub.publish(topic, data, &held)
			held.flush() // what the read loop does before it waits
		})
		for _, c := range conns {
			if c.writing || c.queued != 0 || c.raw.Pending() {
				t.Fatalf("a delivery was queued, not written directly (writing %v, queued %d)", c.writing, c.queued)
			}
			s.hub.unsubscribe(c, topic)
		}
		return n
	}
	one, hundred := allocs(1), allocs(100)
	if one != 1 || hundred != 1 {
		t.Fatalf("publish allocates %v with 1 subscriber and %v with 100; want 1 (the shared frame) each", one, hundred)
	}
	if g := serverGoroutines(); g != 0 {
		t.Fatalf("%d server goroutines after direct deliveries, want 0", g)
	}
}

// Keepalive pings are answered without waking the read loop into the
// WebSocket library: after several ping rounds every idle connection is
// still open and parked again, with no goroutine.
func TestPingRoundsLeaveConnectionsParked(t *testing.T) {
	fastPathOnly(t)
	leakcheck.Check(t)
	s, url := startServer(t, Deps{}, Config{PingInterval: 20 * time.Millisecond, WriteTimeout: time.Second})
	const n = 10
	for range n {
		c := wstest.Dial(t, url)
		go func() { // a real client reads, and so answers pings
			for {
				if _, err := c.Read(); err != nil {
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	answered := func() bool {
		for _, c := range s.snapshotConns() {
			if c.raw.Pongs() < 3 {
				return false
			}
		}
		return true
	}
	opened := func() int64 { conns, _ := s.Counts(); return conns }
	testkit.Eventually(t, time.Until(deadline), func() string {
		return fmt.Sprintf("%d connections open, want %d, each with 3 pongs", opened(), n)
	}, func() bool { return opened() == n && answered() })
	// Pings keep coming: a connection is parked between them, and no
	// read goroutine is ever inside the WebSocket library.
	testkit.Eventually(t, time.Until(deadline), func() string {
		return fmt.Sprintf("%d of %d connections parked, %d read loops in the library", parkedConns(s), n, inLibraryRead())
	}, func() bool { return parkedConns(s) == n && inLibraryRead() == 0 })
}

// inLibraryRead counts read loops inside the WebSocket library's read.
func inLibraryRead() int {
	return bytes.Count(allStacks(), []byte("server.(*conn).read(")) - inAwaitInput()
}

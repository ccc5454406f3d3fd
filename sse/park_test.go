package sse

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/server"
)

// streamServer is a server of cfg and its SSE handler over real TCP.
func streamServer(t *testing.T, cfg server.Config) (*Handler, string) {
	t.Helper()
	s, err := server.New(cfg, server.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	h := testkit.Must(New(Config{}, Deps{WebSocket: s}))
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return h, ts.Listener.Addr().String()
}

// openStream opens GET /sse?topic=... on a plain TCP connection and reads
// until its subscribed event.
func openStream(t *testing.T, addr, topic string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte("GET /sse?topic=" + topic + " HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	readUntil(t, c, r, "event: subscribed\n")
	return c, r
}

// readUntil reads the stream until a line equal to line's.
func readUntil(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream for %q: %v", line, err)
		}
		if l == line {
			return
		}
	}
}

// Idle event streams keep no goroutine (their connections park as idle
// WebSockets do), wake for what comes, and end as soon as their clients
// hang up, though no keepalive will write to them for an hour.
func TestIdleStreamsParkAndEndWithTheirClients(t *testing.T) {
	leakcheck.Check(t)
	// Keepalive an hour away: nothing but the client's own end can end a
	// stream here.
	h, addr := streamServer(t, server.Config{PingInterval: time.Hour})
	const n = 20
	before := runtime.NumGoroutine()
	var conns []net.Conn
	var readers []*bufio.Reader
	for i := range n {
		c, r := openStream(t, addr, "t"+strconv.Itoa(i%2))
		conns, readers = append(conns, c), append(readers, r)
	}
	// The poller's goroutine, and perhaps an HTTP connection's winding
	// down: never one per stream.
	testkit.Eventually(t, 10*time.Second, func() string {
		return strconv.Itoa(runtime.NumGoroutine()-before) + " goroutines more than before " + strconv.Itoa(n) + " idle streams"
	}, func() bool { return runtime.NumGoroutine()-before < n/2 })

	// A publish wakes every subscriber's connection.
	resp, err := http.Post("http://"+addr, "application/json", strings.NewReader(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"t0","data":7}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for i := 0; i < n; i += 2 {
		readUntil(t, conns[i], readers[i], `data: {"topic":"t0","data":7}`+"\n")
	}

	for _, c := range conns {
		c.Close()
	}
	testkit.Eventually(t, 10*time.Second, func() string {
		return strconv.Itoa(h.Sessions()) + " sessions open after their clients left"
	}, func() bool { return h.Sessions() == 0 })
}

// On the portable path (limits.portableSockets) the WebSocket library
// reads an event stream's connection, which then keeps its goroutine, as
// a WebSocket's does there: streams still carry what is published.
func TestStreamsOnThePortablePath(t *testing.T) {
	leakcheck.Check(t)
	_, addr := streamServer(t, server.Config{PortableSockets: true})
	c, r := openStream(t, addr, "p")
	resp, err := http.Post("http://"+addr, "application/json", strings.NewReader(`{"jsonrpc":"2.0","method":"publish","params":{"topic":"p","data":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	readUntil(t, c, r, `data: {"topic":"p","data":1}`+"\n")
	c.Close()
}

package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/sse"
)

// An event stream's connection is upgraded in process as the door's
// upgrades are, by wsock alone: it has no WebSocket library object, and it
// parks. A stream that ends, whichever way, is cleaned up.
func TestEventStreamsHaveNoLibraryObject(t *testing.T) {
	fastPathOnly(t)
	leakcheck.Check(t)
	s, _ := startServer(t, Deps{})
	hs := httptest.NewServer(testkit.Must(sse.New(sse.Config{}, sse.Deps{WebSocket: s})))
	t.Cleanup(hs.Close)
	addr := strings.TrimPrefix(hs.URL, "http://")
	var clients []net.Conn
	for _, query := range []string{"topic=a", "topic=a&topic=b", "rpc"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		if _, err := c.Write([]byte("GET /sse?" + query + " HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		status, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || status != "HTTP/1.1 200 OK\r\n" {
			t.Fatalf("GET /sse?%s: %q, %v", query, status, err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() string {
		return fmt.Sprintf("%d of %d streams' connections parked", parkedConns(s), len(clients))
	}, func() bool { return parkedConns(s) == len(clients) })
	for _, c := range s.snapshotConns() {
		if c.ws != nil {
			t.Fatal("an event stream's connection was upgraded by the WebSocket library")
		}
	}
	for _, c := range clients {
		c.Close()
	}
	testkit.Eventually(t, 10*time.Second, func() string {
		open, _ := s.Counts()
		return fmt.Sprintf("%d connections open, %d known to the poller", open, s.poller.known())
	}, func() bool { open, _ := s.Counts(); return open == 0 && s.poller.known() == 0 })
}

package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// Closes from every path the server has race the clients' own input and
// the end of their streams, on parked connections: each connection runs
// its cleanup exactly once (the server's WaitGroup would go negative, or
// Shutdown would wait forever), nothing stays open or known to the
// poller, and no goroutine is left (leakcheck). Both ways an upgrade is
// made: by the door and wsock (no WebSocket library object), and by
// net/http and the library.
func TestParkedConnectionsCloseExactlyOnce(t *testing.T) {
	fastPathOnly(t)
	leakcheck.Check(t)
	t.Run("door", parkedConnectionsCloseExactlyOnce)
	t.Run("net/http", func(t *testing.T) {
		withNetHTTP(t)
		parkedConnectionsCloseExactlyOnce(t)
	})
}

func parkedConnectionsCloseExactlyOnce(t *testing.T) {
	s, url := startServer(t, Deps{})
	const rounds, n = 5, 24
	for round := range rounds {
		clients := make([]*wstest.Conn, n)
		for i := range clients {
			clients[i] = wstest.Dial(t, url)
			go func() { // reading, a client answers close handshakes
				for {
					if _, err := clients[i].Read(); err != nil {
						return
					}
				}
			}()
		}
		testkit.Eventually(t, 10*time.Second, func() string {
			return fmt.Sprintf("round %d: %d of %d connections parked", round, parkedConns(s), n)
		}, func() bool { return parkedConns(s) == n })
		conns := s.snapshotConns()
		for _, c := range conns {
			if library := c.ws != nil; library != netHTTPTest.Load() {
				t.Fatalf("upgraded by the WebSocket library: %v, served by net/http: %v", library, netHTTPTest.Load())
			}
		}
		var wg sync.WaitGroup
		for i, c := range conns {
			client := clients[i%len(clients)]
			// The server's close, from one of its paths...
			wg.Go(func() {
				switch i % 4 {
				case 0:
					c.abort() // a failed write, a missed pong
				case 1:
					c.goAway() // a hard stop
				case 2:
					c.closeWith(websocket.StatusPolicyViolation, "test", false) // expiry, the server API, a slow consumer
				case 3:
					c.closeWith(websocket.StatusServiceRestart, "drain", true) // a drain
				}
			})
			// ...racing the client's input (a wake-up from the poller)
			// or its going away.
			wg.Go(func() {
				if i%2 == 0 {
					client.TrySend(`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"x"},"id":1}`)
				} else {
					client.WS.CloseNow()
				}
			})
		}
		wg.Wait()
		testkit.Eventually(t, 10*time.Second, func() string {
			open, _ := s.Counts()
			return fmt.Sprintf("round %d: %d connections open, %d known to the poller", round, open, s.poller.known())
		}, func() bool { open, _ := s.Counts(); return open == 0 && s.poller.known() == 0 })
		for _, c := range clients {
			c.WS.CloseNow()
		}
	}
}

// A connection parked since its upgrade is resumed by each path that
// ends it from outside, and by the client's input: a closed socket is out
// of the poller's set, so without the resume its cleanup would never run.
func TestParkedConnectionResumes(t *testing.T) {
	fastPathOnly(t)
	leakcheck.Check(t)
	for name, end := range map[string]func(s *Server, c *conn, client *wstest.Conn){
		"server API disconnect": func(s *Server, c *conn, _ *wstest.Conn) {
			c.closeLater(websocket.StatusPolicyViolation, "bye", false, nil)
		},
		"abort":        func(s *Server, c *conn, _ *wstest.Conn) { c.abort() },
		"client close": func(s *Server, c *conn, client *wstest.Conn) { client.WS.Close(websocket.StatusNormalClosure, "") },
		"client gone":  func(s *Server, c *conn, client *wstest.Conn) { client.WS.CloseNow() },
	} {
		t.Run(name, func(t *testing.T) {
			s, url := startServer(t, Deps{})
			client := wstest.Dial(t, url)
			testkit.Eventually(t, 10*time.Second, "the connection parks", func() bool { return parkedConns(s) == 1 })
			go func() { // reading, the client answers a close handshake
				for {
					if _, err := client.Read(); err != nil {
						return
					}
				}
			}()
			end(s, s.snapshotConns()[0], client)
			testkit.Eventually(t, 10*time.Second, "the connection ends", func() bool {
				open, _ := s.Counts()
				return open == 0 && s.poller.known() == 0
			})
		})
	}
	// And a call: the parked connection answers it, and parks again.
	s, url := startServer(t, Deps{})
	client := wstest.Dial(t, url)
	for range 3 {
		testkit.Eventually(t, 10*time.Second, "the connection parks", func() bool { return parkedConns(s) == 1 })
		wstest.MustOK(t, client.Call("subscribe", `{"topic":"again"}`))
	}
}

// Behind plain net/http (not the door), a client that sends its first
// frame in the same write as the upgrade request has it answered: the
// bytes net/http read past the request head reach the read loop, which
// must not wait on the socket for input it already holds.
func TestFirstFrameWithTheUpgradeRequest(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{})
	addr := strings.TrimPrefix(url, "ws://")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	call := `{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"early"},"id":1}`
	if _, err := nc.Write(append([]byte(req), maskedText(call)...)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang guard, not a threshold
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", resp.Status)
	}
	// The answer to the call, an unmasked text frame.
	var head [2]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		t.Fatalf("no answer to the frame sent with the upgrade request: %v", err)
	}
	n := int(head[1] & 0x7f)
	if head[0] != 0x81 || n > 125 {
		t.Fatalf("frame head % x, want a short text frame", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`"result"`)) || !bytes.Contains(body, []byte(`"id":1`)) {
		t.Fatalf("answer %s, want the subscribe's result", body)
	}
}

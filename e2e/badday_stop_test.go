package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
)

// silentClient completes a WebSocket upgrade over raw TCP and then
// neither reads nor answers anything: a client that never answers the
// close handshake.
func silentClient(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := io.WriteString(nc, "GET /ws HTTP/1.1\r\nHost: "+addr+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", resp.Status)
	}
	return nc
}

// TestStopWithASilentClient: SIGTERM stops the binary while a client that
// never answers the close frame is connected: its wait ends with
// drain.duration (the close handshake's own bound is 5 s). The exit is
// awaited; its time is logged, not asserted.
func TestStopWithASilentClient(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "drain: {duration: 500ms}\n")
	silentClient(t, p.Addr)
	testkit.Eventually(t, 10*time.Second, "the connection counted", func() bool { return p.metric("connections_open") == 1 })
	began := time.Now()
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(30 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	t.Logf("stopped %v after SIGTERM with a silent client connected (drain.duration 500ms)", time.Since(began).Round(time.Millisecond))
}

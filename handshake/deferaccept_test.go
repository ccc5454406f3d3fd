package handshake

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// The door on a listener that defers accepts until a client's first
// bytes are in (ServingListener sets it where the kernel can).

// A head that came with its connection is served from the accept, without
// a peek (no read waits, no peek deadline), and without net/http.
func TestDeferringDoorServesHeadAtAccept(t *testing.T) {
	leakcheck.Check(t)
	e := startDeferringDoor(t, DefaultConfig(), time.Hour)
	release := e.dialHeld(t)
	e.event(t, "serve")
	release()
	<-e.ended
	if n := e.netHTTPConns.Load(); n != 0 {
		t.Fatalf("net/http got %d connections", n)
	}
}

// A refused upgrade whose head came with its connection is answered at
// the accept, byte for byte as the door answers any other.
func TestDeferringDoorShedsAtAcceptByteForByte(t *testing.T) {
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.MaxConnections = 1
	e := startDeferringDoor(t, cfg, time.Hour)
	release := e.dialHeld(t)
	e.event(t, "serve")

	c := e.raw(t)
	write(t, c, upgradeHead)
	got, err := io.ReadAll(c) // until the door closes it
	if err != nil {
		t.Fatal(err)
	}
	e.event(t, "peek") // read at the accept (shedNow)
	e.event(t, "shed")
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	if err != nil {
		t.Fatalf("%v: %q", err, got)
	}
	body, _ := io.ReadAll(resp.Body)
	ms := checkShed(t, resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, "OVERLOADED")
	if want := appendDoor503(nil, ms); !bytes.Equal(got, want) {
		t.Fatalf("answer\n%q\nwant\n%q", got, want)
	}
	if e.handled.Load() != 1 || rejected(e.m, "max_connections") != 1 {
		t.Fatalf("handled %d, rejected %v", e.handled.Load(), rejected(e.m, "max_connections"))
	}
	release()
	<-e.ended
}

// A client that connects and sends nothing is still handed over (when
// the kernel gives up deferring it), peeked at until the peek deadline,
// and closed by net/http's ReadHeaderTimeout.
func TestDeferringDoorSilentClientIsStillTimedOut(t *testing.T) {
	leakcheck.Check(t)
	e := startDeferringDoor(t, DefaultConfig(), 50*time.Millisecond)
	silent := e.raw(t)
	e.event(t, "peek")
	e.event(t, "pass")
	_ = silent.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	if n, err := silent.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("silent client: %d bytes, %v; want the server's close", n, err)
	}
	if e.netHTTPConns.Load() != 1 {
		t.Fatalf("net/http got %d connections, want the silent one", e.netHTTPConns.Load())
	}
}

// A head of which only a part came with the connection is read on by a
// peek, then served.
func TestDeferringDoorReadsOnAHeadSplitAtAccept(t *testing.T) {
	leakcheck.Check(t)
	e := startDeferringDoor(t, DefaultConfig(), time.Hour)
	c := e.raw(t)
	cut := strings.Index(upgradeHead, "Upgrade:")
	write(t, c, upgradeHead[:cut])
	e.event(t, "peek")
	write(t, c, upgradeHead[cut:])
	e.event(t, "serve")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c.Close()
	<-e.ended
}

// ServingListener defers the accepts of a TCP listener it is given.
func TestServingListenerDefersAccepts(t *testing.T) {
	g, _ := newGate(t, DefaultConfig())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := g.ServingListener(ln, "/ws", http.NotFoundHandler()).(*door)
	defer d.Close()
	if want := runtime.GOOS == "linux"; d.headIn != want {
		t.Fatalf("deferred accepts: %v on %s", d.headIn, runtime.GOOS)
	}
}

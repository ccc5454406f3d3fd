package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wsock"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/metrics"
)

// tcpPair is both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return client, server
}

// tcpConn is a conn over a real loopback TCP pair (so the direct,
// non-blocking write path is the one under test) and the client's end.
func tcpConn(t testing.TB, s *Server) (*conn, net.Conn) {
	t.Helper()
	client, server := tcpPair(t)
	return &conn{s: s, raw: wsock.NewConn(server)}, client
}

// writerIdle waits until c has no writer goroutine.
func writerIdle(c *conn) {
	c.mu.Lock()
	c.awaitWriter()
	c.mu.Unlock()
}

// Held frames stay queued until the flush, which writes them all in one
// write; a second flush has nothing to do.
func TestHeldFramesLeaveTogetherAtTheFlush(t *testing.T) {
	s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
	c, client := tcpConn(t, s)
	defer client.Close()
	defer c.raw.Close()
	var h holdSet
	var want []byte
	for i := range 3 {
		f := frameText([]byte(`{"n":` + strconv.Itoa(i) + `}`))
		want = append(want, f...)
		if !c.enqueueHeld(f, &h) {
			t.Fatal("a held frame was refused")
		}
	}
	if len(c.queue) != 3 || c.queued != len(want) || !h.pending() || len(h.conns) != 1 {
		t.Fatalf("before the flush: %d frames (%d bytes) queued, pending %v, %d conns held; want 3 (%d), true, 1",
			len(c.queue), c.queued, h.pending(), len(h.conns), len(want))
	}
	h.flush()
	if len(c.queue) != 0 || c.queued != 0 || c.writing || h.pending() {
		t.Fatalf("after the flush: %d frames (%d bytes) queued, writing %v, pending %v", len(c.queue), c.queued, c.writing, h.pending())
	}
	h.flush()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(client, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("client read %q (%v), want %q", got, err, want)
	}
}

// A publisher's own answers are held apart from its deliveries, whenever
// they were held, and its connection is held once: the flush writes them
// first before a large fan-out (ownFirst), last after a small one.
func TestOwnAnswersAreHeldApart(t *testing.T) {
	s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
	pub, pubClient := tcpConn(t, s)
	defer pubClient.Close()
	defer pub.raw.Close()
	sub, subClient := tcpConn(t, s)
	defer subClient.Close()
	defer sub.raw.Close()
	var h holdSet
	for i := range 2 {
		f := frameText([]byte(`{"n":` + strconv.Itoa(i) + `}`))
		if !sub.enqueueHeld(f, &h) || !pub.hold(f, &h, true) {
			t.Fatal("a held frame was refused")
		}
	}
	if h.own != pub || len(h.conns) != 1 || h.conns[0] != sub {
		t.Fatalf("held: own %p, others %v; want own %p (the publisher), others [%p]", h.own, h.conns, pub, sub)
	}
	h.flush()
	if h.own != nil || len(h.conns) != 0 || h.pending() || pub.queued != 0 || sub.queued != 0 {
		t.Fatalf("after the flush: own %p, %d others held, pending %v, queued %d and %d bytes",
			h.own, len(h.conns), h.pending(), pub.queued, sub.queued)
	}
}

// Whatever order frames are held (by any of several publishers), written
// directly, queued for the writer or flushed in, the client receives
// every frame once, in the order it was queued: held frames go out ahead
// of anything queued after them, whoever writes next.
func TestHeldDirectAndQueuedFramesKeepTheirOrder(t *testing.T) {
	leakcheck.Check(t)
	s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
	rapid.Check(t, func(rt *rapid.T) {
		c, client := tcpConn(t, s)
		defer client.Close()
		defer c.raw.Close()
		sets := []*holdSet{new(holdSet), new(holdSet)}
		var want []byte
		ops := rapid.SliceOfN(rapid.IntRange(0, 5), 1, 60).Draw(rt, "ops")
		for i, op := range ops {
			f := frameText([]byte(`{"i":` + strconv.Itoa(i) + `}`))
			var ok bool
			switch op {
			case 0, 1: // held by publisher 0 or 1, as its answer or a delivery
				ok = c.hold(f, sets[op], rapid.Bool().Draw(rt, "own"))
			case 2: // written at once (a reply, the bus)
				ok = c.enqueueFrame(f, true)
			case 3: // queued for the writer (a large topic from the bus)
				ok = c.enqueueFrame(f, false)
			case 4, 5: // publisher 0 or 1 runs out of input
				sets[op-4].flush()
				continue
			}
			if !ok {
				rt.Fatalf("frame %d was refused", i)
			}
			want = append(want, f...)
		}
		for _, h := range sets {
			h.flush()
		}
		writerIdle(c)
		end := frameText([]byte(`"end"`))
		if !c.enqueueFrame(end, true) {
			rt.Fatal("the last frame was refused")
		}
		writerIdle(c)
		want = append(want, end...)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(client, got); err != nil || !bytes.Equal(got, want) {
			rt.Fatalf("client read %q (%v), want %q", got, err, want)
		}
	})
}

// A busy publisher's deliveries are flushed every maxHeldPublishes
// publishes, not only when its input runs dry.
func TestHeldPublishesAreBounded(t *testing.T) {
	s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
	c, client := tcpConn(t, s)
	defer client.Close()
	defer c.raw.Close()
	s.hub.subscribe(c, "bounded")
	defer s.hub.unsubscribe(c, "bounded")
	var h holdSet
	for i := range maxHeldPublishes - 1 {
		s.hub.publish("bounded", []byte(strconv.Itoa(i)), &h)
	}
	if len(c.queue) != maxHeldPublishes-1 {
		t.Fatalf("%d frames held after %d publishes, want all", len(c.queue), maxHeldPublishes-1)
	}
	s.hub.publish("bounded", []byte(`"last"`), &h)
	if len(c.queue) != 0 || h.pending() {
		t.Fatalf("%d frames still held after %d publishes, want a flush", len(c.queue), maxHeldPublishes)
	}
}

// rawUpgrade opens a WebSocket connection by hand, so the test can send
// bytes a WebSocket library would not (half a frame).
func rawUpgrade(t *testing.T, wsURL string) net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(wsURL, "ws://")
	addr, path, _ := strings.Cut(addr, "/")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	req := "GET /" + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the 101")
	}
	return nc
}

// maskedText is a client's text frame with a zero mask key (the payload
// is unchanged by it).
func maskedText(payload string) []byte {
	f := []byte{0x81}
	if n := len(payload); n < 126 {
		f = append(f, 0x80|byte(n))
	} else {
		f = append(f, 0x80|126, byte(n>>8), byte(n))
	}
	return append(append(f, 0, 0, 0, 0), payload...)
}

// A publisher that sends a burst and then stalls halfway through its next
// frame does not hold its deliveries hostage: they are flushed when the
// read would wait for the rest of the frame.
func TestPublisherStalledMidFrameStillDelivers(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{Metrics: metrics.NewDiscard()})
	sub := wstest.Dial(t, url)
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"stall"}`))
	pub := rawUpgrade(t, url)
	publish := func(i int) []byte {
		return maskedText(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"publish","params":{"topic":"stall","data":{"i":` + strconv.Itoa(i) + `}}}`)
	}
	var burst []byte
	const n = 5
	for i := range n {
		burst = append(burst, publish(i)...)
	}
	last := publish(n)
	half := len(last) / 2
	burst = append(burst, last[:half]...)
	if _, err := pub.Write(burst); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got, want := sub.ExpectMessage("stall"), `{"i":`+strconv.Itoa(i)+`}`; got != want {
			t.Fatalf("message %d: %s, want %s", i, got, want)
		}
	}
	if _, err := pub.Write(last[half:]); err != nil {
		t.Fatal(err)
	}
	if got, want := sub.ExpectMessage("stall"), `{"i":`+strconv.Itoa(n)+`}`; got != want {
		t.Fatalf("message %d: %s, want %s", n, got, want)
	}
	// The publisher's answers arrive too (six results, held and flushed
	// like the deliveries).
	pub.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(pub)
	for i := 0; i <= n; i++ {
		hdr := make([]byte, 2)
		if _, err := io.ReadFull(br, hdr); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body := make([]byte, hdr[1]&0x7F)
		if _, err := io.ReadFull(br, body); err != nil || !strings.Contains(string(body), `"id":`+strconv.Itoa(i)+`,`) {
			t.Fatalf("answer %d: %q (%v)", i, body, err)
		}
	}
}

// Every idle connection pays for its conn: one more field must not move
// it to the next allocation size class (384 bytes) unnoticed.
func TestConnStaysInItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(conn{}); n > 352 {
		t.Fatalf("conn is %d bytes, over the 352-byte size class", n)
	}
}

// However a publisher's bytes arrive (frames of any size, split anywhere,
// in bursts that grow its read buffer and pauses that shrink it again),
// every publish is delivered once and in order.
func TestPublisherReadBufferKeepsEveryByte(t *testing.T) {
	leakcheck.Check(t)
	_, url := startServer(t, Deps{Metrics: metrics.NewDiscard()})
	sub := wstest.Dial(t, url)
	wstest.MustOK(t, sub.Call("subscribe", `{"topic":"bytes"}`))
	pub := rawUpgrade(t, url)
	go func() { _, _ = io.Copy(io.Discard, pub) }() // the answers
	next := 0
	rapid.Check(t, func(rt *rapid.T) {
		sizes := rapid.SliceOfN(rapid.IntRange(0, 9000), 1, 40).Draw(rt, "sizes")
		var stream []byte
		var want []string
		var ends []int // where each frame ends in stream
		for _, n := range sizes {
			data := `{"i":` + strconv.Itoa(next) + `,"p":"` + strings.Repeat("x", n) + `"}`
			next++
			want = append(want, data)
			stream = append(stream, maskedText(`{"jsonrpc":"2.0","id":1,"method":"publish","params":{"topic":"bytes","data":`+data+`}}`)...)
			ends = append(ends, len(stream))
		}
		// Written in chunks of random sizes; after some chunks, wait for
		// every message complete so far (the read then waits, and its
		// buffer shrinks).
		sent, got := 0, 0
		for sent < len(stream) {
			k := min(len(stream)-sent, rapid.IntRange(1, 20000).Draw(rt, "chunk"))
			if _, err := pub.Write(stream[sent : sent+k]); err != nil {
				rt.Fatal(err)
			}
			sent += k
			if !rapid.Bool().Draw(rt, "pause") && sent < len(stream) {
				continue
			}
			for ; got < len(ends) && ends[got] <= sent; got++ {
				if m := sub.ExpectMessage("bytes"); m != want[got] {
					rt.Fatalf("message %d: %.60s, want %.60s", got, m, want[got])
				}
			}
		}
	})
}

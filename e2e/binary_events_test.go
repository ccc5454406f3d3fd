package e2e

// What the server tells a binary (rt.msgpack) client besides messages:
// presence notifications and query results, and system events, decoded
// here by a MessagePack reader of the test's own (not the server's
// transcoder), so a frame the server encodes wrongly cannot be read back
// right by the same code.

import (
	"context"

	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// msgpackConn is a raw rt.msgpack connection: requests are encoded by the
// server's transcoder (what is sent is not under test), frames received
// are decoded by decodeMsgpack.
type msgpackConn struct {
	t  *testing.T
	ws *websocket.Conn
	id int
}

func dialMsgpack(t *testing.T, rawURL string) *msgpackConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, rawURL, &websocket.DialOptions{Subprotocols: []string{protocol.BinarySubprotocol}})
	if err != nil {
		t.Fatalf("dial %s: %v", rawURL, err)
	}
	if ws.Subprotocol() != protocol.BinarySubprotocol {
		t.Fatalf("the server chose %q", ws.Subprotocol())
	}
	t.Cleanup(func() { ws.CloseNow() })
	return &msgpackConn{t: t, ws: ws}
}

// recv reads and decodes one frame; it fails the test on a text frame or
// anything that is not one MessagePack map.
func (c *msgpackConn) recv() map[string]any {
	c.t.Helper()
	f, err := c.tryRecv()
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

func (c *msgpackConn) tryRecv() (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	typ, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageBinary {
		return nil, fmt.Errorf("a text frame on rt.msgpack: %s", b)
	}
	v, err := decodeMsgpack(b)
	if err != nil {
		return nil, fmt.Errorf("frame % x: %w", b, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("frame %v is not a map", v)
	}
	if _, has := m["jsonrpc"]; has {
		return nil, fmt.Errorf("frame %v has a jsonrpc member (the server leaves it out)", m)
	}
	return m, nil
}

// call sends a request and returns its result, skipping notifications
// (kept in skipped).
func (c *msgpackConn) call(method, paramsJSON string, skipped *[]map[string]any) map[string]any {
	c.t.Helper()
	c.id++
	req, ok := protocol.JSONToBinary(nil, []byte(`{"id":`+strconv.Itoa(c.id)+`,"method":"`+method+`","params":`+paramsJSON+`}`))
	if !ok {
		c.t.Fatalf("cannot encode %s", paramsJSON)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageBinary, req); err != nil {
		c.t.Fatal(err)
	}
	for {
		f := c.recv()
		if id, ok := f["id"].(int64); ok && id == int64(c.id) {
			res, ok := f["result"].(map[string]any)
			if !ok {
				c.t.Fatalf("%s: %v", method, f)
			}
			return res
		}
		if skipped != nil {
			*skipped = append(*skipped, f)
		}
	}
}

// next returns the next notification of method (from skipped first).
func (c *msgpackConn) next(method string, skipped *[]map[string]any) map[string]any {
	c.t.Helper()
	for len(*skipped) > 0 {
		f := (*skipped)[0]
		*skipped = (*skipped)[1:]
		if f["method"] == method {
			return f["params"].(map[string]any)
		}
	}
	for {
		if f := c.recv(); f["method"] == method {
			p, ok := f["params"].(map[string]any)
			if !ok {
				c.t.Fatalf("%s without params: %v", method, f)
			}
			return p
		}
	}
}

// A binary client gets presence notifications with each entry's name,
// presence query results, and the system events of a Redis outage and of
// a drain, all as MessagePack maps of the documented members (with the
// integers as integers), then the drain's close.
func TestBinaryPresenceAndSystemEvents(t *testing.T) {
	leakcheck.Check(t)
	r := redistest.Start(t)
	p := start(t, fleetConfig(r.URL(), presenceConfig))
	const alice, bob = "Alice Ω", "Bob"
	bin := dialMsgpack(t, p.WS()+"?name="+url.QueryEscape(alice))
	var skipped []map[string]any
	sub := bin.call("subscribe", `{"topic":"room:1"}`, &skipped)
	if len(sub) != 0 {
		t.Fatalf("subscribe result %v, want {}", sub)
	}

	js := wstest.Dial(t, p.WS()+"?name="+bob)
	wstest.MustOK(t, js.Call("subscribe", `{"topic":"room:1"}`))
	entryNamed := func(list any, name string) map[string]any {
		entries, _ := list.([]any)
		for _, e := range entries {
			if m, ok := e.(map[string]any); ok && m["name"] == name {
				return m
			}
		}
		return nil
	}
	var bobEntry map[string]any
	for bobEntry == nil {
		n := bin.next("presence", &skipped)
		if n["topic"] != "room:1" {
			t.Fatalf("presence notification %v", n)
		}
		bobEntry = entryNamed(n["joins"], bob)
	}
	if id, ok := bobEntry["client"].(string); !ok || id == "" {
		t.Fatalf("Bob's join %v has no client id", bobEntry)
	}

	page := bin.call("presence", `{"topic":"room:1"}`, &skipped)
	if entryNamed(page["clients"], alice) == nil || entryNamed(page["clients"], bob) == nil {
		t.Fatalf("presence result %v, want Alice and Bob by name", page)
	}
	if cur, ok := page["cursor"].(string); !ok || cur != "" {
		t.Fatalf("presence result's cursor %v, want \"\"", page["cursor"])
	}
	stats := bin.call("presenceStats", `{"topic":"room:1"}`, &skipped)
	if stats["clients"] != int64(2) {
		t.Fatalf("presenceStats %v, want 2 clients as an integer", stats)
	}

	js.WS.Close(websocket.StatusNormalClosure, "")
	for {
		n := bin.next("presence", &skipped)
		if left := entryNamed(n["leaves"], bob); left != nil {
			if left["client"] != bobEntry["client"] {
				t.Fatalf("Bob left as %v, joined as %v", left, bobEntry)
			}
			break
		}
	}

	r.Stop()
	if ev := bin.next("system", &skipped); ev["event"] != "degraded" {
		t.Fatalf("system %v, want degraded", ev)
	}
	r.Restart()
	if ev := bin.next("system", &skipped); ev["event"] != "recovered" {
		t.Fatalf("system %v, want recovered", ev)
	}
	testkit.Eventually(t, 30*time.Second, "readyz 200", func() bool { return p.status("/readyz") == 200 })

	p.signal(syscall.SIGTERM)
	ev := bin.next("system", &skipped)
	if ms, ok := ev["reconnectAfterMs"].(int64); ev["event"] != "draining" || !ok || ms <= 0 {
		t.Fatalf("system %v, want draining with reconnectAfterMs a positive integer", ev)
	}
	for {
		if _, err := bin.tryRecv(); err != nil {
			if code := websocket.CloseStatus(err); code != websocket.StatusServiceRestart {
				t.Fatalf("the drain closed with %v (%v), want 1012", code, err)
			}
			break
		}
	}
}

// decodeMsgpack decodes one MessagePack value and fails on bytes after
// it: maps as map[string]any (str keys only), arrays as []any, bins as
// []byte, integers as int64 (uint64 past its range), floats as float64.
func decodeMsgpack(b []byte) (any, error) {
	d := msgpackReader{b: b}
	v, err := d.value(0)
	if err == nil && d.i != len(b) {
		err = fmt.Errorf("%d bytes after the value", len(b)-d.i)
	}
	return v, err
}

type msgpackReader struct {
	b []byte
	i int
}

var errShort = errors.New("msgpack: truncated")

func (d *msgpackReader) take(n int) ([]byte, error) {
	if n < 0 || len(d.b)-d.i < n {
		return nil, errShort
	}
	s := d.b[d.i : d.i+n]
	d.i += n
	return s, nil
}

func (d *msgpackReader) uint(n int) (uint64, error) {
	s, err := d.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

func (d *msgpackReader) value(depth int) (any, error) {
	if depth > 64 {
		return nil, errors.New("msgpack: too deep")
	}
	h, err := d.take(1)
	if err != nil {
		return nil, err
	}
	c := h[0]
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c&0xf0 == 0x80:
		return d.mapOf(int(c&0x0f), depth)
	case c&0xf0 == 0x90:
		return d.arrayOf(int(c&0x0f), depth)
	case c&0xe0 == 0xa0:
		return d.str(int(c & 0x1f))
	}
	sized := func(n int) (int, error) { v, err := d.uint(n); return int(v), err }
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6:
		n, err := sized(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		s, err := d.take(n)
		return append([]byte(nil), s...), err
	case 0xca:
		v, err := d.uint(4)
		return float64(math.Float32frombits(uint32(v))), err
	case 0xcb:
		v, err := d.uint(8)
		return math.Float64frombits(v), err
	case 0xcc, 0xcd, 0xce, 0xcf:
		v, err := d.uint(1 << (c - 0xcc))
		if v > math.MaxInt64 {
			return v, err
		}
		return int64(v), err
	case 0xd0, 0xd1, 0xd2, 0xd3:
		n := 1 << (c - 0xd0)
		v, err := d.uint(n)
		shift := 64 - 8*n
		return int64(v<<shift) >> shift, err
	case 0xd9, 0xda, 0xdb:
		n, err := sized(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		return d.str(n)
	case 0xdc, 0xdd:
		n, err := sized(2 << (c - 0xdc))
		if err != nil {
			return nil, err
		}
		return d.arrayOf(n, depth)
	case 0xde, 0xdf:
		n, err := sized(2 << (c - 0xde))
		if err != nil {
			return nil, err
		}
		return d.mapOf(n, depth)
	}
	return nil, fmt.Errorf("msgpack: type 0x%02x is not in the protocol", c)
}

func (d *msgpackReader) str(n int) (any, error) {
	s, err := d.take(n)
	return string(s), err
}

func (d *msgpackReader) arrayOf(n int, depth int) (any, error) {
	a := make([]any, 0, min(n, 1024))
	for range n {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
	}
	return a, nil
}

func (d *msgpackReader) mapOf(n int, depth int) (any, error) {
	m := make(map[string]any, min(n, 1024))
	for range n {
		k, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("msgpack: map key %v is not a str", k)
		}
		if m[ks], err = d.value(depth + 1); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// The test's reader against hand-made frames: each format it decodes.
func TestDecodeMsgpack(t *testing.T) {
	f64 := []byte{0xcb, 0x40, 0x04, 0, 0, 0, 0, 0, 0} // 2.5
	tests := []struct {
		give []byte
		want string
	}{
		{[]byte{0x05}, "5"},
		{[]byte{0xff}, "-1"},
		{[]byte{0xd0, 0x80}, "-128"},
		{[]byte{0xd1, 0xff, 0x00}, "-256"},
		{[]byte{0xcd, 0x12, 0x34}, "4660"},
		{[]byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "18446744073709551615"},
		{f64, "2.5"},
		{[]byte{0xc0}, "<nil>"},
		{[]byte{0xc3}, "true"},
		{[]byte{0xa2, 'h', 'i'}, "hi"},
		{[]byte{0xd9, 0x02, 'h', 'i'}, "hi"},
		{[]byte{0xc4, 0x02, 0x00, 0xff}, "[0 255]"},
		{[]byte{0x92, 0x01, 0xa1, 'x'}, "[1 x]"},
		{[]byte{0xdc, 0x00, 0x01, 0x07}, "[7]"},
		{[]byte{0x81, 0xa1, 'a', 0x81, 0xa1, 'b', 0x02}, "map[a:map[b:2]]"},
		{[]byte{0xde, 0x00, 0x01, 0xa1, 'k', 0xc2}, "map[k:false]"},
	}
	for _, tt := range tests {
		v, err := decodeMsgpack(tt.give)
		if got := fmt.Sprint(v); err != nil || got != tt.want {
			t.Errorf("% x: %s, %v; want %s", tt.give, got, err, tt.want)
		}
	}
	for _, bad := range [][]byte{{0x92, 0x01}, {0x81, 0x01, 0x01}, {0xc1}, {0x01, 0x02}, {0xd4, 0x00, 0x00}} {
		if v, err := decodeMsgpack(bad); err == nil {
			t.Errorf("% x decoded as %v, want an error", bad, v)
		}
	}
}

package server

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
)

// The hijacked connection runs on small buffers and a corked writer. Every
// message size up to the read limit must still round-trip intact, through
// an RPC echo and through a publish to the sender's own subscription, and
// with frames coalesced (rt.batch) or not.
func TestEveryMessageSizeRoundTrips(t *testing.T) {
	leakcheck.Check(t)
	const limit = 16 << 10
	s, url := startServer(t, Options{Config: Config{MaxMessageBytes: limit}})
	s.Handle("echo", func(_ context.Context, r *Request) (any, error) { return r.Params, nil })
	for _, sub := range []string{"", BatchSubprotocol} {
		c := wstest.Dial(t, url, sub)
		if sub != "" && c.WS.Subprotocol() != sub {
			t.Fatalf("subprotocol %q not negotiated", sub)
		}
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"self"}`))
		frameFor := func(method string, size int) (string, string) {
			// Pad a string so the whole request frame is exactly size bytes.
			head := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":`
			if method == "publish" {
				head += `{"topic":"self","data":"`
			} else {
				head += `["`
			}
			tail := `"]}`
			if method == "publish" {
				tail = `"}}`
			}
			pad := size - len(head) - len(tail)
			if pad < 0 {
				return "", ""
			}
			payload := strings.Repeat(strconv.Itoa(size%10), pad)
			return head + payload + tail, payload
		}
		sizes := []int{}
		for n := 60; n <= 2048; n++ {
			sizes = append(sizes, n)
		}
		for n := 2049; n < limit; n += 97 {
			sizes = append(sizes, n)
		}
		sizes = append(sizes, limit-1, limit)
		for _, n := range sizes {
			frame, payload := frameFor("echo", n)
			if frame == "" {
				continue
			}
			c.Send(frame)
			m := c.Recv()
			var got []string
			if err := json.Unmarshal(m.Result, &got); err != nil || len(got) != 1 || got[0] != payload {
				t.Fatalf("echo of a %d-byte frame (sub %q) came back wrong", n, sub)
			}
		}
		// Publishes: the notification and the response may share a frame
		// under rt.batch; read until both are seen.
		for _, n := range []int{100, 511, 512, 513, 4095, 4096, 4097, limit} {
			frame, payload := frameFor("publish", n)
			c.Send(frame)
			gotMsg, gotResp := false, false
			for !gotMsg || !gotResp {
				b := c.RecvRaw()
				var batch []wstest.Frame
				if b[0] == '[' {
					if err := json.Unmarshal(b, &batch); err != nil {
						t.Fatal(err)
					}
				} else {
					var one wstest.Frame
					if err := json.Unmarshal(b, &one); err != nil {
						t.Fatal(err)
					}
					batch = []wstest.Frame{one}
				}
				for _, m := range batch {
					switch {
					case m.Method == "message":
						if string(m.Params.Data) != `"`+payload+`"` {
							t.Fatalf("published %d-byte frame arrived wrong", n)
						}
						gotMsg = true
					case string(m.ID) == "1":
						wstest.MustOK(t, m)
						gotResp = true
					}
				}
			}
		}
	}
}

// countingConn counts writes that reach the socket.
type countingConn struct {
	net.Conn
	writes int
	data   []byte
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes++
	c.data = append(c.data, p...)
	return len(p), nil
}

func (c *countingConn) SetWriteDeadline(time.Time) error { return nil }

func TestCorkedWritesLeaveAsOne(t *testing.T) {
	under := &countingConn{}
	cc := &corkConn{Conn: under}
	cc.Write([]byte("a"))
	if under.writes != 1 {
		t.Fatalf("uncorked write: %d socket writes, want 1", under.writes)
	}
	cc.cork(time.Second)
	for _, s := range []string{"b", "c", "d"} {
		cc.Write([]byte(s))
	}
	if under.writes != 1 {
		t.Fatalf("corked writes reached the socket: %d", under.writes)
	}
	if err := cc.uncork(); err != nil {
		t.Fatal(err)
	}
	if under.writes != 2 || string(under.data) != "abcd" {
		t.Fatalf("after uncork: %d writes, data %q; want 2 and abcd", under.writes, under.data)
	}
	if cc.buf != nil {
		t.Fatal("an uncorked connection still holds a buffer")
	}
	// A batch past maxCork goes out early rather than growing without bound.
	cc.cork(time.Second)
	cc.Write(make([]byte, maxCork))
	if under.writes != 3 {
		t.Fatalf("a full cork buffer was not flushed: %d writes", under.writes)
	}
	cc.uncork()
}

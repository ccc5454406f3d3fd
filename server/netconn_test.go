package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// The hijacked connection runs on small buffers and a corked writer. Every
// message size up to the read limit must still round-trip intact, through
// an RPC echo and through a publish to the sender's own subscription, and
// with frames coalesced (rt.batch) or not.
func TestEveryMessageSizeRoundTrips(t *testing.T) {
	leakcheck.Check(t)
	const limit = 16 << 10
	s, url := startServer(t, Deps{}, Config{MaxMessageBytes: limit})
	s.Handle("echo", func(_ context.Context, r *Request) (any, error) { return r.Params, nil })
	for _, sub := range []string{"", protocol.BatchSubprotocol} {
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

// The frame header is RFC 6455's for every length class, checked against
// a reference decoding.
func TestAppendTextHeader(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 65535, 65536, 70000, 1 << 32} {
		h := appendTextHeader(nil, n)
		if h[0] != 0x81 {
			t.Fatalf("n=%d: first byte %#x, want FIN|text", n, h[0])
		}
		var got int
		switch l := int(h[1]); {
		case l < 126:
			got = l
			if len(h) != 2 {
				t.Fatalf("n=%d: %d header bytes", n, len(h))
			}
		case l == 126:
			got = int(binary.BigEndian.Uint16(h[2:4]))
			if len(h) != 4 || n < 126 {
				t.Fatalf("n=%d: 16-bit length used wrongly (%d bytes)", n, len(h))
			}
		default:
			got = int(binary.BigEndian.Uint64(h[2:10]))
			if len(h) != 10 || n <= 0xFFFF {
				t.Fatalf("n=%d: 64-bit length used wrongly (%d bytes)", n, len(h))
			}
		}
		if got != n {
			t.Fatalf("n=%d: header says %d", n, got)
		}
	}
}

// Messages larger than 64 KiB (64-bit length headers) and many queued
// messages reach the client intact, with and without rt.batch.
func TestLargeAndQueuedMessagesArriveIntact(t *testing.T) {
	leakcheck.Check(t)
	s, url := startServer(t, Deps{})
	for _, sub := range []string{"", protocol.BatchSubprotocol} {
		c := wstest.Dial(t, url, sub)
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"big"}`))
		sizes := []int{0, 120, 126, 65530, 70000, 200000}
		for i := range 50 {
			sizes = append(sizes, 10+i)
		}
		for _, n := range sizes {
			if err := s.Publish("big", json.RawMessage(`"`+strings.Repeat("b", n)+`"`)); err != nil {
				t.Fatal(err)
			}
		}
		for k := 0; k < len(sizes); {
			b := c.RecvRaw()
			var got []wstest.Frame
			if b[0] == '[' {
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatal(err)
				}
			} else {
				var one wstest.Frame
				if err := json.Unmarshal(b, &one); err != nil {
					t.Fatal(err)
				}
				got = []wstest.Frame{one}
			}
			for _, m := range got {
				if want := `"` + strings.Repeat("b", sizes[k]) + `"`; string(m.Params.Data) != want {
					t.Fatalf("message %d (%d bytes, sub %q) arrived as %d bytes", k, sizes[k], sub, len(m.Params.Data))
				}
				k++
			}
		}
	}
}

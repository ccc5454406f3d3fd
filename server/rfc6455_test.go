package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/metrics"
)

// The conformance suite: RFC 6455's cases in the groups the Autobahn
// fuzzing client walks, sent byte for byte by a raw-frame client over TCP,
// with the fast path on and off (limits.portableSockets). Each case opens
// its own connection, sends frames, and expects either the server's answer
// or its close code.

// rawClient is a WebSocket client that writes frames byte for byte.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

// rawDial upgrades a TCP connection to url's server by hand.
func rawDial(t testing.TB, url string) *rawClient {
	t.Helper()
	host := strings.TrimPrefix(url, "ws://")
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	nc, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := io.WriteString(nc, "GET / HTTP/1.1\r\nHost: "+host+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", resp.Status)
	}
	return &rawClient{t: t, nc: nc, br: br}
}

// frame builds a client frame: first byte head (FIN, RSV, opcode), the
// payload masked unless unmasked.
func frame(head byte, payload []byte, unmasked bool) []byte {
	b := []byte{head}
	mask := byte(0x80)
	if unmasked {
		mask = 0
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, mask|byte(n))
	case n <= 0xFFFF:
		b = append(b, mask|126, byte(n>>8), byte(n))
	default:
		b = append(b, mask|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if unmasked {
		return append(b, payload...)
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

func (c *rawClient) send(frames ...[]byte) {
	c.t.Helper()
	if _, err := c.nc.Write(bytes.Join(frames, nil)); err != nil {
		c.t.Fatal(err)
	}
}

// read reads one server frame: its first byte and payload. Server frames
// must not be masked.
func (c *rawClient) read() (head byte, payload []byte, err error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard, not a threshold
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return 0, nil, err
	}
	if h[1]&0x80 != 0 {
		return 0, nil, errors.New("masked server frame")
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(c.br, l[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(c.br, l[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(l[:])
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(c.br, payload)
	return h[0], payload, err
}

// next reads frames until one that is not a ping (each ping is answered
// with its pong, as a live client's library does).
func (c *rawClient) next() (head byte, payload []byte) {
	c.t.Helper()
	for {
		head, payload, err := c.read()
		if err != nil {
			c.t.Fatalf("reading the server: %v", err)
		}
		if head == 0x89 {
			c.send(frame(0x8A, payload, false))
			continue
		}
		return head, payload
	}
}

// expectClose reads until the server's close frame and checks its code
// (and reason, unless empty); it answers it, as the closing handshake asks.
func (c *rawClient) expectClose(code uint16, reason string) {
	c.t.Helper()
	for {
		head, p := c.next()
		if head != 0x88 {
			continue // answers sent before the close
		}
		if len(p) < 2 {
			c.t.Fatalf("close frame without a code (% x), want %d", p, code)
		}
		if got := binary.BigEndian.Uint16(p); got != code || (reason != "" && string(p[2:]) != reason) {
			c.t.Fatalf("close %d %q, want %d %q", got, p[2:], code, reason)
		}
		c.send(frame(0x88, p[:2], false))
		return
	}
}

// expectEnd expects the connection to end: a close frame with code, or
// the end of the stream without one (the RFC lets a server that must fail
// the connection close it without a close frame).
func (c *rawClient) expectEnd(code uint16) {
	c.t.Helper()
	head, p, err := c.read()
	if err != nil {
		return
	}
	if head != 0x88 || len(p) < 2 || binary.BigEndian.Uint16(p) != code {
		c.t.Fatalf("frame %#x % x, want the end or a close %d", head, p, code)
	}
}

// expectText reads the next data frame and checks it is a final text
// frame that contains want.
func (c *rawClient) expectText(want string) {
	c.t.Helper()
	head, p := c.next()
	if head != 0x81 || !strings.Contains(string(p), want) {
		c.t.Fatalf("frame %#x %.200q, want a text frame with %.200q", head, p, want)
	}
}

// echoCall is a JSON-RPC echo request whose whole frame is size bytes
// (at least 64), with filler chosen by fill.
func echoCall(size int, fill string) string {
	head, tail := callHead, callTail
	n := size - len(head) - len(tail)
	return head + strings.Repeat(fill, n/len(fill)) + strings.Repeat("x", n%len(fill)) + tail
}

// callHead starts an echoCall.
const callHead = `{"jsonrpc":"2.0","id":7,"method":"echo","params":{"d":"`

// callTail ends an echoCall.
const callTail = `"}}`

// bothPaths runs test with the fast path on, then off.
func bothPaths(t *testing.T, test func(t *testing.T, url string, m *metrics.Metrics)) {
	for _, portable := range []bool{false, true} {
		name := "fast"
		if portable {
			name = "portable"
		}
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			if portable {
				withPortable(t)
			}
			m := metrics.NewDiscard()
			s, url := startServer(t, Deps{Metrics: m}, Config{MaxMessageBytes: 1 << 17})
			s.Handle("echo", func(_ context.Context, r *Request) (any, error) { return r.Params, nil })
			test(t, url, m)
		})
	}
}

func TestRFC6455Conformance(t *testing.T) {
	bothPaths(t, func(t *testing.T, url string, _ *metrics.Metrics) {
		// 1. Framing: every length encoding, masked.
		t.Run("framing", func(t *testing.T) {
			c := rawDial(t, url)
			for _, n := range []int{64, 125, 126, 127, 0xFFFF, 0x10000, 1 << 17} {
				call := echoCall(n, "a")
				c.send(frame(0x81, []byte(call), false))
				c.expectText(`"result":{"d":"` + strings.Repeat("a", n-len(callHead)-len(callTail)) + `"}`)
			}
		})
		// An unmasked client frame is a protocol error (section 5.1).
		t.Run("framing/unmasked", func(t *testing.T) {
			c := rawDial(t, url)
			c.send(frame(0x81, []byte(echoCall(64, "a")), true))
			c.expectEnd(1002)
		})

		// 2. Ping and pong: a ping is answered with its payload; an
		// unsolicited pong is ignored; a control payload over 125 bytes is
		// a protocol error.
		t.Run("ping-pong", func(t *testing.T) {
			c := rawDial(t, url)
			for _, n := range []int{0, 1, 125} {
				p := bytes.Repeat([]byte{'p'}, n)
				c.send(frame(0x89, p, false))
				head, got := c.next()
				if head != 0x8A || !bytes.Equal(got, p) {
					c.t.Fatalf("ping of %d bytes answered %#x %q", n, head, got)
				}
			}
			c.send(frame(0x8A, []byte("unsolicited"), false), frame(0x81, []byte(echoCall(64, "b")), false))
			c.expectText("bbbb")
		})
		// A ping sent a byte at a time, and ten in one write, each answered
		// in order.
		t.Run("ping-pong/chops", func(t *testing.T) {
			c := rawDial(t, url)
			p := bytes.Repeat([]byte{'c'}, 125)
			for _, b := range frame(0x89, p, false) {
				c.send([]byte{b})
			}
			if head, got := c.next(); head != 0x8A || !bytes.Equal(got, p) {
				t.Fatalf("a ping sent in chops answered %#x %q", head, got)
			}
		})
		t.Run("ping-pong/ten", func(t *testing.T) {
			c := rawDial(t, url)
			var fs [][]byte
			for i := range 10 {
				fs = append(fs, frame(0x89, []byte{'0' + byte(i)}, false))
			}
			c.send(fs...)
			for i := range 10 {
				if head, got := c.next(); head != 0x8A || string(got) != string('0'+rune(i)) {
					t.Fatalf("pong %d: %#x %q", i, head, got)
				}
			}
		})
		t.Run("ping-pong/oversized", func(t *testing.T) {
			c := rawDial(t, url)
			c.send(frame(0x89, bytes.Repeat([]byte{'p'}, 126), false))
			c.expectClose(1002, "")
		})

		// 3. Reserved bits: no extension was negotiated, so each is an
		// error, on data and control frames.
		for _, head := range []byte{0xC1, 0xA1, 0x91, 0xF1, 0xC9} {
			t.Run("reserved-bits", func(t *testing.T) {
				c := rawDial(t, url)
				c.send(frame(head, []byte("x"), false))
				c.expectClose(1002, "")
			})
		}

		// 4. Opcodes: reserved data (3-7) and control (0xB-0xF) opcodes.
		for _, op := range []byte{3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF} {
			t.Run("opcodes", func(t *testing.T) {
				c := rawDial(t, url)
				c.send(frame(0x80|op, []byte("x"), false))
				c.expectClose(1002, "")
			})
		}
		// Binary messages are not part of the JSON protocol: 1003.
		t.Run("opcodes/binary", func(t *testing.T) {
			c := rawDial(t, url)
			c.send(frame(0x82, []byte(echoCall(64, "b")), false))
			c.expectClose(1003, "binary frames are not supported")
		})

		// 5. Fragmentation: a message in fragments, with control frames
		// between them, is one message; continuation without a start, a
		// new message inside one, and fragmented control frames are
		// protocol errors.
		t.Run("fragmentation", func(t *testing.T) {
			c := rawDial(t, url)
			call := echoCall(300, "f")
			c.send(frame(0x01, []byte(call[:100]), false), frame(0x89, []byte("between"), false))
			head, p := c.next()
			if head != 0x8A || string(p) != "between" {
				t.Fatalf("ping between fragments answered %#x %q", head, p)
			}
			c.send(frame(0x00, []byte(call[100:200]), false), frame(0x8A, nil, false), frame(0x80, []byte(call[200:]), false))
			c.expectText("ffff")
			// Fragments of one byte each.
			call = echoCall(70, "g")
			fs := [][]byte{frame(0x01, []byte(call[:1]), false)}
			for i := 1; i < len(call)-1; i++ {
				fs = append(fs, frame(0x00, []byte(call[i:i+1]), false))
			}
			c.send(append(fs, frame(0x80, []byte(call[len(call)-1:]), false))...)
			c.expectText("gggg")
			// Empty fragments.
			c.send(frame(0x01, nil, false), frame(0x00, []byte(call), false), frame(0x80, nil, false))
			c.expectText("gggg")
		})
		for name, frames := range map[string][][]byte{
			"continuation-first":  {frame(0x80, []byte("x"), false)},
			"message-inside-one":  {frame(0x01, []byte("x"), false), frame(0x81, []byte("y"), false)},
			"fragmented-ping":     {frame(0x09, []byte("x"), false)},
			"fragmented-close":    {frame(0x08, []byte{3, 0xe8}, false)},
			"continuation-of-end": {frame(0x81, []byte(echoCall(64, "c")), false), frame(0x80, []byte("x"), false)},
		} {
			t.Run("fragmentation/"+name, func(t *testing.T) {
				c := rawDial(t, url)
				c.send(frames...)
				c.expectClose(1002, "")
			})
		}

		// 6. UTF-8: text must be valid UTF-8 as a whole message; a
		// character may be split across fragments.
		t.Run("utf8", func(t *testing.T) {
			c := rawDial(t, url)
			call := echoCall(80, "κόσμε")
			c.send(frame(0x81, []byte(call), false))
			c.expectText("κόσμε")
			i := strings.Index(call, "κ") + 1 // inside the two bytes of κ
			c.send(frame(0x01, []byte(call[:i]), false), frame(0x80, []byte(call[i:]), false))
			c.expectText("κόσμε")
		})
		for name, payload := range map[string]string{
			"invalid-byte":   "\xff",
			"overlong":       "\xc0\xaf",
			"surrogate":      "\xed\xa0\x80",
			"past-max":       "\xf4\x90\x80\x80",
			"truncated-last": "\xce",
		} {
			t.Run("utf8/"+name, func(t *testing.T) {
				c := rawDial(t, url)
				call := echoCall(64, "u")
				c.send(frame(0x81, []byte(call[:len(call)-len(callTail)]+payload+callTail), false))
				c.expectClose(1007, "text frame is not valid UTF-8")
			})
			t.Run("utf8/split-"+name, func(t *testing.T) {
				c := rawDial(t, url)
				call := echoCall(64, "u")
				msg := call[:len(call)-len(callTail)] + payload + callTail
				i := len(call) - len(callTail) + 1
				c.send(frame(0x01, []byte(msg[:i]), false), frame(0x80, []byte(msg[i:]), false))
				c.expectClose(1007, "text frame is not valid UTF-8")
			})
		}

		// A valid message sent a byte at a time.
		t.Run("utf8/chops", func(t *testing.T) {
			c := rawDial(t, url)
			for _, b := range frame(0x81, []byte(echoCall(80, "κόσμε")), false) {
				c.send([]byte{b})
			}
			c.expectText("κόσμε")
		})
		// Failing fast: an invalid sequence is refused when it arrives,
		// before the message's final fragment (which never comes here):
		// in a first fragment, in a later one, and split across two.
		for name, frames := range map[string][][]byte{
			"first-fragment":  {frame(0x01, []byte(callHead+"\xff"), false)},
			"later-fragment":  {frame(0x01, []byte(callHead+"κόσμε"), false), frame(0x00, []byte("\xf4\x90\x80\x80"), false)},
			"split":           {frame(0x01, []byte(callHead+"κόσμε\xf4"), false), frame(0x00, []byte("\x90\x80\x80"), false)},
			"split-surrogate": {frame(0x01, []byte(callHead+"\xed"), false), frame(0x00, []byte("\xa0"), false)},
		} {
			t.Run("utf8/fail-fast-"+name, func(t *testing.T) {
				c := rawDial(t, url)
				c.send(frames...)
				c.expectClose(1007, "text frame is not valid UTF-8")
			})
		}

		// 7. Limits: a message over limits.maxMessageBytes, whole or in
		// fragments.
		t.Run("limits", func(t *testing.T) {
			c := rawDial(t, url)
			c.send(frame(0x81, []byte(echoCall(1<<17+1, "l")), false))
			c.expectClose(1009, "message larger than limits.maxMessageBytes (131072)")
		})
		t.Run("limits/fragmented", func(t *testing.T) {
			c := rawDial(t, url)
			call := echoCall(1<<17+1, "l")
			c.send(frame(0x01, []byte(call[:1<<16]), false), frame(0x80, []byte(call[1<<16:]), false))
			c.expectClose(1009, "message larger than limits.maxMessageBytes (131072)")
		})

		// 8. Closing handshake: a valid close is echoed with its code; a
		// close without a payload is answered 1000; invalid codes and a
		// one-byte payload are protocol errors.
		for _, code := range []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
			t.Run("close/valid", func(t *testing.T) {
				c := rawDial(t, url)
				p := binary.BigEndian.AppendUint16(nil, code)
				c.send(frame(0x88, append(p, "bye"...), false))
				head, got, err := c.read()
				if err != nil || head != 0x88 || len(got) < 2 {
					t.Fatalf("close %d answered %#x % x %v", code, head, got, err)
				}
			})
		}
		t.Run("close/empty", func(t *testing.T) {
			c := rawDial(t, url)
			c.send(frame(0x88, nil, false))
			head, _, err := c.read()
			if err != nil || head != 0x88 {
				t.Fatalf("empty close answered %#x %v", head, err)
			}
		})
		for _, code := range []uint16{0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535} {
			t.Run("close/invalid-code", func(t *testing.T) {
				c := rawDial(t, url)
				c.send(frame(0x88, binary.BigEndian.AppendUint16(nil, code), false))
				c.expectClose(1002, "")
			})
		}
		// The longest reason is echoed; one byte more makes the control
		// frame too long.
		t.Run("close/longest-reason", func(t *testing.T) {
			c := rawDial(t, url)
			reason := strings.Repeat("r", 123)
			c.send(frame(0x88, append([]byte{0x03, 0xe8}, reason...), false))
			head, got, err := c.read()
			if err != nil || head != 0x88 || len(got) < 2 || binary.BigEndian.Uint16(got) != 1000 {
				t.Fatalf("close with a 123-byte reason answered %#x % x %v", head, got, err)
			}
		})
		t.Run("close/reason-too-long", func(t *testing.T) {
			c := rawDial(t, url)
			c.send(frame(0x88, append([]byte{0x03, 0xe8}, strings.Repeat("r", 124)...), false))
			c.expectClose(1002, "")
		})
		// Nothing the client sends after its close frame is answered: the
		// close is echoed and the connection ends.
		t.Run("close/data-after", func(t *testing.T) {
			c := rawDial(t, url)
			c.send(frame(0x88, []byte{0x03, 0xe8}, false), frame(0x81, []byte(echoCall(64, "d")), false), frame(0x89, []byte("p"), false))
			head, got, err := c.read()
			if err != nil || head != 0x88 || len(got) < 2 || binary.BigEndian.Uint16(got) != 1000 {
				t.Fatalf("close answered %#x % x %v", head, got, err)
			}
			if head, got, err := c.read(); err == nil {
				t.Fatalf("after the close the server sent %#x %q", head, got)
			}
		})
		t.Run("close/one-byte", func(t *testing.T) {
			c := rawDial(t, url)
			c.send(frame(0x88, []byte{3}, false))
			c.expectClose(1002, "")
		})
	})
}

// Failing fast inside a frame: a frame whose first bytes arrive and hold an
// invalid sequence is refused before the rest of it comes (Autobahn's
// 6.4.3 and 6.4.4). Only the fast path reads a frame's payload as it
// arrives: the WebSocket library reads each frame whole.
func TestRFC6455FailFastInsideAFrame(t *testing.T) {
	leakcheck.Check(t)
	fastPathOnly(t) // the portable path reads a frame's payload whole (the WebSocket library's reader)
	_, url := startServer(t, Deps{Metrics: metrics.NewDiscard()})
	for _, bad := range []string{"\xf4\x90\x80\x80", "\xce\x41"} {
		c := rawDial(t, url)
		msg := []byte(callHead + "κόσμε" + bad + strings.Repeat("x", 100) + callTail)
		f := frame(0x81, msg, false)
		c.send(f[:len(f)-100]) // the invalid bytes, not the frame's end
		c.expectClose(1007, "text frame is not valid UTF-8")
	}
}

// A client that answers pings but never finishes a fragmented message is
// closed with 1008 once limits.messageTimeout has passed (checked at the
// keepalive's steps), on both paths. (One that finishes its message
// across pings is served: the conformance suite's fragmentation case.)
func TestUnfinishedMessageCloses1008(t *testing.T) {
	for _, portable := range []bool{false, true} {
		t.Run(map[bool]string{false: "fast", true: "portable"}[portable], func(t *testing.T) {
			leakcheck.Check(t)
			if portable {
				withPortable(t)
			}
			m := metrics.NewDiscard()
			cfg := Config{PingInterval: 50 * time.Millisecond, MessageTimeout: 200 * time.Millisecond, WriteTimeout: time.Second}
			_, url := startServer(t, Deps{Metrics: m}, cfg)
			c := rawDial(t, url)
			call := echoCall(100, "m")
			c.send(frame(0x01, []byte(call[:10]), false))
			// Answer pings until the close comes: the client is alive,
			// only its message never ends.
			c.expectClose(1008, MessageTimeoutReason)
			if v := testutilValue(m.ProtocolErrors.WithLabelValues("1008")); v != 1 {
				t.Fatalf("protocol_errors_total{code=1008} = %v, want 1", v)
			}

		})
	}
}

// A client that never answers the server's close frame is cut off once
// the closing handshake's bound has passed, on both paths: here the close
// comes from the keepalive (limits.messageTimeout), while the read waits
// in the middle of a message.
func TestSilentClientIsCutOffAfterTheClose(t *testing.T) {
	for _, portable := range []bool{false, true} {
		t.Run(map[bool]string{false: "fast", true: "portable"}[portable], func(t *testing.T) {
			leakcheck.Check(t)
			if portable {
				withPortable(t)
			}
			cfg := Config{PingInterval: 50 * time.Millisecond, MessageTimeout: 100 * time.Millisecond, WriteTimeout: time.Second}
			_, url := startServer(t, Deps{Metrics: metrics.NewDiscard()}, cfg)
			c := rawDial(t, url)
			c.send(frame(0x01, []byte(echoCall(100, "s")[:10]), false))
			for {
				head, p, err := c.read()
				if err != nil {
					t.Fatalf("the connection ended before its close frame: %v", err)
				}
				if head == 0x88 {
					if len(p) < 2 || binary.BigEndian.Uint16(p) != 1008 {
						t.Fatalf("close % x, want 1008", p)
					}
					break
				}
			}
			// Not answered (not even the pings): the server ends it.
			for {
				if _, _, err := c.read(); err != nil {
					return
				}
			}
		})
	}
}

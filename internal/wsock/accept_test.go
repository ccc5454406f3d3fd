package wsock

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// libraryHijacker lets the WebSocket library's Accept run to the end on a
// recorder, so that what it accepts and the subprotocol it answers can be
// compared with Response.Accept's.
type libraryHijacker struct {
	*httptest.ResponseRecorder
	peer net.Conn
}

func (h *libraryHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	a, b := net.Pipe()
	h.peer = b
	return a, bufio.NewReadWriter(bufio.NewReader(a), bufio.NewWriter(a)), nil
}

// libraryAccepts runs the library's Accept on r and reports whether it
// accepted and with which subprotocol.
func libraryAccepts(t *testing.T, r *http.Request, subprotocols []string) (bool, string) {
	t.Helper()
	h := &libraryHijacker{ResponseRecorder: httptest.NewRecorder()}
	c, err := websocket.Accept(h, r, &websocket.AcceptOptions{Subprotocols: subprotocols, InsecureSkipVerify: true})
	if err != nil {
		return false, ""
	}
	sub := c.Subprotocol()
	_ = c.CloseNow()
	h.peer.Close()
	return true, sub
}

// parkableConn is an in-memory connection that is a Parkable.
type parkableConn struct{ net.Conn }

func (parkableConn) Ready() bool                              { return false }
func (parkableConn) Arm(p *Poller, key uint64, w Waker) error { return nil }

// Response.Accept (and AcceptParkable) takes exactly the handshakes the
// library accepts, and chooses the subprotocol the library chooses; the
// rest it leaves alone.
func TestAcceptAgreesWithTheLibrary(t *testing.T) {
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	ours := []string{"rt.batch", "rt.binary"}
	base := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/ws", nil)
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Sec-WebSocket-Version", "13")
		r.Header.Set("Sec-WebSocket-Key", key)
		return r
	}
	tests := []struct {
		give string
		edit func(r *http.Request)
	}{
		{"plain", func(*http.Request) {}},
		{"connection list", func(r *http.Request) { r.Header.Set("Connection", "keep-alive, UPGRADE") }},
		{"connection twice", func(r *http.Request) { r.Header["Connection"] = []string{"keep-alive", " upgrade "} }},
		{"no connection upgrade", func(r *http.Request) { r.Header.Set("Connection", "keep-alive") }},
		{"connection as a prefix", func(r *http.Request) { r.Header.Set("Connection", "upgraded") }},
		{"upgrade list", func(r *http.Request) { r.Header.Set("Upgrade", "h2c, WebSocket") }},
		{"no upgrade", func(r *http.Request) { r.Header.Del("Upgrade") }},
		{"version 8", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Version", "8") }},
		{"two versions", func(r *http.Request) { r.Header["Sec-Websocket-Version"] = []string{"8", "13"} }},
		{"no key", func(r *http.Request) { r.Header.Del("Sec-WebSocket-Key") }},
		{"two keys", func(r *http.Request) { r.Header.Add("Sec-WebSocket-Key", key) }},
		{"short key", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZQ==") }},
		{"unpadded key", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ") }},
		{"key not base64", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ!!") }},
		{"post", func(r *http.Request) { r.Method = http.MethodPost }},
		{"http 1.0", func(r *http.Request) { r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.0", 1, 0 }},
		{"http 2", func(r *http.Request) { r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0 }},
		{"batch", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Protocol", "rt.batch") }},
		{"binary then batch", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Protocol", "rt.binary, rt.batch") }},
		{"case", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Protocol", "RT.Binary") }},
		{"unknown", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Protocol", "chat, superchat") }},
		{"split offers", func(r *http.Request) { r.Header["Sec-Websocket-Protocol"] = []string{"chat", " rt.binary ,x"} }},
		{"empty offers", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Protocol", " , ,") }},
		{"compression offered", func(r *http.Request) { r.Header.Set("Sec-WebSocket-Extensions", "permessage-deflate") }},
		{"origin elsewhere", func(r *http.Request) { r.Header.Set("Origin", "https://elsewhere.example") }},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			r := base()
			tt.edit(r)
			wantOK, wantSub := libraryAccepts(t, r, ours)
			if got := acceptable(r); got != wantOK {
				t.Fatalf("acceptable = %v, the library: %v", got, wantOK)
			}
			if !portable.Load() {
				// An in-process upgrade is judged alike, and its socket
				// is opened only when it is accepted.
				opened := false
				c, sub, ok := AcceptParkable(r, ours, func() (Parkable, error) {
					opened = true
					a, b := net.Pipe()
					b.Close()
					return parkableConn{a}, nil
				})
				if ok != wantOK || opened != wantOK || sub != wantSub {
					t.Fatalf("AcceptParkable: ok %v, opened %v, subprotocol %q; the library: %v, %q", ok, opened, sub, wantOK, wantSub)
				}
				if c != nil {
					if !c.Parks() {
						t.Fatal("AcceptParkable's connection does not park")
					}
					c.Close()
				}
			}
			if !wantOK {
				return
			}
			if got := selectSubprotocol(r.Header, ours); got != wantSub {
				t.Fatalf("subprotocol %q, the library: %q", got, wantSub)
			}
		})
	}
}

// A handshake Response.Accept answers is one a WebSocket client completes
// (the accept key checked, the subprotocol agreed), and the connection it
// returns reads the client's frames and writes ours on the same socket.
func TestAcceptedConnectionTalksToAClient(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		served <- func() error {
			nc, err := ln.Accept()
			if err != nil {
				return err
			}
			defer nc.Close()
			buf := make([]byte, MaxHead)
			n, v, err := ReadHead(nc, buf, 0, "/ws")
			if v != HeadSimple {
				return err
			}
			w := NewResponse(nc)
			r := ParseHead(w.Context(), buf[:n])
			c, sub, ok := w.Accept(r, []string{"rt.batch", "rt.binary"})
			if !ok || c == nil || sub != "rt.binary" {
				return &net.OpError{Op: "accept", Err: http.ErrNotSupported}
			}
			var msg bytes.Buffer
			op, err := c.ReadMessage(&msg, 1<<10, true)
			if err != nil || op != OpBinary {
				return err
			}
			frame := append([]byte{0x82, byte(msg.Len())}, msg.Bytes()...)
			if _, err := c.Write(frame); err != nil {
				return err
			}
			msg.Reset()
			_, err = c.ReadMessage(&msg, 1<<10, true) // the client's close
			if err == nil {
				return &net.OpError{Op: "close", Err: http.ErrNotSupported}
			}
			return nil
		}()
	}()
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws://"+ln.Addr().String()+"/ws", &websocket.DialOptions{Subprotocols: []string{"rt.binary"}})
	if err != nil {
		t.Fatal(err)
	}
	if ws.Subprotocol() != "rt.binary" {
		t.Fatalf("subprotocol %q", ws.Subprotocol())
	}
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("echo")); err != nil {
		t.Fatal(err)
	}
	typ, got, err := ws.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || string(got) != "echo" {
		t.Fatalf("%v %q %v", typ, got, err)
	}
	_ = ws.CloseNow()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// A request Response.Accept leaves alone has nothing written for it: the
// library then answers it in its own words.
func TestAcceptLeavesRefusalsToTheLibrary(t *testing.T) {
	server, client := pair(t)
	defer client.Close()
	w := NewResponse(server)
	r := httptest.NewRequest(http.MethodGet, "/ws", nil) // no upgrade headers
	if c, _, ok := w.Accept(r, nil); ok || c != nil {
		t.Fatal("accepted a request that is no upgrade")
	}
	w.WriteHeader(http.StatusUpgradeRequired)
	w.Finish()
	resp, err := http.ReadResponse(bufio.NewReader(client), nil)
	if err != nil || resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("%v %v", resp, err)
	}
}

package wsock

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/rtserver/rtserver/internal/bufpool"
)

// The opening handshake without the WebSocket library.
//
// The library's Accept makes a connection object per upgrade (channels,
// a map, reader and writer state, a finalizer) that the fast path never
// uses past the upgrade: it reads and writes every frame itself (Conn).
// On a request the door read (Response), an upgrade the library would
// accept is answered here instead; any other request is left to the
// library untouched, so that every refusal is still the library's own.

// An Acceptor is a response writer that completes the opening handshake
// itself (Response, and an in-memory connection's: AcceptParkable), so
// the connection has no WebSocket library object. Accept is
// Response.Accept's contract: ok false means nothing was written or
// read, and r goes to the library.
type Acceptor interface {
	Accept(r *http.Request, subprotocols []string) (c *Conn, subprotocol string, ok bool)
}

// websocketGUID is RFC 6455's constant for Sec-WebSocket-Accept.
const websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// Accept completes the opening handshake of r (RFC 6455 section 4.2.2)
// when the WebSocket library's Accept would accept it without compression
// and with InsecureSkipVerify (the caller checked the origin), and the
// socket has a descriptor this package calls directly: it writes the 101
// with the first of subprotocols the client offers (in the client's
// spelling, as the library answers) and returns the connection, ready
// for ReadMessage, and the subprotocol chosen. ok false means nothing was
// written or read: the caller hands r to the library, which accepts it on
// the portable path or refuses it in its own words. An error writing the
// 101 returns ok true and a nil Conn: the socket is then closed.
func (w *Response) Accept(r *http.Request, subprotocols []string) (c *Conn, subprotocol string, ok bool) {
	if w.hijacked || w.status != 0 || len(w.header) != 0 || !acceptable(r) {
		return nil, "", false
	}
	sc := Descriptor(w.c)
	if sc == nil {
		return nil, "", false
	}
	subprotocol = selectSubprotocol(r.Header, subprotocols)
	w.ctx.stop()
	w.hijacked = true
	buf := bufpool.Get()
	defer bufpool.Put(buf)
	buf.Grow(256) // the 101 fits: appending allocates nothing
	b := append(buf.AvailableBuffer(), "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	b = appendAcceptKey(b, r.Header["Sec-Websocket-Key"][0])
	if subprotocol != "" {
		b = append(b, "\r\nSec-WebSocket-Protocol: "...)
		b = append(b, subprotocol...)
	}
	b = append(b, "\r\n\r\n"...)
	// The connection is made first and writes the 101 with the write
	// callback it has anyway (what the socket takes at once, as WriteNow,
	// without WriteNow's closure and second descriptor). Nobody else has
	// c yet.
	c = newConn(w.c, sc)
	n, err := c.rawWrite(b, false)
	if err == nil && n < len(b) {
		_, err = w.c.Write(b[n:])
	}
	if err != nil {
		w.c.Close()
		return nil, "", true
	}
	// Nothing was read past the head: frames are read from the socket
	// through c (whose Read flushes held frames before it would wait).
	c.br = bufio.NewReaderSize(c, ReadBufferSize)
	return c, subprotocol, true
}

// AcceptParkable is Accept for an upgrade made in process, whose socket is
// an in-memory connection (a Parkable) that open hands over: when the
// library would accept r (acceptable, as Accept) it opens the connection
// and returns it, ready for ReadMessage, with the subprotocol chosen. No
// 101 is written: the answer would never leave the process, and the
// connection's reader starts at its first frame. ok false means open was
// not called (on the portable path too, where the library reads every
// connection); an error from open returns ok true and a nil Conn, open
// having answered or closed whatever it took.
func AcceptParkable(r *http.Request, subprotocols []string, open func() (Parkable, error)) (c *Conn, subprotocol string, ok bool) {
	if portable.Load() || !acceptable(r) {
		return nil, "", false
	}
	nc, err := open()
	if err != nil {
		return nil, "", true
	}
	c = newConn(nc, nil)
	c.br = bufio.NewReaderSize(c, ReadBufferSize)
	return c, selectSubprotocol(r.Header, subprotocols), true
}

// acceptable is the WebSocket library's check of a handshake request
// (HTTP/1.1 or later, GET, Connection with the upgrade token, Upgrade
// with websocket, version 13, one key of 16 base64-encoded bytes): true
// exactly when the library would go on to accept it.
func acceptable(r *http.Request) bool {
	if !r.ProtoAtLeast(1, 1) || r.Method != http.MethodGet ||
		!hasToken(r.Header["Connection"], "upgrade") || !hasToken(r.Header["Upgrade"], "websocket") ||
		!firstIs(r.Header["Sec-Websocket-Version"], "13") {
		return false
	}
	keys := r.Header["Sec-Websocket-Key"]
	if len(keys) != 1 {
		return false
	}
	key := strings.TrimSpace(keys[0])
	if key != keys[0] || len(key) != 24 {
		// The 101 is computed from the key as sent; a key the library
		// would trim is left to it.
		return false
	}
	var dst [18]byte
	n, err := base64.StdEncoding.Decode(dst[:], []byte(key))
	return err == nil && n == 16
}

// firstIs is Header.Get(name) == v on name's values, without Get's
// allocation for a name not spelled canonically.
func firstIs(values []string, v string) bool { return len(values) > 0 && values[0] == v }

// hasToken reports whether a comma-separated token of the values equals
// token, ASCII case-insensitively (the library's headerTokens rule: each
// value and each token trimmed of spaces).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// selectSubprotocol is the library's choice: the first of ours (in our
// order) that the client offers, in the client's spelling; "" if none.
func selectSubprotocol(h http.Header, ours []string) string {
	offered := h["Sec-Websocket-Protocol"]
	for _, sp := range ours {
		for _, v := range offered {
			for v != "" {
				var t string
				t, v, _ = strings.Cut(v, ",")
				if t = strings.TrimSpace(t); strings.EqualFold(sp, t) {
					return t
				}
			}
		}
	}
	return ""
}

// appendAcceptKey appends Sec-WebSocket-Accept for key: base64 of the
// SHA-1 of key and the GUID.
func appendAcceptKey(b []byte, key string) []byte {
	var in [24 + len(websocketGUID)]byte
	sum := sha1.Sum(append(append(in[:0], key...), websocketGUID...))
	return base64.StdEncoding.AppendEncode(b, sum[:])
}

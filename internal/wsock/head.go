package wsock

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// A request head read off a socket outside net/http.
//
// A server that answers some requests before net/http sees them (to shed
// an upgrade cheaply, or to serve it without net/http's per-connection
// buffers) must read the head itself, and must take only what it is sure
// net/http would read the same way: anything unusual goes on to net/http
// with the bytes already read replayed (Replay).

// MaxHead bounds the request head read here. A head that does not end
// within it (large cookies) goes on to net/http.
const MaxHead = 4096

// HeadVerdict is what ClassifyHead makes of the bytes read so far.
type HeadVerdict uint8

const (
	HeadMore   HeadVerdict = iota // still possibly a simple head: read on
	HeadSimple                    // a complete, well-formed GET path head, nothing after it
	HeadOther                     // anything else: leave it to net/http
)

// ClassifyHead decides on b, the bytes read so far (at most limit). It
// says HeadSimple only for a head net/http would parse and route to GET
// path: request line `GET path[?query] HTTP/1.x` with CRLF line ends,
// header names that are tokens followed directly by ':', field values
// without control characters, at most one Host (exactly one for 1.1)
// of plain host bytes (letters, digits, -._:[]), no Content-Length,
// Transfer-Encoding or Expect, and no byte after the blank line. Anything
// unusual is HeadOther. scanned is how far earlier calls have looked for
// the end of the head (0 at first); the updated value is returned so a
// byte-at-a-time sender costs linear time.
func ClassifyHead(b []byte, path string, scanned, limit int) (HeadVerdict, int) {
	// "GET " path, then ' ' or '?'.
	const method = "GET "
	want := len(method) + len(path)
	for i := 0; i < len(b) && i < want; i++ {
		var c byte
		if i < len(method) {
			c = method[i]
		} else {
			c = path[i-len(method)]
		}
		if b[i] != c {
			return HeadOther, scanned
		}
	}
	if len(b) > want && b[want] != ' ' && b[want] != '?' {
		return HeadOther, scanned
	}
	// The end of the head; a bare LF anywhere means net/http's lenient
	// parsing, which is left to it.
	end := -1
	for i := scanned; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i == 0 || b[i-1] != '\r' {
			return HeadOther, i
		}
		if i >= 3 && b[i-2] == '\n' && b[i-3] == '\r' {
			end = i + 1
			break
		}
	}
	if end < 0 {
		if len(b) >= limit {
			return HeadOther, len(b)
		}
		return HeadMore, len(b)
	}
	if end != len(b) || !validHead(b[:end], want) {
		return HeadOther, end
	}
	return HeadSimple, end
}

// ReadHead reads c into buf, after the n bytes already there, until
// ClassifyHead decides (buf's length is the limit), and returns how many
// bytes buf holds, the verdict, and the read error that ended it, if
// any (the verdict is then HeadMore or HeadOther). The caller bounds the
// wait with c's read deadline.
func ReadHead(c net.Conn, buf []byte, n int, path string) (int, HeadVerdict, error) {
	v, scanned := HeadMore, 0
	if n > 0 {
		v, scanned = ClassifyHead(buf[:n], path, 0, len(buf))
	}
	for v == HeadMore {
		k, err := c.Read(buf[n:])
		n += k
		v, scanned = ClassifyHead(buf[:n], path, scanned, len(buf))
		if err != nil {
			return n, v, err
		}
	}
	return n, v, nil
}

// validHead checks a complete head (ending in CRLF CRLF) whose first
// target bytes are "GET path".
func validHead(h []byte, target int) bool {
	line, rest := cutLine(h)
	// Request line: the rest of the target, then the version.
	i := target
	if line[i] == '?' {
		for i++; i < len(line) && line[i] != ' '; i++ {
			if line[i] < 0x21 || line[i] > 0x7e {
				return false
			}
		}
	}
	v := string(line[i:])
	if v != " HTTP/1.1" && v != " HTTP/1.0" {
		return false
	}
	needHost := v == " HTTP/1.1"
	hosts := 0
	for {
		line, rest = cutLine(rest)
		if len(line) == 0 {
			break // the blank line
		}
		colon := -1
		for j, c := range line {
			if c == ':' {
				colon = j
				break
			}
			if !isTokenByte(c) {
				return false // also a leading space: obs-fold
			}
		}
		if colon <= 0 {
			return false
		}
		name, value := line[:colon], line[colon+1:]
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return false
			}
		}
		switch {
		case asciiEqualFold(name, "Host"):
			hosts++
			for _, c := range trimOWS(value) {
				if !isHostByte(c) {
					return false
				}
			}
		case asciiEqualFold(name, "Content-Length"),
			asciiEqualFold(name, "Transfer-Encoding"),
			asciiEqualFold(name, "Expect"):
			return false
		}
	}
	return hosts <= 1 && (hosts == 1 || !needHost)
}

// ParseHead builds the request of head, a complete request head that
// ClassifyHead called simple, with ctx as its context, as
// http.ReadRequest would build it but without its reader, and without a
// second copy of the request for the context. nil: the head is one to
// leave to net/http after all (a '#' in the target, which ReadRequest and
// url.Parse read differently). FuzzClassifyHead holds it to
// http.ReadRequest.
//
// It allocates little, as an upgrade storm makes thousands of requests a
// second: the fields' value slices share one array (each with room for
// its values alone, so an append copies), the usual fields' names and the
// values every upgrade repeats are constants, and a plain target's URL is
// filled in without url.Parse.
func ParseHead(ctx context.Context, head []byte) *http.Request {
	line, rest := cutLine(head)
	sp := bytes.LastIndexByte(line, ' ')
	rawTarget := line[len("GET "):sp]
	if bytes.IndexByte(rawTarget, '#') >= 0 {
		return nil
	}
	target := string(rawTarget)
	u, plain := plainTarget(target)
	parsed := target
	if plain {
		parsed = "" // url.Parse("") allocates the URL, and nothing else
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, parsed, nil)
	if err != nil {
		return nil
	}
	if plain {
		*req.URL = u
	}
	req.RequestURI = target
	req.Proto = "HTTP/1.1" // validHead allows 1.1 and 1.0 alone
	if line[len(line)-1] == '0' {
		req.Proto = "HTTP/1.0"
	}
	req.ProtoMajor, req.ProtoMinor = 1, int(line[len(line)-1]-'0')
	fields := bytes.Count(rest, crlf) - 1 // the blank line ends the head
	if fields > 8 {
		req.Header = make(http.Header, fields)
	}
	values := make([]string, max(fields, 0))
	for i := 0; ; i++ {
		line, rest = cutLine(rest)
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		key := headerKey(line[:colon])
		v := headerValue(trimOWS(line[colon+1:]))
		if vs, ok := req.Header[key]; ok {
			req.Header[key] = append(vs, v)
			continue
		}
		values[i] = v
		req.Header[key] = values[i : i+1 : i+1]
	}
	if hosts := req.Header["Host"]; len(hosts) > 0 {
		req.Host = hosts[0]
		delete(req.Header, "Host") // as net/http: the Host is req.Host
	}
	if v := req.Header["Pragma"]; len(v) > 0 && v[0] == "no-cache" {
		if _, ok := req.Header["Cache-Control"]; !ok {
			req.Header["Cache-Control"] = []string{"no-cache"}
		}
	}
	req.Close = closeAfter(req)
	req.Body = http.NoBody
	return req
}

var crlf = []byte("\r\n")

// plainTarget is the URL of a request target that url.Parse would read
// as a path of unreserved bytes and '/' (not starting "//", which it
// reads as a host), then an optional query: the URL url.Parse would
// return, built without it. ok false: leave the target to url.Parse.
func plainTarget(target string) (u url.URL, ok bool) {
	path, query, hasQuery := strings.Cut(target, "?")
	if len(path) == 0 || path[0] != '/' || strings.HasPrefix(path, "//") {
		return u, false
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '/', c == '-', c == '.', c == '_', c == '~':
		default:
			return u, false
		}
	}
	u.Path = path
	if hasQuery {
		if query == "" {
			u.ForceQuery = true // "path?": as url.Parse
		} else {
			u.RawQuery = query
		}
	}
	return u, true
}

// headerKey is http.CanonicalHeaderKey(string(name)), without an
// allocation for the fields an upgrade usually has: their canonical
// names are constants. (validHead let only token bytes through, for
// which asciiEqualFold is exact.)
func headerKey(name []byte) string {
	for _, k := range commonKeys {
		if len(k) == len(name) && asciiEqualFold(name, k) {
			return k
		}
	}
	return http.CanonicalHeaderKey(string(name))
}

// commonKeys are canonical names (CanonicalHeaderKey's spelling: the
// WebSocket fields are "Sec-Websocket-", not the RFC's "Sec-WebSocket-").
var commonKeys = [...]string{
	"Host", "Upgrade", "Connection", "Origin", "User-Agent",
	"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Protocol", "Sec-Websocket-Extensions",
	"Pragma", "Cache-Control", "Accept-Encoding", "Accept-Language", "Cookie", "Authorization",
	"X-Forwarded-For",
}

// headerValue is string(v), without an allocation for the values every
// upgrade repeats. Other values get strings of their own rather than
// slices of one copy of the head: a value someone keeps for a
// connection's life (a client address from X-Forwarded-For, an event
// stream's Origin) must not keep the whole head with it.
func headerValue(v []byte) string {
	switch string(v) {
	case "websocket":
		return "websocket"
	case "Upgrade":
		return "Upgrade"
	case "13":
		return "13"
	case "no-cache":
		return "no-cache"
	case "permessage-deflate; client_max_window_bits":
		return "permessage-deflate; client_max_window_bits"
	}
	return string(v)
}

// closeAfter is net/http's reading of whether a request asks for its
// connection to close: HTTP/1.0 unless "Connection: keep-alive", HTTP/1.1
// when Connection lists "close".
func closeAfter(r *http.Request) bool {
	has := func(token string) bool {
		for _, v := range r.Header["Connection"] {
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
	if r.ProtoMinor == 0 {
		return !has("keep-alive")
	}
	return has("close")
}

// cutLine splits off the first CRLF-terminated line (without its CRLF).
func cutLine(b []byte) (line, rest []byte) {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\r' && b[i+1] == '\n' {
			return b[:i], b[i+2:]
		}
	}
	return b, nil
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if b[i]|0x20 != s[i]|0x20 {
			return false
		}
	}
	return true
}

// isTokenByte: RFC 9110 tchar, what net/http accepts in a field name.
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// isHostByte: a conservative subset of the bytes net/http accepts in a
// Host (it refuses '@', userinfo, for one); a host with anything
// else is left to net/http.
func isHostByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', ':', '[', ']':
		return true
	}
	return false
}

// Replay returns c with head, the bytes already read from it, read again
// first (c itself when head is empty). The result keeps what net/http
// looks for on a *net.TCPConn: CloseWrite (to avoid a reset after an
// unread body) and ReadFrom (sendfile/splice). head is copied.
func Replay(c net.Conn, head []byte) net.Conn {
	if len(head) == 0 {
		return c
	}
	return &replayConn{Conn: c, head: bytes.Clone(head)}
}

// Socket is the connection under c when c replays a head (Replay), else
// c itself: for watching the socket (HungUp, a Poller), which the bytes
// still to be replayed do not change. Reading it skips them.
func Socket(c net.Conn) net.Conn {
	if r, ok := c.(*replayConn); ok {
		return r.Conn
	}
	return c
}

type replayConn struct {
	net.Conn
	head []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.head)
	c.head = c.head[n:]
	if len(c.head) == 0 {
		c.head = nil // let the copy go
	}
	return n, nil
}

func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *replayConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

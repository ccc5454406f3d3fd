package handshake

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rtserver/rtserver/internal/bufpool"
	"github.com/rtserver/rtserver/internal/wsock"
)

// The door as the upgrade server.
//
// An upgrade through net/http costs more than the upgrade itself: a
// goroutine with per-connection state, 4 KiB read and write buffers that a
// hijacked connection never gives back to their pools, a 2 KiB response
// buffer, and another 4 KiB writer allocated by Hijack: ~14 KiB of garbage
// per connection, which a server that just took 10,000 connections holds
// as resident memory until the runtime returns it. The door already reads
// and checks the request head of an upgrade (classifyHead); when it is
// given the handler it serves such a request itself: it parses the head,
// runs the handler with a small response writer that supports Hijack, and
// is done. Everything else (other paths, other methods, heads it does not
// fully understand, bytes after the head) still goes to net/http.

// ServingListener is Listener, and also serves every well-formed
// `GET path` request itself by calling h, outside net/http: the door reads
// the head (bounded by a 1 s deadline and 4 KiB; past those the connection
// goes to net/http), then runs h in the goroutine that read it. The
// request is what http.ReadRequest makes of the head, with RemoteAddr set;
// its context ends when the client goes away while h runs (on Linux; on
// other systems it never ends). The response writer supports Hijack (the
// returned connection is the socket as the inner listener gave it, with
// nothing read ahead) and Flush; a response that is not hijacked is sent
// with Connection: close, and the connection is closed when h returns, as
// net/http would for an upgrade request that was refused. A panic in h is
// logged (except http.ErrAbortHandler) and closes the connection.
func (g *Gate) ServingListener(inner net.Listener, path string, h http.Handler) net.Listener {
	l := newDoor(g, inner, path, peekTimeout, maxPeekers)
	if d, ok := l.(*door); ok {
		d.h = h
	}
	return l
}

// parseHead builds the request of head, a complete request head that
// classifyHead accepted (GET of the door's path, HTTP/1.0 or 1.1, CRLF
// lines, token field names, no folding, at most one Host, no body), with
// ctx as its context, as http.ReadRequest would build it but without its
// reader, and without a second copy of the request for the context. nil:
// the head is one the door leaves to net/http after all (a '#' in the
// target, which ReadRequest and url.Parse read differently).
// FuzzClassifyHead holds it to http.ReadRequest.
func parseHead(ctx context.Context, head []byte) *http.Request {
	line, rest := cutLine(head)
	sp := bytes.LastIndexByte(line, ' ')
	target, proto := string(line[len("GET "):sp]), string(line[sp+1:])
	if strings.IndexByte(target, '#') >= 0 {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil
	}
	req.RequestURI = target
	req.Proto = proto
	req.ProtoMajor, req.ProtoMinor = 1, int(proto[len(proto)-1]-'0')
	for {
		line, rest = cutLine(rest)
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		key := http.CanonicalHeaderKey(string(line[:colon]))
		req.Header[key] = append(req.Header[key], string(trimOWS(line[colon+1:])))
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

// closeAfter is net/http's reading of whether a request asks for its
// connection to close: HTTP/1.0 unless "Connection: keep-alive", HTTP/1.1
// when Connection lists "close".
func closeAfter(r *http.Request) bool {
	has := func(token string) bool {
		for _, v := range r.Header["Connection"] {
			for _, t := range strings.Split(v, ",") {
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

// serve runs d.h for req (made with w's context) on c and completes the
// response.
func (d *door) serve(c net.Conn, w *doorResponse, req *http.Request) {
	req.RemoteAddr = c.RemoteAddr().String()
	d.event("serve")
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				d.g.log.Error("panic serving upgrade", "remote", req.RemoteAddr, "panic", fmt.Sprint(p), "stack", string(buf))
			}
			w.ctx.stop()
			if !w.hijacked {
				c.Close()
			}
		}
	}()
	d.h.ServeHTTP(w, req)
	w.finish()
}

// bodyBufferLimit is how much of a refused upgrade's body is gathered to
// be sent with the head and a Content-Length; a longer body is streamed
// and ends with the connection.
const bodyBufferLimit = 16 << 10

// doorResponse is the http.ResponseWriter of a request the door serves.
type doorResponse struct {
	c        net.Conn
	ctx      *goneContext // the request's context: its own allocation, as it may outlive w
	header   http.Header
	status   int
	body     []byte
	sent     bool // the head is on the wire: the body streams, ended by close
	hijacked bool
	err      error // the first write error: later writes are dropped
}

func (w *doorResponse) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 4)
	}
	return w.header
}

func (w *doorResponse) WriteHeader(code int) {
	if w.hijacked || w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic("handshake: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		return // no informational responses on an upgrade
	}
	w.status = code
}

func (w *doorResponse) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent && len(w.body)+len(p) <= bodyBufferLimit {
		w.body = append(w.body, p...)
		return len(p), nil
	}
	w.flush(headStream)
	if w.err != nil {
		return 0, w.err
	}
	if _, err := w.c.Write(p); err != nil {
		w.err = err
		return 0, err
	}
	return len(p), nil
}

// Flush sends the head and what the body has so far; the rest of the body
// then streams and ends with the connection.
func (w *doorResponse) Flush() {
	if w.hijacked {
		return
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.flush(headStream)
}

// Hijack hands the socket to the caller after sending the head, if one
// was written (an upgrade's 101).
func (w *doorResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	w.ctx.stop()
	if w.status != 0 && !w.sent {
		w.flush(headUpgrade)
	}
	w.hijacked = true
	if w.err != nil {
		return nil, nil, w.err
	}
	// Nothing is read ahead (the door read exactly the head, and the
	// context's watch only peeks): the reader starts empty. Both buffers
	// are the smallest bufio allows; callers that care bring their own.
	return w.c, bufio.NewReadWriter(bufio.NewReaderSize(w.c, 16), bufio.NewWriterSize(w.c, 16)), nil
}

// finish completes a response that was not hijacked and closes c.
func (w *doorResponse) finish() {
	w.ctx.stop()
	if w.hijacked {
		return
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.flush(headFinal)
	w.c.Close()
}

// headKind is what the head being sent is for.
type headKind uint8

const (
	headFinal   headKind = iota // the whole response is buffered: Content-Length
	headStream                  // the body streams: it ends with the connection
	headUpgrade                 // a hijacked response (101): no length, no close
)

// flush writes the head (once) and the buffered body.
func (w *doorResponse) flush(kind headKind) {
	if w.err != nil {
		return
	}
	if w.sent && len(w.body) == 0 {
		return
	}
	buf := bufpool.Get()
	defer bufpool.Put(buf)
	buf.Grow(512 + len(w.body)) // a head fits: appending allocates nothing
	b := buf.AvailableBuffer()
	if !w.sent {
		b = w.appendHead(b, kind)
		w.sent = true
	}
	b = append(b, w.body...)
	w.body = nil
	if _, err := w.c.Write(b); err != nil {
		w.err = err
	}
}

// headerNewlines makes a header value one line, as net/http does.
var headerNewlines = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")

func (w *doorResponse) appendHead(b []byte, kind headKind) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.status)...)
	b = append(b, "\r\n"...)
	h := w.header
	if kind != headUpgrade {
		h = h.Clone()
		if h == nil {
			h = http.Header{}
		}
		h.Del("Connection")
		h.Del("Transfer-Encoding")
		if _, ok := h["Date"]; !ok {
			h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		}
		bodyless := w.status == http.StatusNoContent || w.status == http.StatusNotModified || w.status < 200
		if !bodyless {
			if _, ok := h["Content-Type"]; !ok && len(w.body) > 0 {
				h.Set("Content-Type", http.DetectContentType(w.body))
			}
			if kind == headFinal {
				h.Set("Content-Length", strconv.Itoa(len(w.body)))
			} else {
				h.Del("Content-Length")
			}
		}
	}
	for k, vs := range h {
		if !validFieldName(k) {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			if strings.ContainsAny(v, "\r\n") {
				v = headerNewlines.Replace(v)
			}
			b = append(b, strings.TrimSpace(v)...)
			b = append(b, "\r\n"...)
		}
	}
	if kind != headUpgrade {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isTokenByte(k[i]) {
			return false
		}
	}
	return true
}

// goneContext is the context of a request the door serves: it ends when
// the client goes away, as net/http's does, so that an upgrade waiting in
// the pacing queue gives its place up. It is watched only once someone
// asks for Done (a waiter does; most requests never wait), by a goroutine
// that waits in the runtime poller for the socket to become readable and
// peeks without consuming: the end of the stream (or an error) ends the
// context; bytes (a client that did not wait for the 101) only end the
// watch. stop ends the watch and waits for it, before the socket is
// handed on or closed.
type goneContext struct {
	c       net.Conn
	once    sync.Once
	done    chan struct{}
	gone    atomic.Bool
	watched chan struct{} // closed when the watch has ended; nil if none
	stopped atomic.Bool
}

func (x *goneContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (x *goneContext) Done() <-chan struct{} {
	x.once.Do(x.start)
	return x.done
}

func (x *goneContext) Err() error {
	if x.gone.Load() {
		return context.Canceled
	}
	return nil
}

func (x *goneContext) Value(key any) any {
	if key == http.LocalAddrContextKey {
		return x.c.LocalAddr()
	}
	return nil
}

func (x *goneContext) String() string { return "handshake.goneContext" }

func (x *goneContext) start() {
	x.done = make(chan struct{})
	if x.stopped.Load() {
		return
	}
	x.watched = make(chan struct{})
	go func() {
		defer close(x.watched)
		if wsock.AwaitGone(x.c) && !x.stopped.Load() {
			x.gone.Store(true)
			close(x.done)
		}
	}()
}

// stop ends the watch, if one runs, and waits for it.
func (x *goneContext) stop() {
	x.stopped.Store(true)
	x.once.Do(func() {}) // no watch starts after this
	if x.watched == nil {
		return
	}
	_ = x.c.SetReadDeadline(aLongTimeAgo)
	<-x.watched
	_ = x.c.SetReadDeadline(time.Time{})
	x.watched = nil
}

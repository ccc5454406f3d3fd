package wsock

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rtserver/rtserver/internal/bufpool"
)

// NewResponse is the response writer of a request read off c outside
// net/http (ParseHead): the request is made with its Context.
func NewResponse(c net.Conn) *Response {
	return &Response{c: c, ctx: &goneContext{c: c}}
}

// Context is the context for the request w answers: it ends when the
// client goes away while the response is under way (on Linux; on other
// systems, and in Portable mode, it never ends), and carries
// http.LocalAddrContextKey. It does not keep w alive.
func (w *Response) Context() context.Context { return w.ctx }

// Abort ends the response after a panic of its handler: the context's
// watch stops, and the socket is closed unless it was hijacked.
func (w *Response) Abort() {
	w.ctx.stop()
	if !w.hijacked {
		w.c.Close()
	}
}

// aLongTimeAgo is a deadline in the past: it wakes a blocked call at once.
var aLongTimeAgo = time.Unix(1, 0)

// ResponseBufferLimit is how much of a response body Response gathers to
// be sent with the head and a Content-Length; a longer body is streamed
// and ends with the connection.
const ResponseBufferLimit = 16 << 10

// Response is the http.ResponseWriter of a request served outside
// net/http on the socket c (NewResponse). It supports Hijack (the
// returned connection is c, with nothing read ahead) and Flush. A
// response that is not hijacked is buffered (up to ResponseBufferLimit) and
// sent by Finish with Content-Length and Connection: close, as net/http
// sends a refused upgrade's; a longer or flushed body streams and ends
// with the connection.
type Response struct {
	c        net.Conn
	ctx      *goneContext // the request's context: its own allocation, as it may outlive w
	header   http.Header
	status   int
	body     []byte
	sent     bool // the head is on the wire: the body streams, ended by close
	hijacked bool
	err      error // the first write error: later writes are dropped
}

func (w *Response) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 4)
	}
	return w.header
}

func (w *Response) WriteHeader(code int) {
	if w.hijacked || w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic("wsock: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		return // no informational responses on an upgrade
	}
	w.status = code
}

func (w *Response) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent && len(w.body)+len(p) <= ResponseBufferLimit {
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
func (w *Response) Flush() {
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
func (w *Response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
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
	// Nothing is read ahead (the caller read exactly the head, and the
	// context's watch only peeks): the reader starts empty. Both buffers
	// are the smallest bufio allows; callers that care bring their own.
	return w.c, bufio.NewReadWriter(bufio.NewReaderSize(w.c, 16), bufio.NewWriterSize(w.c, 16)), nil
}

// Finish completes a response that was not hijacked and closes its
// socket: what net/http does when a handler returns.
func (w *Response) Finish() {
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
func (w *Response) flush(kind headKind) {
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
	if _, err := WriteNow(w.c, b); err != nil {
		w.err = err
	}
}

// headerNewlines makes a header value one line, as net/http does.
var headerNewlines = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")

func (w *Response) appendHead(b []byte, kind headKind) []byte {
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

// goneContext is the context of a request served on a Response: it ends when
// the client goes away, as net/http's does, so that an upgrade waiting in
// the pacing queue gives its place up. It is watched only once someone
// asks for Done (a waiter does; most requests never wait), by a goroutine
// that waits in the runtime poller for the socket to become readable and
// peeks without consuming: the end of the stream (or an error) ends the
// context; bytes (a client that did not wait for the 101) only end the
// watch. stop ends the watch and waits for it, before the socket is
// handed on or closed.
//
// A caller that can look now and then instead (the pacing queue, for all
// its waiters from one goroutine) asks Gone, which costs a peek and no
// goroutine.
type goneContext struct {
	c       net.Conn
	once    sync.Once
	done    chan struct{}
	gone    atomic.Bool
	watched chan struct{} // closed when the watch has ended; nil if none
	stopped atomic.Bool

	// Gone's state, made on its first call.
	raw      syscall.RawConn
	peekFn   func(fd uintptr)
	peekGone bool
	peekBuf  [1]byte
}

// Gone reports, without waiting, whether the client has gone: the end of
// its stream, or an error (bytes it sent are peeked, not consumed, and
// say it has not). If it has, the context ends as the watch would end it.
// Once the response has begun to be handed on (Hijack, Accept, Finish)
// it reports false. Calls must not overlap one another; they may overlap
// anything else.
func (x *goneContext) Gone() bool {
	if x.gone.Load() {
		return true
	}
	if x.stopped.Load() {
		return false
	}
	if x.raw == nil {
		if x.raw = Descriptor(x.c); x.raw == nil {
			return false
		}
		x.peekFn = x.peekFD
	}
	x.peekGone = false
	if err := x.raw.Control(x.peekFn); err != nil || !x.peekGone || x.stopped.Load() {
		return false
	}
	x.once.Do(func() { x.done = make(chan struct{}) }) // nobody asked for Done: no watch
	if x.done == nil {
		return false // stop came first: the response is being handed on
	}
	x.end()
	return true
}

func (x *goneContext) peekFD(fd uintptr) {
	n, wait := PeekFD(fd, x.peekBuf[:])
	x.peekGone = !wait && n == 0
}

// end ends the context, once. x.done exists.
func (x *goneContext) end() {
	if x.gone.CompareAndSwap(false, true) {
		close(x.done)
	}
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

func (x *goneContext) String() string { return "wsock.goneContext" }

func (x *goneContext) start() {
	x.done = make(chan struct{})
	if x.stopped.Load() {
		return
	}
	x.watched = make(chan struct{})
	go func() {
		defer close(x.watched)
		if AwaitGone(x.c) && !x.stopped.Load() {
			x.end()
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

package handshake

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"

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
// and checks the request head of an upgrade (wsock.ClassifyHead); when it is
// given the handler it serves such a request itself: it parses the head,
// runs the handler with a small response writer that supports Hijack, and
// is done (internal/wsock reads the head and writes the response).
// Everything else (other paths, other methods, heads it does not
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
//
// On Linux the door asks the kernel to hand over inner's TCP connections
// only once their first bytes are in (TCP_DEFER_ACCEPT, for up to the
// 1 s it peeks): the head of an upgrade is then read at the accept, and
// shed there or served without waiting for it. A client that sends
// nothing is handed over about a second later and bounded as before; one
// that connects and leaves without a byte is never accepted.
//
// more are further paths the door treats as path, sheds and serves with
// h alike: endpoints whose handler hijacks the connection as an upgrade
// does (rtserver's event streams, GET /sse), which would otherwise leave
// net/http's buffers behind too. Each must be admitted by the gate behind
// h, as path is: the door's 503 while a cap is full is the one Admit
// would write, and it comes before anything else h would have said (a
// request h would have refused for its query, say).
func (g *Gate) ServingListener(inner net.Listener, path string, h http.Handler, more ...string) net.Listener {
	l := newDoor(g, inner, append([]string{path}, more...), peekTimeout, maxPeekers)
	if d, ok := l.(*door); ok {
		d.h = h
		d.headIn = wsock.DeferAccept(inner, peekTimeout)
	}
	return l
}

// serve runs d.h for req (made with w's context) on c and completes the
// response.
func (d *door) serve(c net.Conn, w *wsock.Response, req *http.Request) {
	req.RemoteAddr = addrString(c.RemoteAddr())
	d.event("serve")
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				d.g.log.Error("panic serving upgrade", "remote", req.RemoteAddr, "panic", fmt.Sprint(p), "stack", string(buf))
			}
			w.Abort()
		}
	}()
	d.h.ServeHTTP(w, req)
	w.Finish()
}

// addrString is a.String() in one allocation for an IPv4 TCP address (the
// net package's takes two: the IP's string, then the joined one).
func addrString(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok && t.Zone == "" {
		if ip4 := t.IP.To4(); ip4 != nil {
			var b [len("255.255.255.255:65535")]byte
			return string(netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip4)), uint16(t.Port)).AppendTo(b[:0]))
		}
	}
	return a.String()
}

package wsock

import (
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// portable makes this system behave as one without the descriptor calls
// (Portable).
var portable atomic.Bool

// Portable makes Descriptor, ReadNow and AwaitGone behave as they do on a
// system without the descriptor calls (on: true), and in-memory
// connections (Parkable) as on the portable path, so that the fallback
// paths of their callers can be tested on Linux. It returns a function
// that restores the previous mode (for t.Cleanup). Tests that use it must
// not run in parallel with others that open sockets.
func Portable(on bool) (restore func()) {
	was := portable.Swap(on)
	return func() { portable.Store(was) }
}

// Descriptor is the descriptor of c's socket, for the calls of this
// package that take one; nil when c has none, or on a system (or in the
// mode, Portable) without those calls.
func Descriptor(c net.Conn) syscall.RawConn {
	if !native || portable.Load() {
		return nil
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// ReadNow reads what c has already received into p, without waiting: 0
// when nothing is there yet, when the peer has closed, or when c has no
// descriptor. The caller then learns which by reading as usual.
func ReadNow(c net.Conn, p []byte) int {
	raw := Descriptor(c)
	if raw == nil {
		return 0
	}
	return readNow(raw, p)
}

// WriteNow writes p to c: what the socket takes at once by a write(2)
// the scheduler is not told about (socket_linux.go says why that is
// cheaper), the rest, if any, through c.Write as usual. A small answer on
// a fresh socket (an upgrade's 101, a refusal) always goes at once.
func WriteNow(c net.Conn, p []byte) (int, error) { return writeNow(c, p, false) }

// writeNow is WriteNow, or WriteLast when last is set.
func writeNow(c net.Conn, p []byte, last bool) (int, error) {
	n := 0
	if raw := Descriptor(c); raw != nil {
		var err error
		if cerr := raw.Control(func(fd uintptr) {
			if last {
				n, err = SendLastFD(fd, p)
			} else {
				n, _, err = WriteFD(fd, p)
			}
		}); cerr != nil {
			return 0, cerr
		}
		if err != nil {
			return n, err
		}
	}
	if n == len(p) {
		return n, nil
	}
	k, err := c.Write(p[n:])
	return n + k, err
}

// AwaitGone waits until c's socket is readable and reports whether the
// client has gone: the end of its stream, or an error. Bytes are peeked,
// never consumed (a client that sent some has not gone). It returns false
// at once when c has no descriptor, and when c's read deadline passes.
func AwaitGone(c net.Conn) bool {
	raw := Descriptor(c)
	if raw == nil {
		return false
	}
	var one [1]byte
	gone := false
	err := raw.Read(func(fd uintptr) bool {
		n, wait := PeekFD(fd, one[:])
		if wait {
			return false // nothing yet: wait for readiness
		}
		gone = n == 0
		return true
	})
	return err == nil && gone
}

// HungUp reports, without waiting, whether the peer of sc's socket has
// ended its stream, or the socket has failed or is closed: for a socket
// that owes its peer a one-way stream and expects nothing of it (an event
// stream's client). Bytes the peer sent are read and dropped, at most
// hungUpReads reads of them a call.
func HungUp(sc syscall.RawConn) bool {
	gone := false
	err := sc.Control(func(fd uintptr) { gone = hungUpFD(fd) })
	return err != nil || gone
}

// hungUpReads bounds HungUp's reads of bytes a peer keeps sending.
const hungUpReads = 8

// DeferAccept asks the kernel to hand over ln's TCP connections only once
// their first bytes have arrived (TCP_DEFER_ACCEPT on Linux), so that the
// request head of a fresh connection can be read at once (ReadNow)
// instead of waited for. A client that sends nothing is still handed over,
// about wait later (in whole seconds, at least one), and then bounded as
// before by its reader's deadlines; one that leaves without sending costs
// the server no accept at all. It reports whether it took: false for a
// listener without a descriptor (not TCP), on other systems and in
// Portable mode.
func DeferAccept(ln net.Listener, wait time.Duration) bool {
	if !native || portable.Load() {
		return false
	}
	if _, ok := ln.(*net.TCPListener); !ok {
		return false
	}
	raw, err := ln.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	secs := max(1, int((wait+time.Second-1)/time.Second))
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = deferAcceptFD(fd, secs) }); err != nil {
		return false
	}
	return serr == nil
}

// WriteLast is WriteNow for the last bytes c sends: the caller closes c
// right after, and what the socket takes at once leaves with the FIN, in
// one segment (SendLastFD). The rest, if any, goes through c.Write.
func WriteLast(c net.Conn, p []byte) (int, error) { return writeNow(c, p, true) }

package wsock

import (
	"net"
	"syscall"
)

// A connection taken off a listening socket without net's accept.
//
// net's accept does, for every connection, accept4, setsockopt
// (TCP_NODELAY), getsockname and an epoll registration, and the close
// later an epoll removal; the accepting goroutine may also park in the
// netpoller. A connection the server answers at once and closes (a shed
// upgrade) needs none of that: AcceptFD takes it as a bare non-blocking
// descriptor, ReadFD and SendLastFD answer it and CloseFD closes it. One
// that must be served after all becomes the connection net's accept would
// have returned (ConnFromFD).

// ListenerDescriptor is the descriptor of ln's socket, for AcceptFD: nil
// unless ln is a *net.TCPListener on a system (and in a mode, Portable)
// with the descriptor calls. A Unix-socket listener keeps net's accept.
func ListenerDescriptor(ln net.Listener) syscall.RawConn {
	if !native || portable.Load() {
		return nil
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil
	}
	raw, err := tl.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

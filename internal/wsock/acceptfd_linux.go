package wsock

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// AcceptFD takes the next connection waiting on the listening socket
// raw (ListenerDescriptor) without waiting and without the netpoller:
// accept4(2) with SOCK_NONBLOCK|SOCK_CLOEXEC, not announced to the
// scheduler (socket_linux.go says why). The descriptor is the caller's,
// to close with CloseFD or to hand to ConnFromFD. syscall.EAGAIN means
// nothing is waiting; a closed listener gives net.ErrClosed; any other
// error is accept4's (EMFILE, say), which net's accept would report as
// well. As net's accept does, it retries on EINTR and on a connection
// aborted before it was taken (ECONNABORTED).
func AcceptFD(raw syscall.RawConn) (fd int, err error) {
	if portable.Load() {
		return -1, errors.ErrUnsupported
	}
	fd = -1
	var errno syscall.Errno
	if cerr := raw.Control(func(lfd uintptr) {
		for {
			r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, 0, 0,
				syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
			if e == syscall.EINTR || e == syscall.ECONNABORTED {
				continue
			}
			if e != 0 {
				errno = e
				return
			}
			fd = int(r)
			return
		}
	}); cerr != nil {
		// The listener is closed (Control waits for a Close under way).
		return -1, net.ErrClosed
	}
	if errno != 0 {
		return -1, errno
	}
	return fd, nil
}

// CloseFD closes a descriptor AcceptFD returned, not announced to the
// scheduler: the close of a socket whose last bytes wait (SendLastFD)
// sends them, and the FIN, at once.
func CloseFD(fd int) {
	syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
}

// ConnFromFD turns fd, a TCP connection AcceptFD returned, into the
// connection net's accept would have returned for it: a *net.TCPConn in
// the netpoller, TCP_NODELAY on, and keep-alive as ka (KeepAliveOf a
// connection the same listener's accept returned). fd itself is closed,
// whatever the outcome; an error is net.FileConn's (out of descriptors:
// the duplicate it makes needs one).
func ConnFromFD(fd int, ka net.KeepAliveConfig) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, syscall.EPROTONOSUPPORT
	}
	// net.FileConn sets TCP_NODELAY as net's accept does, but keep-alive
	// always, at its default; the listener's accept may not (the node
	// turns it off).
	if err := tc.SetKeepAliveConfig(ka); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// KeepAliveOf reads the keep-alive settings of c's socket, for
// ConnFromFD; false when c has no socket to read (or in Portable mode).
func KeepAliveOf(c net.Conn) (ka net.KeepAliveConfig, ok bool) {
	raw := Descriptor(c)
	if raw == nil {
		return ka, false
	}
	var on, idle, intvl, cnt int
	var err error
	if cerr := raw.Control(func(fd uintptr) {
		s := int(fd)
		if on, err = syscall.GetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); err != nil || on == 0 {
			return
		}
		if idle, err = syscall.GetsockoptInt(s, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE); err != nil {
			return
		}
		if intvl, err = syscall.GetsockoptInt(s, syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL); err != nil {
			return
		}
		cnt, err = syscall.GetsockoptInt(s, syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT)
	}); cerr != nil || err != nil {
		return ka, false
	}
	if on == 0 {
		return net.KeepAliveConfig{Enable: false}, true
	}
	return net.KeepAliveConfig{Enable: true, Idle: time.Duration(idle) * time.Second,
		Interval: time.Duration(intvl) * time.Second, Count: cnt}, true
}

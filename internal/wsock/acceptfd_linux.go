package wsock

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// A RawListener takes the connections of a TCP listener as bare
// descriptors (Accept). It waits on a duplicate of the listener's
// descriptor, registered in the netpoller on its own: net's listener
// gives no way to wait for its readiness without accepting. The
// listening socket stays open until both the listener and the
// RawListener are closed.
type RawListener struct {
	f   *os.File
	raw syscall.RawConn
}

// NewRawListener is a RawListener for ln: nil unless ln is a
// *net.TCPListener on a system (and in a mode, Portable) with the
// descriptor calls, and the duplicate could be made. A Unix-socket
// listener keeps net's accept.
func NewRawListener(ln net.Listener) *RawListener {
	if !native || portable.Load() {
		return nil
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil
	}
	sc, err := tl.SyscallConn()
	if err != nil {
		return nil
	}
	dup, derr := -1, error(nil)
	if err := sc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = e
			return
		}
		dup = int(r)
	}); err != nil || derr != nil {
		return nil
	}
	// The duplicate shares the listener's non-blocking mode, so NewFile
	// registers it in the netpoller, and its RawConn can wait.
	f := os.NewFile(uintptr(dup), "listener")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &RawListener{f: f, raw: raw}
}

// Accept takes the next connection waiting on the listening socket:
// accept4(2) with SOCK_NONBLOCK|SOCK_CLOEXEC, not announced to the
// scheduler (socket_linux.go says why), and while none is waiting it
// waits in the netpoller, as net's accept does. After each wait take is
// asked, and when it reports false no connection is taken (fd -1, err
// nil): the caller's reason to take one raw may have passed meanwhile.
// The descriptor is the caller's, to close with CloseFD or to hand to
// ConnFromFD. err is os.ErrDeadlineExceeded when Wake woke the wait, an
// error that is not nil once l is closed (Close), or accept4's (EMFILE,
// say, which net's accept would report as well). As net's accept does,
// it retries on EINTR and on a connection aborted before it was taken.
func (l *RawListener) Accept(take func() bool) (fd int, err error) {
	if portable.Load() {
		return -1, errors.ErrUnsupported
	}
	fd = -1
	var errno syscall.Errno
	waited := false
	if rerr := l.raw.Read(func(lfd uintptr) bool {
		if waited && !take() {
			return true
		}
		waited = true
		for {
			r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, 0, 0,
				syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
			switch e {
			case 0:
				fd = int(r)
				return true
			case syscall.EINTR, syscall.ECONNABORTED:
				continue
			case syscall.EAGAIN:
				return false // wait for the listener's readiness
			}
			errno = e
			return true
		}
	}); rerr != nil {
		return -1, rerr
	}
	if errno != 0 {
		return -1, errno
	}
	return fd, nil
}

// Wake makes an Accept that waits, or the next that would, return
// os.ErrDeadlineExceeded, until Rearm.
func (l *RawListener) Wake() { _ = l.f.SetReadDeadline(time.Unix(1, 0)) }

// Rearm undoes Wake.
func (l *RawListener) Rearm() { _ = l.f.SetReadDeadline(time.Time{}) }

// Close closes the duplicate descriptor, waking an Accept that waits.
func (l *RawListener) Close() error { return l.f.Close() }

// CloseFD closes a descriptor Accept returned, not announced to the
// scheduler: the close of a socket whose last bytes wait (SendLastFD)
// sends them, and the FIN, at once.
func CloseFD(fd int) {
	syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
}

// ConnFromFD turns fd, a TCP connection a RawListener took, into the
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

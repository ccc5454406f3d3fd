package handshake

import (
	"net"
	"syscall"
)

// awaitGone waits until c's socket is readable and reports whether the
// client has gone: the end of its stream, or an error. Bytes are peeked,
// never consumed (a client that sent some has not gone). It returns false
// at once when the socket has no descriptor, and when c's read deadline
// passes (stop).
func awaitGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var one [1]byte
	gone := false
	err = raw.Read(func(fd uintptr) bool {
		for {
			n, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch err {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // nothing yet: wait for readiness
			}
			gone = err != nil || n == 0
			return true
		}
	})
	return err == nil && gone
}

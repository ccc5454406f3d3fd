//go:build unix

package handshake

import (
	"net"
	"syscall"
)

// readNow reads what c has already received into p, without waiting: 0
// when nothing is there yet (or the peer has closed, or c has no
// descriptor), which the caller then learns by reading as usual.
func readNow(c net.Conn, p []byte) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = raw.Read(func(fd uintptr) bool {
		for {
			k, err := syscall.Read(int(fd), p)
			if err == syscall.EINTR {
				continue
			}
			n = max(k, 0)
			return true // one attempt: never wait
		}
	})
	return n
}

package server

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// syscallConn is the descriptor of a socket that has one.
func syscallConn(nc net.Conn) syscall.RawConn {
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			return raw
		}
	}
	return nil
}

// writeFD writes c.pend to the non-blocking descriptor. It returns false
// (wait until writable, then call again) only when blocking.
func (c *rawConn) writeFD(fd uintptr) bool {
	if c.stalled.Load() {
		c.stalled.Store(false)
	}
	for len(c.pend) > 0 {
		n, err := syscall.Write(int(fd), c.pend)
		if n > 0 {
			c.pend = c.pend[n:]
			c.n += n
		}
		switch {
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			if !c.block {
				return true
			}
			c.stalled.Store(true)
			return false
		case err != nil:
			c.err = err
			return true
		case n <= 0:
			c.err = io.ErrShortWrite
			return true
		}
	}
	return true
}

// inputFD stores how many bytes wait to be read in the socket.
func (c *rawConn) inputFD(fd uintptr) {
	var n int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	if errno == 0 {
		c.input = int(n)
	}
}

// awaitFD returns true once something can be read: bytes, the end (EOF)
// or an error; else false, to wait for readiness and be called again. It
// peeks (the first two bytes, kept in c.peek for takePong) rather than
// asking FIONREAD: an end that arrived before the wait began must not be
// waited for, its readiness edge is already spent.
func (c *rawConn) awaitFD(fd uintptr) bool {
	for {
		n, _, err := syscall.Recvfrom(int(fd), c.peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			c.flushBeforeWait()
			c.shrinkReader()
			return false // nothing yet: wait
		}
		c.peeked = max(n, 0)
		return true // bytes, the end, or an error: the read reports it
	}
}

// readFD reads what the non-blocking descriptor has now into h.rp.
func (h *holdSet) readFD(fd uintptr) {
	for {
		n, err := syscall.Read(int(fd), h.rp)
		if err == syscall.EINTR {
			continue
		}
		h.rn = max(n, 0)
		return
	}
}

//go:build unix

package pollconn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// conn is a stream socket read and written without the runtime's poller.
type conn struct {
	p            Poll
	network      string
	laddr, raddr net.Addr

	// mu guards fd: a read or write holds it for reading around its
	// syscall (never while sleeping), Close for writing, so a closed
	// descriptor's number, which the kernel may hand out again, is never
	// used.
	mu sync.RWMutex
	fd int // -1 once closed

	closing   chan struct{} // closed by Close: wakes a sleeping Read or Write
	closeOnce sync.Once

	rmu  sync.Mutex    // one Read at a time
	wmu  sync.Mutex    // one Write at a time
	idle time.Duration // the next empty read's sleep; rmu

	rdl, wdl atomic.Int64 // deadlines, Unix ns; 0: none
}

func wrap(c net.Conn, p Poll) net.Conn {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return c // TLS and the like keep their own buffering: leave them be
	}
	if c.LocalAddr().Network() == "unixgram" || c.LocalAddr().Network() == "unixpacket" {
		return c
	}
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return c
	}
	fd, derr := -1, error(nil)
	err = raw.Control(func(s uintptr) {
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		if fd, derr = syscall.Dup(int(s)); derr == nil {
			syscall.CloseOnExec(fd)
		}
	})
	if err != nil || derr != nil {
		return c
	}
	// The duplicate shares the open file and so its O_NONBLOCK; say so
	// anyway, as the reads below rely on it.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return c
	}
	pc := &conn{
		p: p, network: c.LocalAddr().Network(), laddr: c.LocalAddr(), raddr: c.RemoteAddr(),
		fd: fd, closing: make(chan struct{}), idle: p.Min,
	}
	// Closing the original takes the socket out of the epoll set; the
	// duplicate keeps it open.
	_ = c.Close()
	return pc
}

// Read reads what is buffered; when nothing is, it sleeps (see Poll) and
// tries again, until its deadline.
func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		n, err := c.syscall(func(fd int) (int, error) { return syscall.Read(fd, b) })
		switch {
		case n > 0:
			c.idle = c.p.Min
			return n, nil
		case err == nil:
			return 0, io.EOF
		case err == syscall.EINTR:
			continue
		case err != syscall.EAGAIN:
			return 0, c.opError("read", err)
		}
		wait, ok := c.waitFor(c.idle, &c.rdl)
		if !ok {
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		if !c.sleep(wait) {
			return 0, c.opError("read", net.ErrClosed)
		}
		c.idle = min(2*c.idle, c.p.Max)
	}
}

// Write writes all of b, sleeping a millisecond whenever the socket's
// buffer is full, until its deadline.
func (c *conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	done := 0
	for done < len(b) {
		n, err := c.syscall(func(fd int) (int, error) { return syscall.Write(fd, b[done:]) })
		if n > 0 {
			done += n
			continue
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err != syscall.EAGAIN:
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return done, c.opError("write", err)
		}
		wait, ok := c.waitFor(time.Millisecond, &c.wdl)
		if !ok {
			return done, c.opError("write", os.ErrDeadlineExceeded)
		}
		if !c.sleep(wait) {
			return done, c.opError("write", net.ErrClosed)
		}
	}
	return done, nil
}

// syscall runs op on the descriptor unless the connection is closed.
func (c *conn) syscall(op func(fd int) (int, error)) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.fd < 0 {
		return 0, net.ErrClosed
	}
	n, err := op(c.fd)
	return max(n, 0), err
}

// waitFor is how long to sleep before trying again: d, cut short by the
// deadline in dl; false once the deadline has passed.
func (c *conn) waitFor(d time.Duration, dl *atomic.Int64) (time.Duration, bool) {
	if at := dl.Load(); at != 0 {
		left := time.Until(time.Unix(0, at))
		if left <= 0 {
			return 0, false
		}
		d = min(d, left)
	}
	return d, true
}

// sleep waits d; false when Close came first.
func (c *conn) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.closing:
		return false
	}
}

func (c *conn) opError(op string, err error) error {
	if errors.Is(err, net.ErrClosed) {
		err = net.ErrClosed
	}
	return &net.OpError{Op: op, Net: c.network, Source: c.laddr, Addr: c.raddr, Err: err}
}

// Close closes the socket and wakes a sleeping Read or Write.
func (c *conn) Close() error {
	err := c.opError("close", net.ErrClosed)
	c.closeOnce.Do(func() {
		close(c.closing)
		c.mu.Lock()
		defer c.mu.Unlock()
		err = syscall.Close(c.fd)
		c.fd = -1
	})
	return err
}

func (c *conn) LocalAddr() net.Addr  { return c.laddr }
func (c *conn) RemoteAddr() net.Addr { return c.raddr }

func (c *conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(unixNano(t))
	return nil
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(unixNano(t))
	return nil
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}

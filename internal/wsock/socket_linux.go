package wsock

import (
	"io"
	"syscall"
	"unsafe"
)

// native: this system has the descriptor calls.
const native = true

// The calls below go to the kernel without telling the Go scheduler
// (syscall.RawSyscall, not syscall.Syscall): the descriptors are
// non-blocking, so a call returns at once (EAGAIN when it would wait),
// and announcing it would only cost. An announced call that outlasts the
// runtime's monitor tick (20 µs, which a busy loopback write or a
// descheduled vCPU passes) has its P handed to another thread, and every
// such hand-off keeps the monitor polling at its shortest interval: on a
// two-core VM that polling was a tenth of the server's CPU in a fan-out
// and a fifth to two fifths under refusals and connect storms
// (docs/journal/latency-and-shedding.md).

// rawWrite is write(2) on a non-blocking descriptor.
func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

// rawRead is read(2) on a non-blocking descriptor.
func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	if raceBuild {
		// The announced read tells the race detector that what it reads
		// was written before (race_on.go).
		n, err := syscall.Read(int(fd), p)
		if errno, ok := err.(syscall.Errno); ok {
			return 0, errno
		}
		return n, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

// rawPeek is recvfrom(2) with MSG_PEEK|MSG_DONTWAIT.
func rawPeek(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return int(n), e
}

// WriteFD writes as much of p as the non-blocking descriptor takes now,
// and returns how much went. full reports that it stopped because the
// socket would take no more (EAGAIN); err is any other failure.
func WriteFD(fd uintptr, p []byte) (n int, full bool, err error) {
	for n < len(p) {
		k, errno := rawWrite(fd, p[n:])
		if errno == 0 && k > 0 {
			n += k
		}
		switch {
		case errno == syscall.EINTR:
		case errno == syscall.EAGAIN:
			return n, true, nil
		case errno != 0:
			return n, false, errno
		case k <= 0:
			return n, false, io.ErrShortWrite
		}
	}
	return n, false, nil
}

// ReadFD reads what the non-blocking descriptor has received into p,
// without waiting: 0 when nothing has arrived, at the end, or on error.
func ReadFD(fd uintptr, p []byte) int {
	for {
		n, errno := rawRead(fd, p)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0:
			return 0
		}
		return n
	}
}

// PeekFD copies the first received bytes into p without consuming them
// and without waiting. wait reports that nothing has arrived, not even
// the end; otherwise n is how many were peeked: 0 at the end or on an
// error, which a read then reports. An end that arrived before a wait
// began is seen (its readiness edge may be spent), which asking for the
// count of waiting bytes (TIOCINQ) would not tell from "nothing yet".
func PeekFD(fd uintptr, p []byte) (n int, wait bool) {
	for {
		n, errno := rawPeek(fd, p)
		switch errno {
		case 0:
			return n, false
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, true
		}
		return 0, false
	}
}

// hungUpFD is HungUp on a non-blocking descriptor: it reads until nothing
// is left (not gone), the end or an error (gone).
func hungUpFD(fd uintptr) bool {
	var drop [512]byte
	for range hungUpReads {
		n, errno := rawRead(fd, drop[:])
		switch {
		case errno == syscall.EINTR:
		case errno == syscall.EAGAIN:
			return false
		case errno != 0 || n == 0:
			return true
		}
	}
	return false
}

// setRcvLowat sets SO_RCVLOWAT: how many received bytes make the socket
// readable, and so wake whoever polls it.
func setRcvLowat(fd uintptr, n int32) {
	syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT,
		uintptr(unsafe.Pointer(&n)), unsafe.Sizeof(n), 0)
}

// deferAcceptFD sets TCP_DEFER_ACCEPT on a listening socket: accept
// returns a connection only once its first bytes have arrived, or after
// about secs seconds without any.
func deferAcceptFD(fd uintptr, secs int) error {
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, secs)
}

// SendLastFD is WriteFD for a socket's last bytes: send(2) with MSG_MORE,
// so that the kernel holds what it takes until the close that the caller
// makes next, and sends it with the FIN in one segment instead of two
// (on loopback, a segment costs the sender its peer's receive as well).
// Only a close that follows at once may come after it: held bytes wait
// for more, the close or the kernel's cork timeout.
func SendLastFD(fd uintptr, p []byte) (n int, err error) {
	for n < len(p) {
		k, _, errno := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n),
			syscall.MSG_MORE|syscall.MSG_NOSIGNAL, 0, 0)
		switch {
		case errno == syscall.EINTR:
		case errno == syscall.EAGAIN:
			return n, nil
		case errno != 0:
			return n, errno
		case k == 0:
			return n, io.ErrShortWrite
		default:
			n += int(k)
		}
	}
	return n, nil
}

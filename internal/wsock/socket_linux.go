package wsock

import (
	"io"
	"syscall"
)

// native: this system has the descriptor calls.
const native = true

// WriteFD writes as much of p as the non-blocking descriptor takes now,
// and returns how much went. full reports that it stopped because the
// socket would take no more (EAGAIN); err is any other failure.
func WriteFD(fd uintptr, p []byte) (n int, full bool, err error) {
	for n < len(p) {
		k, err := syscall.Write(int(fd), p[n:])
		if k > 0 {
			n += k
		}
		switch {
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			return n, true, nil
		case err != nil:
			return n, false, err
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
		n, err := syscall.Read(int(fd), p)
		if err == syscall.EINTR {
			continue
		}
		return max(n, 0)
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
		n, _, err := syscall.Recvfrom(int(fd), p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, true
		}
		return max(n, 0), false
	}
}

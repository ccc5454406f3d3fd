package wsock

import (
	"bufio"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
)

// A client that has closed before the read loop comes to wait is seen at
// once: the end is peeked for, not waited for (its readiness may already
// have been delivered).
func TestAwaitInputSeesAnEarlierEnd(t *testing.T) {
	client, server := testkit.TCPPair(t)
	defer server.Close()
	rc := NewConn(server)
	rc.br = bufio.NewReaderSize(server, ReadBufferSize)
	client.Close()
	// Let the end reach the server side, and the runtime's poller see it.
	sc, _ := server.(*net.TCPConn).SyscallConn()
	for ended := false; !ended; {
		_ = sc.Control(func(fd uintptr) {
			n, _, err := syscall.Recvfrom(int(fd), make([]byte, 1), syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			ended = n == 0 && err == nil
		})
		runtime.Gosched()
	}
	done := make(chan struct{})
	go func() {
		rc.AwaitInput(false, false)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a hang guard, not a threshold
		t.Fatal("AwaitInput waits for a client that has already closed")
	}
}

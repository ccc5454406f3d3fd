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

// CloseFrameNext tells a close frame at the head of the input from
// anything else, whether the head is still in the socket or already in
// the read buffer.
func TestCloseFrameNext(t *testing.T) {
	for _, tc := range []struct {
		frame []byte
		want  bool
	}{
		{[]byte{0x88, 0x82, 1, 2, 3, 4, 0x03 ^ 1, 0xe8 ^ 2}, true},
		{[]byte{0x81, 0x80, 1, 2, 3, 4}, false},
		{[]byte{0x8A, 0x80, 1, 2, 3, 4, 0x88, 0x80, 1, 2, 3, 4}, true}, // a pong (taken), then a close
	} {
		client, server := testkit.TCPPair(t)
		rc := NewConn(server)
		rc.br = bufio.NewReaderSize(server, ReadBufferSize)
		if _, err := client.Write(tc.frame); err != nil {
			t.Fatal(err)
		}
		rc.AwaitInput(false, false) // peeks the socket; takes a pong
		if got := rc.CloseFrameNext(); got != tc.want {
			t.Fatalf("% x in the socket: %v, want %v", tc.frame, got, tc.want)
		}
		if _, err := rc.br.Peek(1); err != nil { // now in the read buffer
			t.Fatal(err)
		}
		if got := rc.CloseFrameNext(); got != tc.want {
			t.Fatalf("% x buffered: %v, want %v", tc.frame, got, tc.want)
		}
		client.Close()
		server.Close()
	}
}

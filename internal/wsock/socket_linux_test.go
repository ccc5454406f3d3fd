package wsock

import (
	"bytes"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// DeferAccept takes on a TCP listener: a connection is accepted with the
// bytes its client sent first already readable without waiting. It does
// not take where there is no TCP socket, or in Portable mode.
func TestDeferAccept(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !DeferAccept(ln, time.Second) {
		t.Fatal("DeferAccept did not take on a TCP listener")
	}
	raw, err := ln.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var secs int
	var gerr error
	_ = raw.Control(func(fd uintptr) {
		secs, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT)
	})
	if gerr != nil || secs <= 0 {
		t.Fatalf("TCP_DEFER_ACCEPT reads %d, %v", secs, gerr)
	}

	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const head = "GET /ws HTTP/1.1\r\n\r\n"
	if _, err := client.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	buf := make([]byte, 64)
	if n := ReadNow(server, buf); string(buf[:n]) != head {
		t.Fatalf("read at accept %q, want the whole head", buf[:n])
	}

	unix, err := net.Listen("unix", t.TempDir()+"/s")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	if DeferAccept(unix, time.Second) {
		t.Fatal("DeferAccept took on a Unix listener")
	}
	defer Portable(true)()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if DeferAccept(other, time.Second) {
		t.Fatal("DeferAccept took in Portable mode")
	}
}

// unsentBytes is what c's socket holds that has not been sent yet
// (SIOCOUTQNSD).
func unsentBytes(t *testing.T, c net.Conn) int {
	t.Helper()
	const siocoutqnsd = 0x894B
	var n int32
	var errno syscall.Errno
	_ = Descriptor(c).Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall(syscall.SYS_IOCTL, fd, siocoutqnsd, uintptr(unsafe.Pointer(&n)))
	})
	if errno != 0 {
		t.Fatal("SIOCOUTQNSD:", errno)
	}
	return int(n)
}

// WriteLast holds a short answer in the socket until the close, which
// sends it with the FIN; the client reads all of it, then the end. An
// answer longer than the socket takes at once goes whole as well, the
// rest through the connection's own write.
func TestWriteLastLeavesWithTheClose(t *testing.T) {
	skipUnlessNative(t)
	leakcheck.Check(t)
	for _, size := range []int{len("HTTP/1.1 503 Service Unavailable\r\n\r\n"), 8 << 20} {
		server, client := pair(t)
		answer := bytes.Repeat([]byte("x"), size)
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(client) // to the end: the server's FIN
			got <- b
		}()
		if size < 1000 {
			if n, err := WriteLast(server, answer); n != size || err != nil {
				t.Fatalf("WriteLast: %d, %v", n, err)
			}
			if held := unsentBytes(t, server); held != size {
				t.Fatalf("after WriteLast %d bytes are unsent, want all %d (held for the FIN)", held, size)
			}
		} else if n, err := WriteLast(server, answer); n != size || err != nil {
			t.Fatalf("WriteLast of %d: %d, %v", size, n, err)
		}
		server.Close()
		if b := <-got; !bytes.Equal(b, answer) {
			t.Fatalf("the client read %d bytes, want the %d written", len(b), size)
		}
	}
}

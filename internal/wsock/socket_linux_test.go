package wsock

import (
	"net"
	"syscall"
	"testing"
	"time"

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

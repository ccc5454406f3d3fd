package wsock

import (
	"errors"
	"net"
	"testing"
	"time"
	"unsafe"
)

// countingConn records writes that reach the socket.
type countingConn struct {
	net.Conn
	writes int
	data   []byte
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes++
	c.data = append(c.data, p...)
	return len(p), nil
}

func (c *countingConn) SetWriteDeadline(time.Time) error { return nil }

// Once sealed (a close frame is coming), no more data frames are sent,
// while the library's own writes (the close frame) still go out.
func TestSealedConnSendsNoData(t *testing.T) {
	under := &countingConn{}
	rc := &Conn{Conn: under}
	if err := rc.Send([]byte("data"), time.Second); err != nil {
		t.Fatal(err)
	}
	rc.Seal()
	if err := rc.Send([]byte("late"), time.Second); !errors.Is(err, ErrSealed) {
		t.Fatalf("send after seal: %v", err)
	}
	rc.Write([]byte("close"))
	if string(under.data) != "dataclose" || under.writes != 2 {
		t.Fatalf("socket got %q in %d writes", under.data, under.writes)
	}
}

// Every idle connection pays for its Conn: the parking state and the
// owner fit in the 240-byte size class it has.
func TestConnStaysInItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 240 {
		t.Fatalf("Conn is %d bytes, over the 240-byte size class", n)
	}
}

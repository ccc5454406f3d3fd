package wsock

import (
	"bufio"
	"io"
	"net"
)

// Buffer sizes of a hijacked connection. net/http hands over 4 KiB for
// reading and 4 KiB for writing, held for the life of the connection:
// most of what an idle connection costs. The reader only needs room for
// frame headers (payloads larger than the buffer are read straight into
// the caller's slice). The writer carries only the WebSocket library's
// control frames (ping, pong, close: at most 2+125 bytes, a server never
// masks), and must hold a whole one so that each leaves in a single Write.
const (
	ReadBufferSize  = 256
	WriteBufferSize = 128
)

// SmallBuffers replaces the buffers net/http's Hijack returned for nc (r
// its reader): the reader by one of ReadBufferSize unless it holds bytes
// the client sent before the upgrade's answer (they must be kept, so it
// stays), and the writer by one of WriteBufferSize that writes to w.
func SmallBuffers(nc net.Conn, r *bufio.Reader, w io.Writer) (*bufio.Reader, *bufio.ReadWriter) {
	if r.Buffered() == 0 {
		r = bufio.NewReaderSize(nc, ReadBufferSize)
	}
	return r, bufio.NewReadWriter(r, bufio.NewWriterSize(w, WriteBufferSize))
}

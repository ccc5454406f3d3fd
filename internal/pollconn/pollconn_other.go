//go:build !unix

package pollconn

import "net"

// wrap: only Unix sockets can be read outside the runtime's poller.
func wrap(c net.Conn, _ Poll) net.Conn { return c }

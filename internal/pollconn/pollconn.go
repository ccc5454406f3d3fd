package pollconn

import (
	"net"
	"time"
)

// Poll is how long a polled connection sleeps when a read finds nothing:
// Min after one that found data, doubling up to Max.
type Poll struct {
	Min, Max time.Duration
}

// normal returns p with Min at least a millisecond and Max at least Min.
func (p Poll) normal() Poll {
	p.Min = max(p.Min, time.Millisecond)
	p.Max = max(p.Max, p.Min)
	return p
}

// Wrap returns a polled connection in c's place, taking c over (c is
// closed, or, on failure, handed back), or c itself where polling does
// not apply (see the package documentation).
func Wrap(c net.Conn, p Poll) net.Conn {
	return wrap(c, p.normal())
}

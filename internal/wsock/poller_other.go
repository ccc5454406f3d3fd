//go:build !linux

package wsock

import "syscall"

// Poller watches sockets for input without a goroutine per socket. There
// is none on this system: NewPoller fails, and callers keep a goroutine
// waiting on each socket.
type Poller struct{}

// NewPoller fails here (ErrNoPoller).
func NewPoller() (*Poller, error) { return nil, ErrNoPoller }

// Arm fails here.
func (p *Poller) Arm(syscall.RawConn, uint64, Waker) error { return ErrNoPoller }

// Forget does nothing here.
func (p *Poller) Forget(uint64) {}

// Close does nothing here.
func (p *Poller) Close() {}

// Len is 0 here.
func (p *Poller) Len() int { return 0 }

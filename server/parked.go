package server

import (
	"sync"

	"github.com/rtserver/rtserver/internal/wsock"
)

// idlePoller is the server's readiness poller for parked connections
// (conn.park): started by the first connection that parks, stopped by
// Shutdown once every connection has ended. Where there is none (another
// system, wsock.Portable, or after Shutdown), get returns nil and read
// goroutines wait on their sockets as before.
type idlePoller struct {
	mu      sync.Mutex
	p       *wsock.Poller
	stopped bool // stop ran, or the poller could not be made
}

// get is the poller, started on first use; nil when there is none.
func (ip *idlePoller) get() *wsock.Poller {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	if ip.p == nil && !ip.stopped {
		p, err := wsock.NewPoller()
		if err != nil {
			ip.stopped = true
			return nil
		}
		ip.p = p
	}
	return ip.p
}

// forget drops a connection that has ended from the poller, if it has one.
func (ip *idlePoller) forget(id uint64) {
	ip.mu.Lock()
	p := ip.p
	ip.mu.Unlock()
	if p != nil {
		p.Forget(id)
	}
}

// known is how many connections the poller knows (tests).
func (ip *idlePoller) known() int {
	ip.mu.Lock()
	p := ip.p
	ip.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.Len()
}

// stop stops the poller's goroutine for good. A connection still parked
// then is resumed by the close of its socket (wsock.Conn.Close).
func (ip *idlePoller) stop() {
	ip.mu.Lock()
	p := ip.p
	ip.p, ip.stopped = nil, true
	ip.mu.Unlock()
	if p != nil {
		p.Close()
	}
}

package wsock

import "errors"

// A Waker is told when the socket it armed a Poller for may have input
// (or has ended, or failed). It is called on the Poller's goroutine and
// must not block.
type Waker interface{ Wake() }

// ErrNoPoller is NewPoller's error on a system without one (or in the
// Portable mode).
var ErrNoPoller = errors.New("wsock: no readiness poller on this system")

// ErrPollerClosed is Arm's error once the Poller is closed.
var ErrPollerClosed = errors.New("wsock: poller closed")

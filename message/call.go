package message

import (
	"strconv"
	"sync/atomic"
)

// Call describes one call at dispatch. The caller owns it (the server keeps
// one per in-flight call) so checking allocates nothing; a concurrency lease
// taken by Check lives inside it and is given back by Release.
//
// Lease life cycle: Check that allows a class with a Concurrency part
// stores the lease in the Call; Release gives it back exactly once, however
// many times and from however many goroutines it is called (handler return,
// recovered panic, connection teardown). After Release the Call is free
// again and may be refilled and checked for the next call; Check panics on a
// Call that still holds a lease, because two leases in one Call would make
// one Release ambiguous. Reuse a Call only once every party that may call
// Release for the previous call is done with it: Release takes no token, so
// a late Release from the previous call would give back the new lease.
//
// The exported fields are read by Check only; set them before Check, on the
// goroutine that calls it. A Call must not be copied after first use (go vet
// reports copies): a copy of a held lease would be released twice.
type Call struct {
	Method string
	Topic  string // publish/subscribe topic, or ""
	User   string // authenticated user id; "" when anonymous
	IP     string // client IP key (an IPv6 /64 prefix as text)
	ConnID uint64

	// lease is the class whose concurrency slot this Call holds, or nil.
	// Swap to nil is the one release: whoever swaps the class out gives it
	// back, so concurrent Releases release once.
	lease atomic.Pointer[Class]

	// connKey caches ConnID as text for Rate{By: "conn"} (a limiter key is
	// a string), so a Call reused on one connection formats it once.
	connKey   string
	connKeyID uint64
}

// Release gives back the concurrency lease Check took, if any. It is
// idempotent and safe to call from several goroutines: the lease is
// released exactly once. When several Releases race, the ones that lose
// return at once, possibly a moment before the winner has given the slot
// back; after every racing Release has returned, it is back.
func (c *Call) Release() {
	if c.lease.Load() == nil {
		return
	}
	if cl := c.lease.Swap(nil); cl != nil {
		cl.inflight.Add(-1)
	}
}

// ReleaseDropped is Release for a call whose work was wasted rather than
// done: the client went away, the handler panicked, or (when the adapter is
// asked to) it answered with a server error. The lease is given back
// exactly as by Release, and at most once across Release and
// ReleaseDropped together; a part that learns from outcomes (an adaptive
// concurrency limit) counts the call as a drop instead of a completion.
func (c *Call) ReleaseDropped() {
	c.Release()
}

// Holding reports whether the Call holds a concurrency lease now.
func (c *Call) Holding() bool { return c.lease.Load() != nil }

func (c *Call) connIDKey() string {
	if c.connKey == "" || c.connKeyID != c.ConnID {
		c.connKey = strconv.FormatUint(c.ConnID, 10)
		c.connKeyID = c.ConnID
	}
	return c.connKey
}

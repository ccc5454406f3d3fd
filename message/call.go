package message

import (
	"encoding/json"
	"strconv"
	"sync/atomic"
)

// Call describes one call at dispatch. The caller owns it (the server keeps
// one per in-flight call) so checking allocates nothing; a concurrency lease
// taken by Check lives inside it and is given back by Release.
//
// Lease life cycle: Check that allows a class with a Concurrency or
// AdaptiveConcurrency part stores the lease in the Call; Release (or
// ReleaseWith) gives it back exactly once, however many times and from
// however many goroutines it is called (handler return, recovered panic,
// connection teardown). After Release the Call is free again and may be
// refilled and checked for the next call; Check panics on a Call that still
// holds a lease, because two leases in one Call would make one Release
// ambiguous. Reuse a Call only once every party that may call Release for
// the previous call is done with it: Release takes no token, so a late
// Release from the previous call would give back the new lease.
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

	// Bytes is the size of the request (the JSON-RPC request object, or
	// an HTTP request's body): the cost of a Cost{Of: "bytes"} part, and
	// the per-subscriber factor of Cost{Of: "fanout"}.
	Bytes int64
	// Subscribers is this instance's subscriber count of Topic when the
	// call publishes to it (the server sets it for publish): a
	// Cost{Of: "fanout"} part charges Bytes × Subscribers.
	Subscribers int64
	// Params is the call's params (a JSON object), read by a
	// Cost{Of: "param:<name>"} part, which charges the named top-level
	// member (a non-negative number).
	Params json.RawMessage

	// lease is the class whose concurrency slot this Call holds, or nil.
	// Swap to nil is the one release: whoever swaps the class out gives it
	// back, so concurrent Releases release once.
	lease atomic.Pointer[Class]
	// start is when an AdaptiveConcurrency lease was taken (the class's
	// clock, in ns since its epoch): Release measures the latency from it.
	// Written by Check before the lease is published, read by the one
	// Release that swaps the lease out.
	start int64

	// connKey caches ConnID as text for Rate{By: "conn"} (a limiter key is
	// a string), so a Call reused on one connection formats it once.
	connKey   string
	connKeyID uint64
}

// Outcome is how an admitted call ended, reported by ReleaseWith. An
// AdaptiveConcurrency part learns from it: a Completed call contributes its
// latency (Check to Release); a Dropped call counts as overload and pulls
// the limit down. Parts other than AdaptiveConcurrency ignore it.
type Outcome uint8

const (
	// Completed: the call ran to its end, successfully or with an
	// application error (bad params, not found, forbidden): its latency is
	// a valid sample of the backend's speed.
	Completed Outcome = iota
	// Dropped: the call failed in a way that signals overload: it timed
	// out, its backend failed (an HTTP 5xx when an adapter is told to
	// count it), it panicked, or the client went away before the answer.
	Dropped
)

func (o Outcome) String() string {
	switch o {
	case Completed:
		return "completed"
	case Dropped:
		return "dropped"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Release gives back the concurrency lease Check took, if any, reporting
// the call as Completed (ReleaseWith(Completed)). It is idempotent and safe
// to call from several goroutines: the lease is released exactly once. When
// several Releases race, the ones that lose return at once, possibly a
// moment before the winner has given the slot back; after every racing
// Release has returned, it is back.
func (c *Call) Release() { c.ReleaseWith(Completed) }

// ReleaseWith is Release reporting how the call ended. Only the Release
// that actually gives the lease back reports its outcome; later ones (and
// any on a Call without a lease) do nothing, so a handler may call
// ReleaseWith(Dropped) on failure and a deferred Release() after it.
func (c *Call) ReleaseWith(o Outcome) {
	if c.lease.Load() == nil {
		return
	}
	if cl := c.lease.Swap(nil); cl != nil {
		cl.release(c.start, o)
	}
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

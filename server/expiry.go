package server

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/deadlines"
	"github.com/rtserver/rtserver/protocol"
)

// MethodRefresh replaces the connection's token (docs/authentication.md).
const MethodRefresh = protocol.MethodRefresh

// tokenExpiry binds a connection to its token's exp: a tokenExpiring
// notice at least the refresh notice before exp, then a close with 1008
// at exp unless a refresh moved exp first. It exists only for
// connections whose token has an exp (a connection without one carries a
// nil pointer and nothing scheduled). Its next step waits in the
// server's expiry heap, one timer for every connection, not a timer (nor
// a goroutine) of its own.
type tokenExpiry struct {
	notice time.Duration
	now    func() time.Time
	warn   func(left time.Duration) // sends the tokenExpiring notice
	expire func()                   // closes the connection
	heap   *deadlines.Heap[*tokenExpiry]

	mu      sync.Mutex
	expires time.Time // zero: no exp (after a refresh with a token without one)
	noticed bool      // the notice for this expires was sent
	stopped bool
	next    deadlines.Handle // under heap's lock
}

// newExpiryHeap is the heap a server's token expiries wait in. Exact (no
// rounding): a connection closes at its exp, not after it.
func newExpiryHeap() *deadlines.Heap[*tokenExpiry] {
	return deadlines.New(0, func(e *tokenExpiry) *deadlines.Handle { return &e.next }, (*tokenExpiry).fire)
}

// noticeSlack is how much earlier than exp - notice the notice is sent,
// so that timer latency never makes it arrive less than notice before exp.
func noticeSlack(notice time.Duration) time.Duration {
	return min(notice/10, time.Second)
}

// newTokenExpiry starts watching expires, in h.
func newTokenExpiry(h *deadlines.Heap[*tokenExpiry], expires time.Time, notice time.Duration, now func() time.Time, warn func(time.Duration), expire func()) *tokenExpiry {
	e := &tokenExpiry{notice: notice, now: now, warn: warn, expire: expire, heap: h, expires: expires}
	e.mu.Lock()
	h.After(e, e.nextLocked())
	e.mu.Unlock()
	return e
}

// nextLocked is how long until the next thing to do: the notice, or exp.
func (e *tokenExpiry) nextLocked() time.Duration {
	at := e.expires
	if !e.noticed {
		at = at.Add(-e.notice - noticeSlack(e.notice))
	}
	return max(at.Sub(e.now()), 0)
}

// fire runs on the heap's goroutine: it decides from the current state,
// so a refresh that moved exp just before is honoured. warn and expire
// run under e.mu, so once stop has returned neither runs again (the
// connection's cleanup relies on it: expire starts a close owned by the
// server's WaitGroup). Both only queue work, as the heap requires; lock
// order: e.mu before the connection's mu and before the heap's.
func (e *tokenExpiry) fire() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped || e.expires.IsZero() {
		return
	}
	left := e.expires.Sub(e.now())
	if left <= 0 {
		e.stopped = true
		e.expire()
		return
	}
	if !e.noticed && left <= e.notice+noticeSlack(e.notice) {
		e.noticed = true
		e.warn(left)
	}
	e.heap.After(e, e.nextLocked())
}

// extend moves exp to expires (zero: the connection no longer expires)
// and rearms the notice. It reports false when the connection has
// already expired.
func (e *tokenExpiry) extend(expires time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return false
	}
	e.expires, e.noticed = expires, false
	if expires.IsZero() {
		e.heap.Cancel(e)
		return true
	}
	e.heap.After(e, e.nextLocked())
	return true
}

// stop ends the watch (the connection ended).
func (e *tokenExpiry) stop() {
	e.mu.Lock()
	e.stopped = true
	e.heap.Cancel(e)
	e.mu.Unlock()
}

// watchExpiry starts the expiry of a connection whose token has an exp.
// It runs on the read goroutine (start, or a refresh), which owns
// c.expiry.
func (c *conn) watchExpiry(expires time.Time) {
	c.expiry = newTokenExpiry(c.s.expiries, expires, c.s.refreshNotice, time.Now,
		func(left time.Duration) {
			c.enqueue(protocol.AppendTokenExpiring(nil, max(left.Milliseconds(), 1)))
		},
		func() {
			c.closeLater(websocket.StatusPolicyViolation, protocol.ReasonTokenExpired, false, nil)
		})
}

// refresh answers the refresh method: a valid token of the same user
// replaces the connection's, moving (or lifting) its expiry. Any failure
// is -32003 and leaves the connection as it was.
func (c *conn) refresh(r *protocol.Request) (json.RawMessage, *protocol.Error) {
	token, perr := protocol.DecodeRefreshParams(r.Params)
	if perr != nil {
		return nil, perr
	}
	call := c.builtinCallOf(r.Method, "")
	defer endBuiltinCall(call)
	if perr := c.admit(call); perr != nil {
		return nil, perr
	}
	defer call.Release()
	forbidden := protocol.NewError(protocol.CodeForbidden, "", nil)
	if c.s.gate == nil {
		return nil, forbidden
	}
	id, err := c.s.gate.VerifyToken(&c.ctx, token)
	if err != nil || id.User != c.ticket.User {
		return nil, forbidden
	}
	switch {
	case c.expiry != nil:
		if !c.expiry.extend(id.Expires) {
			return nil, forbidden // expired meanwhile: the close is under way
		}
	case !id.Expires.IsZero():
		c.watchExpiry(id.Expires)
	}
	if id.Expires.IsZero() {
		return json.RawMessage(`{"expiresAt":null}`), nil
	}
	b := strconv.AppendInt([]byte(`{"expiresAt":`), id.Expires.Unix(), 10)
	return append(b, '}'), nil
}

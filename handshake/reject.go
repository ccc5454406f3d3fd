package handshake

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/retryhint"
)

// shedCounter estimates rejections per second over a sliding second from
// two fixed one-second buckets. Approximate under races, which is all a
// retry hint needs.
type shedCounter struct {
	sec  atomic.Int64
	cur  atomic.Int64
	prev atomic.Int64
}

func (c *shedCounter) add(now int64) int64 {
	s := floorDiv(now, int64(time.Second))
	if old := c.sec.Load(); s != old && c.sec.CompareAndSwap(old, s) {
		p := c.cur.Swap(0)
		if s != old+1 {
			p = 0
		}
		c.prev.Store(p)
	}
	frac := now - s*int64(time.Second) // ns into this second
	return c.cur.Add(1) + c.prev.Load()*(int64(time.Second)-frac)/int64(time.Second)
}

// overloadHint is the jittered retry hint for a shed upgrade. It grows
// with the recent shedding rate: a crowd of R rejections per second is
// told to come back spread over about R/capacity seconds (capacity: the
// upgrades per second pacing lets through, or nominalCapacity without
// pacing), capped at 60 × the base. Jitter is uniform over [h/2, 3h/2) so
// a rejected crowd does not return in lockstep. Never below 1ms.
//
// R counts the rejections before this one: a lone rejection after a quiet
// spell gets exactly the base, so its hint is in [base/2, 3·base/2) and,
// rounded up to whole milliseconds, never above 3·base/2.
func (g *Gate) overloadHint(now int64) int64 {
	recent := g.shed.add(now) - 1
	h := g.base + time.Duration(float64(recent)/g.capacity*float64(time.Second))
	h = min(h, g.maxHint)
	return retryhint.Millis(retryhint.Jitter(h/2, h))
}

// rateHint is the hint for a per-IP denial: never earlier than the
// limiter's own RetryAfter (an earlier retry is bound to fail), plus up to
// half of it again as jitter.
func rateHint(retryAfter time.Duration) int64 {
	return retryhint.Millis(retryhint.Jitter(retryAfter, retryAfter/2+1))
}

// closeShed answers a shed upgrade in close mode: the upgrade completes
// and the connection is closed at once with 1013 and the hint's reason,
// because a browser cannot read the status of a failed upgrade but can
// read a close code. Origin was already checked, hence InsecureSkipVerify.
// Close waits (bounded by coder/websocket, 5s) for the client's close frame.
func closeShed(w http.ResponseWriter, r *http.Request, ms int64) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept has answered the request
	}
	_ = c.Close(websocket.StatusTryAgainLater, retryhint.Reason(ms))
}

// plainError answers origin failures, which are never subject to the
// reject mode (auth failures: refuseToken).
func plainError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg))
}

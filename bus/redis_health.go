package bus

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// pinger PINGs Redis at once and then every pingEvery.
func (e *engine) pinger() {
	defer e.bg.Done()
	e.ping()
	close(e.firstPing)
	t := time.NewTicker(e.pingEvery)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
			e.ping()
		case <-e.pingSoon:
			e.ping()
		}
	}
}

// subState is a subscription's OnState. A subscription Redis has
// confirmed again proves Redis is back; PING at once rather than on the
// next tick, so that an instance that receives again also says so (and
// its clients hear "recovered") without waiting up to an interval.
func (e *engine) subState(up bool) {
	e.health.subState(up)
	if up {
		select {
		case e.pingSoon <- struct{}{}:
		default:
		}
	}
}

func (e *engine) ping() {
	ctx, cancel := context.WithTimeout(e.ctx, e.pingWait)
	defer cancel()
	var err error
	if cc, ok := e.client.(*redis.ClusterClient); ok {
		// Every master: a partition on a dead node is as bad as a dead Redis.
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = e.pingClient().Ping(ctx).Err()
	}
	if e.ctx.Err() != nil {
		return
	}
	switch {
	case err == nil:
		e.slowPings, e.answered = 0, true
	case e.answered && slowAnswer(err) && e.slowPings+1 < slowPingsDead:
		// Slow, not dead: a Redis that has answered before did not answer
		// in time. One late answer is not an outage; this many in a row
		// is (and a refused or broken connection is at once).
		e.slowPings++
		e.log.Warn("bus: redis is slow: a PING went unanswered", "timeout", e.pingWait, "inARow", e.slowPings)
		return
	default:
		e.log.Debug("bus: ping failed", "err", err)
	}
	e.health.setLink(err == nil)
}

// slowPingsDead is how many PINGs in a row may time out on a connection
// Redis accepted before the bus counts Redis as gone: a Redis that is
// slow for a moment (a fork, a big command) is not an outage.
const slowPingsDead = 3

// slowAnswer tells a PING that timed out (Redis slow, or a black hole)
// from one that failed outright (refused, reset: Redis gone).
func slowAnswer(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// pingClient is the client PINGs go through: a connection of their own,
// so that no queue of the bus's or the stores' traffic on the shared
// client (a replay storm, presence writes) can delay a PING and make a
// healthy Redis look down. Falls back to the shared client for a client
// kind it cannot copy.
func (e *engine) pingClient() redis.UniversalClient {
	if e.pinger1 != nil {
		return e.pinger1
	}
	return e.client
}

// newPingClient copies c's options for one connection, no retries (one
// PING is one try; the pinger tries again every interval) and socket
// deadlines from the PING's own timeout.
func newPingClient(c redis.UniversalClient, wait time.Duration) *redis.Client {
	rc, ok := c.(*redis.Client)
	if !ok {
		return nil
	}
	o := *rc.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 1, 0, 1
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = wait, wait, wait
	o.PoolTimeout = wait
	// RESP2: no push notifications to set up (the shared client has
	// registered its handlers already) for a connection that only PINGs.
	o.Protocol = 2
	return redis.NewClient(&o)
}

// health tracks whether cross-instance delivery is down: until the first
// PING has answered (a bus that has not reached Redis yet is not up), while
// the last PING or publish failed (link down), or while any subscription
// has failed and not been confirmed again by Redis.
//
// The Receiver is told only changes from what it assumes: it starts out
// assuming delivery is up, so a bus that reaches Redis at once tells it
// nothing, and one that cannot tells it BusState(true) once.
type health struct {
	mu       sync.Mutex
	reached  bool // some PING has answered
	linkDown bool
	subsDown int
	degraded atomic.Bool // what Degraded reads: no lock on /readyz or Publish
	told     bool        // what recv last heard (false: up, its assumption)
	recv     Receiver
	gauge    prometheus.Gauge
	log      *slog.Logger
}

// init marks the bus degraded until the first PING answers.
func (h *health) init() {
	h.degraded.Store(true)
	h.gauge.Set(1)
}

func (h *health) setLink(up bool) {
	h.mu.Lock()
	h.linkDown = !up
	h.reached = h.reached || up
	h.update()
	h.mu.Unlock()
}

// subState is a Subscription's OnState.
func (h *health) subState(up bool) {
	if up {
		h.addSubsDown(-1)
	} else {
		h.addSubsDown(1)
	}
}

func (h *health) addSubsDown(n int) {
	h.mu.Lock()
	h.subsDown += n
	h.update()
	h.mu.Unlock()
}

// update applies a change; the Receiver hears of it under h.mu, so
// BusState calls are never reordered.
func (h *health) update() {
	d := !h.reached || h.linkDown || h.subsDown > 0
	was := h.degraded.Swap(d)
	switch {
	case d == h.told:
		if !d && was {
			h.gauge.Set(0)
			h.log.Info("bus: connected")
		}
		return
	case d:
		h.gauge.Set(1)
		h.log.Warn("bus: degraded, cross-instance delivery is down")
	default:
		h.gauge.Set(0)
		h.log.Info("bus: recovered")
	}
	h.told = d
	if h.recv != nil {
		h.recv.BusState(d)
	}
}

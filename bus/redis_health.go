package bus

import (
	"context"
	"log/slog"
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
		err = e.client.Ping(ctx).Err()
	}
	if e.ctx.Err() != nil {
		return
	}
	if err != nil {
		e.log.Debug("bus: ping failed", "err", err)
	}
	e.health.setLink(err == nil)
}

// health tracks whether cross-instance delivery is down: while the last
// PING or publish failed (link down), or while any subscription has failed
// and not been confirmed again by Redis.
type health struct {
	mu       sync.Mutex
	linkDown bool
	subsDown int
	degraded atomic.Bool // what Degraded reads: no lock on /readyz or Publish
	recv     Receiver
	gauge    prometheus.Gauge
	log      *slog.Logger
}

func (h *health) setLink(up bool) {
	h.mu.Lock()
	h.linkDown = !up
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
	d := h.linkDown || h.subsDown > 0
	if d == h.degraded.Load() {
		return
	}
	h.degraded.Store(d)
	if d {
		h.gauge.Set(1)
		h.log.Warn("bus: degraded, cross-instance delivery is down")
	} else {
		h.gauge.Set(0)
		h.log.Info("bus: recovered")
	}
	if h.recv != nil {
		h.recv.BusState(d)
	}
}

package bus

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/ctxsleep"
)

// SubscriptionConfig configures one Redis pub/sub subscription. The zero
// value of every field but Client, Channel and Handle is a documented
// default.
type SubscriptionConfig struct {
	// Client is the Redis client; the subscription does not close it.
	Client redis.UniversalClient
	// Channel is the one channel subscribed.
	Channel string
	// Sharded subscribes with SSUBSCRIBE (Redis 7 shard channels) instead
	// of SUBSCRIBE.
	Sharded bool
	// Handle takes every payload received, on the subscription's own
	// goroutine, in the order Redis delivered them. It must not block for
	// long: a stalled read makes Redis drop the connection once its
	// pub/sub output buffer limit is hit, losing every message behind it.
	Handle func(payload string)
	// OnConfirm, when set, runs on the subscription's goroutine each time
	// Redis confirms the (re)subscription, before any message that
	// follows the confirmation is handled.
	OnConfirm func()
	// OnIdle, when set, runs on the subscription's goroutine after
	// IdleAfter without a message.
	OnIdle func()
	// OnState, when set, hears the subscription go down (false: a receive
	// error, a silent connection that did not answer its PING) and come
	// back (true: Redis confirmed it again). It runs on the subscription's
	// goroutine, never twice in a row with the same value, and never
	// after Close has returned.
	OnState func(up bool)
	// IdleAfter is how long the connection may stay silent before it is
	// PINGed. 0: 1s.
	IdleAfter time.Duration
	// PingTimeout bounds the answer to that PING; without one it is
	// PINGed again, and after three in a row unanswered the connection
	// is replaced. 0: 500ms.
	PingTimeout time.Duration
	// MaxBackoff caps the wait between retries while Redis is unreachable
	// (it starts at 50ms and doubles). 0: IdleAfter.
	MaxBackoff time.Duration
	// Logger logs losses and recoveries. nil: slog.Default().
	Logger *slog.Logger
	// Gather, when positive, makes the loop wait this long after a
	// message that woke it before reading on, so that the messages that
	// arrive meanwhile are read together: the process wakes once per
	// batch instead of once per message, which is most of what a small
	// message costs. Redis holds them meanwhile, in its output buffer,
	// whose limit is far above what a short wait gathers. For channels
	// whose messages may wait that long (the cluster aggregator's, which
	// come every few seconds per sender); 0: off, as for the buses.
	Gather time.Duration
}

// Subscription owns one Redis pub/sub subscription: subscribing and
// waiting for Redis to confirm, the receive loop, noticing a dead or
// silent connection (PING when idle), redialing with backoff, and
// resubscribing after Redis Cluster moves the slot. Every user of Redis
// pub/sub in rtserver (the buses, the cluster aggregator) goes through
// it.
//
// A subscription is "down" from a failure until Redis confirms the
// (re)subscription. Once Stop has returned no new payload is handed to
// Handle (one already in Handle may finish); once Close has returned,
// Handle has returned for good.
type Subscription struct {
	cfg SubscriptionConfig
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards ps and stopped. Handle runs without it: Handle may take
	// the caller's locks, which the caller may hold while calling Stop.
	mu      sync.Mutex
	ps      *redis.PubSub
	stopped bool
	halted  atomic.Bool // stopped, read without mu by handle

	firstOnce sync.Once
	first     chan struct{} // closed at the first confirmation or failure
	readyOnce sync.Once
	ready     chan struct{} // closed at the first confirmation
	confirmed atomic.Bool   // confirmed by Redis at least once
	down      bool          // loop goroutine only
}

const minBackoff = 50 * time.Millisecond

// Subscribe starts a subscription; it does not wait for Redis (see First
// and Ready). Close stops it.
func Subscribe(cfg SubscriptionConfig) *Subscription {
	cfg.IdleAfter = orDefault(cfg.IdleAfter, defaultPingInterval)
	cfg.PingTimeout = orDefault(cfg.PingTimeout, defaultPingTimeout)
	cfg.MaxBackoff = orDefault(cfg.MaxBackoff, cfg.IdleAfter)
	s := &Subscription{cfg: cfg, done: make(chan struct{}), first: make(chan struct{}), ready: make(chan struct{})}
	s.log = cfg.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.run()
	return s
}

// Channel is the subscribed channel.
func (s *Subscription) Channel() string { return s.cfg.Channel }

// First is closed at Redis's first verdict: the first confirmation, or
// the first failure.
func (s *Subscription) First() <-chan struct{} { return s.first }

// Ready is closed when Redis has confirmed the subscription once.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Confirmed reports whether Redis has confirmed the subscription once.
func (s *Subscription) Confirmed() bool { return s.confirmed.Load() }

// Stop ends the subscription without waiting for its goroutine (Done
// says when it is gone). Closing the connection unsubscribes it on the
// Redis side (it is this subscription's own connection), without waiting
// on a socket that may be stalled. No payload is handed to Handle once
// Stop has returned, other than one already being handed over.
func (s *Subscription) Stop() {
	s.cancel()
	s.halted.Store(true)
	s.mu.Lock()
	s.stopped = true
	ps := s.ps
	s.mu.Unlock()
	if ps != nil {
		_ = ps.Close() // unblocks a receive in progress
	}
}

// Done is closed when the subscription's goroutine has returned.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Close stops the subscription and waits for its goroutine.
func (s *Subscription) Close() {
	s.Stop()
	<-s.done
}

func (s *Subscription) run() {
	defer close(s.done)
	defer func() {
		if s.down && s.cfg.OnState != nil {
			s.cfg.OnState(true) // gone: no longer counts as down
		}
		s.signalFirst()
		s.mu.Lock()
		if s.ps != nil {
			_ = s.ps.Close()
		}
		s.mu.Unlock()
	}()
	ps := s.open()
	backoff := minBackoff
	pings := 0             // PINGs sent since the last thing Redis sent
	var gathered time.Time // when the last Gather wait ended
	for ps != nil {
		wait := s.cfg.IdleAfter
		if pings > 0 {
			wait = s.cfg.PingTimeout
		}
		msg, err := s.receive(ps, wait)
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) {
				if pings == 0 && s.cfg.OnIdle != nil {
					s.cfg.OnIdle()
				}
				// Silent for a while: ask, and ask again while no answer
				// comes within the ping timeout, up to slowPingsDead
				// times: one late answer is a slow Redis, or this process
				// starved of CPU (a recovery storm during a deploy), not
				// a dead connection. Then the connection is dead without
				// having said so; replace it.
				if pings < slowPingsDead {
					pings++
					if s.ping(ps) == nil {
						continue
					}
				}
				s.fail(err)
				pings = 0
				if !s.sleep(&backoff) {
					return
				}
				ps = s.open()
				continue
			}
			// go-redis drops the broken connection; the next receive
			// redials and resubscribes.
			s.fail(err)
			if !s.sleep(&backoff) {
				return
			}
			continue
		}
		pings = 0
		switch m := msg.(type) {
		case *redis.Message:
			s.handle(m.Payload)
			// A message read within Gather of the last wait came from
			// what it gathered; one later woke the loop: wait again.
			if s.cfg.Gather > 0 && time.Since(gathered) >= s.cfg.Gather {
				if ctxsleep.Sleep(s.ctx, s.cfg.Gather) != nil {
					return
				}
				gathered = time.Now()
			}
		case *redis.Subscription:
			if m.Channel != s.cfg.Channel {
				continue
			}
			switch m.Kind {
			case "subscribe", "ssubscribe":
				backoff = minBackoff
				s.ok()
			case "unsubscribe", "sunsubscribe":
				// Not ours (we never unsubscribe a live subscription):
				// Redis Cluster moved the slot. Subscribe again, where
				// it is now.
				s.fail(errors.New("subscription dropped by redis"))
				ps = s.open()
			}
		}
	}
}

func (s *Subscription) handle(p string) {
	if !s.halted.Load() {
		s.cfg.Handle(p)
	}
}

// open replaces the PubSub with a new one subscribed to the channel, or
// returns nil when the subscription is stopped.
// receive reads the next message, waiting at most wait. While the
// subscription is down or not yet confirmed the read may have to redial
// and greet Redis first, under the PubSub's lock that Stop needs too: then
// the whole call is bounded by a deadline (honoured by a client whose
// ContextTimeoutEnabled is set), so that a Redis that accepts and never
// answers cannot hold Stop for the client's read timeout. A confirmed
// subscription reads without one: no timer per message.
func (s *Subscription) receive(ps *redis.PubSub, wait time.Duration) (any, error) {
	if !s.down && s.confirmed.Load() {
		return ps.ReceiveTimeout(s.ctx, wait)
	}
	bound := 2 * s.cfg.PingTimeout
	ctx, cancel := context.WithTimeout(s.ctx, bound)
	defer cancel()
	return ps.ReceiveTimeout(ctx, min(wait, bound))
}

// ping asks a silent connection to answer, bounded as receive is.
func (s *Subscription) ping(ps *redis.PubSub) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.PingTimeout)
	defer cancel()
	return ps.Ping(ctx)
}

func (s *Subscription) open() *redis.PubSub {
	var ps *redis.PubSub
	if s.cfg.Sharded {
		ps = s.cfg.Client.SSubscribe(s.ctx) // no channels: no I/O yet
	} else {
		ps = s.cfg.Client.Subscribe(s.ctx)
	}
	s.mu.Lock()
	old := s.ps
	if s.stopped {
		s.ps = nil
		s.mu.Unlock()
		_ = ps.Close()
		if old != nil {
			_ = old.Close()
		}
		return nil
	}
	s.ps = ps
	s.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	// Bounded: opening may dial and greet Redis (HELLO) under the
	// PubSub's lock, which Stop needs too; a Redis that accepts and never
	// answers must not hold Stop for the client's read timeout times its
	// retries (with a client whose ContextTimeoutEnabled is set).
	octx, cancel := context.WithTimeout(s.ctx, 2*s.cfg.PingTimeout)
	defer cancel()
	var err error
	if s.cfg.Sharded {
		err = ps.SSubscribe(octx, s.cfg.Channel)
	} else {
		err = ps.Subscribe(octx, s.cfg.Channel)
	}
	// On error the channel is remembered and the next receive retries.
	if err != nil && s.ctx.Err() == nil {
		s.fail(err)
	}
	return ps
}

func (s *Subscription) sleep(backoff *time.Duration) bool {
	err := ctxsleep.Sleep(s.ctx, *backoff)
	*backoff = min(*backoff*2, s.cfg.MaxBackoff)
	return err == nil
}

func (s *Subscription) signalFirst() { s.firstOnce.Do(func() { close(s.first) }) }

func (s *Subscription) fail(err error) {
	if !s.down {
		s.down = true
		s.log.Warn("redis subscription lost", "channel", s.cfg.Channel, "err", err)
		if s.cfg.OnState != nil {
			s.cfg.OnState(false)
		}
	}
	s.signalFirst()
}

func (s *Subscription) ok() {
	if s.cfg.OnConfirm != nil {
		s.cfg.OnConfirm()
	}
	s.confirmed.Store(true)
	s.readyOnce.Do(func() { close(s.ready) })
	if s.down {
		s.down = false
		s.log.Info("redis subscription restored", "channel", s.cfg.Channel)
		if s.cfg.OnState != nil {
			s.cfg.OnState(true)
		}
	}
	s.signalFirst()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

package bus

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// inMsg is one message waiting for the Receiver.
type inMsg struct {
	topic   string // or, for a control message, its key
	data    []byte
	control bool
	epoch   string // a history topic's message (position.go): its position
	offset  uint64
}

// deliverer hands received messages to r, in the order they arrived.
func (e *engine) deliverer(r Receiver) {
	defer e.bg.Done()
	pr, _ := r.(PositionReceiver)
	for m := range e.deliver {
		if m.offset > 0 {
			if pr != nil {
				pr.DeliverAt(m.topic, m.data, m.epoch, m.offset)
			} else {
				e.dropMalformed.Inc()
			}
			continue
		}
		if m.control {
			r.DeliverControl(m.topic, m.data)
		} else {
			r.Deliver(m.topic, m.data)
		}
	}
}

// subLoop owns one subscription (one channel, one connection) and its
// receive goroutine. go-redis redials and resubscribes by itself after a
// connection error; the loop notices failures (receive errors, a silent
// connection that does not answer its PING) and confirmations, and keeps
// health up to date. A subscription is "down" from a failure until Redis
// confirms the (re)subscription.
type subLoop struct {
	e       *engine
	channel string
	accept  func(topic string) bool // nil: every topic

	ctx    context.Context
	cancel context.CancelFunc

	// mu guards ps and stopped. A message is handed to the delivery queue
	// under mu, so none is delivered once stop has returned.
	mu      sync.Mutex
	ps      *redis.PubSub
	stopped bool

	firstOnce sync.Once
	first     chan struct{} // closed at the first confirmation or failure
	confirmed atomic.Bool   // confirmed by Redis at least once
	down      bool          // loop goroutine only
}

// newSubLoop starts a loop for channel; the caller has done e.loops.Add(1).
func newSubLoop(e *engine, channel string, accept func(string) bool) *subLoop {
	l := &subLoop{e: e, channel: channel, accept: accept, first: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(e.ctx)
	go l.run()
	return l
}

// stop ends the loop without waiting for it. Closing the connection
// unsubscribes it on the Redis side (it is this subscription's own
// connection), without waiting on a socket that may be stalled.
func (l *subLoop) stop() {
	l.cancel()
	l.mu.Lock()
	l.stopped = true
	ps := l.ps
	l.mu.Unlock()
	if ps != nil {
		_ = ps.Close() // unblocks a receive in progress
	}
}

func (l *subLoop) run() {
	defer l.e.loops.Done()
	defer func() {
		if l.down {
			l.e.health.addSubsDown(-1)
		}
		l.signalFirst()
		l.mu.Lock()
		if l.ps != nil {
			_ = l.ps.Close()
		}
		l.mu.Unlock()
	}()
	ps := l.open()
	backoff := minBackoff
	pinged := false
	for ps != nil {
		wait := l.e.pingEvery
		if pinged {
			wait = l.e.pingWait
		}
		msg, err := ps.ReceiveTimeout(l.ctx, wait)
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) {
				// Silent for a ping interval: ask. No answer within the
				// ping timeout: the connection is dead without having
				// said so; replace it.
				if !pinged {
					pinged = true
					if ps.Ping(l.ctx) == nil {
						continue
					}
				}
				l.fail(err)
				pinged = false
				if !l.sleep(&backoff) {
					return
				}
				ps = l.open()
				continue
			}
			// go-redis drops the broken connection; the next receive
			// redials and resubscribes.
			l.fail(err)
			if !l.sleep(&backoff) {
				return
			}
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			l.handle(m.Payload)
		case *redis.Subscription:
			if m.Channel != l.channel {
				continue
			}
			switch m.Kind {
			case "subscribe", "ssubscribe":
				backoff = minBackoff
				l.ok()
			case "unsubscribe", "sunsubscribe":
				// Not ours (we never unsubscribe a live loop): Redis
				// Cluster moved the slot. Subscribe again, where it is now.
				l.fail(errors.New("subscription dropped by redis"))
				ps = l.open()
			}
		}
	}
}

// open replaces the loop's PubSub with a new one subscribed to channel,
// or returns nil when the loop is stopped.
func (l *subLoop) open() *redis.PubSub {
	var ps *redis.PubSub
	if l.e.sharded {
		ps = l.e.client.SSubscribe(l.ctx) // no channels: no I/O yet
	} else {
		ps = l.e.client.Subscribe(l.ctx)
	}
	l.mu.Lock()
	old := l.ps
	if l.stopped {
		l.ps = nil
		l.mu.Unlock()
		_ = ps.Close()
		if old != nil {
			_ = old.Close()
		}
		return nil
	}
	l.ps = ps
	l.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	var err error
	if l.e.sharded {
		err = ps.SSubscribe(l.ctx, l.channel)
	} else {
		err = ps.Subscribe(l.ctx, l.channel)
	}
	// On error the channel is remembered and the next receive retries.
	if err != nil && l.ctx.Err() == nil {
		l.fail(err)
	}
	return ps
}

func (l *subLoop) sleep(backoff *time.Duration) bool {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	*backoff = min(*backoff*2, l.e.pingEvery)
	select {
	case <-t.C:
		return true
	case <-l.ctx.Done():
		return false
	}
}

func (l *subLoop) signalFirst() { l.firstOnce.Do(func() { close(l.first) }) }

func (l *subLoop) fail(err error) {
	if !l.down {
		l.down = true
		l.e.log.Warn("bus: subscription lost", "channel", l.channel, "err", err)
		l.e.health.addSubsDown(1)
	}
	l.signalFirst()
}

func (l *subLoop) ok() {
	l.confirmed.Store(true)
	if l.down {
		l.down = false
		l.e.log.Info("bus: subscription restored", "channel", l.channel)
		l.e.health.addSubsDown(-1)
	}
	l.signalFirst()
}

// handle validates one received payload and queues it for the Receiver.
func (l *subLoop) handle(p string) {
	e := l.e
	if len(p) > e.maxEnv {
		e.dropReceived(DropOversize, l.channel, len(p))
		return
	}
	var epoch string
	var offset uint64
	if len(p) > 0 && p[0] == positionVersion {
		var ok bool
		if epoch, offset, p, ok = splitPosition(p); !ok {
			e.dropReceived(DropMalformed, l.channel, len(p))
			return
		}
	}
	if e.signer != nil {
		env, mac, ok := e.signer.verify(p)
		if !ok {
			// Counted as malformed; the log line says why.
			e.dropReceived("bad_signature", l.channel, len(p))
			return
		}
		if isControl(env) && !e.signer.firstTime(mac) {
			e.dropReceived("replayed", l.channel, len(p))
			return
		}
		p = env
	}
	decode, control := decodeEnvelope, isControl(p)
	if control {
		decode = decodeControl
	}
	self := e.id
	if offset > 0 && !control {
		// A position envelope comes back to its sender on purpose.
		self = ""
	}
	topic, data, own, reason := decode(p, self, e.maxEnv)
	switch {
	case own && offset == 0:
		return
	case own: // an envelope that names no instance
		reason = DropMalformed
	}
	switch {
	case reason != "":
		e.dropReceived(reason, l.channel, len(p))
		return
	}
	if l.accept != nil && !l.accept(topic) {
		// Another topic hashed into the same partition: not a drop.
		return
	}
	buf := []byte(data)
	if !validData(buf) {
		e.dropReceived(DropMalformed, l.channel, len(p))
		return
	}
	// The topic is cloned so the Receiver may keep it without pinning the
	// whole payload.
	m := inMsg{topic: strings.Clone(topic), data: buf, control: control, epoch: strings.Clone(epoch), offset: offset}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	e.m.BusReceived.Inc()
	select {
	case e.deliver <- m:
	default:
		e.dropSlowRecv.Inc()
		e.log.Warn("bus: dropped a received message: delivery queue full", "reason", DropSlowRecv)
	}
}

// dropReceived counts and logs a received envelope that failed validation.
func (e *engine) dropReceived(reason, channel string, size int) {
	switch reason {
	case DropOversize:
		e.dropOversize.Inc()
	case DropBadTopic:
		e.dropBadTopic.Inc()
	default:
		e.dropMalformed.Inc()
	}
	e.log.Warn("bus: dropped a received envelope", "reason", reason, "channel", channel, "bytes", size)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

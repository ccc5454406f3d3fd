package bus

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/protocol"
)

// outMsg is one queued PUBLISH and the publisher waiting for its fate.
type outMsg struct {
	channel string
	env     []byte
	done    *pending
}

// pending carries a writer's answer to the publisher that waits for it.
type pending struct{ ch chan error }

var pendingPool = sync.Pool{New: func() any { return &pending{ch: make(chan error, 1)} }}

// publish validates, encodes and queues one message, and waits for Redis
// to take it.
func (e *engine) publish(channel, topic string, data []byte) error {
	if !protocol.ValidTopic(topic) || protocol.Reserved(topic) {
		e.dropBadTopic.Inc()
		return ErrBadTopic
	}
	return e.enqueue(e.queue, channel, topic, data, 0, appendEnvelope)
}

// enqueue encodes one envelope with encode (extra bytes longer than a data
// envelope), queues it on q (waiting at most e.wait for room) and waits
// for a writer's answer: nil once Redis has taken it.
func (e *engine) enqueue(q chan outMsg, channel, topic string, data []byte, extra int, encode encoder) error {
	m, err := e.encode(channel, topic, data, extra, encode)
	if err != nil {
		return err
	}
	return e.send1(q, m)
}

type encoder func(dst []byte, instance, topic string, data []byte) []byte

// encode builds (and signs) one envelope, or refuses it: too large, or
// Redis unreachable (both counted).
func (e *engine) encode(channel, topic string, data []byte, extra int, encode encoder) (outMsg, error) {
	n := envelopeLen(e.id, topic, data) + extra
	if e.signer != nil {
		n += stampLen + sigLen
	}
	if n > e.maxEnv {
		e.dropOversize.Inc()
		return outMsg{}, ErrTooLarge
	}
	if e.degraded() {
		e.dropDegraded.Inc()
		return outMsg{}, ErrDegraded
	}
	// Encoding here, on the caller's goroutine, spreads the copying over
	// the publishers and lets the caller reuse data at once.
	m := outMsg{channel: channel, env: encode(make([]byte, 0, n), e.id, topic, data)}
	if e.signer != nil {
		m.env = e.signer.sign(m.env)
	}
	return m, nil
}

// send1 queues m on q and waits for its answer.
func (e *engine) send1(q chan outMsg, m outMsg) error {
	p := pendingPool.Get().(*pending)
	m.done = p
	if err := e.queueUp(q, m); err != nil {
		pendingPool.Put(p)
		return err
	}
	// Every queued message is answered exactly once: by the writer that
	// sends it, or by close when no writer ever ran.
	err := <-p.ch
	pendingPool.Put(p)
	return err
}

// queueUp puts m on q, waiting at most e.wait for room.
func (e *engine) queueUp(q chan outMsg, m outMsg) error {
	e.pubMu.RLock()
	defer e.pubMu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	select {
	case q <- m:
		return nil
	default:
	}
	if e.wait > 0 {
		t := time.NewTimer(e.wait)
		defer t.Stop()
		select {
		case q <- m:
			return nil
		case <-t.C:
		}
	}
	e.dropQueueFull.Inc()
	return ErrQueueFull
}

// answer tells m's publisher what became of it.
func (e *engine) answer(m outMsg, err error) {
	if m.done != nil {
		m.done.ch <- err
	}
}

// writer drains the publish queues, up to batch messages per round trip,
// control messages first, then data and notices alike: a full data or
// notice queue delays a control message by at most the round trip in
// flight, and neither of the two can keep the other waiting. Several writers
// run at once, each round trip on its own connection: a publisher waits
// for its own message, so it has one in flight at a time and its
// messages cannot overtake each other.
func (e *engine) writer() {
	defer e.bg.Done()
	batch := make([]outMsg, 0, e.batch)
	for {
		m, ok := e.next()
		if !ok {
			// Publish can no longer queue (closed): flush what is left.
			for {
				batch = e.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				e.send(batch)
			}
		}
		batch = e.fill(append(batch[:0], m))
		e.send(batch)
	}
}

// next waits for a message to send, a control message first; false once
// the writers are told to stop.
func (e *engine) next() (outMsg, bool) {
	select {
	case m := <-e.ctlOut:
		return m, true
	default:
	}
	select {
	case m := <-e.ctlOut:
		return m, true
	case m := <-e.queue:
		return m, true
	case m := <-e.noticeOut:
		return m, true
	case <-e.writerStop:
		return outMsg{}, false
	}
}

// fill adds queued messages to batch, without waiting, up to its size:
// control messages first, then data and notices in random turn.
func (e *engine) fill(batch []outMsg) []outMsg {
	for len(batch) < e.batch {
		select {
		case m := <-e.ctlOut:
			batch = append(batch, m)
			continue
		default:
		}
		select {
		case m := <-e.queue:
			batch = append(batch, m)
		case m := <-e.noticeOut:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

func (e *engine) pubCmd(ctx context.Context, c redis.Cmdable, m outMsg) *redis.IntCmd {
	if e.sharded {
		return c.SPublish(ctx, m.channel, m.env)
	}
	return c.Publish(ctx, m.channel, m.env)
}

// send publishes one batch and answers each message's publisher: nil when
// Redis took it, ErrDegraded when it did not (counted, reason degraded).
// A failed write marks Redis unreachable until the next PING answers.
func (e *engine) send(batch []outMsg) {
	defer clear(batch) // let the envelopes go
	if e.degraded() {
		e.dropDegraded.Add(float64(len(batch)))
		for _, m := range batch {
			e.answer(m, ErrDegraded)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var ok int
	var err error
	if len(batch) == 1 {
		err = e.pubCmd(ctx, e.client, batch[0]).Err()
		if err == nil {
			ok = 1
			e.answer(batch[0], nil)
		} else {
			e.answer(batch[0], ErrDegraded)
		}
	} else {
		cmds := make([]*redis.IntCmd, len(batch))
		_, err = e.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range batch {
				cmds[i] = e.pubCmd(ctx, p, m)
			}
			return nil
		})
		for i, m := range batch {
			if cmds[i].Err() == nil {
				ok++
				e.answer(m, nil)
			} else {
				e.answer(m, ErrDegraded)
			}
		}
	}
	e.m.BusPublished.Add(float64(ok))
	if lost := len(batch) - ok; lost > 0 {
		e.dropDegraded.Add(float64(lost))
		e.log.Warn("bus: publish failed", "refused", lost, "err", err)
		e.health.setLink(false)
	}
}

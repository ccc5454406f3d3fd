package bus

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/protocol"
)

// outMsg is one queued PUBLISH.
type outMsg struct {
	channel string
	env     []byte
}

// publish validates, encodes and queues one message. It never blocks.
func (e *engine) publish(channel, topic string, data []byte) error {
	if !protocol.ValidTopic(topic) || protocol.Reserved(topic) {
		e.dropBadTopic.Inc()
		return ErrBadTopic
	}
	return e.enqueue(channel, topic, data, appendEnvelope)
}

// publishControl validates, encodes and queues one control message (see
// control.go). It never blocks.
func (e *engine) publishControl(channel, key string, data []byte) error {
	if !validControlKey(key) {
		e.dropBadTopic.Inc()
		return ErrBadTopic
	}
	return e.enqueue(channel, key, data, appendControl)
}

// enqueue encodes one envelope with encode and queues it.
func (e *engine) enqueue(channel, topic string, data []byte, encode func(dst []byte, instance, topic string, data []byte) []byte) error {
	n := envelopeLen(e.id, topic, data)
	if e.signer != nil {
		n += stampLen + sigLen
	}
	if n > e.maxEnv {
		e.dropOversize.Inc()
		return ErrTooLarge
	}
	if e.degraded() {
		e.dropDegraded.Inc()
		return ErrDegraded
	}
	// Encoding here, on the caller's goroutine, spreads the copying over
	// the publishers and lets the caller reuse data at once.
	m := outMsg{channel: channel, env: encode(make([]byte, 0, n), e.id, topic, data)}
	if e.signer != nil {
		m.env = e.signer.sign(m.env)
	}
	e.pubMu.RLock()
	defer e.pubMu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	select {
	case e.queue <- m:
		return nil
	default:
		e.dropQueueFull.Inc()
		return ErrQueueFull
	}
}

// writer drains the publish queue, up to batch messages per round trip.
func (e *engine) writer() {
	defer e.bg.Done()
	batch := make([]outMsg, 0, e.batch)
	for {
		select {
		case m := <-e.queue:
			batch = e.fill(append(batch[:0], m))
			e.send(batch)
		case <-e.writerStop:
			// Publish can no longer queue (closed): flush what is left.
			for {
				batch = e.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				e.send(batch)
			}
		}
	}
}

// fill adds queued messages to batch, without waiting, up to its size.
func (e *engine) fill(batch []outMsg) []outMsg {
	for len(batch) < e.batch {
		select {
		case m := <-e.queue:
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

// send publishes one batch. Messages that do not make it are counted as
// dropped (degraded), and a failed write marks Redis unreachable until the
// next PING answers.
func (e *engine) send(batch []outMsg) {
	defer clear(batch) // let the envelopes go
	if e.degraded() {
		e.dropDegraded.Add(float64(len(batch)))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var ok int
	var err error
	if len(batch) == 1 {
		if err = e.pubCmd(ctx, e.client, batch[0]).Err(); err == nil {
			ok = 1
		}
	} else {
		var cmds []redis.Cmder
		cmds, err = e.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range batch {
				e.pubCmd(ctx, p, m)
			}
			return nil
		})
		for _, c := range cmds {
			if c.Err() == nil {
				ok++
			}
		}
	}
	e.m.BusPublished.Add(float64(ok))
	if lost := len(batch) - ok; lost > 0 {
		e.dropDegraded.Add(float64(lost))
		e.log.Warn("bus: publish failed", "lost", lost, "err", err)
		e.health.setLink(false)
	}
}

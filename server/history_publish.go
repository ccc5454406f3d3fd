package server

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/protocol"
)

// History topics: publishing (see history.go).

// pipelinedStore is a store whose publishes may be answered later
// (history.Redis): a connection then has several in flight, instead of
// waiting on its read goroutine for each round trip.
type pipelinedStore interface {
	PublishAsync(p history.Publish, done func(pos history.Position, dup bool, err error))
}

// maxPublishesInFlight is the most history publishes one connection has
// waiting for the store: past it, its read goroutine waits for the
// oldest answer (the client is read no further until then).
const maxPublishesInFlight = 64

// answeredLater is the result of a call whose response is queued later,
// by whatever completes it (handle then answers nothing now).
var answeredLater = json.RawMessage(`"later"`)

func isAnsweredLater(r json.RawMessage) bool {
	return len(r) == len(answeredLater) && &r[0] == &answeredLater[0]
}

// connHistory is a connection's history state, made at its first
// history call (a pointer keeps conn in its size class).
type connHistory struct {
	replays []replay // read goroutine only

	mu       sync.Mutex
	inflight int           // publishes handed to the store and not yet answered
	room     chan struct{} // made by the read goroutine waiting for room, closed by the next answer
}

func (c *conn) histState() *connHistory {
	if c.hist == nil {
		c.hist = &connHistory{}
	}
	return c.hist
}

// take counts one more publish in flight, first waiting while the
// connection has maxPublishesInFlight.
func (ch *connHistory) take() {
	ch.mu.Lock()
	for ch.inflight >= maxPublishesInFlight {
		if ch.room == nil {
			ch.room = make(chan struct{})
		}
		room := ch.room
		ch.mu.Unlock()
		<-room
		ch.mu.Lock()
	}
	ch.inflight++
	ch.mu.Unlock()
}

// give counts one publish answered.
func (ch *connHistory) give() {
	ch.mu.Lock()
	ch.inflight--
	if ch.room != nil {
		close(ch.room)
		ch.room = nil
	}
	ch.mu.Unlock()
}

// publishHistory stores a client's publish on a history topic; the store
// delivers it (to this instance too, through DeliverAt). With a pipelined
// store and id set to the request's id (a single request: the answer
// needs no batch around it), it answers later, once the store has the
// message, and the read goroutine goes on reading meanwhile; the store
// answers a topic's publishes in offset order.
func (c *conn) publishHistory(topic string, data, params json.RawMessage, pol history.Policy, later bool, id json.RawMessage) (json.RawMessage, *protocol.Error) {
	hp, perr := protocol.DecodeHistoryParams(params)
	if perr != nil {
		return nil, perr
	}
	key := ""
	if hp.IdempotencyKey != "" {
		if c.ticket.User != "" {
			key = "u:" + c.ticket.User + "\x00" + hp.IdempotencyKey
		} else {
			key = "c:" + c.s.hist.scope + ":" + strconv.FormatUint(c.id, 10) + "\x00" + hp.IdempotencyKey
		}
	}
	if ps, ok := c.s.hist.store.(pipelinedStore); ok && later {
		c.publishPipelined(ps, history.Publish{Topic: topic, Data: data, Policy: pol, IdempotencyKey: key}, id)
		return answeredLater, nil
	}
	pos, err := c.s.hist.publish(&c.ctx, topic, data, pol, key, c.holder())
	if err != nil {
		return nil, c.s.historyUnavailable()
	}
	return protocol.AppendPosition(nil, pos.Epoch, pos.Offset), nil
}

// publishPipelined hands p to the store and answers id (nil: a
// notification, answered with nothing) when the store is done.
func (c *conn) publishPipelined(ps pipelinedStore, p history.Publish, id json.RawMessage) {
	s, ch := c.s, c.histState()
	if id != nil {
		id = append(json.RawMessage(nil), id...) // the frame's buffer is reused
	}
	ch.take()
	ps.PublishAsync(p, func(pos history.Position, _ bool, err error) {
		defer ch.give()
		var resp []byte
		if err != nil {
			s.log.Debug("history publish failed", "topic", p.Topic, "err", err)
			resp = protocol.AppendError(nil, id, s.historyUnavailable())
		} else {
			if s.pressure != nil {
				s.pressure.RecordPublished(1)
			}
			resp = protocol.AppendResult(nil, id, protocol.AppendPosition(nil, pos.Epoch, pos.Offset))
		}
		if id != nil && c.enqueueFrame(frameText(resp), true) {
			s.m.MessagesSent.Inc()
		}
	})
}

// publish stores a message through the store; with an in-process store
// it then delivers the topic's line, held in held (the publisher's read
// goroutine's holdSet, or nil: written at once).
func (h *historyState) publish(ctx context.Context, topic string, data []byte, pol history.Policy, key string, held *holdSet) (history.Position, error) {
	pos, _, err := h.store.Publish(ctx, history.Publish{Topic: topic, Data: data, Policy: pol, IdempotencyKey: key})
	if h.inProcess {
		h.mu.Lock()
		q := h.topics[topic]
		h.mu.Unlock()
		if q != nil {
			q.flush(held)
		}
	}
	if err != nil {
		h.s.log.Debug("history publish failed", "topic", topic, "err", err)
		return pos, err
	}
	if h.s.pressure != nil {
		h.s.pressure.RecordPublished(1)
	}
	return pos, nil
}

// PublishHistory publishes data on a history topic for the server API:
// like Publish, but through the store, returning the position. key, when
// not empty, is an idempotency key in the server API's own scope.
func (s *Server) PublishHistory(ctx context.Context, topic string, data json.RawMessage, key string) (history.Position, bool, error) {
	pol := s.hist.policyOf(topic)
	if !pol.Enabled() {
		return history.Position{}, false, s.Publish(topic, data)
	}
	if key != "" {
		key = "api\x00" + key
	}
	pos, err := s.hist.publish(ctx, topic, compactData(data), pol, key, nil)
	return pos, true, err
}

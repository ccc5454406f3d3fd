package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rtserver/rtserver/internal/retryhint"
	"github.com/rtserver/rtserver/protocol"
)

// Call sends a request and waits for its response. params is marshalled
// with encoding/json (nil omits it; a json.RawMessage is sent as is);
// the result is unmarshalled into result unless it is nil.
//
// A JSON-RPC error comes back as a *protocol.Error (errors.As) whose Data,
// when present, is a json.RawMessage. If the connection is down, or drops
// before the response arrives, Call fails with ErrDisconnected (errors.Is)
// and the request is not re-sent: it may or may not have been executed.
// When ctx ends first, Call returns ctx.Err() and a late response is
// discarded.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.call(ctx, method, params, result, nil)
}

// call is Call with a hook the reader runs on the result, in order with
// the frames around it.
func (c *Client) call(ctx context.Context, method string, params, result any, hook func(json.RawMessage)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cn, err := c.live()
	if err != nil {
		return err
	}
	id := c.nextID.Add(1)
	b, err := encodeRequest(id, method, params)
	if err != nil {
		return err
	}
	ch, err := cn.register(id)
	if err != nil {
		return err
	}
	cn.setHook(id, hook)
	if err := cn.write(ctx, b); err != nil {
		cn.forget(id)
		return c.writeErr(err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return r.err
		}
		if result != nil && len(r.result) > 0 {
			if err := json.Unmarshal(r.result, result); err != nil {
				return fmt.Errorf("rtclient: decoding result of %s: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		cn.forget(id)
		return ctx.Err()
	}
}

// Notify sends a notification: a request without id, which the server
// never answers (not even with an error).
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cn, err := c.live()
	if err != nil {
		return err
	}
	b, err := encodeRequest(0, method, params)
	if err != nil {
		return err
	}
	if err := cn.write(ctx, b); err != nil {
		return c.writeErr(err)
	}
	return nil
}

// Publish publishes data (marshalled with encoding/json; pass a
// json.RawMessage for pre-encoded JSON) to topic and waits for the server
// to accept it. An invalid topic is refused locally with the same
// *protocol.Error (-32602) the server would send.
func (c *Client) Publish(ctx context.Context, topic string, data any) error {
	if reason := protocol.CheckTopic(topic); reason != "" {
		return protocol.NewError(protocol.CodeInvalidParams, reason, nil)
	}
	return c.Call(ctx, protocol.MethodPublish, publishParams{Topic: topic, Data: data}, nil)
}

type topicParams struct {
	Topic string `json:"topic"`
}

type publishParams struct {
	Topic string `json:"topic"`
	Data  any    `json:"data"`
}

// live returns the current connection, or why there is none.
func (c *Client) live() (*conn, error) {
	if c.closing.Load() || c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	c.mu.Lock()
	cn := c.conn
	c.mu.Unlock()
	if cn == nil {
		return nil, ErrDisconnected
	}
	return cn, nil
}

func (c *Client) writeErr(err error) error {
	if c.closing.Load() {
		return wrapCause(ErrClosed, err)
	}
	return wrapCause(ErrDisconnected, err)
}

// Subscription is a live subscription to one topic. It is re-sent to the
// server after every reconnect until Unsubscribe.
type Subscription struct {
	c     *Client
	topic string
	h     func(topic string, data json.RawMessage)
	hm    func(Message) // in place of h: SubscribeSince

	// A history topic's position (history.go), under c.mu: set by the
	// reader from subscribe results and from every message's offset.
	pos Position
}

// Topic returns the subscribed topic.
func (s *Subscription) Topic() string { return s.topic }

// Subscribe subscribes to topic and delivers each "message" notification
// for it to h. Handlers of all subscriptions (and Options.OnSystem) run on
// one goroutine per client, one at a time, in the order the server sent
// the messages; a handler that blocks delays every other (and, past a
// buffer, stops the client reading). A handler may call Call, Publish or
// Unsubscribe, but give such calls a deadline: a reply cannot be read
// while the buffer is full. The client never reuses data: h may keep it.
//
// One subscription per topic per client: a second Subscribe to the same
// topic returns ErrAlreadySubscribed. An invalid topic is refused locally
// with the *protocol.Error (-32602) the server would send.
func (c *Client) Subscribe(ctx context.Context, topic string, h func(topic string, data json.RawMessage)) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("rtclient: Subscribe with a nil handler")
	}
	return c.subscribe(ctx, &Subscription{c: c, topic: topic, h: h})
}

// subscribe registers s and sends its subscribe: with recover from s.pos
// when it has one (SubscribeSince).
func (c *Client) subscribe(ctx context.Context, s *Subscription) (*Subscription, error) {
	topic := s.topic
	if reason := protocol.CheckTopic(topic); reason != "" {
		return nil, protocol.NewError(protocol.CodeInvalidParams, reason, nil)
	}
	c.mu.Lock()
	if c.subs[topic] != nil {
		c.mu.Unlock()
		return nil, ErrAlreadySubscribed
	}
	// Registered before the request goes out, so a message that the
	// server sends right after its reply is not dropped.
	c.subs[topic] = s
	c.mu.Unlock()
	var params any = topicParams{Topic: topic}
	if s.pos.Epoch != "" {
		params = recoverParams{Topic: topic, Recover: true, Since: s.pos}
	}
	if err := c.call(ctx, protocol.MethodSubscribe, params, nil, s.onResult(s.pos.Epoch != "")); err != nil {
		c.removeSub(s)
		return nil, err
	}
	return s, nil
}

// Unsubscribe stops delivery at once (a handler already running finishes)
// and tells the server. When there is no connection it only forgets the
// subscription locally: the server dropped it with the connection. Calling
// it again does nothing.
func (s *Subscription) Unsubscribe(ctx context.Context) error {
	if !s.c.removeSub(s) {
		return nil
	}
	err := s.c.Call(ctx, protocol.MethodUnsubscribe, topicParams{Topic: s.topic}, nil)
	if errors.Is(err, ErrDisconnected) || errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// removeSub forgets s if it is still the live subscription of its topic.
func (c *Client) removeSub(s *Subscription) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs[s.topic] != s {
		return false
	}
	delete(c.subs, s.topic)
	return true
}

// dispatch runs handlers, one at a time, in arrival order. After Close it
// drains without calling them.
func (c *Client) dispatch() {
	defer c.wg.Done()
	for d := range c.deliver {
		if c.closing.Load() {
			continue
		}
		switch d.method {
		case protocol.NotifyMessage:
			c.mu.Lock()
			s := c.subs[d.topic]
			c.mu.Unlock()
			switch {
			case s == nil:
			case s.hm != nil:
				s.hm(Message{Topic: d.topic, Data: d.data, Offset: d.offset})
			default:
				s.h(d.topic, d.data)
			}
		case protocol.NotifySystem:
			if c.opts.OnSystem != nil {
				c.opts.OnSystem(d.event, d.data)
			}
		case methodRecovery:
			if c.opts.OnRecovery != nil {
				c.opts.OnRecovery(d.topic, d.recovered, d.event)
			}
		case protocol.NotifyPresence:
			c.presenceDiff(d.data)
		}
	}
}

// resubscribeRounds bounds how often one reconnect re-sends subscriptions
// that the server shed (OVERLOADED, RATE_LIMITED) before giving them up.
const resubscribeRounds = 3

// resubscribe sends every live subscription on a new connection before it
// is reported Connected. Requests are pipelined, not sent one round trip at
// a time. A subscription the server refuses for good (-32602, -32003,
// -32004, ...) is dropped and logged; one it sheds is retried after the
// server's hint, up to resubscribeRounds times. An error means the
// connection is unusable and the caller dials again.
func (c *Client) resubscribe(cn *conn) error {
	c.mu.Lock()
	topics := make([]string, 0, len(c.subs))
	for t := range c.subs {
		topics = append(topics, t)
	}
	c.mu.Unlock()

	type pending struct {
		topic string
		ch    chan response
	}
	for round := 0; len(topics) > 0; round++ {
		calls := make([]pending, 0, len(topics))
		for _, t := range topics {
			id := c.nextID.Add(1)
			params, hook := c.resubscribeParams(t)
			b, _ := encodeRequest(id, protocol.MethodSubscribe, params)
			ch, err := cn.register(id)
			if err != nil {
				return err
			}
			cn.setHook(id, hook)
			if err := cn.write(c.ctx, b); err != nil {
				return wrapCause(ErrDisconnected, err)
			}
			calls = append(calls, pending{t, ch})
		}
		timeout := time.NewTimer(handshakeTimeout)
		var retry []string
		var wait time.Duration
		for _, p := range calls {
			var r response
			select {
			case r = <-p.ch:
			case <-timeout.C:
				return errors.New("rtclient: no answer to resubscribe")
			case <-c.ctx.Done():
				timeout.Stop()
				return ErrClosed
			}
			var pe *protocol.Error
			switch {
			case r.err == nil:
			case !errors.As(r.err, &pe):
				timeout.Stop()
				return r.err
			case (pe.Code == protocol.CodeOverloaded || pe.Code == protocol.CodeRateLimited) && round+1 < resubscribeRounds:
				retry = append(retry, p.topic)
				wait = max(wait, dataHint(pe))
			default:
				c.mu.Lock()
				if s := c.subs[p.topic]; s != nil {
					delete(c.subs, p.topic)
				}
				c.mu.Unlock()
				c.opts.Logger.Warn("rtclient: resubscribe refused; subscription dropped", "topic", p.topic, "err", pe)
			}
		}
		timeout.Stop()
		topics = retry
		if len(topics) > 0 {
			d := backoff(round, c.opts.MinBackoff, c.opts.MaxBackoff, wait, c.opts.Rand())
			if c.opts.Sleep(c.ctx, d) != nil {
				return ErrClosed
			}
		}
	}
	return nil
}

// dataHint reads the hint from a -32001/-32002 error's data.
func dataHint(pe *protocol.Error) time.Duration {
	raw, ok := pe.Data.(json.RawMessage)
	if !ok {
		return 0
	}
	return retryhint.FromBody(raw)
}

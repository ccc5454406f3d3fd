package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rtserver/rtserver/protocol"
)

// History topics (docs/history.md). A subscription to a topic that keeps
// history has a position, the (epoch, offset) of the last message it
// delivered: the subscribe result sets it and every message's offset
// advances it, on the reader goroutine, in frame order. After every
// reconnect (and on the server's resync event) the subscription is sent
// with recover and since, so the server replays what was missed; a
// message at or before the position is a duplicate and is dropped. The
// application learns per topic whether the missed messages came
// (Options.OnRecovery): when they did not, it should reload its state.

// Position is a place in a history topic's stream.
type Position struct {
	Epoch  string `json:"epoch"`
	Offset uint64 `json:"offset"`
}

// Message is one message delivered to a SubscribeSince handler.
type Message struct {
	Topic string
	// Data is the message's JSON value; the client never reuses it.
	Data json.RawMessage
	// Offset is the message's place in its history topic's stream: 0 on
	// a topic that keeps no history.
	Offset uint64
}

// SubscribeSince is Subscribe with each message's offset and, on a history
// topic, a starting position: with since set (a non-empty Epoch) the
// server replays what came after it, then live messages follow; whether it
// could (or the reason it could not) reaches Options.OnRecovery. The zero
// Position subscribes from now, as Subscribe does.
func (c *Client) SubscribeSince(ctx context.Context, topic string, since Position, h func(Message)) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("rtclient: SubscribeSince with a nil handler")
	}
	return c.subscribe(ctx, &Subscription{c: c, topic: topic, hm: h, pos: since})
}

// Position is the subscription's position: the zero Position for a topic
// that keeps no history (or before the first result).
func (s *Subscription) Position() Position {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.pos
}

// subscribeResult is a subscribe result on a history topic.
type subscribeResult struct {
	Epoch     string `json:"epoch"`
	Offset    uint64 `json:"offset"`
	Recovered *bool  `json:"recovered"`
	Reason    string `json:"reason"`
}

// recoverParams are subscribe params with recover.
type recoverParams struct {
	Topic   string   `json:"topic"`
	Recover bool     `json:"recover"`
	Since   Position `json:"since"`
}

// onResult is the reader's hook on a subscribe result for s: it sets the
// position (a recovered subscription keeps its own: the replay follows),
// and after a recovery attempt tells the application how it went.
func (s *Subscription) onResult(recovering bool) func(json.RawMessage) {
	return func(raw json.RawMessage) {
		var r subscribeResult
		if json.Unmarshal(raw, &r) != nil || r.Epoch == "" {
			return // not a history topic
		}
		c := s.c
		c.mu.Lock()
		if c.subs[s.topic] != s {
			c.mu.Unlock()
			return
		}
		recovered := r.Recovered != nil && *r.Recovered
		if !recovered || s.pos.Epoch != r.Epoch {
			s.pos = Position{Epoch: r.Epoch, Offset: r.Offset}
		}
		c.mu.Unlock()
		if recovering && r.Recovered != nil {
			c.enqueue(delivery{method: methodRecovery, topic: s.topic, recovered: recovered, event: r.Reason})
		}
	}
}

// methodRecovery is the dispatcher's delivery of a recovery's outcome.
const methodRecovery = "recovery"

// advance moves topic's position to offset; false when the subscription
// already had it (a duplicate: dropped). Reader goroutine.
func (c *Client) advance(topic string, offset uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.subs[topic]
	if s == nil {
		return true // the dispatcher drops it
	}
	if s.pos.Epoch != "" && offset <= s.pos.Offset {
		return false
	}
	s.pos.Offset = offset
	return true
}

// resubscribeParams are the params and result hook of topic's subscribe
// after a reconnect: with recover from its position on a history topic.
func (c *Client) resubscribeParams(topic string) (any, func(json.RawMessage)) {
	c.mu.Lock()
	s := c.subs[topic]
	var pos Position
	if s != nil {
		pos = s.pos
	}
	c.mu.Unlock()
	if s == nil {
		return topicParams{Topic: topic}, nil
	}
	if pos.Epoch == "" {
		return topicParams{Topic: topic}, s.onResult(false)
	}
	return recoverParams{Topic: topic, Recover: true, Since: pos}, s.onResult(true)
}

// resync answers the server's resync event for topic: subscribe again
// from the position, in the background (the reader must go on reading).
func (c *Client) resync(topic string) {
	c.wg.Add(1) // the reader holds a count: Wait cannot be at zero
	go func() {
		defer c.wg.Done()
		params, hook := c.resubscribeParams(topic)
		ctx, cancel := context.WithTimeout(c.ctx, handshakeTimeout)
		defer cancel()
		if err := c.call(ctx, protocol.MethodSubscribe, params, nil, hook); err != nil {
			// The next reconnect recovers it, or the next resync retries.
			c.opts.Logger.Warn("rtclient: resubscribe after resync failed", "topic", topic, "err", err)
		}
	}()
}

// PublishAt publishes data on topic with an idempotency key of its own,
// and retries with the same key until ctx ends: when the connection drops
// before the answer, on the next connection as soon as it is up (however
// long the outage took, the retries' backoff does not grow with it); when
// the server sheds the call (-32001: BUS, HISTORY_UNAVAILABLE, ...), after
// its retry hint (at most twice the hint). On a history topic the message
// is stored and delivered once however often it is sent. It returns the
// message's position (the zero Position on a topic without history, where
// a retry after a lost answer may deliver twice).
func (c *Client) PublishAt(ctx context.Context, topic string, data any) (Position, error) {
	if reason := protocol.CheckTopic(topic); reason != "" {
		return Position{}, protocol.NewError(protocol.CodeInvalidParams, reason, nil)
	}
	var k [12]byte
	_, _ = rand.Read(k[:])
	p := struct {
		Topic          string `json:"topic"`
		Data           any    `json:"data"`
		IdempotencyKey string `json:"idempotencyKey"`
	}{topic, data, hex.EncodeToString(k[:])}
	var last error // the last refusal, named when the deadline ends the retries
	for attempt := 0; ; {
		var pos Position
		err := c.Call(ctx, protocol.MethodPublish, p, &pos)
		if last != nil && ctx.Err() != nil {
			return Position{}, fmt.Errorf("%w; last refusal: %w", err, last)
		}
		var pe *protocol.Error
		switch {
		case err == nil:
			return pos, nil
		case errors.Is(err, ErrDisconnected) && !permanent(err):
			// The connection dropped before the answer, or is down: send
			// it again on the next one, once it is up. A close the
			// message itself caused (1009: too large) would come again,
			// and the client does not reconnect after it.
			last = err
			if err := c.awaitLive(ctx); err != nil {
				return Position{}, fmt.Errorf("%w; last refusal: %w", err, last)
			}
			continue
		case errors.As(err, &pe) && pe.Code == protocol.CodeOverloaded:
		default:
			return Position{}, err
		}
		last = err
		// After the server's hint, with a jitter of at most the hint
		// (MinBackoff without one), growing no further: a long refusal
		// (Redis down) must not push the next try past the caller's
		// deadline once the server takes it again.
		hint := dataHint(pe)
		d := backoff(attempt, c.opts.MinBackoff, max(2*hint, c.opts.MinBackoff), hint, c.opts.Rand())
		attempt++
		if err := c.opts.Sleep(ctx, d); err != nil {
			// Say why it was still unpublished (BUS, HISTORY_UNAVAILABLE,
			// a shed), not only that time ran out.
			return Position{}, fmt.Errorf("%w; last refusal: %w", err, last)
		}
	}
}

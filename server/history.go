package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/protocol"
)

// History topics (docs/history.md). A topic whose policy keeps history is
// served differently from a plain one at three points:
//
//   - publish goes to the store, which assigns the offset where it stores
//     the message and hands it to every instance (this one included)
//     through DeliverAt, in offset order; the publisher gets the position;
//   - every local subscriber of the topic is served by the topic's
//     sequencer (topicSeq), not by the hub's fan-out: the sequencer
//     delivers the topic's offsets in order, once each, fills a gap it
//     sees from the store (once, for all its subscribers), and checks
//     each idle topic's position periodically so that a lost last message
//     is noticed too;
//   - each subscription keeps a history.Cursor: subscribe registers it
//     holding live messages back, reads the store (after the bus has
//     confirmed the subscription), answers, replays from the store paced
//     by the send queue, then releases what was held.
//
// Files: this one holds the state and the history method;
// history_publish.go publishing; history_seq.go the sequencer (delivery in
// offset order, gap fills, the periodic check, new epochs);
// history_subscribe.go subscribing and recovery's paced replay.
//
// Lock order: historyState.mu, then topicSeq.mu, then hsub.mu, then
// conn.mu. No lock is held while the store is called, and topicSeq.mu is
// not held while a topic's messages are fanned out (topicSeq.unlock).

// historyState is the server's part of history.
type historyState struct {
	s      *Server
	store  history.Store
	cfg    history.Config
	policy func(topic string) history.Policy
	scope  string // this server's idempotency scope for anonymous connections
	every  time.Duration
	// inProcess: the store delivers in the publisher's call (the memory
	// store), so publish flushes the topic's line itself.
	inProcess bool

	mu     sync.Mutex
	topics map[string]*topicSeq

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// topicSeq is a history topic with local subscribers.
type topicSeq struct {
	h      *historyState
	topic  string
	policy history.Policy
	refs   int // under historyState.mu

	mu      sync.Mutex
	dead    bool // released: a late fill stops
	ready   bool // epoch and last known
	epoch   string
	last    uint64            // the last offset delivered to subscribers
	target  uint64            // the periodic check found the store at least here
	checked uint64            // last at the previous periodic check
	pending []history.Message // received past a gap (or before ready), ascending; Data is the frame
	filling bool
	subs    map[*conn]*hsub

	// Fan-out runs outside mu. What the sequencer decides under mu (the
	// next offset, a new epoch) is put in line in out; the one goroutine
	// that finds delivering unset takes the line out and delivers it to
	// audience, line after line, until it is empty (unlock). A topic's
	// offsets so reach every subscriber in order, while publishers, the
	// bus and fills hold mu only for an append.
	out        []seqItem
	spare      []seqItem // out's previous array, reused
	delivering bool
	audience   []subscriber // subs as a list, replaced (never changed) when subs changes
}

// seqItem is one step of a topic's delivery.
type seqItem struct {
	m history.Message // Data is the frame
	// reset: a new epoch, epoch (m is not a message); every cursor not
	// already positioned in it is retired and its subscriber told to
	// resync: nothing of the new epoch reaches a subscription of the old
	// one until the client subscribes again (docs/history.md).
	reset bool
	epoch string
}

type subscriber struct {
	c  *conn
	hs *hsub
}

// hsub is one connection's subscription to a history topic.
type hsub struct {
	mu    sync.Mutex
	cur   history.Cursor
	epoch string // of the position the subscribe answered
	gone  bool   // unsubscribed: a delivery already under way skips it
}

// Bounds of what history holds in memory per topic and per subscription.
const (
	maxPending  = 4096 // messages a sequencer holds past a gap
	maxHeld     = 8192 // live messages a recovering subscription holds
	replayPage  = 100  // messages per store read of a replay or a fill
	fillBackoff = time.Second
	// maxHistoryResultBytes bounds the history method's result: a client
	// asking for more pages with since.
	maxHistoryResultBytes = 1 << 20
)

func newHistoryState(s *Server, o Deps) (*historyState, error) {
	if o.HistoryPolicy == nil {
		return nil, nil
	}
	if o.History == nil {
		// The streams live in this process, delivered through the
		// server as they are stored.
		var evicted prometheus.Counter
		if o.Metrics != nil {
			evicted = o.Metrics.HistoryEvictions
		}
		store, err := history.NewMemory(o.HistoryConfig, history.MemoryDeps{Evicted: evicted, Deliver: s.DeliverHistory})
		if err != nil {
			return nil, err
		}
		o.History = store
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	h := &historyState{
		s: s, store: o.History, cfg: o.HistoryConfig.WithDefaults(), policy: o.HistoryPolicy,
		scope: hex.EncodeToString(b[:]), topics: map[string]*topicSeq{}, stop: make(chan struct{}),
	}
	// The memory store delivers in the publisher's call, under its topic
	// lock, through DeliverHistory (history.MemoryDeps.Deliver): it
	// only puts in line (offset order); publish delivers once the store
	// has returned.
	_, h.inProcess = o.History.(*history.Memory)
	h.every = o.HistoryCheckInterval
	if h.every <= 0 {
		h.every = 5 * time.Second
	}
	return h, nil
}

// start starts the periodic position check (Server.Start).
func (h *historyState) start() {
	if h == nil {
		return
	}
	h.wg.Add(1)
	go h.checker(h.every)
}

// policyOf is topic's history policy; the zero policy when history is off.
func (h *historyState) policyOf(topic string) history.Policy {
	if h == nil {
		return history.Policy{}
	}
	return h.policy(topic)
}

func (h *historyState) close() {
	if h == nil {
		return
	}
	h.stopOnce.Do(func() { close(h.stop) })
	h.wg.Wait()
}

// stopped reports whether close has begun.
func (h *historyState) stopped() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

// unavailable is the answer when the store cannot be reached.
func (s *Server) historyUnavailable() *protocol.Error {
	return protocol.NewError(protocol.CodeOverloaded, "", protocol.OverloadedData{
		Reason: protocol.ReasonHistoryUnavailable, RetryAfterMs: hintMillis(time.Second),
	})
}

// --- the history method ---

// historyCall answers the history method: the topic's position and its
// messages after since (or the newest), at most limit and about
// maxHistoryResultBytes.
func (c *conn) historyCall(topic string, params json.RawMessage, pol history.Policy) (json.RawMessage, *protocol.Error) {
	hp, perr := protocol.DecodeHistoryParams(params)
	if perr != nil {
		return nil, perr
	}
	if !pol.Enabled() {
		return nil, protocol.NewError(protocol.CodeInvalidParams, "topic keeps no history", protocol.TopicData{Topic: topic})
	}
	res, err := c.s.History(&c.ctx, topic, hp.Since, hp.Limit)
	if err != nil {
		return nil, c.s.historyUnavailable()
	}
	return res, nil
}

// ErrNoHistory is History's error for a topic that keeps no history.
var ErrNoHistory = history.ErrNoHistory

// History answers the history method (for clients and the server API):
// {"epoch","offset","messages":[{"offset","data"}...]}. since nil: the
// newest limit messages; since of another epoch: none. limit 0: 100.
func (s *Server) History(ctx context.Context, topic string, since *protocol.Since, limit int) (json.RawMessage, error) {
	pol := s.hist.policyOf(topic)
	if !pol.Enabled() {
		return nil, ErrNoHistory
	}
	if limit <= 0 {
		limit = protocol.DefaultHistoryLimit
	}
	after := history.Newest
	if since != nil {
		after = since.Offset
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pos, msgs, err := s.hist.store.Read(ctx, topic, after, limit, pol)
	if err != nil {
		return nil, err
	}
	if since != nil && (since.Epoch != pos.Epoch || since.Offset > pos.Offset) {
		msgs = nil
	}
	b := protocol.AppendPosition(nil, pos.Epoch, pos.Offset)
	b = append(b[:len(b)-1], `,"messages":[`...)
	for i, m := range msgs {
		if len(b) > maxHistoryResultBytes {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"offset":`...)
		b = strconv.AppendUint(b, m.Offset, 10)
		b = append(b, `,"data":`...)
		b = append(b, m.Data...)
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

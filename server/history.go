package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/metrics"
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

func newHistoryState(s *Server, o Options) *historyState {
	if o.History == nil || o.HistoryPolicy == nil {
		return nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	h := &historyState{
		s: s, store: o.History, cfg: o.HistoryConfig.WithDefaults(), policy: o.HistoryPolicy,
		scope: hex.EncodeToString(b[:]), topics: map[string]*topicSeq{}, stop: make(chan struct{}),
	}
	if m, ok := o.History.(*history.Memory); ok && m.Deliver == nil {
		// Under the store's topic lock: only put in line (offset order);
		// publish delivers once the store has returned.
		m.Deliver = func(topic, epoch string, msg history.Message) { h.offer(topic, msg.Data, epoch, msg.Offset) }
		h.inProcess = true
	}
	h.every = o.HistoryCheckInterval
	if h.every <= 0 {
		h.every = 5 * time.Second
	}
	return h
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

// --- publish ---

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

// --- delivery ---

// deliverAt takes a history topic's message from the store or the bus
// and delivers it (and whatever it releases) in order, held in held
// (nil: written at once).
func (h *historyState) deliverAt(topic string, data []byte, epoch string, offset uint64, held *holdSet) {
	if q := h.offer(topic, data, epoch, offset); q != nil {
		q.flush(held)
	}
}

// offer puts a history topic's message in its sequencer's line, and
// returns the sequencer (nil: the topic has no local subscriber), whose
// flush delivers it.
func (h *historyState) offer(topic string, data []byte, epoch string, offset uint64) *topicSeq {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	q := h.topics[topic]
	h.mu.Unlock()
	if q == nil {
		return nil
	}
	frame := frameMessageAt(topic, offset, data)
	q.mu.Lock()
	q.offer(epoch, history.Message{Offset: offset, Data: frame})
	q.mu.Unlock()
	return q
}

// flush delivers what is in line, held in held (nil: written at once),
// unless another goroutine is already doing so (it then delivers this
// too).
func (q *topicSeq) flush(held *holdSet) {
	q.mu.Lock()
	q.unlockWith(held)
}

// DeliverAt is the bus's hand-over of a history topic's message.
func (r *busReceiver) DeliverAt(topic string, data []byte, epoch string, offset uint64) {
	r.deliverAt(topic, data, epoch, offset, nil)
}

// DeliverAt is a bus receive worker's hand-over of a history topic's
// message: held while the worker has more in hand, like Deliver.
func (h *busHolder) DeliverAt(topic string, data []byte, epoch string, offset uint64) {
	h.r.deliverAt(topic, data, epoch, offset, h.held)
}

func (r *busReceiver) deliverAt(topic string, data []byte, epoch string, offset uint64, held *holdSet) {
	s := (*Server)(r)
	if s.pressure != nil {
		s.pressure.RecordPublished(1)
	}
	s.hist.deliverAt(topic, data, epoch, offset, held)
}

// frameMessageAt is frameMessage with the offset.
func frameMessageAt(topic string, offset uint64, data []byte) []byte {
	b := make([]byte, maxHeader, maxHeader+protocol.MessageAtOverhead+len(topic)+len(data))
	b = protocol.AppendMessageAt(b, topic, offset, data)
	var hdr [maxHeader]byte
	h := appendTextHeader(hdr[:0], len(b)-maxHeader)
	start := maxHeader - len(h)
	copy(b[start:], h)
	return b[start:]
}

// offer delivers m in order, or holds it past a gap and starts a fill.
// Caller holds q.mu.
func (q *topicSeq) offer(epoch string, m history.Message) {
	if !q.ready {
		q.hold(m)
		return
	}
	if epoch != q.epoch {
		q.newEpoch(epoch, m.Offset-1)
	}
	if m.Offset <= q.last {
		return
	}
	if m.Offset == q.last+1 && len(q.pending) == 0 {
		q.fanout(m)
		return
	}
	q.hold(m)
	q.startFill()
}

// hold keeps m (ascending, no duplicates) until the gap before it is
// filled. Past maxPending, the gap is given up: the sequencer moves on
// and the subscribers see it (resync).
func (q *topicSeq) hold(m history.Message) {
	i := sort.Search(len(q.pending), func(i int) bool { return q.pending[i].Offset >= m.Offset })
	if i < len(q.pending) && q.pending[i].Offset == m.Offset {
		return
	}
	q.pending = append(q.pending, history.Message{})
	copy(q.pending[i+1:], q.pending[i:])
	q.pending[i] = m
	if len(q.pending) > maxPending && q.ready {
		q.h.s.m.HistoryGapFills.WithLabelValues(metrics.GapResync).Inc()
		q.last = q.pending[0].Offset - 1
		q.drain()
	} else if len(q.pending) > maxPending {
		q.pending = q.pending[1:]
	}
}

// drain delivers the held messages that follow on from last.
func (q *topicSeq) drain() {
	i := 0
	for i < len(q.pending) && q.pending[i].Offset <= q.last+1 {
		if q.pending[i].Offset == q.last+1 {
			q.fanout(q.pending[i])
		}
		i++
	}
	clear(q.pending[:i])
	q.pending = q.pending[i:]
	if len(q.pending) == 0 {
		q.pending = nil
	}
}

// newEpoch follows the topic into a new epoch: the old stream is gone,
// so every subscriber is told to resync and continues from last. Caller
// holds q.mu.
func (q *topicSeq) newEpoch(epoch string, last uint64) {
	q.epoch, q.last, q.target, q.pending = epoch, last, 0, nil
	q.out = append(q.out, seqItem{m: history.Message{Offset: last}, reset: true, epoch: epoch})
}

// fanout puts m (its Data is the frame) in line for every subscriber
// whose cursor takes it. Caller holds q.mu, so the line is in offset
// order; unlock delivers it.
func (q *topicSeq) fanout(m history.Message) {
	q.last = m.Offset
	q.out = append(q.out, seqItem{m: m})
}

// unlock releases q.mu, delivering what is in line (unlockWith).
func (q *topicSeq) unlock() { q.unlockWith(nil) }

// unlockWith releases q.mu. If something is in line and nobody is
// delivering, the caller becomes the deliverer: it delivers the line
// without q.mu, then any line that formed meanwhile, until none is left;
// held, when not nil, holds the frames for its owner's flush. Only one
// goroutine delivers at a time, so every subscriber sees the line's order.
func (q *topicSeq) unlockWith(held *holdSet) {
	if q.delivering || len(q.out) == 0 {
		q.mu.Unlock()
		return
	}
	q.delivering = true
	for len(q.out) > 0 {
		items, audience := q.out, q.audience
		q.out, q.spare = q.spare[:0], nil
		q.mu.Unlock()
		q.deliver(items, audience, held)
		clear(items)
		q.mu.Lock()
		if cap(items) <= maxPending {
			q.spare = items[:0]
		}
	}
	q.delivering = false
	q.mu.Unlock()
}

// deliver hands items, in order, to every subscriber of audience whose
// cursor takes them, held in held when not nil. Only the deliverer calls
// it (unlockWith).
func (q *topicSeq) deliver(items []seqItem, audience []subscriber, held *holdSet) {
	var resync []byte
	sendResync := func(c *conn) {
		if resync == nil {
			resync = frameText(protocol.AppendResync(nil, q.topic))
		}
		c.sendResync(resync)
	}
	direct := len(audience) < queuedFanout
	for _, it := range items {
		sent := 0
		for _, sb := range audience {
			sb.hs.mu.Lock()
			if sb.hs.gone {
				sb.hs.mu.Unlock()
				continue
			}
			if it.reset {
				retire := sb.hs.epoch != it.epoch && !sb.hs.cur.Retired()
				if retire {
					sb.hs.cur.Retire()
				}
				sb.hs.mu.Unlock()
				if retire {
					sendResync(sb.c)
				}
				continue
			}
			ok, gap := sb.hs.cur.Live(it.m)
			if ok {
				if held != nil {
					ok = sb.c.enqueueHeld(it.m.Data, held)
				} else {
					ok = sb.c.enqueueFrame(it.m.Data, direct)
				}
			}
			if ok {
				sent++
			}
			sb.hs.mu.Unlock()
			if gap {
				sendResync(sb.c)
			}
		}
		q.h.s.m.MessagesSent.Add(float64(sent))
		if held != nil && !it.reset {
			held.published()
		}
	}
}

// listen replaces the audience after subs changed. Caller holds q.mu.
func (q *topicSeq) listen() {
	a := make([]subscriber, 0, len(q.subs))
	for c, hs := range q.subs {
		a = append(a, subscriber{c: c, hs: hs})
	}
	q.audience = a
}

func (c *conn) sendResync(frame []byte) {
	if c.enqueueFrame(frame, true) {
		c.s.m.MessagesSent.Inc()
		c.s.m.HistoryResyncs.Inc()
	}
}

// startFill starts the goroutine that fills the gap before the held
// messages (or up to target) from the store. Caller holds q.mu.
func (q *topicSeq) startFill() {
	if q.filling || q.dead || q.h.stopped() {
		return
	}
	q.filling = true
	q.h.wg.Add(1)
	go q.fill()
}

// fill reads what is missing from the store until the gap is closed,
// given up (the store no longer has it), or the topic has no subscriber.
// A store that cannot be read is retried every fillBackoff: the held
// messages wait (bounded by maxPending).
func (q *topicSeq) fill() {
	defer q.h.wg.Done()
	h := q.h
	for {
		q.mu.Lock()
		want := q.target
		if len(q.pending) > 0 {
			want = q.pending[0].Offset - 1
		}
		if q.dead || want <= q.last {
			q.filling = false
			q.mu.Unlock()
			return
		}
		after, n := q.last, int(min(want-q.last, replayPage))
		q.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pos, msgs, err := h.store.Read(ctx, q.topic, after, n, q.policy)
		cancel()
		if err != nil {
			h.s.m.HistoryGapFills.WithLabelValues(metrics.GapError).Inc()
			t := time.NewTimer(fillBackoff)
			select {
			case <-t.C:
			case <-h.stop:
				t.Stop()
				q.mu.Lock()
				q.filling = false
				q.mu.Unlock()
				return
			}
			continue
		}
		q.mu.Lock()
		switch {
		case q.dead:
		case pos.Epoch != q.epoch:
			q.newEpoch(pos.Epoch, pos.Offset)
		case q.last != after:
			// Delivered meanwhile (the pending drained): read again.
		case len(msgs) == 0 || msgs[0].Offset != after+1:
			// Gone from the store: the subscribers resync.
			h.s.m.HistoryGapFills.WithLabelValues(metrics.GapResync).Inc()
			q.last = min(want, pos.Offset)
			if len(msgs) > 0 {
				q.last = msgs[0].Offset - 1
			}
			q.deliverRead(msgs)
		default:
			h.s.m.HistoryGapFills.WithLabelValues(metrics.GapFilled).Inc()
			q.deliverRead(msgs)
		}
		q.unlock()
	}
}

// deliverRead delivers messages read from the store, then what was held
// behind them. Caller holds q.mu.
func (q *topicSeq) deliverRead(msgs []history.Message) {
	// q.last may have been moved past a gap: the cursors see the skip.
	for _, m := range msgs {
		if m.Offset <= q.last {
			continue
		}
		if m.Offset != q.last+1 {
			break
		}
		m.Data = frameMessageAt(q.topic, m.Offset, m.Data)
		q.fanout(m)
	}
	q.drain()
}

// checker checks every idle tracked topic's position every interval: a
// lost pub/sub message that no later message reveals is found here.
func (h *historyState) checker(every time.Duration) {
	defer h.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-h.stop:
			return
		}
		h.mu.Lock()
		qs := make([]*topicSeq, 0, len(h.topics))
		for _, q := range h.topics {
			qs = append(qs, q)
		}
		h.mu.Unlock()
		for _, q := range qs {
			q.mu.Lock()
			idle := q.ready && !q.filling && q.last == q.checked
			q.checked = q.last
			q.mu.Unlock()
			if idle {
				q.check()
			}
		}
	}
}

// check reads the topic's position from the store and fills up to it if
// this instance is behind.
func (q *topicSeq) check() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	pos, _, err := q.h.store.Read(ctx, q.topic, history.Newest, 0, q.policy)
	cancel()
	if err != nil {
		return
	}
	q.mu.Lock()
	defer q.unlock()
	if !q.ready || q.dead {
		return
	}
	if pos.Epoch != q.epoch {
		// The stream was replaced (Redis lost it) and its first messages
		// passed while this instance was not listening: start over.
		q.newEpoch(pos.Epoch, 0)
	}
	if pos.Offset > q.last {
		q.target = max(q.target, pos.Offset)
		q.startFill()
	}
}

// checkAll checks every tracked topic now, in the background: after the
// bus was down, messages may have passed this instance by.
func (h *historyState) checkAll() {
	if h == nil || h.stopped() {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.mu.Lock()
		qs := make([]*topicSeq, 0, len(h.topics))
		for _, q := range h.topics {
			qs = append(qs, q)
		}
		h.mu.Unlock()
		for _, q := range qs {
			q.check()
		}
	}()
}

// gap is the bus's word that it dropped messages of topic (its receive
// queue was full): a history topic repairs that from the store at once,
// instead of telling its subscribers. It reports whether topic is one.
func (h *historyState) gap(topic string) bool {
	if !h.policyOf(topic).Enabled() {
		return false
	}
	h.mu.Lock()
	q := h.topics[topic]
	h.mu.Unlock()
	if q != nil && !h.stopped() {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			q.check()
		}()
	}
	return true
}

// --- subscribe ---

// acquire returns topic's sequencer, counting one more subscription.
func (h *historyState) acquire(topic string, pol history.Policy) *topicSeq {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.topics[topic]
	if q == nil {
		q = &topicSeq{h: h, topic: topic, policy: pol, subs: map[*conn]*hsub{}}
		h.topics[topic] = q
	}
	q.refs++
	return q
}

// leave takes c off topic's sequencer, if it was on it.
func (h *historyState) leave(c *conn, topic string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.topics[topic]
	if q == nil {
		return
	}
	q.mu.Lock()
	if _, ok := q.subs[c]; !ok {
		q.mu.Unlock()
		return
	}
	hs := q.subs[c]
	delete(q.subs, c)
	q.listen()
	hs.mu.Lock()
	hs.gone = true
	hs.mu.Unlock()
	q.refs--
	if q.refs == 0 {
		q.dead = true
		delete(h.topics, topic)
	}
	q.mu.Unlock()
}

// ready sets the sequencer's position from a store read, the first time,
// and delivers what it held meanwhile.
func (q *topicSeq) setReady(pos history.Position) {
	if q.ready {
		return
	}
	q.ready, q.epoch, q.last = true, pos.Epoch, pos.Offset
	q.drain()
	if len(q.pending) > 0 {
		q.startFill()
	}
}

// replay is what a subscribe leaves to do once its result is queued: a
// recovery's pages, or (live) only going live from end, so that no
// message reaches the client before the result that positions it.
type replay struct {
	q     *topicSeq
	hs    *hsub
	first []history.Message
	end   uint64
	live  bool
}

// subscribeHistory subscribes c to a history topic: plain (the result is
// the position; live from there) or with recover (the result says
// whether the missed messages follow).
func (c *conn) subscribeHistory(topic string, params json.RawMessage, pol history.Policy) (json.RawMessage, *protocol.Error) {
	s, h := c.s, c.s.hist
	hp, perr := protocol.DecodeHistoryParams(params)
	if perr != nil {
		return nil, perr
	}
	if hp.Recover && hp.Since == nil {
		return nil, protocol.NewError(protocol.CodeInvalidParams, "recover needs since", nil)
	}
	c.subsMu.Lock()
	_, already := c.subs[topic]
	c.subsMu.Unlock()
	if !already {
		if perr := c.addSub(topic); perr != nil {
			return nil, perr
		}
	}
	since := uint64(0)
	if hp.Recover {
		since = hp.Since.Offset
	}
	// Registered, holding live messages back, before the store is read:
	// what is published after the read arrives live and is held. The
	// cursor starts from nothing: until the read says whether since can be
	// trusted, no live message may be dropped as already seen (a new
	// epoch counts from 1 again).
	q, hs, last := h.acquireFor(c, topic, pol, already)

	after, limit := since, replayPage
	if !hp.Recover {
		after, limit = history.Newest, 0
	}
	ctx, cancel := context.WithTimeout(&c.ctx, 5*time.Second)
	pos, msgs, err := h.store.Read(ctx, topic, after, limit, pol)
	cancel()
	if err != nil {
		if already {
			// A refused subscribe changes nothing: the subscription the
			// client had goes on live from where it was, releasing what
			// was held meanwhile, as if this call had not come.
			c.addReplay(replay{q: q, hs: hs, end: last, live: true})
		} else {
			c.removeSub(topic)
		}
		if hp.Recover {
			s.m.HistoryRecoveries.WithLabelValues(metrics.RecoveryUnavailable).Inc()
		}
		return nil, s.historyUnavailable()
	}
	q.mu.Lock()
	q.setReady(pos)
	q.unlock()
	hs.mu.Lock()
	hs.epoch = pos.Epoch
	hs.mu.Unlock()

	if !hp.Recover {
		c.addReplay(replay{q: q, hs: hs, end: pos.Offset, live: true})
		return protocol.AppendPosition(nil, pos.Epoch, pos.Offset), nil
	}
	reason := ""
	switch {
	case hp.Since.Epoch != pos.Epoch || since > pos.Offset:
		reason = protocol.RecoverEpoch
	case pos.Offset-since > uint64(h.cfg.MaxReplay):
		reason = protocol.RecoverTooMany
	case pos.Offset > since && (len(msgs) == 0 || msgs[0].Offset != since+1):
		reason = protocol.RecoverTrimmed
	}
	if reason != "" {
		s.m.HistoryRecoveries.WithLabelValues(reason).Inc()
		c.addReplay(replay{q: q, hs: hs, end: pos.Offset, live: true})
		return protocol.AppendRecovered(nil, pos.Epoch, pos.Offset, false, reason), nil
	}
	s.m.HistoryRecoveries.WithLabelValues(metrics.RecoveryRecovered).Inc()
	// Trusted: the client has everything up to since; held live messages
	// at or below it are dropped when the replay ends.
	hs.mu.Lock()
	hs.cur.Skip(since)
	hs.mu.Unlock()
	c.addReplay(replay{q: q, hs: hs, first: msgs, end: pos.Offset})
	return protocol.AppendRecovered(nil, pos.Epoch, pos.Offset, true, ""), nil
}

// acquireFor registers c's cursor on topic's sequencer (counting it once
// per subscription), from offset 0 and holding live messages back: from
// the moment it is on the sequencer's audience, nothing reaches the client
// before the subscribe result. last is what the cursor had delivered
// before (0 for a new subscription).
func (h *historyState) acquireFor(c *conn, topic string, pol history.Policy, already bool) (q *topicSeq, hs *hsub, last uint64) {
	h.mu.Lock()
	q = h.topics[topic]
	h.mu.Unlock()
	if q == nil || !already {
		q = h.acquire(topic, pol)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	hs = q.subs[c]
	if hs == nil {
		hs = &hsub{}
		q.subs[c] = hs
		q.listen()
	}
	hs.mu.Lock()
	last = hs.cur.Last()
	hs.cur.Reset(0)
	hs.cur.StartReplay(maxHeld)
	hs.mu.Unlock()
	return q, hs, last
}

// goLive skips the cursor to last and releases what it held.
func (c *conn) goLive(q *topicSeq, hs *hsub, last uint64) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.cur.Skip(last)
	held, _ := hs.cur.EndReplay()
	c.enqueueReleased(q, held)
}

// enqueueReleased queues held live messages (their Data is the frame).
// Caller holds the subscription's lock.
func (c *conn) enqueueReleased(q *topicSeq, held []history.Message) {
	for _, m := range held {
		if c.enqueueFrame(m.Data, true) {
			c.s.m.MessagesSent.Inc()
		}
	}
}

// runReplays runs the recoveries the frame's subscribes decided, after
// their results were queued: pages from the store, each message queued
// only while the send queue has room (so the replay never makes the
// client a slow consumer, and never builds one giant frame), then the
// held live messages.
func (c *conn) runReplays() {
	ch := c.hist
	if ch == nil || len(ch.replays) == 0 {
		return
	}
	rs := ch.replays
	ch.replays = nil
	for i, r := range rs {
		// Off the list first: the list must not keep a recovery's first
		// page for as long as the whole replay runs.
		rs[i] = replay{}
		c.runReplay(r)
	}
}

// addReplay leaves r to run once the frame's responses are queued.
func (c *conn) addReplay(r replay) {
	ch := c.histState()
	ch.replays = append(ch.replays, r)
}

func (c *conn) runReplay(r replay) {
	if r.live {
		c.goLive(r.q, r.hs, r.end)
		return
	}
	s, h := c.s, c.s.hist
	room := s.cfg.SendQueueBytes / 4
	page := r.first
	r.first = nil // r lives as long as the replay; the page must not
	gap := false
	for {
		r.hs.mu.Lock()
		out, g := r.hs.cur.Page(page)
		last := r.hs.cur.Last()
		r.hs.mu.Unlock()
		gap = gap || g
		// Queued, not written one by one: the connection's writer sends
		// what a page queued in few writes.
		sent := 0
		for _, m := range out {
			if !c.awaitRoom(room) {
				break
			}
			if c.enqueueFrame(frameMessageAt(r.q.topic, m.Offset, m.Data), false) {
				sent++
			}
		}
		s.m.MessagesSent.Add(float64(sent))
		s.m.HistoryReplayed.Add(float64(sent))
		if sent < len(out) {
			return // closed
		}
		if last >= r.end || len(page) == 0 {
			break
		}
		ctx, cancel := context.WithTimeout(&c.ctx, 5*time.Second)
		var err error
		_, page, err = h.store.Read(ctx, r.q.topic, last, replayPage, r.q.policy)
		cancel()
		if err != nil {
			// The store went away mid-replay: what was replayed stands;
			// the client is told to resync for the rest.
			gap = true
			break
		}
	}
	r.hs.mu.Lock()
	held, g := r.hs.cur.EndReplay()
	c.enqueueReleased(r.q, held)
	r.hs.mu.Unlock()
	if gap || g {
		c.sendResync(frameText(protocol.AppendResync(nil, r.q.topic)))
	}
}

// awaitRoom waits, while the send queue holds more than limit bytes, for
// its writer to empty it; false when the connection closed meanwhile.
// (Waiting for the writer to finish, not for room, keeps the connection
// free of a second wake-up channel: a replay then goes in bursts of at
// most limit bytes.)
func (c *conn) awaitRoom(limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.closed && c.queued > limit && c.writing {
		c.awaitWriter()
	}
	return !c.closed
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
var ErrNoHistory = errors.New("server: topic keeps no history")

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

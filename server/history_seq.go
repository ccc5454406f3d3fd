package server

import (
	"context"
	"sort"
	"time"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/protocol"
)

// History topics: delivery by each topic's sequencer, gap fills and the
// periodic check (see history.go).

// deliverAt takes a history topic's message from the store or the bus
// and delivers it (and whatever it releases) in order, held in held
// (nil: written at once).
func (h *historyState) deliverAt(topic string, data []byte, epoch string, offset uint64, held *holdSet) {
	if q := h.offer(topic, data, epoch, offset); q != nil {
		q.flush(held)
	}
}

// DeliverHistory takes a message an in-process store (history.Memory)
// just stored: what history.MemoryDeps.Deliver must call. It runs under
// the store's topic lock, so it only puts the message in line, in offset
// order; the publish that stored it delivers it.
func (s *Server) DeliverHistory(topic, epoch string, m history.Message) {
	s.hist.offer(topic, m.Data, epoch, m.Offset)
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
		var bin []byte // the binary protocol's frame, built at its first subscriber
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
				f := binaryOf(sb.c, it.m.Data, &bin)
				if held != nil {
					ok = sb.c.enqueueHeld(f, held)
				} else {
					ok = sb.c.enqueueFrame(f, direct)
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
		qs := h.tracked()
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
		qs := h.tracked()
		for _, q := range qs {
			q.check()
		}
	}()
}

// tracked is every topic's sequencer now.
func (h *historyState) tracked() []*topicSeq {
	h.mu.Lock()
	defer h.mu.Unlock()
	qs := make([]*topicSeq, 0, len(h.topics))
	for _, q := range h.topics {
		qs = append(qs, q)
	}
	return qs
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

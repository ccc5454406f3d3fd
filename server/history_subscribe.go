package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/protocol"
)

// History topics: subscribing, recovery and its paced replay (see
// history.go).

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

package server

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// hubShards spreads topics over independently locked maps so publishes to
// different topics on different cores do not contend.
const hubShards = 32

// hub maps topics to this instance's subscribers, in the server's
// Subscribers table (Deps.Subscribers).
type hub struct {
	s *Server
	*Subscribers
}

type hubShard struct {
	mu     sync.RWMutex
	topics map[string]*topicSubs
}

// topicSubs is one topic's local subscribers: the set, and a list of it
// that deliveries share. The list is built by the first delivery after a
// change and then read as it is, without copying or walking a map, by
// every delivery until the next change: a topic's subscribers change far
// less often than it is published to.
type topicSubs struct {
	conns map[*conn]struct{}
	// list is nil after a change. It is stored only with the shard's
	// lock held (read or write), so a list built under a read lock can
	// never outlive the change that follows it; once stored it is never
	// modified.
	list atomic.Pointer[[]*conn]
}

// subscribers returns the topic's subscribers as a shared list that must
// not be modified. sh.mu held (read or write).
func (t *topicSubs) subscribers() []*conn {
	if l := t.list.Load(); l != nil {
		return *l
	}
	l := make([]*conn, 0, len(t.conns))
	for c := range t.conns {
		l = append(l, c)
	}
	t.list.Store(&l)
	return l
}

// init makes t (nil: a new table) the hub's table.
func (h *hub) init(s *Server, t *Subscribers) {
	if t == nil {
		t = NewSubscribers()
	}
	h.s, h.Subscribers = s, t
}

// subscribe adds c to topic, and tells the bus when the topic got its
// first local subscriber. The bus call is made after the shard lock is
// released: a sharded bus may wait for Redis to confirm a new partition,
// and deliveries to this shard must not wait with it. Buses count
// Subscribe and Unsubscribe per topic, so two such calls racing for one
// topic still net out to the hub's state.
func (h *hub) subscribe(c *conn, topic string) {
	sh := h.shard(topic)
	sh.mu.Lock()
	subs := sh.topics[topic]
	first := subs == nil
	if first {
		subs = &topicSubs{conns: map[*conn]struct{}{}}
		sh.topics[topic] = subs
	}
	subs.conns[c] = struct{}{}
	subs.list.Store(nil)
	sh.mu.Unlock()
	if first {
		h.s.bus.Subscribe(topic)
	}
}

// unsubscribe removes c from topic, and tells the bus when the topic lost
// its last local subscriber.
func (h *hub) unsubscribe(c *conn, topic string) {
	sh := h.shard(topic)
	sh.mu.Lock()
	subs := sh.topics[topic]
	if subs == nil {
		sh.mu.Unlock()
		return
	}
	delete(subs.conns, c)
	subs.list.Store(nil)
	last := len(subs.conns) == 0
	if last {
		delete(sh.topics, topic)
	}
	sh.mu.Unlock()
	if last {
		h.s.bus.Unsubscribe(topic)
	}
}

// publish delivers data to every local subscriber of topic. The frame is
// built once per encoding and shared: queues hold references to the same
// bytes. With a holdSet (a publisher's read goroutine running input it
// already has), deliveries are held and each subscriber gets everything
// held for it in one write when that goroutine runs out of input
// (write.go): immediate when publishes are sparse, one write per
// subscriber per burst when not.
// Without one (Server.Publish, the bus), a socket that takes the frame at
// once gets it right away from this goroutine, except for a large topic:
// its frames are queued for the subscribers' writers, which run on every
// core, so this goroutine is not held for a write per subscriber. The
// topic's shared subscriber list is walked without the shard's lock held
// (a subscribe to another topic of the shard does not wait for a
// fan-out), and without a copy per publish.
func (h *hub) publish(topic string, data []byte, held *holdSet) {
	h.publishTo(h.subscribers(topic), topic, data, held)
}

// publishTo is publish to list, topic's subscribers as the caller looked
// them up (hub.subscribers): a client's publish looks them up once, for
// its admission and its deliveries.
func (h *hub) publishTo(list []*conn, topic string, data []byte, held *holdSet) {
	if len(list) == 0 {
		return
	}
	frame := messageFrames{topic: topic, data: data}
	// The shared list's order is fixed until the topic's subscribers
	// change: each publish starts at a random place in it, so no
	// subscriber is always the last one written to.
	start := 0
	if len(list) > 1 {
		start = rand.IntN(len(list))
	}
	// Without a holdSet a large topic's frames are only queued (see above).
	direct := len(list) < queuedFanout
	sent := deliver(list[start:], &frame, held, direct) + deliver(list[:start], &frame, held, direct)
	h.s.m.MessagesSent.Add(float64(sent))
	if held != nil {
		held.published()
	}
}

// deliver gives the message's frame to each of list (the frame of its
// encoding, built once for all): held for held when given, else written
// at once where direct and the socket takes it, else queued. It returns
// how many took it.
func deliver(list []*conn, frame *messageFrames, held *holdSet, direct bool) int {
	sent := 0
	if held != nil {
		for _, c := range list {
			if c.enqueueHeld(frame.frameFor(c), held) {
				sent++
			}
		}
		return sent
	}
	for _, c := range list {
		if c.enqueueFrame(frame.frameFor(c), direct) {
			sent++
		}
	}
	return sent
}

// queuedFanout is the smallest topic whose deliveries Server.Publish and
// the bus only queue.
const queuedFanout = 64

// subscribers returns topic's local subscribers as a list shared with
// other deliveries (not to be modified), copied out of the shard's lock:
// socket writes happen without it held.
func (h *hub) subscribers(topic string) []*conn {
	sh := h.shard(topic)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if subs := sh.topics[topic]; subs != nil {
		return subs.subscribers()
	}
	return nil
}

// topics is the number of topics with local subscribers.
func (h *hub) topics() int {
	n := 0
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.RLock()
		n += len(sh.topics)
		sh.mu.RUnlock()
	}
	return n
}

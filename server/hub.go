package server

import (
	"hash/maphash"
	"sort"
	"sync"

	"github.com/rtserver/rtserver/bus"
)

// hubShards spreads topics over independently locked maps so publishes to
// different topics on different cores do not contend.
const hubShards = 32

// hub maps topics to this instance's subscribers.
type hub struct {
	s      *Server
	seed   maphash.Seed
	shards [hubShards]hubShard
}

type hubShard struct {
	mu     sync.RWMutex
	topics map[string]map[*conn]struct{}
}

func (h *hub) init(s *Server) {
	h.s = s
	h.seed = maphash.MakeSeed()
	for i := range h.shards {
		h.shards[i].topics = map[string]map[*conn]struct{}{}
	}
}

func (h *hub) shard(topic string) *hubShard {
	return &h.shards[maphash.String(h.seed, topic)%hubShards]
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
		subs = map[*conn]struct{}{}
		sh.topics[topic] = subs
	}
	subs[c] = struct{}{}
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
	delete(subs, c)
	last := len(subs) == 0
	if last {
		delete(sh.topics, topic)
	}
	sh.mu.Unlock()
	if last {
		h.s.bus.Unsubscribe(topic)
	}
}

// publish delivers data to every local subscriber of topic. The frame is
// built once and shared: queues hold references to the same bytes. With
// a holdSet (a publisher's read goroutine running input it already has),
// deliveries are held and each subscriber gets everything held for it in
// one write when that goroutine runs out of input (write.go): immediate
// when publishes are sparse, one write per subscriber per burst when not.
// Without one (Server.Publish, the bus), a socket that takes the frame at
// once gets it right away from this goroutine, except for a large topic:
// its frames are queued for the subscribers' writers, which run on every
// core, so this goroutine is not held for a write per subscriber. The
// subscribers are copied out so the socket writes happen without the
// shard's lock held (a subscribe to another topic of the shard does not
// wait for a fan-out).
func (h *hub) publish(topic string, data []byte, held *holdSet) {
	sh := h.shard(topic)
	sh.mu.RLock()
	subs := sh.topics[topic]
	if len(subs) == 0 {
		sh.mu.RUnlock()
		return
	}
	lp := deliveryPool.Get().(*[]*conn)
	list := *lp
	for c := range subs {
		list = append(list, c)
	}
	sh.mu.RUnlock()
	frame := frameMessage(topic, data)
	sent := 0
	if held != nil {
		for _, c := range list {
			if c.enqueueHeld(frame, held) {
				sent++
			}
		}
	} else {
		direct := len(list) < queuedFanout
		for _, c := range list {
			if c.enqueueFrame(frame, direct) {
				sent++
			}
		}
	}
	h.s.m.MessagesSent.Add(float64(sent))
	if cap(list) <= maxPooledDelivery {
		clear(list)
		*lp = list[:0]
		deliveryPool.Put(lp)
	}
	if held != nil {
		held.published()
	}
}

// queuedFanout is the smallest topic whose deliveries Server.Publish and
// the bus only queue.
const queuedFanout = 64

// maxPooledDelivery bounds the subscriber lists kept for reuse: one huge
// topic must not pin its list forever.
const maxPooledDelivery = 1 << 14

// subjects lists topics with local subscribers, most subscribed first.
func (h *hub) subjects() []bus.TopicCount {
	var out []bus.TopicCount
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.RLock()
		for t, subs := range sh.topics {
			out = append(out, bus.TopicCount{Topic: t, Count: len(subs)})
		}
		sh.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Topic < out[j].Topic
	})
	return out
}

// count is the number of local subscribers of topic.
func (h *hub) count(topic string) int {
	sh := h.shard(topic)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return len(sh.topics[topic])
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

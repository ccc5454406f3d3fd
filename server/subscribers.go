package server

import (
	"cmp"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/rtserver/rtserver/bus"
)

// Subscribers counts this instance's subscribers per topic. The server
// that is given it (Deps.Subscribers) adds one as each subscription is
// made and takes it when the subscription ends; anything else that needs
// the counts (the cluster aggregator's subscriber counts, docs/cluster.md)
// is given the same Subscribers when it is built, before the server
// exists. Give one Subscribers to one server. Safe for concurrent use.
type Subscribers struct {
	seed   maphash.Seed
	shards [hubShards]subscriberShard
}

type subscriberShard struct {
	mu     sync.RWMutex
	topics map[string]int
}

// NewSubscribers returns an empty count.
func NewSubscribers() *Subscribers {
	s := &Subscribers{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].topics = map[string]int{}
	}
	return s
}

func (s *Subscribers) shard(topic string) *subscriberShard {
	return &s.shards[maphash.String(s.seed, topic)%hubShards]
}

// add adds n (negative: takes -n) to topic's count. The hub adds after
// its shard's lock is released, so the changes of one topic may land in
// either order: a count may stand below zero for a moment, and readers
// see it as zero.
func (s *Subscribers) add(topic string, n int) {
	sh := s.shard(topic)
	sh.mu.Lock()
	if c := sh.topics[topic] + n; c != 0 {
		sh.topics[topic] = c
	} else {
		delete(sh.topics, topic)
	}
	sh.mu.Unlock()
}

// Count is the number of local subscribers of topic.
func (s *Subscribers) Count(topic string) int {
	sh := s.shard(topic)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return max(sh.topics[topic], 0)
}

// Subjects lists topics with local subscribers, most subscribed first
// (equal counts: by topic).
func (s *Subscribers) Subjects() []bus.TopicCount {
	var out []bus.TopicCount
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		for t, n := range sh.topics {
			if n > 0 {
				out = append(out, bus.TopicCount{Topic: t, Count: n})
			}
		}
		sh.mu.RUnlock()
	}
	slices.SortFunc(out, func(x, y bus.TopicCount) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Topic, y.Topic))
	})
	return out
}

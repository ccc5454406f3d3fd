package server

import (
	"cmp"
	"hash/maphash"
	"slices"

	"github.com/rtserver/rtserver/bus"
)

// Subscribers is this instance's table of topics and their local
// subscribers. The server that is given it (Deps.Subscribers) keeps its
// subscriptions in it; anything built before the server that reads the
// counts (the cluster aggregator's subscriber counts, docs/cluster.md) is
// given the same Subscribers. Give one Subscribers to one server. Safe
// for concurrent use.
type Subscribers struct {
	seed   maphash.Seed
	shards [hubShards]hubShard
}

// NewSubscribers returns an empty table.
func NewSubscribers() *Subscribers {
	t := &Subscribers{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].topics = map[string]*topicSubs{}
	}
	return t
}

func (t *Subscribers) shard(topic string) *hubShard {
	return &t.shards[maphash.String(t.seed, topic)%hubShards]
}

// Count is the number of local subscribers of topic.
func (t *Subscribers) Count(topic string) int {
	sh := t.shard(topic)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if subs := sh.topics[topic]; subs != nil {
		return len(subs.conns)
	}
	return 0
}

// Subjects lists topics with local subscribers, most subscribed first
// (equal counts: by topic).
func (t *Subscribers) Subjects() []bus.TopicCount {
	var out []bus.TopicCount
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		for topic, subs := range sh.topics {
			out = append(out, bus.TopicCount{Topic: topic, Count: len(subs.conns)})
		}
		sh.mu.RUnlock()
	}
	slices.SortFunc(out, func(x, y bus.TopicCount) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Topic, y.Topic))
	})
	return out
}

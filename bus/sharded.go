package bus

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rtserver/rtserver/protocol"
)

// SubscriberCounter gives cluster-wide subscriber counts: the publishrate
// aggregator's SubscribersOf (this instance's live count plus the fresh
// counts its siblings broadcast).
type SubscriberCounter interface {
	SubscribersOf(topic string) int
}

// TopicCount is a topic with its number of local subscriptions.
type TopicCount struct {
	Topic string
	Count int
}

// ShardedOptions configures a sharded bus: the Redis options plus the
// partitioning.
type ShardedOptions struct {
	RedisOptions
	// Partitions is how many channels topics are hashed into. Every
	// instance of a fleet must use the same value (and ChannelPrefix), or
	// they will not hear each other. 0: 16.
	Partitions int
	// Cluster, when set, answers Subscribers with cluster-wide counts.
	// nil: Subscribers returns the local count.
	Cluster SubscriberCounter
}

// Sharded is the sharded Redis bus (redis.bus: sharded), for Redis 7+ and
// Redis Cluster. A topic belongs to partition FNV-1a-32(topic) mod
// Partitions; partition N travels on the shard channel
//
//	"{" + ChannelPrefix + "p" + N + "}"     e.g. {rt:p7}
//
// The whole name is a hash tag, so each partition lives in one Cluster
// slot (and partitions spread over the nodes). Messages go out with
// SPUBLISH, pipelined up to BatchSize per round trip by Writers
// goroutines (a ClusterClient splits each pipeline by node). An instance SSUBSCRIBEs a partition only
// while it has a local subscriber for at least one of its topics, on a
// connection of its own (go-redis serves one slot per sharded PubSub), and
// drops messages for the partition's other topics before delivery (not
// counted: they are simply not for us).
//
// Subscribe and Unsubscribe are reference counted per topic, and topics
// per partition: the first topic of a partition opens its subscription,
// the last one to leave closes that connection, which unsubscribes it on
// the Redis side. Degraded semantics and metrics are those of Redis.
type Sharded struct {
	e        *engine
	channels []string // by partition
	cluster  SubscriberCounter

	// mu guards everything below. Lock order: mu, then a Subscription's mu.
	mu       sync.RWMutex
	topics   map[string]int  // local refs by topic
	partRefs []int           // topics with refs, by partition
	loops    []*Subscription // the live subscription, by partition
	started  bool
	closed   bool
}

var _ Bus = (*Sharded)(nil)

// NewSharded returns a sharded bus. It does no I/O: Start does.
func NewSharded(opts ShardedOptions) (*Sharded, error) {
	e, err := newEngine(opts.RedisOptions, true)
	if err != nil {
		return nil, err
	}
	n := orDefault(opts.Partitions, DefaultPartitions)
	b := &Sharded{
		e:        e,
		channels: make([]string, n),
		cluster:  opts.Cluster,
		topics:   make(map[string]int),
		partRefs: make([]int, n),
		loops:    make([]*Subscription, n),
	}
	for i := range b.channels {
		b.channels[i] = PartitionChannel(opts.ChannelPrefix, i)
	}
	return b, nil
}

// PartitionChannel is the shard channel of partition n.
func PartitionChannel(prefix string, n int) string {
	return "{" + prefix + "p" + strconv.Itoa(n) + "}"
}

// Partition is the partition of topic, out of n.
func Partition(topic string, n int) int {
	// FNV-1a, 32 bits: cheap, no allocation, and spreads short similar
	// names (room-1, room-2, ...) well.
	h := uint32(2166136261)
	for i := 0; i < len(topic); i++ {
		h ^= uint32(topic[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

func (b *Sharded) partition(topic string) int { return Partition(topic, len(b.channels)) }

// Start starts the bus's goroutines and subscribes the partitions of the
// topics Subscribed so far. It waits, at most until ctx ends, for the
// first PING verdict and for those subscriptions' confirmations (or
// failures). The bus runs until Close; ctx bounds only this wait.
func (b *Sharded) Start(ctx context.Context, r Receiver) error {
	var firsts []<-chan struct{}
	err := b.e.start(r, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.started = true
		for p, n := range b.partRefs {
			if n > 0 {
				firsts = append(firsts, b.startLoop(p).First())
			}
		}
	})
	if err != nil {
		return err
	}
	return b.e.waitFirst(ctx, firsts...)
}

// startLoop opens partition p's subscription. Caller holds mu.
func (b *Sharded) startLoop(p int) *Subscription {
	l := b.e.subscribe(b.channels[p], b.local)
	b.loops[p] = l
	return l
}

// local reports whether topic has a local subscriber.
func (b *Sharded) local(topic string) bool {
	b.mu.RLock()
	n := b.topics[topic]
	b.mu.RUnlock()
	return n > 0
}

// Publish hands data on topic's partition to Redis for the other
// instances, like Redis.Publish (with its waits and errors).
func (b *Sharded) Publish(topic string, data []byte) error {
	return b.e.publish(b.channels[b.partition(topic)], topic, data)
}

// PublishControl sends a control message on key's partition, for the
// instances that declared interest in key with Subscribe(key), like
// Redis.PublishControl.
func (b *Sharded) PublishControl(key string, data []byte) error {
	return b.e.publishControl(b.channels[b.partition(key)], key, data)
}

// PublishNotice sends a notice on key's partition, for the instances
// that declared interest in key, like Redis.PublishNotice.
func (b *Sharded) PublishNotice(key string, data []byte) error {
	return b.e.publishNotice(b.channels[b.partition(key)], key, data)
}

// Subscribe adds a local reference to topic. When that makes its
// partition wanted, the partition is SSUBSCRIBEd, and Subscribe waits (at
// most PingTimeout, and not at all while degraded) for Redis to confirm,
// so that what a sibling publishes after Subscribe returns is delivered.
// Otherwise it does no I/O.
func (b *Sharded) Subscribe(topic string) {
	b.mu.Lock()
	b.topics[topic]++
	var l *Subscription
	if b.topics[topic] == 1 {
		p := b.partition(topic)
		b.partRefs[p]++
		l = b.loops[p]
		if l == nil && b.started && !b.closed {
			l = b.startLoop(p)
		}
	}
	b.mu.Unlock()
	if l == nil || l.Confirmed() || b.e.degraded() {
		return
	}
	t := time.NewTimer(b.e.pingWait)
	defer t.Stop()
	select {
	case <-l.First():
	case <-t.C:
	}
}

// Unsubscribe removes a local reference to topic (one per Subscribe; extra
// calls are ignored). When the partition has no topic left, its
// subscription is closed. It does no waiting.
func (b *Sharded) Unsubscribe(topic string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.topics[topic]
	switch {
	case !ok:
		return
	case n > 1:
		b.topics[topic] = n - 1
		return
	}
	delete(b.topics, topic)
	p := b.partition(topic)
	b.partRefs[p]--
	if b.partRefs[p] == 0 && b.loops[p] != nil {
		b.loops[p].Stop()
		b.loops[p] = nil
	}
}

// LocalSubjects returns every topic with local subscribers and its count
// (Subscribe references minus Unsubscribe), largest count first: what the
// publishrate aggregator broadcasts as this instance's subs.
func (b *Sharded) LocalSubjects() []TopicCount {
	b.mu.RLock()
	out := make([]TopicCount, 0, len(b.topics))
	for t, n := range b.topics {
		if protocol.Reserved(t) {
			continue // a control key (UserKey), not a topic
		}
		out = append(out, TopicCount{Topic: t, Count: n})
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(x, y TopicCount) int {
		if c := cmp.Compare(y.Count, x.Count); c != 0 {
			return c
		}
		return cmp.Compare(x.Topic, y.Topic)
	})
	return out
}

// Subscribers is the cluster-wide subscriber count of topic when
// ShardedOptions.Cluster is set, else the local count.
func (b *Sharded) Subscribers(topic string) int {
	if b.cluster != nil {
		return b.cluster.SubscribersOf(topic)
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.topics[topic]
}

// Degraded reports whether cross-instance delivery is down now.
func (b *Sharded) Degraded() bool { return b.e.degraded() }

// InstanceID is the id this bus stamps on its envelopes.
func (b *Sharded) InstanceID() string { return b.e.id }

// Close closes every subscription, sends what is still queued (while
// Redis answers), stops every goroutine and waits for them.
func (b *Sharded) Close() error {
	return b.e.close(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.closed = true
		for p, l := range b.loops {
			if l != nil {
				l.Stop()
				b.loops[p] = nil
			}
		}
	})
}

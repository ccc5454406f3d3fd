package bus

import "context"

// Redis is the single-channel Redis bus (redis.bus: single): every topic
// travels on one pub/sub channel, ChannelPrefix + "bus" (e.g. "rt:bus"),
// with PUBLISH and SUBSCRIBE. Every instance receives every message and
// hands the Receiver all but its own. Simple and fine while the fleet's
// total publish rate fits one Redis connection per instance; past that,
// use Sharded.
//
// Publish queues and waits for Redis to take the message; Writers
// goroutines each pipeline up to BatchSize PUBLISH commands per round
// trip. Redis loss (a failed PING, publish or
// subscription) makes the bus degraded until Redis answers again and the
// subscription is confirmed again; go-redis redials and resubscribes.
type Redis struct {
	e       *engine
	channel string
	sub     *Subscription
}

var _ Bus = (*Redis)(nil)

// NewRedis returns a single-channel Redis bus. It does no I/O: Start does.
func NewRedis(opts RedisOptions) (*Redis, error) {
	e, err := newEngine(opts, false)
	if err != nil {
		return nil, err
	}
	return &Redis{e: e, channel: opts.ChannelPrefix + "bus"}, nil
}

// Start subscribes and starts the bus's goroutines. It waits, at most until
// ctx ends, for the first PING's answer and for Redis to confirm the
// subscription (or for the first sign that Redis is unreachable: then the
// bus is degraded, r has heard BusState(true), and it retries in the
// background). The bus runs until Close; ctx bounds only this wait.
func (b *Redis) Start(ctx context.Context, r Receiver) error {
	err := b.e.start(r, func() {
		b.sub = b.e.subscribe(b.channel, nil)
	})
	if err != nil {
		return err
	}
	return b.e.waitFirst(ctx, b.sub.First())
}

// Publish hands data on topic to Redis for the other instances and returns
// nil once Redis has taken it. It waits at most PublishWait for room in
// the queue, then for its round trip. It returns ErrDegraded while Redis
// is unreachable (or when the write failed) and ErrQueueFull when the
// queue stayed full (both counted), ErrBadTopic or ErrTooLarge for
// messages no receiver would accept, ErrClosed after Close.
func (b *Redis) Publish(topic string, data []byte) error {
	return b.e.publish(b.channel, topic, data)
}

// PublishControl sends a control message to every other instance, on the
// one channel, like Publish (with its errors); when signed it first takes
// the message's number from the fleet counter (control.go).
func (b *Redis) PublishControl(key string, data []byte) error {
	return b.e.publishControl(b.channel, key, data)
}

// PublishNotice sends a notice to every other instance, on the one
// channel, like Publish (with its errors): see notice.go.
func (b *Redis) PublishNotice(key string, data []byte) error {
	return b.e.publishNotice(b.channel, key, data)
}

// Subscribe does nothing: every topic is on the one channel.
func (b *Redis) Subscribe(string) {}

// Unsubscribe does nothing: every topic is on the one channel.
func (b *Redis) Unsubscribe(string) {}

// Degraded reports whether cross-instance delivery is down now (what
// /readyz reads).
func (b *Redis) Degraded() bool { return b.e.degraded() }

// InstanceID is the id this bus stamps on its envelopes.
func (b *Redis) InstanceID() string { return b.e.id }

// Channel is the Redis channel the bus uses.
func (b *Redis) Channel() string { return b.channel }

// Close unsubscribes, sends what is still queued (while Redis answers),
// stops every goroutine and waits for them. The Receiver hears nothing
// after Close returns.
func (b *Redis) Close() error {
	return b.e.close(func() {
		if b.sub != nil {
			b.sub.Stop()
		}
	})
}

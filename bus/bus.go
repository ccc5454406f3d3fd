package bus

import (
	"context"
	"errors"
)

// Receiver takes what the bus brings in from other instances.
type Receiver interface {
	// Deliver hands over a message published on another instance. The
	// topic is valid and not reserved; data is valid JSON. Deliver must not
	// block for long: it runs on the bus's receive loop.
	Deliver(topic string, data []byte)
	// DeliverControl hands over a control message sent by another
	// instance's PublishControl (see control.go): key is a valid control
	// key, data is valid JSON. The messages of one key arrive in order.
	// Like Deliver, it must not block for long.
	DeliverControl(key string, data []byte)
	// DeliverNotice hands over a notice sent by another instance's
	// PublishNotice (see notice.go): key is a valid control key, data is
	// valid JSON. Unlike a control message, a notice is not single use:
	// the same one may arrive twice within the signed envelope's replay
	// window, so it must carry nothing that acts on a user. Like Deliver,
	// it must not block for long.
	DeliverNotice(key string, data []byte)
	// Gap reports that messages on topic from other instances were lost
	// here (this instance fell behind what Redis pushed): it comes after
	// the topic's messages that went before the loss and before any that
	// follow. Like Deliver, it must not block for long.
	Gap(topic string)
	// BusState reports a change of cross-instance delivery: degraded true
	// when it went down, false when it recovered.
	BusState(degraded bool)
}

// A HoldingReceiver lets each receive worker of a Redis bus hold its
// deliveries while it has more messages in hand and write them once it has
// none: under load one socket write per subscriber per burst instead of one
// per message, and no added latency when messages are sparse. Each worker
// gets its own Holder and uses it from its goroutine only.
type HoldingReceiver interface {
	Receiver
	Holder() Holder
}

// A Holder is one receive worker's way in: Deliver as Receiver.Deliver,
// with what it delivers possibly held until Flush, which the worker calls
// whenever its queue is empty.
type Holder interface {
	Deliver(topic string, data []byte)
	Flush()
}

// Bus delivers messages across instances.
type Bus interface {
	// Start connects and begins handing received messages to r. It returns
	// once the bus is running, or degraded and retrying in the background,
	// or when ctx ends, whichever comes first: ctx bounds only the wait,
	// never the bus. A bus that has not reached Redis yet is degraded.
	Start(ctx context.Context, r Receiver) error
	// Publish hands data to the other instances. A nil error means the
	// message left this instance (for Redis: Redis took it); otherwise it
	// did not, and the error says why: ErrQueueFull when the bus stayed
	// full for its bounded wait, ErrDegraded while cross-instance delivery
	// is down (both counted). The caller answers its own publisher
	// accordingly: a message Publish refused must not be acknowledged. It
	// must not keep data after it returns: the caller's data may alias a
	// read buffer that is reused.
	Publish(topic string, data []byte) error
	// PublishControl sends a control message to the other instances that
	// declared interest in key (Subscribe(key); buses with one channel
	// reach every instance). key is reserved, e.g. UserKey(user). Like
	// Publish, it waits, bounded, and returns the same errors.
	PublishControl(key string, data []byte) error
	// PublishNotice sends information keyed like a control message (a
	// reserved key, e.g. a presence topic's) to the other instances that
	// declared interest in key, unnumbered and best-effort, on a queue of
	// its own, so that no amount of it delays a control message or takes
	// a data message's room (see notice.go). It does not wait for Redis:
	// nil means queued; a full queue drops its oldest notice (counted).
	// While cross-instance delivery is down it returns ErrDegraded.
	PublishNotice(key string, data []byte) error
	// Subscribe and Unsubscribe declare this instance's interest in a topic:
	// the hub calls Subscribe when a topic gets its first local subscriber
	// and Unsubscribe when it loses its last. Buses that carry every topic
	// on one channel may ignore them.
	Subscribe(topic string)
	Unsubscribe(topic string)
	// Degraded reports whether cross-instance delivery is down now.
	Degraded() bool
	// Close stops the bus and waits for its goroutines.
	Close() error
}

// Errors returned by Publish when a message was dropped.
var (
	ErrDegraded  = errors.New("bus: cross-instance delivery is down")
	ErrQueueFull = errors.New("bus: publish queue full: the bus cannot take more now")
	ErrClosed    = errors.New("bus: closed")
)

// Drop reasons (the reason label of bus_messages_dropped_total).
const (
	DropDegraded  = "degraded"      // published while Redis was unreachable
	DropQueueFull = "queue_full"    // the publish queue stayed full for PublishWait: the publisher was refused
	DropOversize  = "oversize"      // a received envelope over the size cap
	DropMalformed = "malformed"     // a received envelope that does not parse
	DropBadTopic  = "bad_topic"     // a received envelope with an invalid or reserved topic
	DropSlowRecv  = "slow_receiver" // received, then lost because the receive workers fell behind; the topic's subscribers hear of the gap
	// DropNoticeOverflow: a notice (a presence diff, best-effort) dropped,
	// the oldest first, because the notice send queue was full.
	DropNoticeOverflow = "notice_overflow"
)

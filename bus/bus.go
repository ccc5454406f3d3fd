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
	// key, data is valid JSON. Control and data messages from one channel
	// arrive in order. Like Deliver, it must not block for long.
	DeliverControl(key string, data []byte)
	// BusState reports a change of cross-instance delivery: degraded true
	// when it went down, false when it recovered.
	BusState(degraded bool)
}

// Bus delivers messages across instances.
type Bus interface {
	// Start connects and begins handing received messages to r. It returns
	// once the bus is running (or degraded and retrying in the background).
	Start(ctx context.Context, r Receiver) error
	// Publish queues data for the other instances. It does not wait for the
	// network; it returns ErrDegraded or ErrQueueFull when the message was
	// dropped (and counted). It must not keep data after it returns: the
	// caller's data may alias a read buffer that is reused.
	Publish(topic string, data []byte) error
	// PublishControl queues a control message for the other instances that
	// declared interest in key (Subscribe(key); buses with one channel
	// reach every instance). key is reserved, e.g. UserKey(user). Like
	// Publish, it never blocks and returns the same errors.
	PublishControl(key string, data []byte) error
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
	ErrQueueFull = errors.New("bus: publish queue full")
	ErrClosed    = errors.New("bus: closed")
)

// Drop reasons (the reason label of bus_messages_dropped_total).
const (
	DropDegraded  = "degraded"   // published while Redis was unreachable
	DropQueueFull = "queue_full" // the publish queue was full
	DropOversize  = "oversize"   // a received envelope over the size cap
	DropMalformed = "malformed"  // a received envelope that does not parse
	DropBadTopic  = "bad_topic"  // a received envelope with an invalid or reserved topic
	DropSlowRecv  = "slow_receiver"
)

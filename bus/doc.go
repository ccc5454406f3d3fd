// Package bus carries published messages between rtserver instances.
//
// One interface, Bus, with three implementations side by side: Memory (a
// single instance, or several in one process sharing a MemoryBroker),
// Redis single-channel (every topic on one pub/sub channel) and Redis
// sharded (topics hashed into partitions, SSUBSCRIBE per partition on
// demand, for Redis 7 and Redis Cluster).
//
// The bus never delivers to local subscribers: the server's hub does that
// directly, and hands the bus only what other instances must see. Messages
// from other instances arrive at the Receiver given to Start, validated
// (size cap, topic grammar, no reserved topics) and with this instance's own
// echoes removed.
//
// Besides messages, the bus carries control messages (PublishControl,
// Receiver.DeliverControl): the server API's disconnect and unsubscribe,
// routed by a reserved key such as UserKey(user), as a second envelope
// kind on the same channels and connections (see control.go). They never
// reach topic subscribers.
//
// Invariants: nothing is lost silently (every drop is counted in
// bus_messages_dropped_total{reason}); Publish never blocks on the network
// (it queues, bounded, and a full queue drops and counts); the Redis read
// loop never waits for the Receiver (received messages go through a
// bounded queue to one delivery goroutine per bus, and a full queue drops
// and counts slow_receiver), and the Receiver sees messages in the order
// Redis delivered them on each channel. Subscribe and Unsubscribe are
// counted per topic, so callers may race them; the sharded bus's Subscribe
// may wait (bounded) for Redis to confirm a new partition.
package bus

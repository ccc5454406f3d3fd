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
// reach topic subscribers. Notices (PublishNotice, Receiver.DeliverNotice)
// are keyed the same way but unnumbered and best-effort, for information
// that is harmless twice or lost (presence diffs): they have a send queue
// of their own that drops its oldest when full, and share the data
// messages' receive workers. Control messages have a send queue, a
// receive queue and a worker of their own, so no other traffic can
// starve them (notice.go).
//
// Subscription is the one Redis pub/sub primitive of rtserver: subscribe
// and wait for Redis's confirmation, receive, notice a dead connection,
// redial with backoff. Both Redis buses and the cluster aggregator
// (publishrate) use it.
//
// Invariants: acknowledged means delivered. Publish returns nil only once
// Redis has taken the message (a message Publish refused was delivered
// nowhere, and the caller must not acknowledge it); it waits, bounded
// (RedisOptions.PublishWait), for room in a bounded queue, and refuses
// with ErrQueueFull rather than drop. Nothing is lost silently: every
// drop is counted in bus_messages_dropped_total{reason}. The Redis read
// loop never waits for the Receiver: received messages go to receive
// workers by topic hash (checked and delivered in parallel, each topic in
// the order Redis delivered it), and a worker that falls behind drops,
// counts slow_receiver and tells the Receiver of the topic's gap, in
// order. Subscribe and Unsubscribe are counted per topic, so callers may
// race them; the sharded bus's Subscribe may wait (bounded) for Redis to
// confirm a new partition. The bus never sets process-wide state.
package bus

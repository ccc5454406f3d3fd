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
// Invariants: nothing is lost silently (every drop is counted in
// bus_messages_dropped_total{reason}); Publish never blocks on the network
// (it queues, bounded, and a full queue drops and counts); the Receiver is
// called from one goroutine per subscription, in the order Redis delivers.
package bus

// Package presence keeps who is subscribed to a topic, fleet-wide: one
// entry per (topic, connection), holding the connection's client id
// (unique across the fleet, see ClientID) and its user.
//
// Three parts:
//
//   - a Store holds every instance's entries: MemoryStore in the process
//     (the memory bus: one instance, or several in one process), RedisStore
//     in Redis (both Redis buses, Redis Cluster included). The Redis store
//     keeps per-topic entries with an expiry index and counts, so Stats is
//     O(1) in the topic's size, and removes expired entries lazily in the
//     same scripts that read or write a topic: the entries of an instance
//     that died vanish within the ttl without any live instance noticing
//     the death;
//   - a Tracker is one instance's side: it writes its connections' joins
//     and leaves to the store (batched: everything queued while a write is
//     in flight goes in the next one, one pipelined round trip), refreshes
//     its entries every ttl/3 in bounded batches (at most MaxBatch entries
//     per round trip, never one per connection), and coalesces join/leave
//     diffs per topic;
//   - a coalescer (diff.go) merges joins and leaves per topic and lets a
//     topic's diff out at most once per diffInterval, at most MaxDiff
//     entries at a time: a join and a leave of the same client in one
//     window cancel out, so a mass reconnect costs each subscriber one
//     notification per interval, not one per joiner.
//
// Presence must never cost a Redis round trip per connection per refresh
// period, and never deliver to connections itself: the server does, from
// the encoded notification a Tracker hands it.
//
// Invariants: the Tracker's writer goroutine is the only one that writes
// its entries to the store, so a refresh never resurrects an entry whose
// leave was queued before it; store writes are idempotent (adding an entry
// twice, or removing an absent one, changes no count). Lock order:
// Tracker.mu only; no store call and no callback runs under it.
package presence

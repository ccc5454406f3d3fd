// Package ratelimit decides whether one event may happen now: a GCRA
// (generic cell rate algorithm) limiter for a single key (GCRA), the same
// limiter per key in a bounded, sharded store (Keyed, which also charges
// weighted events: AllowN, a token bucket of cost units), and a true
// sliding-window count per key in the same kind of store (Window).
//
// # Semantics
//
// A limiter of limit events per period allows a burst of limit events at
// once and then one event every period/limit (the emission interval T,
// rounded up to a whole nanosecond so the sustained rate never exceeds
// limit/period). A denied event does not count: a client that keeps
// retrying while denied is let through as soon as its earlier events have
// drained, never later.
//
// GCRA is a token bucket, not a sliding log: the exact guarantee is that in
// any closed interval of length L a key gets at most limit + floor(L/T)
// allowed events. Over one period that is up to 2·limit−1 (a full burst at
// the start, then the refill), not limit. A sliding log would give "at most
// limit in any window of one period" but costs limit timestamps per key:
// that is Window.
//
// Window keeps, per key, a ring of the timestamps of its allowed events in
// the last period (at most limit of them: a ring starts at 4 slots and
// doubles up to limit), and allows an event when fewer than limit are in
// the window (now-per, now]. So no window of length per ever holds more
// than limit allowed events, and an event is denied only when limit really
// were allowed in the last period; RetryAfter is when the oldest leaves.
// Memory per key: limit × 8 bytes at most.
//
// # The keyed store
//
// Keyed and Window share one store (store.go). Keys are hashed (hash/maphash with a per-store random seed, so a client
// cannot aim its keys at one shard) into up to 64 shards, each a mutex over
// a map and an intrusive doubly linked LRU list held in a slice. The store
// never holds more than maxKeys keys. When a shard is full, inserting a new
// key evicts that shard's least recently used key.
//
// It never fails open. Every Allow, allowed or denied, makes its key the
// most recently used, so a key that keeps hammering stays at the front and
// is only evicted if a whole shard's worth of other new keys (about
// maxKeys/shards) arrive in its shard between two of its own events. The
// accepted cost of bounding memory: a key that was quiet long enough to be
// evicted comes back with a full burst. Evictions() counts evictions so an
// operator can see when maxKeys is too small for the traffic.
//
// # Invariants
//
//   - Allow on a key already in the store allocates nothing; inserting a
//     new key copies it once (strings.Clone) so the store never pins a
//     larger buffer the key was sliced from.
//   - Result.RetryAfter > 0 exactly when Result.Allowed is false, and an
//     event at now+RetryAfter is allowed if nothing else happened to the key
//     (except an AllowN heavier than limit, which is never allowed).
//   - Window.Allow on a key whose ring has grown allocates nothing; a full
//     store reuses an evicted key's ring.
//   - Lock order: one shard mutex at a time; nothing else is locked.
//   - Time is the caller's: Allow takes now, so tests inject it. Times are
//     measured from the limiter's creation (time.Time.Sub, monotonic when
//     both sides carry a monotonic reading) and must stay within ±292 years
//     of it.
//
// This package must never do I/O, start goroutines, or log.
package ratelimit

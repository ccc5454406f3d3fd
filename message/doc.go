// Package message is rtserver's message tier: it decides, per RPC call,
// whether the call may run now.
//
// It owns classes and their rules, the Decision type and its combine
// algebra, per-class rate limits and concurrency caps with exactly-once
// lease release, and the Router that maps method names to classes. The
// server resolves a *Class once (Router.ClassOf) and calls Class.Check on
// every call.
//
// Must never: do I/O, block, or allocate on the Check path. The pressure
// snapshot is an atomic pointer load, the cluster view is a map read behind
// an atomic pointer (SetRates), metric children are resolved at Register,
// and the concurrency lease lives in the caller's Call. The only lock taken
// is the rate limiter's per-shard mutex, held for a map lookup. (One
// exception, amortised: a Rate{By: "conn"} part formats ConnID as text the
// first time a Call is checked with that ConnID.)
//
// Evaluation order (documented because it decides what a denial costs):
// pressure reasons, cluster top publisher, predicate, rate, concurrency; the
// first part that denies decides. Stateless parts first so that a call shed
// by pressure spends no rate token and takes no lease; concurrency last so
// that a lease is only taken by a call that is then certainly admitted.
//
// Invariants:
//   - every concurrency lease is released exactly once: Call.Release swaps
//     the lease out atomically, so any number of Releases from any number
//     of goroutines give it back once; in-flight never exceeds Max (slots
//     are taken with a compare-and-swap, never over-added and undone);
//   - Combine is associative, commutative and idempotent with identity
//     AllowFull over well-formed decisions, so parts reduce in any order
//     and the binding reason is deterministic;
//   - every denial's RetryAfter is positive (at least 1ms), jittered unless
//     the rate limiter knows the exact wait;
//   - bounded by configuration: the Router's cache of method names seen
//     holds at most 1024 entries (routerCacheMax), and each Rate part's key store
//     is bounded by Options.RateMaxKeys (the limiter evicts, never fails
//     open).
package message

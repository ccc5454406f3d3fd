// Package message is rtserver's message tier: it decides, per RPC call,
// whether the call may run now.
//
// It owns classes and their rules, the Decision type and its combine
// algebra, per-class rate limits (GCRA or a sliding window), cost budgets,
// fixed and adaptive concurrency caps with exactly-once lease release, and
// the Router that maps method names to classes. The server resolves a
// *Class once (Router.ClassOf) and calls Class.Check on every call.
//
// Must never: do I/O, block, or allocate on the Check path, with one
// explicit exception: a Rate or Cost part with Scope "cluster" makes one
// round trip to Deps.Shared (message/clusterrate: Redis), because a
// budget shared by a fleet has to live somewhere shared; classes without
// such a part never touch it. Otherwise: the pressure snapshot is an atomic
// pointer load, the cluster view is a map read (Deps.Rates), metric children are resolved at Register, and the
// concurrency lease lives in the caller's Call. The locks taken are the
// rate and cost limiters' per-shard mutexes, held for a map lookup, and an
// adaptive limit's mutex, taken once per Release to add a latency sample.
// (One exception, amortised: a part keyed by "conn" formats ConnID as text
// the first time a Call is checked with that ConnID.)
//
// Evaluation order (documented because it decides what a denial costs):
// pressure reasons, cluster top publisher, predicate, bid price (spends
// nothing), local rate, local cost, cluster-scoped rate and cost (one round
// trip, charged together or not at all), concurrency (fixed and adaptive: one lease); the first part
// that denies decides. Stateless parts first so that a call shed by
// pressure spends no token and takes no lease; concurrency last so that a
// lease is only taken by a call that is then certainly admitted.
//
// Invariants:
//   - an adaptive limit never leaves [Min, Max] (the limit Check enforces is
//     an atomic load; the controller updates it under its mutex);
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
//     holds at most 1024 entries (routerCacheMax), and each local Rate and
//     Cost part's key store is bounded by Deps.rateMaxKeys (the limiter
//     evicts, never fails open); a sliding window holds at most Limit
//     timestamps per key.
package message

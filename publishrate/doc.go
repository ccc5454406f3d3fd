// Package publishrate is the cluster-wide publish-rate aggregator: every
// instance sends its own top publishers over Redis pub/sub to one merging
// instance elected through Redis, whose merged view every instance takes
// (merged mode, the default); or, in broadcast mode (Options.Mode), every
// instance broadcasts them and merges its siblings' broadcasts into a
// cluster view, with no leader.
//
// # What it owns
//
// An Aggregator broadcasts, every PublishInterval, the envelope of
// docs/cluster.md on Options.Channel: this instance's top-N topics
// (messages and bytes per second), top-N users (messages per second) and,
// given Deps.Subscribers, top-N local subscriber counts.
// With a LiveLocal (the pressure monitor) the rates are those of the last
// second at sending, and this instance's own share of RateOf and
// RateOfUser is its live rate at the call; with another Local they are
// averaged over the whole interval (every pressure sample weighted by the
// time it covers, see window) and its share is its latest sample.
//
// It subscribes to the same channel and keeps, per sibling instance, its
// latest accepted envelope stamped with this instance's clock at arrival.
// A sibling is fresh while its latest envelope arrived less than StaleAfter
// ago by the receiver's clock; the sender's ts is used only to ignore
// envelopes not newer than the one held (while that one is fresh), so
// skewed clocks between instances do not matter. On a plain Redis client
// the subscriptions dial through a client of their own whose connections
// are read on a timer (internal/pollconn), a fiftieth of the interval
// apart while envelopes come, so "arrival" is when an envelope was read:
// up to a tenth of the interval after it reached the socket. One wake-up
// reads and merges every envelope that came meanwhile.
//
// The broadcast view sums, per topic and per user, this instance's latest
// pressure sample (its live rate, for RateOf and RateOfUser) and every
// fresh sibling's lists, and counts contributing
// instances per topic. It is kept incrementally (see merge.go): an
// accepted envelope subtracts its sender's previous lists from running
// sums and adds its own, a local sample does the same for this instance's
// part, and a sibling that goes stale leaves the same way, so each costs
// the size of its lists whatever the number of siblings held. Stale
// siblings are forgotten oldest first on every merge, so a silent sibling
// leaves the view within StaleAfter plus one PublishInterval at the
// latest. Every broadcast tick also re-sums everything held, so rounding
// from subtracting floats never outlives an interval. Nothing is rebuilt
// on a reader's path: RateOf, RateOfUser and SubscribersOf are one hash,
// a short probe of a table the merge only ever extends, and one atomic
// load, with no lock and no allocation, and implement message.RateSource
// and the sharded bus's SubscribersOf. A reader racing a merge sees each
// topic's sum either before or after the envelope, never half of it.
//
// RateOf answers for every topic present in this instance's sample or in
// any fresh sibling slice, not only the merged top-N: a topic that is hot
// on one instance but not in the cluster's top-N still has a rate.
// TopPublishers and the cluster_topic_publish_rate/bytes gauges carry the
// merged top-N only; topics leaving it vanish from the exposition. The
// top-N is read off the merge on every local sample, every broadcast tick
// and every TopPublishers call, not per envelope, so the gauges trail the
// sums by at most one pressure sample interval.
//
// Before Start and after Close the view is this instance's own
// rates alone (the OnSample listener registered by New keeps it current).
//
// # Merged mode
//
// With Options.Mode "merged" (merged.go, docs/cluster.md "Merged mode")
// slices go to Channel+":in" instead, and only the merging instance reads
// them: the one holding the lease key in Redis (SET NX with a TTL of 1.5
// PublishIntervals, renewed every half interval), under a fencing epoch.
// It merges them as above and publishes the merged view (v 2, signed
// under its own domain) on Channel+":view" every half interval; every
// instance holds the latest view, from the highest epoch while fresh, as
// its cluster view, with its own rates as a floor under RateOf (and, with
// a LiveLocal, what its live rate grew since its last slice added), and
// falls back to its own rates when it holds no fresh view.
//
// # Signature (Options.HMACSecret)
//
// The sender marshals the envelope without sig, giving the bytes B, which
// are a JSON object `{...}`. sig is the lowercase hex of the fleet
// signer's MAC (internal/envsign) of B under the rate-slice domain:
// HMAC-SHA256(secret, "rtserver rate slice v1" + 0x00 + B), so no other
// kind of signed envelope of the fleet passes for a slice. The bytes sent are B with its final `}` replaced
// by `,"sig":"<64 hex digits>"}`: sig is always the last member, and
// nothing (no whitespace) follows its closing `"}`.
//
// A receiver with a secret requires the payload to end in exactly
// `,"sig":"` + 64 hex digits + `"}`; it cuts that suffix, appends `}` and
// so recovers B byte for byte, checks the HMAC over B in constant time, and
// parses B (not the payload). What is parsed is therefore exactly what was
// signed. A payload without that suffix is unsigned; one whose MAC differs
// is forged; both are dropped and counted in
// cluster_publish_rate_parse_errors_total. Without a secret, receivers
// parse the payload as is and ignore any sig.
//
// Replays. An envelope is refused when its ts is further than
// StaleAfter+MaxClockSkew from this instance's clock (and, when signed,
// further than the fleet's replay window, 30s), or not newer than the last
// one accepted from its sender. So a captured envelope replayed to an
// instance that has not accepted one from that sender (a fresh one) is
// accepted at most once, only while it is inside that window, and it is
// what the sender really reported then: it counts until the sender's next
// envelope replaces it, or, if the sender is gone, until it goes stale,
// StaleAfter after it arrived. A replay can never invent rates nor bring
// back older ones (docs/cluster.md).
//
// # What it must never do
//
// Read Redis on a caller's path: lookups are memory only. Block the pressure
// monitor: the OnSample listener only merges in memory. Trust the wire:
// every envelope is bounded (DefaultMaxEnvelopeBytes, at most max(2*TopN, 64)
// entries per list, instance ids <= 128 bytes of the topic alphabet, user
// ids <= 1024 bytes of UTF-8, topics per protocol.ValidTopic without
// duplicates, rates finite in [0, 1e15], counts in [0, 2^40]) and anything
// else is dropped whole and counted. This instance's own envelopes, echoed
// by Redis, are ignored and not counted as received.
//
// # Bounds
//
// At most MaxInstances siblings are tracked; envelopes from further new
// instances are ignored (Stats.InstancesIgnored, logged) until a tracked one
// goes stale. The averaging window tracks at most max(8*TopN, 256) topics
// and as many users per interval. A sent envelope over DefaultMaxEnvelopeBytes is
// shortened, lowest rates first, until it fits. Topic and user keys are
// interned for the merge (see merge.go) and released with the last slice
// that carries them; a lookup table holds at most twice the keys the held
// slices carry, plus released keys up to three quarters of its slots.
//
// # Failure
//
// Publishing goes through Options.Breaker (default: open after 3
// consecutive failures, for 2*PublishInterval, then one probe); while it is
// open, broadcasts are skipped, counted (Stats.BreakerSkips) and logged. The
// subscriber reconnects and resubscribes on its own after a Redis outage;
// siblings' slices simply go stale meanwhile. Log lines about trouble are
// limited to one per kind per 10 seconds.
//
// # Concurrency
//
// Lock order: the lifecycle lock (Start/Close), then the merge
// lock. Goroutines: one bus.Subscription (the receive loop shared with the
// buses), the activation that waits for Redis to confirm it, and once it
// has, one ticker, all owned by Start and stopped and awaited by Close;
// in merged mode also the lead loop,
// and while this instance merges, the subscription to the slices, which
// the lead loop owns and closes (never under the merge lock: its handler
// takes it).
package publishrate

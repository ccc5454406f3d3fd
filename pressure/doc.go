// Package pressure samples this instance's load into an immutable Snapshot
// that the message tier reads on every call with one atomic load.
//
// # What it owns
//
// A Monitor samples every Config.SampleInterval (Start, until Close) or on demand
// (Sample) and publishes one *Snapshot with a single atomic pointer store:
//
//   - MEMORY: Go heap in use divided by the memory limit. "Heap in use" is
//     runtime/metrics /memory/classes/heap/objects:bytes (live objects and
//     dead ones not yet swept; MemStats.HeapAlloc). Not committed heap: free
//     and unused spans the runtime holds do not count. The limit is
//     GOMEMLIMIT when set, else Config.MemoryLimitBytes, else the tightest
//     cgroup v2 memory.max on the path from this process's cgroup to the
//     root; with none of these the ratio is 0 and MEMORY never fires. RSS
//     (from /proc/self/statm, 0 off Linux) is reported for dashboards only.
//   - PUBLISH_RATE: messages actually published per second over the
//     interval, counted by RecordPublished (local publishes and messages
//     from the bus).
//   - SUBSCRIBERS: subscriptions / connections, as the server counts them
//     into AddConnections and AddSubscriptions while it runs (0 with no
//     connections).
//   - Top publishers by topic and by user: RecordAttempt counts publish
//     attempts that reached the message tier, admitted or not. Each sample
//     turns the interval's counts into messages/s and bytes/s, keeps the top
//     Config.TopN by messages/s (descending, ties by name ascending) and
//     resets the counts.
//   - Live rates (live.go): each tracked name also counts its attempts in
//     a ring of 100 ms buckets, so Monitor.RateOf and RateOfUser answer
//     the attempts of the last second at the moment of the call (the
//     oldest bucket counted in proportion), and LiveTop ranks names by
//     them. They are what clusterTopPublisher rules read: a publisher is
//     seen over a threshold as soon as its last second is, not at the
//     next sample.
//   - SchedLatencyP99: the p99 of /sched/latencies:seconds over the interval
//     (the delta of the cumulative histogram since the previous sample),
//     reported as the upper bound of the bucket that holds it.
//   - GCCPUFraction: /cpu/classes/gc/total:cpu-seconds over
//     /cpu/classes/total:cpu-seconds, both as deltas over the interval. The
//     total is GOMAXPROCS × wall time, so this is the share of available CPU,
//     like MemStats.GCCPUFraction, and the runtime refreshes it at GC time.
//
// The reason is the highest-priority active one: MEMORY > PUBLISH_RATE >
// SUBSCRIBERS > NONE. A reason activates when its value is >= its
// threshold; a threshold of 0 switches it off. With a hysteresis h (none
// in a node: no key sets it), an active reason clears only when its value
// drops below threshold*(1-h), so a value hovering at the threshold does
// not flap. Each reason keeps its own state: when MEMORY clears, an
// active PUBLISH_RATE shows through.
// Topic hotness (OnTopicHot) follows the same rule against
// TopicPublishRatePerSec or TopicPublishBytesPerSec (hot when either is
// reached; cold when both are below).
//
// # Bounds
//
// Topic and user names come from clients. At most DefaultMaxTrackedKeys
// (default 10,000) distinct topics, and separately users, are counted per
// interval; an attempt on a further name is counted only in
// Snapshot.UntrackedTopicAttempts / UntrackedUserAttempts. At each sample
// the counts are read and zeroed, then every name is dropped except this
// sample's top-N, the hot topics, and names recorded in between (whose
// counts belong to the next interval) and names with attempts in the last
// second: a heavy publisher keeps its counter and never loses its slot to
// a flood of new names. Empty users are
// counted by topic only. The hot-topic set is bounded by the tracked keys.
//
// # Must never
//
// Block or allocate on the recording path for a name already tracked:
// RecordAttempt is a lock-free sync.Map lookup plus four atomic adds (two
// when its 100 ms bucket is new: a compare-and-swap each) on that name's
// own counter of three cache lines, per table (topic, user), and no clock
// read while the monitor runs: the sampling goroutine keeps the current
// bucket in an atomic every 100 ms;
// RecordPublished is one atomic add. Only a new name takes the slow path
// (bound check, allocation, LoadOrStore). The sampler swaps every counter to
// zero, then deletes idle names; a deleted counter stays on a retired list
// for one more interval so that a recorder which looked it up just before
// the delete still has its add counted. Counts are exact unless a recorder
// stalls between lookup and add for longer than a whole interval.
//
// # Listeners
//
// OnReasonChange, OnTopicHot and OnSample listeners run on the sampling
// goroutine after the snapshot is stored and the metrics updated, in that
// order (hot/cold events sorted by topic). A listener that panics is
// logged and does not stop the others or the monitor. Listeners must not
// block and must not call Sample (samples are serialised by a mutex held
// while listeners run, so that they observe samples in order).
//
// # Metrics
//
// pressure_reason{reason} is set for all four reasons (NONE included) at
// every sample: 1 for the active one, 0 for the others.
// pressure_publish_rate, pressure_memory_ratio, and ws_topic_publish_rate
// {topic} for exactly the current top-N topics.
package pressure

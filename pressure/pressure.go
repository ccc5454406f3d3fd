package pressure

// STUB: the API other packages build against. The pressure helper replaces
// the bodies (and adds doc.go, tests, benchmarks); signatures stay.

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/rtserver/rtserver/metrics"
)

// Reason is the active pressure reason. Priority: MEMORY > PUBLISH_RATE >
// SUBSCRIBERS > NONE.
type Reason uint8

const (
	None Reason = iota
	Memory
	PublishRate
	Subscribers
)

func (r Reason) String() string {
	switch r {
	case Memory:
		return "MEMORY"
	case PublishRate:
		return "PUBLISH_RATE"
	case Subscribers:
		return "SUBSCRIBERS"
	}
	return "NONE"
}

// ParseReason parses MEMORY, PUBLISH_RATE or SUBSCRIBERS.
func ParseReason(s string) (Reason, bool) {
	switch s {
	case "MEMORY":
		return Memory, true
	case "PUBLISH_RATE":
		return PublishRate, true
	case "SUBSCRIBERS":
		return Subscribers, true
	}
	return None, false
}

// TopicRate is one topic's publish rate over the sample interval.
type TopicRate struct {
	Topic          string
	MessagesPerSec float64
	BytesPerSec    float64
}

// UserRate is one user's publish rate over the sample interval.
type UserRate struct {
	User           string
	MessagesPerSec float64
	BytesPerSec    float64
}

// Snapshot is an immutable sample. Never modify one you loaded.
type Snapshot struct {
	At              time.Time
	Reason          Reason
	MemoryRatio     float64 // heap in use / memory limit (0 when no limit is known)
	HeapInUse       uint64
	MemoryLimit     uint64
	RSS             uint64
	PublishRate     float64 // messages published per second (local + from the bus)
	Connections     int64
	Subscriptions   int64
	SubscriberRatio float64 // subscriptions / connections
	SchedLatencyP99 time.Duration
	GCCPUFraction   float64
	TopTopics       []TopicRate // by publish attempts, descending, at most topN
	TopUsers        []UserRate
}

// RateOf is the topic's attempts per second if it is in TopTopics, else 0.
func (s *Snapshot) RateOf(topic string) float64 {
	for i := range s.TopTopics {
		if s.TopTopics[i].Topic == topic {
			return s.TopTopics[i].MessagesPerSec
		}
	}
	return 0
}

// RateOfUser is the user's attempts per second if in TopUsers, else 0.
func (s *Snapshot) RateOfUser(user string) float64 {
	for i := range s.TopUsers {
		if s.TopUsers[i].User == user {
			return s.TopUsers[i].MessagesPerSec
		}
	}
	return 0
}

// Config of the monitor. Thresholds of 0 switch that reason off.
type Config struct {
	SampleInterval          time.Duration
	MemoryHeapUsedRatio     float64
	MemoryLimitBytes        uint64
	PublishRatePerSec       float64
	SubscriberRatio         float64
	TopicPublishRatePerSec  float64
	TopicPublishBytesPerSec float64
	TopN                    int
	Hysteresis              float64 // a reason clears below threshold*(1-Hysteresis); 0 = none
}

// DefaultConfig is CONTRACT section 5's pressure block.
func DefaultConfig() Config {
	return Config{
		SampleInterval:          time.Second,
		MemoryHeapUsedRatio:     0.85,
		PublishRatePerSec:       10000,
		SubscriberRatio:         50,
		TopicPublishRatePerSec:  5000,
		TopicPublishBytesPerSec: 10485760,
		TopN:                    20,
	}
}

// Counts reports the live connection and subscription counts.
type Counts func() (connections, subscriptions int64)

// Monitor samples pressure.
type Monitor struct {
	snap atomic.Pointer[Snapshot]
}

// New returns a monitor; counts may be nil.
func New(cfg Config, counts Counts, m *metrics.Metrics, log *slog.Logger) *Monitor {
	mon := &Monitor{}
	mon.snap.Store(&Snapshot{})
	return mon
}

// Snapshot returns the latest sample (one atomic load; never nil).
func (m *Monitor) Snapshot() *Snapshot { return m.snap.Load() }

// RecordAttempt counts a publish attempt that reached the message tier
// (admitted or not), for the top publishers by topic and by user.
func (m *Monitor) RecordAttempt(topic, user string, bytes int) {}

// RecordPublished counts n messages actually published (locally, or
// arriving from the bus), for PUBLISH_RATE.
func (m *Monitor) RecordPublished(n int) {}

// OnReasonChange registers a listener called after a sample changes the reason.
func (m *Monitor) OnReasonChange(f func(old, new Reason)) {}

// OnTopicHot registers a listener called when a topic crosses (hot=true) or
// falls back below (hot=false) a topic threshold.
func (m *Monitor) OnTopicHot(f func(t TopicRate, hot bool)) {}

// OnSample registers a listener called with every new snapshot.
func (m *Monitor) OnSample(f func(*Snapshot)) {}

// Sample takes one sample now.
func (m *Monitor) Sample() {}

// Run samples every SampleInterval until ctx ends.
func (m *Monitor) Run(ctx context.Context) { <-ctx.Done() }

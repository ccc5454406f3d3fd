package pressure

import (
	"fmt"
	"math"
	"time"

	"github.com/rtserver/rtserver/internal/conf"
)

// MarshalText is the reason's config word (MEMORY, PUBLISH_RATE,
// SUBSCRIBERS, BUS; NONE for None).
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads MEMORY, PUBLISH_RATE, SUBSCRIBERS or BUS.
func (r *Reason) UnmarshalText(b []byte) error {
	v, ok := ParseReason(string(b))
	if !ok {
		return fmt.Errorf("unknown pressure reason (want MEMORY, PUBLISH_RATE, SUBSCRIBERS or BUS)")
	}
	*r = v
	return nil
}

// Config of the monitor (pressure.* in docs/configuration.md). Thresholds
// of 0 switch that reason (or, for the topic thresholds, that hot-topic
// test) off.
type Config struct {
	SampleInterval          time.Duration `yaml:"sampleInterval" help:"period of the pressure samples; 0 = 1s"`
	MemoryHeapUsedRatio     float64       `yaml:"memoryHeapUsedRatio" help:"MEMORY when heap in use / memory limit (GOMEMLIMIT or memoryLimitBytes) reaches this; in (0, 1], 0 = off"`
	MemoryLimitBytes        uint64        `yaml:"memoryLimitBytes" help:"memory limit used when GOMEMLIMIT is unset; 0: the cgroup limit"`
	PublishRatePerSec       float64       `yaml:"publishRatePerSec" help:"PUBLISH_RATE when messages published per second reach this; 0 = off"`
	SubscriberRatio         float64       `yaml:"subscriberRatio" help:"SUBSCRIBERS when subscriptions / connections reach this; 0 = off"`
	TopicPublishRatePerSec  float64       `yaml:"topicPublishRatePerSec" help:"a topic is hot at this many publish attempts per second; 0 = off"`
	TopicPublishBytesPerSec float64       `yaml:"topicPublishBytesPerSec" help:"a topic is hot at this many published bytes per second; 0 = off"`
	TopN                    int           `yaml:"topN" help:"top publishing topics and users kept per sample; 0 = 20"`

	// hysteresis: a reason clears below threshold*(1-hysteresis); 0 =
	// none (no key sets it; this package's tests do); clamped to [0, 1).
	hysteresis float64
	// maxTrackedKeys bounds the distinct topics, and separately the
	// distinct users, counted per sample interval; attempts on further
	// names are counted only in Snapshot.Untracked*Attempts. 0:
	// DefaultMaxTrackedKeys (no key sets it; this package's tests do).
	maxTrackedKeys int
}

// DefaultConfig is the pressure.* defaults of docs/configuration.md.
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

// withDefaults fills the documented zero-value defaults.
func (c Config) withDefaults() Config {
	if c.SampleInterval <= 0 {
		c.SampleInterval = time.Second
	}
	if c.TopN <= 0 {
		c.TopN = 20
	}
	if c.maxTrackedKeys <= 0 {
		c.maxTrackedKeys = DefaultMaxTrackedKeys
	}
	if c.hysteresis < 0 || c.hysteresis != c.hysteresis {
		c.hysteresis = 0
	}
	if c.hysteresis >= 1 {
		c.hysteresis = 0.99
	}
	return c
}

// Validate reports every invalid pressure.* value at once, naming each
// key.
func (c Config) Validate() error {
	var p conf.Problems
	if c.SampleInterval < 0 {
		p.Add("pressure.sampleInterval", "must not be negative (0 = 1s), got %s", c.SampleInterval)
	}
	if r := c.MemoryHeapUsedRatio; !(r >= 0 && r <= 1) {
		p.Add("pressure.memoryHeapUsedRatio", "must be in (0, 1], or 0 = off, got %v", r)
	}
	threshold := func(key string, f float64) {
		if !(f >= 0) || math.IsInf(f, 0) {
			p.Add(key, "must be a finite number >= 0 (0 = off), got %v", f)
		}
	}
	threshold("pressure.publishRatePerSec", c.PublishRatePerSec)
	threshold("pressure.subscriberRatio", c.SubscriberRatio)
	threshold("pressure.topicPublishRatePerSec", c.TopicPublishRatePerSec)
	threshold("pressure.topicPublishBytesPerSec", c.TopicPublishBytesPerSec)
	if c.TopN < 0 {
		p.Add("pressure.topN", "must not be negative (0 = 20), got %d", c.TopN)
	}
	return p.Err()
}

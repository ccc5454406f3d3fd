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

	// Hysteresis: a reason clears below threshold*(1-Hysteresis); 0 =
	// none; clamped to [0, 1).
	Hysteresis float64 `yaml:"-"`
	// MaxTrackedKeys bounds the distinct topics, and separately the
	// distinct users, counted per sample interval; attempts on further
	// names are counted only in Snapshot.Untracked*Attempts. 0: 10,000.
	MaxTrackedKeys int `yaml:"-"`
	// Now is the clock used to stamp samples and measure the interval
	// between them. nil: time.Now.
	Now func() time.Time `yaml:"-"`
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
	if c.MaxTrackedKeys <= 0 {
		c.MaxTrackedKeys = DefaultMaxTrackedKeys
	}
	if c.Hysteresis < 0 || c.Hysteresis != c.Hysteresis {
		c.Hysteresis = 0
	}
	if c.Hysteresis >= 1 {
		c.Hysteresis = 0.99
	}
	if c.Now == nil {
		c.Now = time.Now
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

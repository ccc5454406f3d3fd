package presence

import (
	"time"

	"github.com/rtserver/rtserver/internal/conf"
)

// Config is the presence.* keys (docs/configuration.md). Zero values mean
// the defaults. Which topics keep presence is decided per namespace
// (topics.namespaces[].presence and joinLeave, access.Rule).
type Config struct {
	// TTL is how long an entry lives without a refresh: the longest an
	// instance that died stays present. Each instance refreshes its
	// entries every TTL/3.
	TTL time.Duration `yaml:"ttl" help:"an entry not refreshed for this long is gone: how long the connections of an instance that died stay present; each instance refreshes its entries every ttl/3; 0 = 60s"`
	// DiffInterval is how long join/leave diffs of a topic are coalesced:
	// a topic's subscribers get at most one presence notification per
	// interval.
	DiffInterval time.Duration `yaml:"diffInterval" help:"join/leave diffs are coalesced per topic for this long: at most one presence notification per topic per interval; 0 = 1s"`
}

// Defaults of Config.
const (
	DefaultTTL          = 60 * time.Second
	DefaultDiffInterval = time.Second
)

// DefaultConfig returns the defaults of docs/configuration.md.
func DefaultConfig() Config { return Config{TTL: DefaultTTL, DiffInterval: DefaultDiffInterval} }

// Validate reports every invalid presence.* value at once, naming each key.
func (c Config) Validate() error {
	var p conf.Problems
	if c.TTL < 0 || (c.TTL > 0 && c.TTL < 3*time.Millisecond) {
		p.Add("presence.ttl", "must be at least 3ms (entries are refreshed every ttl/3; 0 = 60s), got %s", c.TTL)
	}
	if c.DiffInterval < 0 {
		p.Add("presence.diffInterval", "must not be negative (0 = 1s), got %s", c.DiffInterval)
	}
	return p.Err()
}

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.DiffInterval <= 0 {
		c.DiffInterval = DefaultDiffInterval
	}
	return c
}

package presence

import (
	"fmt"
	"time"
)

// Config is the presence.* keys (docs/configuration.md). Zero values mean
// the defaults.
type Config struct {
	// TTL is how long an entry lives without a refresh: the longest an
	// instance that died stays present (presence.ttl). Each instance
	// refreshes its entries every TTL/3. Default 60s.
	TTL time.Duration
	// DiffInterval is how long join/leave diffs of a topic are coalesced:
	// a topic's subscribers get at most one presence notification per
	// interval (presence.diffInterval). Default 1s.
	DiffInterval time.Duration
}

// Defaults of Config.
const (
	DefaultTTL          = 60 * time.Second
	DefaultDiffInterval = time.Second
)

// DefaultConfig returns the defaults of docs/configuration.md.
func DefaultConfig() Config { return Config{TTL: DefaultTTL, DiffInterval: DefaultDiffInterval} }

// Validate reports a value no instance can run with, naming its key.
func (c Config) Validate() error {
	if c.TTL < 0 || (c.TTL > 0 && c.TTL < 3*time.Millisecond) {
		return fmt.Errorf("presence.ttl: %v must be at least 3ms (entries are refreshed every ttl/3)", c.TTL)
	}
	if c.DiffInterval < 0 {
		return fmt.Errorf("presence.diffInterval: %v is negative", c.DiffInterval)
	}
	return nil
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

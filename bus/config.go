package bus

import (
	"net/url"

	"github.com/rtserver/rtserver/internal/conf"
)

// Config is the cross-instance bus of docs/configuration.md (redis.*). An
// empty URL means a single instance: the in-memory bus. The zero value
// is the in-memory bus; the Redis keys' zero values are their defaults.
type Config struct {
	URL           string `yaml:"url" help:"redis:// or rediss:// URL; empty: single instance with the in-memory bus"`
	Bus           string `yaml:"bus" help:"single (one channel) | sharded (SSUBSCRIBE, Redis 7+, Redis Cluster); empty: single"`
	Partitions    int    `yaml:"partitions" help:"sharded bus: topics are hashed into this many channels; 0 = 16"`
	ChannelPrefix string `yaml:"channelPrefix" help:"prefix of every Redis channel, for multi-tenant isolation"`
}

// DefaultConfig is the redis.* defaults of docs/configuration.md.
func DefaultConfig() Config {
	return Config{Bus: "single", Partitions: 16, ChannelPrefix: "rt:"}
}

// Validate reports every invalid redis.* value at once, naming each key.
func (c Config) Validate() error {
	var p conf.Problems
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			p.Add("redis.url", "must be a redis:// or rediss:// URL with a host, got %q", c.URL)
		}
	}
	switch c.Bus {
	case "", "single", "sharded":
	default:
		p.Add("redis.bus", "must be single or sharded, got %q", c.Bus)
	}
	if c.Partitions < 0 {
		p.Add("redis.partitions", "must not be negative (0 = 16), got %d", c.Partitions)
	}
	return p.Err()
}

package bus

import (
	"net/url"
	"time"

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
	// PublishQueue and PublishWait are the back-pressure of a Redis bus
	// (docs/cluster.md): a publish is acknowledged only once Redis took
	// it, and one the bus cannot take is refused, never dropped.
	PublishQueue int           `yaml:"publishQueue" help:"publishes waiting to be written to Redis; when full, a publish waits publishWait for room, then is shed with -32001 reason BUS (the server API: 503 with Retry-After); 0 = 8192"`
	PublishWait  time.Duration `yaml:"publishWait" help:"how long a publish waits for room in a full publishQueue before it is shed; 0 = 50ms, negative = shed at once"`
}

// DefaultConfig is the redis.* defaults of docs/configuration.md.
func DefaultConfig() Config {
	return Config{Bus: "single", Partitions: 16, ChannelPrefix: "rt:", PublishQueue: defaultQueueSize, PublishWait: defaultPublishWait}
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
	if c.PublishQueue < 0 {
		p.Add("redis.publishQueue", "must not be negative (0 = 8192), got %d", c.PublishQueue)
	}
	return p.Err()
}

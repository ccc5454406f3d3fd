package bus

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/rtserver/rtserver/internal/conf"
)

// Config is the cross-instance bus of docs/configuration.md (redis.*). An
// empty URL means a single instance: the in-memory bus. The zero value
// is the in-memory bus; the Redis keys' zero values are their defaults.
type Config struct {
	URL           string `yaml:"url" help:"redis:// or rediss:// URL of the server (with redis.sentinel.addrs, its host is the monitored primary's name: redis://:password@mymaster/0; with addr query parameters, the nodes of a Redis Cluster); empty: single instance with the in-memory bus"`
	Bus           string `yaml:"bus" help:"single (one channel) | sharded (SSUBSCRIBE, Redis 7+, Redis Cluster); empty: single"`
	Partitions    int    `yaml:"partitions" help:"sharded bus: topics are hashed into this many channels; 0 = 16"`
	ChannelPrefix string `yaml:"channelPrefix" help:"prefix of every Redis channel, for multi-tenant isolation"`
	// PublishQueue and PublishWait are the back-pressure of a Redis bus
	// (docs/cluster.md): a publish is acknowledged only once Redis took
	// it, and one the bus cannot take is refused, never dropped.
	PublishQueue int           `yaml:"publishQueue" help:"publishes waiting to be written to Redis; when full, a publish waits publishWait for room, then is shed with -32001 reason BUS (the server API: 503 with Retry-After); 0 = 8192"`
	PublishWait  time.Duration `yaml:"publishWait" help:"how long a publish waits for room in a full publishQueue before it is shed; 0 = 50ms, negative = shed at once"`
	// Sentinel finds the primary through Redis Sentinel (NewClient).
	Sentinel Sentinel `yaml:"sentinel"`
}

// Sentinel is how the primary is found when Redis Sentinel watches it
// (redis.sentinel.*). Its zero value means no Sentinel: redis.url names
// the server itself.
type Sentinel struct {
	Addrs    []string `yaml:"addrs" help:"host:port of each Redis Sentinel (three or more, so that a quorum survives one loss); set, rtserver asks them for the primary named by redis.url's host and follows their fail-overs; empty: no Sentinel"`
	Password string   `yaml:"password" help:"password of the Sentinels (requirepass in sentinel.conf), which may differ from the primary's in redis.url; empty: none"`
}

// Defaults of redis.* that other packages share: the Redis keys of
// presence, history and the shared limiters live under the bus's prefix
// and partitions.
const (
	// DefaultPartitions is redis.partitions' default, and what 0 means.
	DefaultPartitions = 16
	// DefaultChannelPrefix is redis.channelPrefix's default.
	DefaultChannelPrefix = "rt:"
)

// DefaultConfig is the redis.* defaults of docs/configuration.md.
func DefaultConfig() Config {
	return Config{Bus: "single", Partitions: DefaultPartitions, ChannelPrefix: DefaultChannelPrefix, PublishQueue: defaultQueueSize, PublishWait: defaultPublishWait}
}

// Validate reports every invalid redis.* value at once, naming each key.
func (c Config) Validate() error {
	var p conf.Problems
	if c.URL != "" {
		// The value is never echoed whole: it may hold the password.
		if u, err := url.Parse(c.URL); err != nil {
			p.Add("redis.url", "must be a redis:// or rediss:// URL with a host; the value does not parse as a URL")
		} else if (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			p.Add("redis.url", "must be a redis:// or rediss:// URL with a host, got %q", u.Redacted())
		}
	}
	for i, a := range c.Sentinel.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			p.Add(fmt.Sprintf("redis.sentinel.addrs[%d]", i), "must be host:port, got %q", a)
		}
	}
	if len(c.Sentinel.Addrs) > 0 {
		switch u, err := url.Parse(c.URL); {
		case c.URL == "":
			p.Add("redis.sentinel.addrs", "needs redis.url, whose host names the primary the Sentinels monitor (redis://mymaster)")
		case err == nil && u.Query().Has("addr"):
			p.Add("redis.sentinel.addrs", "excludes addr parameters in redis.url: those select a Redis Cluster")
		}
	} else if c.Sentinel.Password != "" {
		p.Add("redis.sentinel.password", "needs redis.sentinel.addrs")
	}
	switch c.Bus {
	case "", "single", "sharded":
	default:
		p.Add("redis.bus", "must be single or sharded, got %q", c.Bus)
	}
	if c.Partitions < 0 {
		p.Add("redis.partitions", "must not be negative (0 = %d), got %d", DefaultPartitions, c.Partitions)
	}
	if c.PublishQueue < 0 {
		p.Add("redis.publishQueue", "must not be negative (0 = 8192), got %d", c.PublishQueue)
	}
	return p.Err()
}

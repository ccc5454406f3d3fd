package clusterrate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/instance"
	"github.com/rtserver/rtserver/message"
)

// CeilingOptions of Ceilings; the zero value is the documented default.
type CeilingOptions struct {
	// Prefix starts every key (inside the hash tag). Default "rt:".
	Prefix string
	// InstanceID names this instance's entry. Default: 16 random hex
	// digits (the node passes its aggregator's id).
	InstanceID string
	// TTL is how long an instance's limit counts after it was last
	// shared: an instance that stopped sharing leaves the live count
	// after it. Default 3s (three exchanges at the default one a second).
	TTL time.Duration
}

// Ceilings is a message.CeilingStore on Redis: one hash per class,
// {<prefix>adm:ceil:<class>}, holding per instance its latest limit and
// when it was shared (Redis's clock, so the instances' clocks do not
// matter). Safe for concurrent use.
type Ceilings struct {
	client redis.Scripter
	prefix string
	id     string
	ttl    time.Duration
}

var _ message.CeilingStore = (*Ceilings)(nil)

// NewCeilings returns a Ceilings on client.
func NewCeilings(client redis.Scripter, opts CeilingOptions) *Ceilings {
	c := &Ceilings{client: client, prefix: opts.Prefix, id: opts.InstanceID, ttl: opts.TTL}
	if c.prefix == "" {
		c.prefix = bus.DefaultChannelPrefix
	}
	if c.id == "" {
		c.id = instance.NewID()
	}
	if c.ttl <= 0 {
		c.ttl = 3 * time.Second
	}
	return c
}

// ceilingScript records ARGV[2] as instance ARGV[1]'s limit at Redis's
// now, drops the entries older than ARGV[3] ms, and returns the limits
// left (this instance's included). The key expires two TTLs after the
// last exchange. Reading the clock inside a script is fine with effects
// replication (the default since Redis 5).
var ceilingScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. now)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local c = string.find(v, ':', 1, true)
  local at = c and tonumber(string.sub(v, c + 1))
  local lim = c and tonumber(string.sub(v, 1, c - 1))
  if not at or not lim or now - at > ttl then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = lim
  end
end
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return out
`)

// ShareLimit implements message.CeilingStore: one EVALSHA.
func (c *Ceilings) ShareLimit(ctx context.Context, class string, limit int64) ([]int64, error) {
	key := "{" + c.prefix + "adm:ceil:" + class + "}"
	out, err := ceilingScript.Run(ctx, c.client, []string{key}, c.id, limit, c.ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("clusterrate: ceiling of %s: %w", class, err)
	}
	return out, nil
}

package clusterrate

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/instance"
	"github.com/rtserver/rtserver/message"
)

// ceilingTTL is how long an instance's limit counts after it was last
// shared: an instance that stopped sharing leaves the live count after it
// (three exchanges at the default one a second).
const ceilingTTL = 3 * time.Second

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

// NewCeilings returns a Ceilings on deps.Client.
func NewCeilings(cfg Config, deps Deps) (*Ceilings, error) {
	if deps.Client == nil {
		return nil, errNoClient
	}
	c := &Ceilings{client: deps.Client, prefix: cmp.Or(cfg.Prefix, bus.DefaultChannelPrefix), id: deps.InstanceID, ttl: deps.ttl}
	if c.id == "" {
		c.id = instance.NewID()
	}
	if c.ttl <= 0 {
		c.ttl = ceilingTTL
	}
	return c, nil
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

package clusterrate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/ratelimit"
)

// Options of a Limiter; the zero value is the documented default.
type Options struct {
	// Prefix starts every key (inside the hash tag), for several
	// deployments on one Redis; the node passes redis.channelPrefix.
	// Default "rt:".
	Prefix string
	// Timeout bounds one check, round trip included. Default 100ms.
	Timeout time.Duration
}

// Limiter is a message.SharedLimiter on Redis (a single node or a Redis
// Cluster: any go-redis client). Safe for concurrent use.
type Limiter struct {
	client  redis.Scripter
	prefix  string
	timeout time.Duration
}

var _ message.SharedLimiter = (*Limiter)(nil)

// New returns a Limiter on client.
func New(client redis.Scripter, opts Options) *Limiter {
	l := &Limiter{client: client, prefix: opts.Prefix, timeout: opts.Timeout}
	if l.prefix == "" {
		l.prefix = "rt:"
	}
	if l.timeout <= 0 {
		l.timeout = 100 * time.Millisecond
	}
	return l
}

// gcraScript runs GCRA for each key: KEYS[i] holds the key's theoretical
// arrival time (µs); ARGV[1] is now (µs), then per key its limit, its
// emission interval t (µs) and the units n this call spends. A key heavier
// than its whole burst (n > limit) is denied for one period. Every key is
// charged only when every key allows. A key expires a second after its
// bucket is full again (the second absorbs clocks that disagree: an
// instance behind the others must not find state dropped too early).
// The reply is, per key, allowed (1 or
// 0), remaining units, and the wait in µs when denied.
var gcraScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local out, tats, ok = {}, {}, true
for i = 1, #KEYS do
  local limit = tonumber(ARGV[3*i-1])
  local t = tonumber(ARGV[3*i])
  local n = tonumber(ARGV[3*i+1])
  local span = limit * t
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  if n > limit then
    out[3*i-2], out[3*i-1], out[3*i] = 0, 0, span
    ok = false
  else
    local nxt = tat + n * t
    local allowAt = nxt - span
    if now < allowAt then
      out[3*i-2], out[3*i-1], out[3*i] = 0, 0, allowAt - now
      ok = false
    else
      out[3*i-2], out[3*i-1], out[3*i] = 1, math.floor((now + span - nxt) / t), 0
      tats[i] = nxt
    end
  end
end
if ok then
  for i = 1, #KEYS do
    local ttl = math.ceil((tats[i] - now) / 1000) + 1000
    redis.call('SET', KEYS[i], string.format('%.0f', tats[i]), 'PX', ttl)
  end
end
return out
`)

// Preload loads the script on Redis (on every master of a Redis Cluster)
// and so also opens a connection to each and learns the cluster's slots.
// Checks work without it (the first one loads the script), but a cold
// first check can take longer than Options.Timeout; the node calls it at
// start, before it listens. It is bounded by ctx only.
func (l *Limiter) Preload(ctx context.Context) error {
	if err := gcraScript.Load(ctx, l.client).Err(); err != nil {
		return fmt.Errorf("clusterrate: preload: %w", err)
	}
	return nil
}

// errReply is a reply the script cannot have sent.
var errReply = errors.New("clusterrate: malformed script reply")

// AllowShared implements message.SharedLimiter: one EVALSHA.
func (l *Limiter) AllowShared(ctx context.Context, key string, now time.Time, limits []message.SharedLimit, results []ratelimit.Result) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	tag := "{" + l.prefix + "adm:" + key + "}:"
	keys := make([]string, len(limits))
	args := make([]any, 1, 1+3*len(limits))
	args[0] = now.UnixMicro()
	for i, lim := range limits {
		if lim.Limit < 1 || lim.Per <= 0 || lim.N < 0 {
			return fmt.Errorf("clusterrate: invalid limit %+v", lim)
		}
		keys[i] = tag + lim.Name
		perUS := int64((lim.Per + time.Microsecond - 1) / time.Microsecond)
		t := max((perUS+lim.Limit-1)/lim.Limit, 1)
		args = append(args, lim.Limit, t, lim.N)
	}
	reply, err := gcraScript.Run(ctx, l.client, keys, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("clusterrate: %w", err)
	}
	if len(reply) != 3*len(limits) {
		return errReply
	}
	for i, lim := range limits {
		allowed, remaining, wait := reply[3*i], reply[3*i+1], reply[3*i+2]
		r := ratelimit.Result{Allowed: allowed == 1, Limit: lim.Limit}
		if r.Allowed {
			r.Remaining = remaining
		} else {
			r.RetryAfter = max(time.Duration(wait)*time.Microsecond, time.Microsecond)
		}
		results[i] = r
	}
	return nil
}

// String names the limiter in logs.
func (l *Limiter) String() string {
	return "clusterrate(prefix=" + strconv.Quote(l.prefix) + ")"
}

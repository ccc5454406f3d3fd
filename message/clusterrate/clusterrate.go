package clusterrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/ratelimit"
)

// Config of a Limiter or a Ceilings; the zero value is the documented
// default.
type Config struct {
	// Prefix starts every key (inside the hash tag), for several
	// deployments on one Redis; the node passes redis.channelPrefix.
	// Default "rt:".
	Prefix string
}

// Deps are what a Limiter or a Ceilings uses beside its configuration.
type Deps struct {
	// Client reaches Redis (a single node or a Redis Cluster: any
	// go-redis client). Required.
	Client redis.Scripter
	// InstanceID names this instance's entry in a Ceilings. Default: 16
	// random hex digits (the node passes its aggregator's id).
	InstanceID string
	// Logger hears a Limiter's warm-up (Start); nil: slog.Default().
	Logger *slog.Logger

	timeout time.Duration // bounds one check, round trip included; 0: checkTimeout
	ttl     time.Duration // a Ceilings entry's life; 0: ceilingTTL
}

// checkTimeout bounds one check of a Limiter, round trip included.
const checkTimeout = 100 * time.Millisecond

var errNoClient = errors.New("clusterrate: no Redis client")

// Limiter is a message.SharedLimiter on Redis (a single node or a Redis
// Cluster: any go-redis client). Safe for concurrent use.
type Limiter struct {
	client  redis.Scripter
	prefix  string
	timeout time.Duration
	log     *slog.Logger
	warm    warmUp
}

var _ message.SharedLimiter = (*Limiter)(nil)

// New returns a Limiter on deps.Client.
func New(cfg Config, deps Deps) (*Limiter, error) {
	if deps.Client == nil {
		return nil, errNoClient
	}
	l := &Limiter{client: deps.Client, prefix: cmp.Or(cfg.Prefix, bus.DefaultChannelPrefix), timeout: deps.timeout, log: deps.Logger}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.timeout <= 0 {
		l.timeout = checkTimeout
	}
	return l, nil
}

// gcraScript runs GCRA for each key, in nanoseconds, with the local
// limiter's integer arithmetic (ratelimit.Keyed), so that both decide the
// same timeline the same way, retry hints included.
//
// Lua numbers are doubles, exact to 2^53: nanoseconds since 1970 do not fit,
// so an absolute time travels as two integers, whole microseconds since 1970
// and the nanoseconds past them (0-999), and the script computes only with
// times relative to now (a difference stays far below 2^53: a period is at
// most maxPer). KEYS[i] holds the key's theoretical arrival time (TAT) as
// text "<µs>.<ns, three digits>"; a plain "<µs>" (written by earlier
// versions of this script) reads as ".000", and those versions read the
// new text as a number of µs, so a fleet mid-upgrade keeps one budget.
//
// ARGV[1], ARGV[2] are now (µs, ns past it), then per key its limit, its
// emission interval t (ns) and the units n this call spends. A key heavier
// than its whole burst (n > limit) is denied for one period. Every key is
// charged only when every key allows. A key expires a second after its
// bucket is full again (the second absorbs clocks that disagree: an
// instance behind the others must not find state dropped too early). The
// reply is, per key, allowed (1 or 0), remaining units, and the wait in ns
// when denied.
var gcraScript = redis.NewScript(`
local nowUS, nowNS = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, tats, ok = {}, {}, true
for i = 1, #KEYS do
  local limit = tonumber(ARGV[3*i])
  local t = tonumber(ARGV[3*i+1])
  local n = tonumber(ARGV[3*i+2])
  local span = limit * t
  local tat = 0
  local v = redis.call('GET', KEYS[i])
  if v then
    local dot = string.find(v, '.', 1, true)
    local us, ns = v, 0
    if dot then us, ns = string.sub(v, 1, dot - 1), tonumber(string.sub(v, dot + 1)) end
    tat = (tonumber(us) - nowUS) * 1000 + (ns - nowNS)
  end
  if tat < 0 then tat = 0 end
  if n > limit then
    out[3*i-2], out[3*i-1], out[3*i] = 0, 0, span
    ok = false
  else
    local nxt = tat + n * t
    local allowAt = nxt - span
    if allowAt > 0 then
      out[3*i-2], out[3*i-1], out[3*i] = 0, 0, allowAt
      ok = false
    else
      out[3*i-2], out[3*i-1], out[3*i] = 1, math.floor((span - nxt) / t), 0
      tats[i] = nxt
    end
  end
end
if ok then
  for i = 1, #KEYS do
    local abs = nowNS + tats[i]
    local ns = abs % 1000
    local us = nowUS + (abs - ns) / 1000
    local ttl = math.ceil(tats[i] / 1000000) + 1000
    redis.call('SET', KEYS[i], string.format('%.0f.%03d', us, ns), 'PX', ttl)
  end
end
return out
`)

// maxPer is the longest period (limit × emission interval) a cluster-scoped
// limit may have: the script computes in nanoseconds relative to now,
// exactly as long as they stay under 2^53 (about 104 days).
const maxPer = time.Duration(1 << 53)

// Preload loads the script on Redis (on every master of a Redis Cluster)
// and so also opens a connection to each and learns the cluster's slots.
// Checks work without it (the first one loads the script), but a cold
// first check can take longer than its timeout; Start calls it, and
// again in the background until it succeeds. It is bounded by ctx only.
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
	args := make([]any, 2, 2+3*len(limits))
	ns := now.UnixNano()
	args[0], args[1] = ns/1000, ns%1000
	if ns < 0 {
		return fmt.Errorf("clusterrate: clock %v is before 1970", now)
	}
	for i, lim := range limits {
		if lim.Limit < 1 || lim.Per <= 0 || lim.Per > maxPer || lim.N < 0 {
			return fmt.Errorf("clusterrate: invalid limit %+v", lim)
		}
		keys[i] = tag + lim.Name
		t := ratelimit.EmissionInterval(lim.Limit, lim.Per)
		if t > int64(maxPer)/lim.Limit {
			return fmt.Errorf("clusterrate: limit %+v: its span exceeds %v", lim, maxPer)
		}
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
			r.RetryAfter = max(time.Duration(wait), 1)
		}
		results[i] = r
	}
	return nil
}

// String names the limiter in logs.
func (l *Limiter) String() string {
	return "clusterrate(prefix=" + strconv.Quote(l.prefix) + ")"
}

package presence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
)

// RedisStore keeps entries in Redis, for both Redis buses. A topic T has
// three keys, all under the hash tag of T's bus partition (bus.KeyTag),
// so they share one Redis Cluster slot with T's bus channel:
//
//	TAG:presence:x:T   sorted set: member "client\x00user" (or "client\x00user\x00name"
//	                   with a display name), score its expiry (ms, Redis clock)
//	TAG:presence:l:T   sorted set: the same members, score 0, for paging in client order
//	TAG:presence:u:T   hash: user -> its number of entries
//
// Stats is ZCARD and HLEN: O(1) whatever the topic's size. Every script
// that touches a topic first removes up to cleanupBatch of its expired
// entries, correcting the counts, so an instance that died leaves nothing
// a reader can see past the ttl, and nobody has to notice it died. The
// keys expire with their newest entry, so a topic whose every instance
// died is removed by Redis itself. Expiry is decided on the Redis server's
// clock (TIME), never an instance's, so clock skew between instances does
// not matter.
type RedisStore struct {
	client     redis.UniversalClient
	prefix     string
	partitions int
	ttl        time.Duration
	expired    func(topic string, gone []Entry)
}

// RedisDeps are what a RedisStore uses beside its configuration (its TTL,
// presence.ttl).
type RedisDeps struct {
	// Client is the Redis client: a *redis.Client or a *redis.ClusterClient.
	Client redis.UniversalClient
	// ChannelPrefix and Partitions place each topic's keys in its bus
	// partition's slot: the bus's own values (redis.channelPrefix,
	// redis.partitions). Defaults "rt:" and 16.
	ChannelPrefix string
	Partitions    int
	// Expired, when set, hears of the entries a script removed because
	// they expired (their instance died): the Tracker announces their
	// leaves. It runs on the caller's goroutine and must not block.
	Expired func(topic string, gone []Entry)
}

// NewRedisStore returns a store on deps.Client whose entries live
// cfg.TTL without a refresh. It does no I/O.
func NewRedisStore(cfg Config, deps RedisDeps) (*RedisStore, error) {
	if deps.Client == nil {
		return nil, errors.New("presence: RedisDeps.Client is required")
	}
	s := &RedisStore{
		client:     deps.Client,
		prefix:     deps.ChannelPrefix,
		partitions: deps.Partitions,
		ttl:        cfg.TTL,
		expired:    deps.Expired,
	}
	if s.prefix == "" {
		s.prefix = bus.DefaultChannelPrefix
	}
	if s.partitions <= 0 {
		s.partitions = bus.DefaultPartitions
	}
	if s.ttl <= 0 {
		s.ttl = DefaultTTL
	}
	if s.ttl < time.Millisecond {
		return nil, fmt.Errorf("presence.ttl: %v is under a millisecond", s.ttl)
	}
	return s, nil
}

var _ Store = (*RedisStore)(nil)

// keys returns topic's three keys: expiry index, lex index, user counts.
func (s *RedisStore) keys(topic string) []string {
	tag := bus.KeyTag(s.prefix, topic, s.partitions)
	return []string{tag + ":presence:x:" + topic, tag + ":presence:l:" + topic, tag + ":presence:u:" + topic}
}

// cleanupBatch bounds the expired entries one script removes, so a topic
// whose instance died with a crowd in it never blocks Redis for long: a
// reader that finds more runs the script again (each entry is removed
// once, so the cost is amortised over the entries).
const cleanupBatch = 1000

// luaCommon is shared by every script: the Redis clock in ms, the user of
// a member, and the bounded removal of expired entries.
var luaCommon = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function user(m)
  local i = string.find(m, '\0', 1, true)
  local j = string.find(m, '\0', i + 1, true)
  if j then return string.sub(m, i + 1, j - 1) end
  return string.sub(m, i + 1)
end
local function drop(m)
  local u = user(m)
  if redis.call('HINCRBY', KEYS[3], u, -1) <= 0 then redis.call('HDEL', KEYS[3], u) end
end
local function expire()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ` + strconv.Itoa(cleanupBatch) + `)
  if #gone > 0 then
    redis.call('ZREM', KEYS[1], unpack(gone))
    redis.call('ZREM', KEYS[2], unpack(gone))
    for _, m in ipairs(gone) do drop(m) end
  end
  return gone
end
`

// updateScript adds ARGV[2] members (ARGV[3]..) with expiry now+ARGV[1] ms
// and removes the rest; it returns the expired members it removed. A
// member appears at most once per call (Apply starts a new call for a
// member seen again).
var updateScript = redis.NewScript(luaCommon + `
local gone = expire()
local ttl = tonumber(ARGV[1])
local nadd = tonumber(ARGV[2])
if nadd > 0 then
  -- One ZMSCORE tells which members are new (their counts go up), one
  -- ZADD sets every expiry: a refresh of 1,000 entries is a few calls.
  local adds, zargs = {}, {}
  for i = 1, nadd do
    adds[i] = ARGV[2 + i]
    zargs[2 * i - 1] = now + ttl
    zargs[2 * i] = adds[i]
  end
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(adds))
  redis.call('ZADD', KEYS[1], unpack(zargs))
  for i, m in ipairs(adds) do
    if not scores[i] then
      redis.call('ZADD', KEYS[2], 0, m)
      redis.call('HINCRBY', KEYS[3], user(m), 1)
    end
  end
end
for i = 3 + nadd, #ARGV do
  local m = ARGV[i]
  if redis.call('ZREM', KEYS[1], m) == 1 then
    redis.call('ZREM', KEYS[2], m)
    drop(m)
  end
end
if nadd > 0 then
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
return gone
`)

// statsScript returns {clients, users, more, gone}: more is 1 when expired
// entries remain (the counts are then not final).
var statsScript = redis.NewScript(luaCommon + `
local gone = expire()
local more = 0
if #gone == ` + strconv.Itoa(cleanupBatch) + ` then more = 1 end
return {redis.call('ZCARD', KEYS[1]), redis.call('HLEN', KEYS[3]), more, gone}
`)

// pageScript returns {members, gone}: up to ARGV[2] live members whose
// client sorts after ARGV[1] (members are "client\x00user", so every
// member of a later client sorts at or after cursor.."\x01").
var pageScript = redis.NewScript(luaCommon + `
local gone = expire()
local from = '-'
if ARGV[1] ~= '' then from = '[' .. ARGV[1] .. '\1' end
local ms = redis.call('ZRANGEBYLEX', KEYS[2], from, '+', 'LIMIT', 0, tonumber(ARGV[2]))
local live = {}
if #ms > 0 then
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(ms))
  for i, m in ipairs(ms) do
    if scores[i] and tonumber(scores[i]) > now then live[#live + 1] = m end
  end
end
local last = ''
if #ms == tonumber(ARGV[2]) then last = ms[#ms] end
return {live, gone, last}
`)

// member is e's sorted-set member: client and user, and the display name
// when there is one (neither user nor name holds a NUL: handshake.ValidUser
// and handshake.DisplayName refuse control characters).
func member(e Entry) string {
	if e.Name == "" {
		return e.Client + "\x00" + e.User
	}
	return e.Client + "\x00" + e.User + "\x00" + e.Name
}

func entryOf(m string) Entry {
	c, rest, _ := strings.Cut(m, "\x00")
	u, n, _ := strings.Cut(rest, "\x00")
	return Entry{Client: c, User: u, Name: n}
}

// maxArgs bounds one script call's members: the Lua stack takes a few
// thousand unpacked values; a larger group is split.
const maxArgs = MaxBatch

// Apply writes changes as one pipeline: one script call per topic (per
// maxArgs of its changes). On a Redis Cluster the pipeline goes to every
// node concerned at once.
func (s *RedisStore) Apply(ctx context.Context, changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	type group struct {
		topic         string
		adds, removes []any
		members       map[string]bool
	}
	var groups []*group
	open := map[string]*group{}
	for _, c := range changes {
		g := open[c.Topic]
		// A script applies adds before removes: a member seen again
		// (joined, left and joined again) starts a new call, in order.
		if g == nil || len(g.adds)+len(g.removes) >= maxArgs || g.members[member(c.Entry)] {
			g = &group{topic: c.Topic, members: map[string]bool{}}
			groups = append(groups, g)
			open[c.Topic] = g
		}
		g.members[member(c.Entry)] = true
		if c.Leave {
			g.removes = append(g.removes, member(c.Entry))
		} else {
			g.adds = append(g.adds, member(c.Entry))
		}
	}
	run := func(pipe redis.Pipeliner, sha bool) {
		for _, g := range groups {
			args := make([]any, 0, 2+len(g.adds)+len(g.removes))
			args = append(args, s.ttl.Milliseconds(), len(g.adds))
			args = append(append(args, g.adds...), g.removes...)
			if sha {
				updateScript.EvalSha(ctx, pipe, s.keys(g.topic), args...)
			} else {
				updateScript.Eval(ctx, pipe, s.keys(g.topic), args...)
			}
		}
	}
	cmds, err := s.pipeline(ctx, run)
	for i, cmd := range cmds {
		if ms, cerr := cmd.(*redis.Cmd).StringSlice(); cerr == nil && i < len(groups) {
			s.report(groups[i].topic, ms)
		}
	}
	return err
}

// pipeline runs queue's commands in one pipeline with EVALSHA and, when
// Redis does not know a script (a restart flushed its cache), once more
// with EVAL, which also caches it. Writes are idempotent, so the retry is
// safe.
func (s *RedisStore) pipeline(ctx context.Context, queue func(redis.Pipeliner, bool)) ([]redis.Cmder, error) {
	cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error { queue(p, true); return nil })
	if err != nil && isNoScript(cmds) {
		cmds, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error { queue(p, false); return nil })
	}
	if err != nil {
		return cmds, fmt.Errorf("presence: redis: %w", err)
	}
	return cmds, nil
}

func isNoScript(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c.Err() != nil && strings.HasPrefix(c.Err().Error(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

// run runs one script on one topic, with the same fallback as pipeline.
func (s *RedisStore) run(ctx context.Context, script *redis.Script, topic string, args ...any) ([]any, error) {
	v, err := script.Run(ctx, s.client, s.keys(topic), args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("presence: redis: %w", err)
	}
	return v, nil
}

// report hands expired members to the Expired callback.
func (s *RedisStore) report(topic string, gone []string) {
	if len(gone) == 0 || s.expired == nil {
		return
	}
	es := make([]Entry, len(gone))
	for i, m := range gone {
		es[i] = entryOf(m)
	}
	s.expired(topic, es)
}

func strings2(v any) []string {
	xs, _ := v.([]any)
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Stats counts topic's live entries and users. It is two O(1) reads,
// after removing the topic's expired entries (again while more than
// cleanupBatch were due: a crowd left by an instance that died).
func (s *RedisStore) Stats(ctx context.Context, topic string) (Stats, error) {
	for {
		v, err := s.run(ctx, statsScript, topic)
		if err != nil {
			return Stats{}, err
		}
		if len(v) != 4 {
			return Stats{}, errors.New("presence: redis: unexpected stats reply")
		}
		s.report(topic, strings2(v[3]))
		if more, _ := v[2].(int64); more == 1 {
			continue
		}
		clients, _ := v[0].(int64)
		users, _ := v[1].(int64)
		return Stats{Clients: clients, Users: users}, nil
	}
}

// Page lists up to limit live entries of topic after cursor, in client id
// order.
func (s *RedisStore) Page(ctx context.Context, topic, cursor string, limit int) (Page, error) {
	limit = pageLimit(limit)
	v, err := s.run(ctx, pageScript, topic, cursor, limit)
	if err != nil {
		return Page{}, err
	}
	if len(v) != 3 {
		return Page{}, errors.New("presence: redis: unexpected page reply")
	}
	s.report(topic, strings2(v[1]))
	live := strings2(v[0])
	p := Page{Clients: make([]Entry, len(live))}
	for i, m := range live {
		p.Clients[i] = entryOf(m)
	}
	if last, _ := v[2].(string); last != "" {
		p.Cursor = entryOf(last).Client
	}
	return p, nil
}

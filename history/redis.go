package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
)

// Redis is the store for both Redis buses. A topic's keys, all under the
// hash tag of its bus partition (bus.KeyTag), so that they and the shard
// channel that carries the topic share one Redis Cluster slot:
//
//	{tag}h:l:<topic>   a list, newest first, of stored messages (stored.go),
//	                   at most Size long, expiring TTL after the last publish
//	{tag}h:m:<topic>   a hash: e (the epoch), o (the last offset); expires
//	                   MetaTTL + TTL after the last publish
//	{tag}h:i:<topic>\x00<key>   a publish's position under its idempotency key
//
// One script per publish checks the idempotency key, assigns the offset
// (HINCRBY on the metadata: the offset only ever moves in the step that
// stores the message), pushes and trims the list, and publishes the bus's
// envelope with the position in front (bus/position.go) on the topic's
// channel; Redis runs it atomically, so every instance receives a topic's
// messages in offset order. Publishes are pipelined: one writer goroutine
// sends what is queued, up to redisBatch scripts per round trip. A script
// cache miss (NOSCRIPT, after a failover or SCRIPT FLUSH) is answered by
// running the same batch again with EVAL, which reloads the script.
//
// Metadata that Redis lost (evicted, or expired after MetaTTL) gives the
// topic a new epoch, and its old list is deleted in the same step: a
// position of another epoch is never trusted.
type Redis struct {
	client  redis.UniversalClient
	bus     bus.HistoryPublisher
	prefix  string
	parts   int
	cfg     Config
	batch   int
	down    func() bool // Redis known unreachable: refuse at once
	log     *slog.Logger
	errPub  prometheus.Counter
	errRead prometheus.Counter

	queue   chan *pubReq
	stop    chan struct{}
	done    sync.WaitGroup
	once    sync.Once
	started sync.Once // the writer starts with Start
}

// RedisDeps are what a Redis store uses beside its configuration.
type RedisDeps struct {
	Client redis.UniversalClient // not closed by the store
	// Bus is the Redis bus the scripts publish through (its channels, its
	// envelope and signature).
	Bus bus.HistoryPublisher
	// KeyPrefix and Partitions are the bus's (redis.channelPrefix and, for
	// the sharded bus, redis.partitions): keys are tagged with bus.KeyTag
	// to share the slots of the channels the scripts publish to.
	KeyPrefix  string
	Partitions int
	// StoreErrors counts failed store operations, by op ("publish",
	// "read"): history_store_errors_total. nil: not counted.
	StoreErrors *prometheus.CounterVec
	Logger      *slog.Logger
	// Down reports whether Redis is known to be unreachable now (the
	// bus's Degraded): meanwhile a publish is refused at once with
	// ErrUnavailable, and so is every one still queued, instead of each
	// waiting for a round trip that cannot succeed. nil: never.
	Down func() bool
}

// Bounds of a Redis store's writer.
const (
	redisBatch = 128  // the most publish scripts per round trip
	redisQueue = 8192 // publishes waiting for the writer; past it ErrUnavailable at once
)

// NewRedis returns a Redis store. It does no I/O; its writer goroutine
// starts with Start (publishes queue until then), and Close stops it.
func NewRedis(cfg Config, deps RedisDeps) (*Redis, error) {
	if deps.Client == nil || deps.Bus == nil {
		return nil, errors.New("history: a Redis store needs a client and a Redis bus")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := deps
	r := &Redis{
		client: o.Client, bus: o.Bus, prefix: o.KeyPrefix, parts: o.Partitions,
		cfg: cfg.WithDefaults(), batch: redisBatch, down: o.Down, log: o.Logger,
		queue: make(chan *pubReq, redisQueue), stop: make(chan struct{}),
	}
	if r.down == nil {
		r.down = func() bool { return false }
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if o.StoreErrors != nil {
		r.errPub = o.StoreErrors.WithLabelValues("publish")
		r.errRead = o.StoreErrors.WithLabelValues("read")
	}
	return r, nil
}

var _ Store = (*Redis)(nil)

// Start starts the writer, which sends the queued publishes to Redis. It
// does no I/O itself and never fails: a publish that Redis refuses fails
// alone. After Close it starts nothing.
func (r *Redis) Start(context.Context) error {
	r.started.Do(func() {
		r.done.Add(1)
		go r.writer()
	})
	return nil
}

// Close stops the writer; publishes still queued fail with ErrUnavailable.
func (r *Redis) Close() error {
	r.once.Do(func() { close(r.stop) })
	r.started.Do(func() {}) // no writer after Close
	r.done.Wait()
	return nil
}

func (r *Redis) keys(topic string) (list, meta string) {
	tag := bus.KeyTag(r.prefix, topic, r.parts)
	return tag + "h:l:" + topic, tag + "h:m:" + topic
}

// validMetaLua defines validMeta(e, o) for the scripts: whether a topic's
// metadata is what the scripts write, an epoch of 1 to 32 letters or
// digits and an offset of 1 to 15 decimal digits. Whoever can write Redis
// keys can write anything there; metadata that is not of that form is
// taken as lost (a new epoch, the list deleted, as when Redis evicted it),
// so a corrupt position never fails a topic's publishes or reads for
// metaTtl, and is never trusted: clients holding the old one recover with
// reason "epoch".
const validMetaLua = `
local function validMeta(e, o)
  return e and o and #e <= 32 and string.match(e, '^%w+$') ~= nil and #o <= 15 and string.match(o, '^%d+$') ~= nil
end
`

// publishScript: KEYS list, meta[, idem]; ARGV channel, envelope, data
// start (1-based), data end, now ms, size, ttl ms, meta ttl ms, idem ttl
// ms, new epoch, sharded "1"|"0". Returns {"epoch offset", dup 0|1}.
var publishScript = redis.NewScript(validMetaLua + `
if KEYS[3] then
  local prev = redis.call('GET', KEYS[3])
  if prev then return {prev, 1} end
end
local epoch = redis.call('HGET', KEYS[2], 'e')
if not epoch or not validMeta(epoch, redis.call('HGET', KEYS[2], 'o')) then
  epoch = ARGV[10]
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'e', epoch, 'o', 0)
end
local off = string.format('%d', redis.call('HINCRBY', KEYS[2], 'o', 1))
local env = ARGV[2]
redis.call('LPUSH', KEYS[1], off .. ' ' .. ARGV[5] .. ' ' .. string.sub(env, tonumber(ARGV[3]), tonumber(ARGV[4])))
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[6]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[7])
redis.call('PEXPIRE', KEYS[2], ARGV[8])
local pos = epoch .. ' ' .. off
if KEYS[3] then redis.call('SET', KEYS[3], pos, 'PX', ARGV[9]) end
local payload = '\4' .. pos .. ' ' .. env
if ARGV[11] == '1' then
  redis.call('SPUBLISH', ARGV[1], payload)
else
  redis.call('PUBLISH', ARGV[1], payload)
end
return {pos, 0}
`)

// readScript: KEYS list, meta; ARGV after, limit, new epoch, ttl ms of a
// position it creates,
// newest "1"|"0". Returns {epoch, last, items newest first}.
var readScript = redis.NewScript(validMetaLua + `
local epoch = redis.call('HGET', KEYS[2], 'e')
if not epoch or not validMeta(epoch, redis.call('HGET', KEYS[2], 'o')) then
  epoch = ARGV[3]
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'e', epoch, 'o', 0)
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return {epoch, 0, {}}
end
local last = tonumber(redis.call('HGET', KEYS[2], 'o'))
local limit = tonumber(ARGV[2])
local after = tonumber(ARGV[1])
if ARGV[5] == '1' then after = math.max(0, last - limit) end
if after >= last or limit <= 0 then return {epoch, string.format('%d', last), {}} end
local n = last - after
return {epoch, string.format('%d', last), redis.call('LRANGE', KEYS[1], math.max(0, n - limit), n - 1)}
`)

// pubReq is one publish waiting for the writer.
type pubReq struct {
	keys []string
	args []any
	done func(Position, bool, error)
}

// Publish runs the publish script for p, pipelined with other publishes,
// and returns the message's position once Redis has stored it.
func (r *Redis) Publish(ctx context.Context, p Publish) (Position, bool, error) {
	type result struct {
		pos Position
		dup bool
		err error
	}
	ch := make(chan result, 1)
	r.PublishAsync(p, func(pos Position, dup bool, err error) { ch <- result{pos, dup, err} })
	select {
	case res := <-ch:
		return res.pos, res.dup, res.err
	case <-ctx.Done():
		// The script may still run: the message may be stored and
		// delivered. The caller answers unavailable; a retry with the
		// same idempotency key is safe.
		return Position{}, false, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

// PublishAsync is Publish without waiting: it queues the publish (p.Data
// is copied before it returns) and done runs once with the outcome, on
// the store's answering goroutine, or at once when the publish cannot be
// queued. done must not block. The writer runs the scripts in the order
// they were queued and calls each done in the order Redis ran them, so a
// topic's publishes are acknowledged in offset order.
func (r *Redis) PublishAsync(p Publish, done func(pos Position, dup bool, err error)) {
	if r.down() {
		r.count(r.errPub)
		done(Position{}, false, errDown)
		return
	}
	env, channel, sharded, at, err := r.bus.HistoryEnvelope(p.Topic, p.Data)
	if err != nil {
		done(Position{}, false, err)
		return
	}
	list, meta := r.keys(p.Topic)
	keys := []string{list, meta}
	if p.IdempotencyKey != "" {
		keys = append(keys, bus.KeyTag(r.prefix, p.Topic, r.parts)+"h:i:"+p.Topic+"\x00"+p.IdempotencyKey)
	}
	sh := "0"
	if sharded {
		sh = "1"
	}
	req := &pubReq{keys: keys, done: done, args: []any{
		channel, env, at + 1, at + len(p.Data), time.Now().UnixMilli(), p.Policy.Size,
		p.Policy.TTL.Milliseconds(), (r.cfg.MetaTTL + p.Policy.TTL).Milliseconds(),
		r.cfg.IdempotencyTTL.Milliseconds(), newEpoch(), sh,
	}}
	select {
	case <-r.stop:
		done(Position{}, false, fmt.Errorf("%w: store closed", ErrUnavailable))
		return
	default:
	}
	select {
	case r.queue <- req:
	case <-r.stop:
		done(Position{}, false, fmt.Errorf("%w: store closed", ErrUnavailable))
	default:
		r.count(r.errPub)
		done(Position{}, false, fmt.Errorf("%w: publish queue full", ErrUnavailable))
	}
}

// errDown is the refusal of a publish while Redis is known unreachable.
var errDown = fmt.Errorf("%w: redis unreachable", ErrUnavailable)

// opTimeout bounds one pipelined round trip.
const opTimeout = 3 * time.Second

// answer is a publish's outcome, for its done.
type answer struct {
	q   *pubReq
	pos Position
	dup bool
	err error
}

func (r *Redis) writer() {
	defer r.done.Done()
	// The answers of one batch (each done writes to a client's socket)
	// run on a goroutine of their own, in batch order, while the next
	// batch is in Redis: batches still run one after the other, so a
	// topic's offsets follow the order of its publishes, and its answers
	// too.
	answers := make(chan []answer, 2)
	var answering sync.WaitGroup
	answering.Go(func() {
		for as := range answers {
			for _, a := range as {
				a.q.done(a.pos, a.dup, a.err)
			}
		}
	})
	defer func() {
		close(answers)
		answering.Wait()
	}()
	batch := make([]*pubReq, 0, r.batch)
	for {
		select {
		case q := <-r.queue:
			batch = append(batch[:0], q)
		fill:
			for len(batch) < r.batch {
				select {
				case q := <-r.queue:
					batch = append(batch, q)
				default:
					break fill
				}
			}
			if r.down() {
				// Queued before Redis was known unreachable: refused
				// now, not after a round trip that cannot succeed.
				answers <- r.refuse(batch)
			} else {
				answers <- r.send(batch)
			}
			clear(batch)
		case <-r.stop:
			for {
				select {
				case q := <-r.queue:
					q.done(Position{}, false, fmt.Errorf("%w: store closed", ErrUnavailable))
				default:
					return
				}
			}
		}
	}
}

// refuse answers every publish of batch with errDown.
func (r *Redis) refuse(batch []*pubReq) []answer {
	out := make([]answer, len(batch))
	for i, q := range batch {
		r.count(r.errPub)
		out[i] = answer{q: q, err: errDown}
	}
	return out
}

// send runs one batch of publish scripts in one pipeline (EVALSHA), and
// the ones Redis did not know the script for again with EVAL, and returns
// their outcomes in the order Redis ran them: the first pipeline's, then
// the retried ones'.
func (r *Redis) send(batch []*pubReq) []answer {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(batch))
	_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range batch {
			cmds[i] = publishScript.EvalSha(ctx, p, q.keys, q.args...)
		}
		return nil
	})
	var retry []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range retry {
				cmds[i] = publishScript.Eval(ctx, p, batch[i].keys, batch[i].args...)
			}
			return nil
		})
	}
	out := make([]answer, 0, len(batch))
	finish := func(i int) {
		pos, dup, err := publishResult(cmds[i])
		if err != nil {
			r.count(r.errPub)
			r.log.Warn("history: publish failed", "err", err)
		}
		out = append(out, answer{q: batch[i], pos: pos, dup: dup, err: err})
	}
	for i := range batch {
		if len(retry) == 0 || !slices.Contains(retry, i) {
			finish(i)
		}
	}
	for _, i := range retry {
		finish(i)
	}
	return out
}

func publishResult(c *redis.Cmd) (Position, bool, error) {
	v, err := c.Slice()
	if err != nil {
		return Position{}, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if len(v) != 2 {
		return Position{}, false, fmt.Errorf("%w: unexpected script reply", ErrUnavailable)
	}
	s, _ := v[0].(string)
	dup, _ := v[1].(int64)
	pos, ok := parsePosition(s)
	if !ok {
		return Position{}, false, fmt.Errorf("%w: unexpected script reply %q", ErrUnavailable, s)
	}
	return pos, dup == 1, nil
}

// parsePosition parses "epoch offset".
func parsePosition(s string) (Position, bool) {
	e, o, ok := strings.Cut(s, " ")
	off, err := strconv.ParseUint(o, 10, 64)
	if !ok || e == "" || err != nil {
		return Position{}, false
	}
	return Position{Epoch: e, Offset: off}, true
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// Newest, as Read's after, asks for the newest limit messages.
const Newest = ^uint64(0)

// Read returns topic's position and up to limit messages after after
// (Newest: the newest limit), oldest first, without those older than
// policy.TTL or that do not decode (logged). The messages' Data share one
// buffer: keeping one keeps the page.
func (r *Redis) Read(ctx context.Context, topic string, after uint64, limit int, policy Policy) (Position, []Message, error) {
	list, meta := r.keys(topic)
	newest, a := "0", strconv.FormatUint(after, 10)
	if after == Newest {
		newest, a = "1", "0"
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	// A position created by a read (an empty topic's) lives 2 ttl, at
	// least a minute: reads of made-up topics must not fill Redis for
	// metaTtl. The first publish extends it to metaTtl.
	v, err := readScript.Run(ctx, r.client, []string{list, meta}, a, limit, newEpoch(),
		max(2*policy.TTL, time.Minute).Milliseconds(), newest).Slice()
	if err != nil {
		r.count(r.errRead)
		return Position{}, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if len(v) != 3 {
		r.count(r.errRead)
		return Position{}, nil, fmt.Errorf("%w: unexpected read reply", ErrUnavailable)
	}
	epoch, _ := v[0].(string)
	var last uint64
	switch x := v[1].(type) {
	case int64:
		last = uint64(max(x, 0))
	case string:
		last, _ = strconv.ParseUint(x, 10, 64)
	}
	pos := Position{Epoch: epoch, Offset: last}
	items, _ := v[2].([]any)
	if len(items) == 0 {
		return pos, nil, nil
	}
	oldest := int64(0)
	if policy.TTL > 0 {
		oldest = time.Now().Add(-policy.TTL).UnixMilli()
	}
	// The page's data in one allocation, not one per message: a storm of
	// recoveries reads a million of them.
	size := 0
	for _, it := range items {
		s, _ := it.(string)
		size += len(s)
	}
	buf := make([]byte, 0, size)
	out := make([]Message, 0, len(items))
	for i := len(items) - 1; i >= 0; i-- {
		s, _ := items[i].(string)
		var m Message
		var err error
		m, buf, err = decodeStoredInto(buf, s)
		if err != nil {
			r.count(r.errRead)
			r.log.Warn("history: dropped a stored message that does not decode", "topic", topic)
			continue
		}
		if m.Time < oldest || m.Offset > last || (len(out) > 0 && m.Offset <= out[len(out)-1].Offset) {
			continue
		}
		out = append(out, m)
	}
	return pos, out, nil
}

func (r *Redis) count(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/metrics"
)

// RedisOptions configures a Redis bus. The zero value of every field but
// Client/URL is a documented default.
type RedisOptions struct {
	// Client is the Redis client to use: a *redis.Client for one server,
	// or a *redis.ClusterClient (sharded bus only: the single-channel bus
	// needs every instance on one server or on a cluster's global pub/sub).
	// The bus does not close it.
	Client redis.UniversalClient
	// URL is used when Client is nil: a redis:// or rediss:// URL for one
	// server (redis.ParseURL). The bus opens that client and closes it.
	URL string
	// ChannelPrefix prefixes every channel name, for multi-tenant
	// isolation. "" means no prefix; rtserver's config default is "rt:".
	ChannelPrefix string
	// InstanceID tags every envelope this instance publishes, so that its
	// own echoes are recognised and dropped. At most MaxInstanceIDLen
	// bytes. "": 16 random hex digits.
	InstanceID string
	// Metrics receives bus_* counters and the bus_degraded gauge.
	// nil: metrics.NewDiscard().
	Metrics *metrics.Metrics
	// Logger logs state changes (degraded, recovered). nil: slog.Default().
	Logger *slog.Logger
	// QueueSize bounds the publish queue, in messages: Publish drops and
	// counts (queue_full) when it is full. 0: 8192.
	QueueSize int
	// DeliverQueueSize bounds the messages received from Redis and not yet
	// handed to the Receiver. The Redis read loop never waits for the
	// Receiver: when this is full it drops and counts (slow_receiver),
	// because a stalled read loop would make Redis disconnect us and lose
	// every topic's messages, not just the slow ones. 0: 8192.
	DeliverQueueSize int
	// BatchSize is the most PUBLISH commands sent in one pipelined round
	// trip by the writer. 1 sends each message on its own. 0: 128.
	BatchSize int
	// MaxEnvelopeBytes caps a received envelope; larger ones are dropped
	// and counted (oversize). Publish refuses messages over it.
	// 0: DefaultMaxEnvelopeBytes (1 MiB of data plus the largest header).
	MaxEnvelopeBytes int
	// PingInterval is how often Redis is PINGed to notice that it is gone
	// (and back), and how long a subscription connection may stay silent
	// before it is PINGed in turn. 0: 1s.
	PingInterval time.Duration
	// PingTimeout bounds each PING. The sharded bus's Subscribe also waits
	// at most this long for Redis to confirm a new partition subscription.
	// 0: 500ms.
	PingTimeout time.Duration
	// HMACSecret, when set, signs (and time-stamps) every envelope this
	// instance publishes and makes it drop (reason malformed) every
	// received envelope that is unsigned, signed with another secret, more
	// than 30s from this instance's clock, or a control message already
	// accepted (see sign.go). Every instance of a fleet must use the same
	// secret. nil: unsigned.
	HMACSecret []byte
}

const (
	defaultQueueSize    = 8192
	defaultBatchSize    = 128
	defaultPingInterval = time.Second
	defaultPingTimeout  = 500 * time.Millisecond
	// opTimeout bounds one pipelined write. A write that takes longer marks
	// the bus degraded; the queue behind it fills and drops (counted).
	opTimeout  = 3 * time.Second
	minBackoff = 50 * time.Millisecond
)

// ErrBadTopic is returned by Publish for a topic outside the grammar or
// reserved: every receiver would drop it, so it is dropped (and counted,
// reason bad_topic) here.
var ErrBadTopic = errors.New("bus: invalid or reserved topic")

// engine is what the single-channel and the sharded Redis buses share: the
// publish queue and its pipelining writer, health (degraded) tracking, the
// pinger, the delivery queue and its goroutine. Subscription loops
// (subLoop) run on top of it.
//
// Goroutines: writer, pinger and deliverer (bg), started by start; one
// subLoop per subscription (loops). close stops loops first, then the bg
// goroutines, and waits for all.
//
// Files: this one holds the options, the engine and its life cycle;
// redis_publish.go the publish queue and writer; redis_health.go the
// pinger and degraded tracking; redis_subscribe.go the subscription loops,
// validation of received envelopes and the deliverer.
type engine struct {
	client    redis.UniversalClient
	ownClient bool
	sharded   bool // SPUBLISH/SSUBSCRIBE instead of PUBLISH/SUBSCRIBE
	id        string
	log       *slog.Logger
	maxEnv    int
	signer    *signer // nil: unsigned envelopes
	batch     int
	pingEvery time.Duration
	pingWait  time.Duration

	m                           *metrics.Metrics
	dropDegraded, dropQueueFull prometheus.Counter
	dropOversize, dropMalformed prometheus.Counter
	dropBadTopic, dropSlowRecv  prometheus.Counter

	// pubMu guards closed against Publish, so no message is queued after
	// the writer's final drain (it would be lost without being counted).
	pubMu  sync.RWMutex
	closed bool
	queue  chan outMsg

	deliver chan inMsg
	health  health

	ctx        context.Context // cancelled by close
	cancel     context.CancelFunc
	started    bool // under pubMu
	writerStop chan struct{}
	firstPing  chan struct{} // closed after the first PING has answered or failed
	bg, loops  sync.WaitGroup
}

func newEngine(o RedisOptions, sharded bool) (*engine, error) {
	e := &engine{client: o.Client, sharded: sharded, id: o.InstanceID, m: o.Metrics, log: o.Logger}
	if e.client == nil {
		if o.URL == "" {
			return nil, errors.New("bus: redis options need a Client or a URL")
		}
		ro, err := redis.ParseURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("bus: redis url: %w", err)
		}
		e.client, e.ownClient = redis.NewClient(ro), true
	}
	if e.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		e.id = hex.EncodeToString(b[:])
	}
	if len(e.id) > MaxInstanceIDLen {
		return nil, fmt.Errorf("bus: instance id longer than %d bytes", MaxInstanceIDLen)
	}
	if e.m == nil {
		e.m = metrics.NewDiscard()
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.log = e.log.With("component", "bus", "instance", e.id)
	e.maxEnv = orDefault(o.MaxEnvelopeBytes, DefaultMaxEnvelopeBytes)
	e.signer = newSigner(o.HMACSecret)
	e.batch = orDefault(o.BatchSize, defaultBatchSize)
	e.pingEvery = orDefault(o.PingInterval, defaultPingInterval)
	e.pingWait = orDefault(o.PingTimeout, defaultPingTimeout)
	e.queue = make(chan outMsg, orDefault(o.QueueSize, defaultQueueSize))
	e.deliver = make(chan inMsg, orDefault(o.DeliverQueueSize, defaultQueueSize))
	e.writerStop = make(chan struct{})
	e.firstPing = make(chan struct{})
	e.ctx, e.cancel = context.WithCancel(context.Background())

	d := e.m.BusDropped
	e.dropDegraded = d.WithLabelValues(DropDegraded)
	e.dropQueueFull = d.WithLabelValues(DropQueueFull)
	e.dropOversize = d.WithLabelValues(DropOversize)
	e.dropMalformed = d.WithLabelValues(DropMalformed)
	e.dropBadTopic = d.WithLabelValues(DropBadTopic)
	e.dropSlowRecv = d.WithLabelValues(DropSlowRecv)
	e.health.gauge = e.m.BusDegraded
	e.health.log = e.log
	e.m.BusDegraded.Set(0)
	return e, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// start hands r the state changes and messages from now on, starts the
// writer, pinger and deliverer, and calls startLoops (under pubMu, so
// that a concurrent close sees the loops it starts).
func (e *engine) start(r Receiver, startLoops func()) error {
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	switch {
	case e.closed:
		return ErrClosed
	case e.started:
		return errors.New("bus: already started")
	}
	e.started = true
	e.health.mu.Lock()
	e.health.recv = r
	e.health.mu.Unlock()
	e.bg.Add(3)
	go e.writer()
	go e.pinger()
	go e.deliverer(r)
	startLoops()
	return nil
}

// waitFirst waits, at most until ctx ends, for the first PING verdict and
// for each of extra (first subscription verdicts).
func (e *engine) waitFirst(ctx context.Context, extra ...<-chan struct{}) error {
	for _, ch := range append([]<-chan struct{}{e.firstPing}, extra...) {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// close stops everything; stopLoops must stop every subLoop (and prevent
// new ones). Idempotent.
func (e *engine) close(stopLoops func()) error {
	e.pubMu.Lock()
	if e.closed {
		e.pubMu.Unlock()
		return nil
	}
	e.closed = true
	started := e.started
	e.pubMu.Unlock()

	// No state callbacks once Close has begun: the receiver may be going
	// away too.
	e.health.mu.Lock()
	e.health.recv = nil
	e.health.mu.Unlock()

	stopLoops()
	e.cancel()
	e.loops.Wait()
	// Only loops send on deliver, and they are all gone.
	close(e.deliver)
	if started {
		close(e.writerStop)
	} else {
		// Never started: what was queued never had a way out. Count it,
		// as delivery that never came up.
		close(e.firstPing)
		e.dropDegraded.Add(float64(len(e.queue)))
	}
	e.bg.Wait()
	if e.ownClient {
		return e.client.Close()
	}
	return nil
}

func (e *engine) degraded() bool { return e.health.degraded.Load() }

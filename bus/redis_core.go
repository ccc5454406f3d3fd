package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/instance"
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
	// URL is used when Client is nil: redis.url, for NewClient (one server
	// or a Redis Cluster). The bus opens that client and closes it.
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
	// PublishQueue bounds the publish queue, in messages (redis.publishQueue):
	// the publishes waiting for a writer. 0: 8192.
	PublishQueue int
	// PublishWait is how long Publish waits for room in a full queue
	// (redis.publishWait) before it refuses the message with
	// ErrQueueFull. 0: 50ms; a negative value does not wait.
	PublishWait time.Duration
	// DeliverQueueSize bounds the messages received from Redis and not yet
	// handed to the Receiver, over all receive workers. The Redis read
	// loop never waits for the Receiver: when a worker's share is full it
	// drops, counts (slow_receiver) and tells the topic's subscribers
	// (Receiver.Gap), because a stalled read loop would make Redis
	// disconnect us and lose every topic's messages, not just the slow
	// ones. 0: 65536.
	DeliverQueueSize int
	// BatchSize is the most PUBLISH commands sent in one pipelined round
	// trip by a writer. 1 sends each message on its own. 0: 128.
	BatchSize int
	// Writers is how many pipelined round trips may be in flight at once,
	// each on its own connection. 0: 4.
	Writers int
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
	// than 30s from this instance's clock, or a control message that is
	// not new to the fleet (see sign.go and control.go). Every instance of
	// a fleet must use the same secret. nil: unsigned.
	HMACSecret []byte
}

const (
	defaultQueueSize = 8192
	// defaultDeliverQueue is the receive side's slack: a receiving
	// instance does a topic's whole fan-out per message, while its
	// sender only wrote it once, so a sender outruns it whenever its CPU
	// is taken for a moment. 64Ki messages (a few MiB of small messages)
	// ride out seconds of that; Redis's own pub/sub buffer would
	// disconnect us long before (docs/cluster.md).
	defaultDeliverQueue = 1 << 16
	defaultPublishWait  = 50 * time.Millisecond
	defaultBatchSize    = 128
	defaultWriters      = 4
	defaultPingInterval = time.Second
	defaultPingTimeout  = 500 * time.Millisecond
	// controlQueue bounds the control messages (disconnect, unsubscribe)
	// waiting for a writer, and those received and not yet handed to the
	// Receiver: their own budget, apart from data and notices, so that
	// no other traffic can take their room (control.go, notice.go). A
	// server API sends one per call.
	controlQueue = 4096
	// opTimeout bounds one pipelined write. A write that takes longer marks
	// the bus degraded; the queue behind it fills and drops (counted).
	opTimeout = 3 * time.Second
)

// ErrBadTopic is returned by Publish for a topic outside the grammar or
// reserved: every receiver would drop it, so it is dropped (and counted,
// reason bad_topic) here.
var ErrBadTopic = errors.New("bus: invalid or reserved topic")

// engine is what the single-channel and the sharded Redis buses share: the
// publish queue and its pipelining writers, health (degraded) tracking,
// the pinger, and the receive workers. Subscriptions (one per channel)
// feed the workers.
//
// Goroutines: writers, pinger and receive workers (bg), started by start;
// one Subscription per channel (loops). close stops subscriptions first,
// then the bg goroutines, and waits for all.
//
// Files: this one holds the options, the engine and its life cycle;
// redis_publish.go the publish queue and writers; redis_health.go the
// pinger and degraded tracking; redis_receive.go what a subscription hands
// the workers, validation of received envelopes and the workers;
// subscription.go the subscription itself; control.go the control
// messages and their replay guard.
type engine struct {
	client    redis.UniversalClient
	ownClient bool
	sharded   bool // SPUBLISH/SSUBSCRIBE instead of PUBLISH/SUBSCRIBE
	id        string
	log       *slog.Logger
	maxEnv    int
	signer    *signer // nil: unsigned envelopes
	ctl       *controlGuard
	batch     int
	writers   int
	wait      time.Duration // PublishWait; <= 0: no wait
	pingEvery time.Duration
	pingWait  time.Duration
	pinger1   *redis.Client // the PINGs' own connection; nil: through client
	slowPings int           // PINGs in a row that timed out; pinger only
	answered  bool          // some PING has answered; pinger only

	m                           *metrics.Metrics
	dropDegraded, dropQueueFull prometheus.Counter
	dropOversize, dropMalformed prometheus.Counter
	dropBadTopic, dropSlowRecv  prometheus.Counter
	dropNotice                  prometheus.Counter

	// pubMu guards closed against Publish, so no message is queued after
	// the writer's final drain (it would be lost without being counted).
	pubMu  sync.RWMutex
	closed bool
	queue  chan outMsg
	ctlOut chan outMsg // control messages: their own queue, served first
	// noticeOut holds notices: their own queue, so that they never take
	// a data message's room; full, it drops its oldest (notice.go).
	noticeOut chan outMsg

	workers []chan inMsg // received messages, by topic hash
	ctlIn   chan inMsg   // received control messages: their own worker
	health  health

	ctx        context.Context // cancelled by close
	cancel     context.CancelFunc
	started    bool // under pubMu
	writerStop chan struct{}
	firstPing  chan struct{} // closed after the first PING has answered or failed
	pingSoon   chan struct{} // a PING out of turn: a subscription came back
	bg, loops  sync.WaitGroup
}

func newEngine(o RedisOptions, sharded bool) (*engine, error) {
	e := &engine{client: o.Client, sharded: sharded, id: o.InstanceID, m: o.Metrics, log: o.Logger}
	if e.client == nil {
		if o.URL == "" {
			return nil, errors.New("bus: redis options need a Client or a URL")
		}
		c, err := NewClient(Config{URL: o.URL})
		if err != nil {
			return nil, err
		}
		e.client, e.ownClient = c, true
	}
	if e.id == "" {
		e.id = instance.NewID()
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
	e.writers = orDefault(o.Writers, defaultWriters)
	e.wait = o.PublishWait
	if e.wait == 0 {
		e.wait = defaultPublishWait
	}
	e.ctl = newControlGuard(e.client, o.ChannelPrefix)
	e.pingEvery = orDefault(o.PingInterval, defaultPingInterval)
	e.pingWait = orDefault(o.PingTimeout, defaultPingTimeout)
	e.pinger1 = newPingClient(e.client, e.pingWait)
	e.queue = make(chan outMsg, orDefault(o.PublishQueue, defaultQueueSize))
	e.ctlOut = make(chan outMsg, controlQueue)
	e.noticeOut = make(chan outMsg, noticeQueue)
	e.workers = newWorkerQueues(orDefault(o.DeliverQueueSize, defaultDeliverQueue))
	e.ctlIn = make(chan inMsg, controlQueue)
	e.writerStop = make(chan struct{})
	e.firstPing = make(chan struct{})
	e.pingSoon = make(chan struct{}, 1)
	e.ctx, e.cancel = context.WithCancel(context.Background())

	d := e.m.BusDropped
	e.dropDegraded = d.WithLabelValues(DropDegraded)
	e.dropQueueFull = d.WithLabelValues(DropQueueFull)
	e.dropOversize = d.WithLabelValues(DropOversize)
	e.dropMalformed = d.WithLabelValues(DropMalformed)
	e.dropBadTopic = d.WithLabelValues(DropBadTopic)
	e.dropSlowRecv = d.WithLabelValues(DropSlowRecv)
	e.dropNotice = d.WithLabelValues(DropNoticeOverflow)
	e.health.gauge = e.m.BusDegraded
	e.health.log = e.log
	e.health.init()
	return e, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// start hands r the state changes and messages from now on, starts the
// writers, pinger and receive workers, and calls startLoops (under pubMu, so
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
	e.bg.Add(2 + e.writers + len(e.workers))
	for range e.writers {
		go e.writer()
	}
	go e.pinger()
	for _, q := range e.workers {
		go e.worker(q, r)
	}
	go e.worker(e.ctlIn, r)
	startLoops()
	return nil
}

// waitFirst waits, at most until ctx ends, for the first PING verdict and
// for each of extra (first subscription verdicts). When ctx ends first the
// bus runs on: it stays degraded until Redis answers, retrying in the
// background, and the caller is not kept waiting on Redis.
func (e *engine) waitFirst(ctx context.Context, extra ...<-chan struct{}) error {
	for _, ch := range append([]<-chan struct{}{e.firstPing}, extra...) {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// close stops everything; stopLoops must stop every subscription (and
// prevent new ones). Idempotent.
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
	// Only subscriptions send to the workers, and they are all gone.
	for _, q := range e.workers {
		close(q)
	}
	close(e.ctlIn)
	if started {
		close(e.writerStop)
	} else {
		// Never started: what was queued never had a way out. Its
		// publishers hear so.
		close(e.firstPing)
		for {
			select {
			case m := <-e.queue:
				e.answer(m, ErrDegraded)
				continue
			case m := <-e.ctlOut:
				e.answer(m, ErrDegraded)
				continue
			case <-e.noticeOut:
				e.dropDegraded.Inc()
				continue
			default:
			}
			break
		}
	}
	e.bg.Wait()
	if e.pinger1 != nil {
		e.pinger1.Close()
	}
	if e.ownClient {
		return e.client.Close()
	}
	return nil
}

func (e *engine) degraded() bool { return e.health.degraded.Load() }

package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/protocol"
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

// outMsg is one queued PUBLISH.
type outMsg struct {
	channel string
	env     []byte
}

// inMsg is one message waiting for the Receiver.
type inMsg struct {
	topic   string // or, for a control message, its key
	data    []byte
	control bool
}

// engine is what the single-channel and the sharded Redis buses share: the
// publish queue and its pipelining writer, health (degraded) tracking, the
// pinger, the delivery queue and its goroutine. Subscription loops
// (subLoop) run on top of it.
//
// Goroutines: writer, pinger and deliverer (bg), started by start; one
// subLoop per subscription (loops). close stops loops first, then the bg
// goroutines, and waits for all.
type engine struct {
	client    redis.UniversalClient
	ownClient bool
	sharded   bool // SPUBLISH/SSUBSCRIBE instead of PUBLISH/SUBSCRIBE
	id        string
	log       *slog.Logger
	maxEnv    int
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

// publish validates, encodes and queues one message. It never blocks.
func (e *engine) publish(channel, topic string, data []byte) error {
	if !protocol.ValidTopic(topic) || protocol.Reserved(topic) {
		e.dropBadTopic.Inc()
		return ErrBadTopic
	}
	return e.enqueue(channel, topic, data, appendEnvelope)
}

// publishControl validates, encodes and queues one control message (see
// control.go). It never blocks.
func (e *engine) publishControl(channel, key string, data []byte) error {
	if !validControlKey(key) {
		e.dropBadTopic.Inc()
		return ErrBadTopic
	}
	return e.enqueue(channel, key, data, appendControl)
}

// enqueue encodes one envelope with encode and queues it.
func (e *engine) enqueue(channel, topic string, data []byte, encode func(dst []byte, instance, topic string, data []byte) []byte) error {
	n := envelopeLen(e.id, topic, data)
	if n > e.maxEnv {
		e.dropOversize.Inc()
		return ErrTooLarge
	}
	if e.degraded() {
		e.dropDegraded.Inc()
		return ErrDegraded
	}
	// Encoding here, on the caller's goroutine, spreads the copying over
	// the publishers and lets the caller reuse data at once.
	m := outMsg{channel: channel, env: encode(make([]byte, 0, n), e.id, topic, data)}
	e.pubMu.RLock()
	defer e.pubMu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	select {
	case e.queue <- m:
		return nil
	default:
		e.dropQueueFull.Inc()
		return ErrQueueFull
	}
}

// writer drains the publish queue, up to batch messages per round trip.
func (e *engine) writer() {
	defer e.bg.Done()
	batch := make([]outMsg, 0, e.batch)
	for {
		select {
		case m := <-e.queue:
			batch = e.fill(append(batch[:0], m))
			e.send(batch)
		case <-e.writerStop:
			// Publish can no longer queue (closed): flush what is left.
			for {
				batch = e.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				e.send(batch)
			}
		}
	}
}

// fill adds queued messages to batch, without waiting, up to its size.
func (e *engine) fill(batch []outMsg) []outMsg {
	for len(batch) < e.batch {
		select {
		case m := <-e.queue:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

func (e *engine) pubCmd(ctx context.Context, c redis.Cmdable, m outMsg) *redis.IntCmd {
	if e.sharded {
		return c.SPublish(ctx, m.channel, m.env)
	}
	return c.Publish(ctx, m.channel, m.env)
}

// send publishes one batch. Messages that do not make it are counted as
// dropped (degraded), and a failed write marks Redis unreachable until the
// next PING answers.
func (e *engine) send(batch []outMsg) {
	defer clear(batch) // let the envelopes go
	if e.degraded() {
		e.dropDegraded.Add(float64(len(batch)))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var ok int
	var err error
	if len(batch) == 1 {
		if err = e.pubCmd(ctx, e.client, batch[0]).Err(); err == nil {
			ok = 1
		}
	} else {
		var cmds []redis.Cmder
		cmds, err = e.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range batch {
				e.pubCmd(ctx, p, m)
			}
			return nil
		})
		for _, c := range cmds {
			if c.Err() == nil {
				ok++
			}
		}
	}
	e.m.BusPublished.Add(float64(ok))
	if lost := len(batch) - ok; lost > 0 {
		e.dropDegraded.Add(float64(lost))
		e.log.Warn("bus: publish failed", "lost", lost, "err", err)
		e.health.setLink(false)
	}
}

// pinger PINGs Redis at once and then every pingEvery.
func (e *engine) pinger() {
	defer e.bg.Done()
	e.ping()
	close(e.firstPing)
	t := time.NewTicker(e.pingEvery)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
			e.ping()
		}
	}
}

func (e *engine) ping() {
	ctx, cancel := context.WithTimeout(e.ctx, e.pingWait)
	defer cancel()
	var err error
	if cc, ok := e.client.(*redis.ClusterClient); ok {
		// Every master: a partition on a dead node is as bad as a dead Redis.
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = e.client.Ping(ctx).Err()
	}
	if e.ctx.Err() != nil {
		return
	}
	if err != nil {
		e.log.Debug("bus: ping failed", "err", err)
	}
	e.health.setLink(err == nil)
}

// deliverer hands received messages to r, in the order they arrived.
func (e *engine) deliverer(r Receiver) {
	defer e.bg.Done()
	for m := range e.deliver {
		if m.control {
			r.DeliverControl(m.topic, m.data)
		} else {
			r.Deliver(m.topic, m.data)
		}
	}
}

// health tracks whether cross-instance delivery is down: while the last
// PING or publish failed (link down), or while any subscription has failed
// and not been confirmed again by Redis.
type health struct {
	mu       sync.Mutex
	linkDown bool
	subsDown int
	degraded atomic.Bool // what Degraded reads: no lock on /readyz or Publish
	recv     Receiver
	gauge    prometheus.Gauge
	log      *slog.Logger
}

func (h *health) setLink(up bool) {
	h.mu.Lock()
	h.linkDown = !up
	h.update()
	h.mu.Unlock()
}

func (h *health) addSubsDown(n int) {
	h.mu.Lock()
	h.subsDown += n
	h.update()
	h.mu.Unlock()
}

// update applies a change; the Receiver hears of it under h.mu, so
// BusState calls are never reordered.
func (h *health) update() {
	d := h.linkDown || h.subsDown > 0
	if d == h.degraded.Load() {
		return
	}
	h.degraded.Store(d)
	if d {
		h.gauge.Set(1)
		h.log.Warn("bus: degraded, cross-instance delivery is down")
	} else {
		h.gauge.Set(0)
		h.log.Info("bus: recovered")
	}
	if h.recv != nil {
		h.recv.BusState(d)
	}
}

// subLoop owns one subscription (one channel, one connection) and its
// receive goroutine. go-redis redials and resubscribes by itself after a
// connection error; the loop notices failures (receive errors, a silent
// connection that does not answer its PING) and confirmations, and keeps
// health up to date. A subscription is "down" from a failure until Redis
// confirms the (re)subscription.
type subLoop struct {
	e       *engine
	channel string
	accept  func(topic string) bool // nil: every topic

	ctx    context.Context
	cancel context.CancelFunc

	// mu guards ps and stopped. A message is handed to the delivery queue
	// under mu, so none is delivered once stop has returned.
	mu      sync.Mutex
	ps      *redis.PubSub
	stopped bool

	firstOnce sync.Once
	first     chan struct{} // closed at the first confirmation or failure
	confirmed atomic.Bool   // confirmed by Redis at least once
	down      bool          // loop goroutine only
}

// newSubLoop starts a loop for channel; the caller has done e.loops.Add(1).
func newSubLoop(e *engine, channel string, accept func(string) bool) *subLoop {
	l := &subLoop{e: e, channel: channel, accept: accept, first: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(e.ctx)
	go l.run()
	return l
}

// stop ends the loop without waiting for it. Closing the connection
// unsubscribes it on the Redis side (it is this subscription's own
// connection), without waiting on a socket that may be stalled.
func (l *subLoop) stop() {
	l.cancel()
	l.mu.Lock()
	l.stopped = true
	ps := l.ps
	l.mu.Unlock()
	if ps != nil {
		_ = ps.Close() // unblocks a receive in progress
	}
}

func (l *subLoop) run() {
	defer l.e.loops.Done()
	defer func() {
		if l.down {
			l.e.health.addSubsDown(-1)
		}
		l.signalFirst()
		l.mu.Lock()
		if l.ps != nil {
			_ = l.ps.Close()
		}
		l.mu.Unlock()
	}()
	ps := l.open()
	backoff := minBackoff
	pinged := false
	for ps != nil {
		wait := l.e.pingEvery
		if pinged {
			wait = l.e.pingWait
		}
		msg, err := ps.ReceiveTimeout(l.ctx, wait)
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) {
				// Silent for a ping interval: ask. No answer within the
				// ping timeout: the connection is dead without having
				// said so; replace it.
				if !pinged {
					pinged = true
					if ps.Ping(l.ctx) == nil {
						continue
					}
				}
				l.fail(err)
				pinged = false
				if !l.sleep(&backoff) {
					return
				}
				ps = l.open()
				continue
			}
			// go-redis drops the broken connection; the next receive
			// redials and resubscribes.
			l.fail(err)
			if !l.sleep(&backoff) {
				return
			}
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			l.handle(m.Payload)
		case *redis.Subscription:
			if m.Channel != l.channel {
				continue
			}
			switch m.Kind {
			case "subscribe", "ssubscribe":
				backoff = minBackoff
				l.ok()
			case "unsubscribe", "sunsubscribe":
				// Not ours (we never unsubscribe a live loop): Redis
				// Cluster moved the slot. Subscribe again, where it is now.
				l.fail(errors.New("subscription dropped by redis"))
				ps = l.open()
			}
		}
	}
}

// open replaces the loop's PubSub with a new one subscribed to channel,
// or returns nil when the loop is stopped.
func (l *subLoop) open() *redis.PubSub {
	var ps *redis.PubSub
	if l.e.sharded {
		ps = l.e.client.SSubscribe(l.ctx) // no channels: no I/O yet
	} else {
		ps = l.e.client.Subscribe(l.ctx)
	}
	l.mu.Lock()
	old := l.ps
	if l.stopped {
		l.ps = nil
		l.mu.Unlock()
		_ = ps.Close()
		if old != nil {
			_ = old.Close()
		}
		return nil
	}
	l.ps = ps
	l.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	var err error
	if l.e.sharded {
		err = ps.SSubscribe(l.ctx, l.channel)
	} else {
		err = ps.Subscribe(l.ctx, l.channel)
	}
	// On error the channel is remembered and the next receive retries.
	if err != nil && l.ctx.Err() == nil {
		l.fail(err)
	}
	return ps
}

func (l *subLoop) sleep(backoff *time.Duration) bool {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	*backoff = min(*backoff*2, l.e.pingEvery)
	select {
	case <-t.C:
		return true
	case <-l.ctx.Done():
		return false
	}
}

func (l *subLoop) signalFirst() { l.firstOnce.Do(func() { close(l.first) }) }

func (l *subLoop) fail(err error) {
	if !l.down {
		l.down = true
		l.e.log.Warn("bus: subscription lost", "channel", l.channel, "err", err)
		l.e.health.addSubsDown(1)
	}
	l.signalFirst()
}

func (l *subLoop) ok() {
	l.confirmed.Store(true)
	if l.down {
		l.down = false
		l.e.log.Info("bus: subscription restored", "channel", l.channel)
		l.e.health.addSubsDown(-1)
	}
	l.signalFirst()
}

// handle validates one received payload and queues it for the Receiver.
func (l *subLoop) handle(p string) {
	e := l.e
	decode, control := decodeEnvelope, isControl(p)
	if control {
		decode = decodeControl
	}
	topic, data, own, reason := decode(p, e.id, e.maxEnv)
	switch {
	case own:
		return
	case reason != "":
		e.dropReceived(reason, l.channel, len(p))
		return
	}
	if l.accept != nil && !l.accept(topic) {
		// Another topic hashed into the same partition: not a drop.
		return
	}
	buf := []byte(data)
	if !validData(buf) {
		e.dropReceived(DropMalformed, l.channel, len(p))
		return
	}
	// The topic is cloned so the Receiver may keep it without pinning the
	// whole payload.
	m := inMsg{topic: strings.Clone(topic), data: buf, control: control}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	e.m.BusReceived.Inc()
	select {
	case e.deliver <- m:
	default:
		e.dropSlowRecv.Inc()
		e.log.Warn("bus: dropped a received message: delivery queue full", "reason", DropSlowRecv)
	}
}

// dropReceived counts and logs a received envelope that failed validation.
func (e *engine) dropReceived(reason, channel string, size int) {
	switch reason {
	case DropOversize:
		e.dropOversize.Inc()
	case DropBadTopic:
		e.dropBadTopic.Inc()
	default:
		e.dropMalformed.Inc()
	}
	e.log.Warn("bus: dropped a received envelope", "reason", reason, "channel", channel, "bytes", size)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

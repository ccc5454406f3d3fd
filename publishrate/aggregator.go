package publishrate

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/internal/envsign"
	"github.com/rtserver/rtserver/internal/pollconn"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

const (
	// retryMax caps the subscription's wait between retries while Redis
	// is unreachable.
	retryMax = 2 * time.Second
	logEvery = 10 * time.Second // at most one log line per kind of trouble
)

// Aggregator is one instance's view of the cluster's top publishers. See
// the package documentation.
type Aggregator struct {
	opts    Options
	id      string
	client  redis.UniversalClient
	local   Local
	live    LiveLocal // local, when its rates are live; else nil
	m       *metrics.Metrics
	log     *slog.Logger
	now     func() time.Time // Deps.now
	breaker Breaker
	maxList int // bound on each list of a received envelope
	// signer checks received envelopes (nil: no secret); its keyed MACs
	// are pooled, so it is made once.
	signer *envsign.Signer
	// Merged mode (Options.Mode): where slices and views go, and the
	// merging instance's lease.
	merged                    bool
	sliceChannel, viewChannel string
	leaseKey, epochKey        string
	leaseTTL                  time.Duration

	// The merged view's top-N and sibling count; the per-topic and
	// per-user sums are read from mg, which publishes them itself.
	top      atomic.Pointer[[]Entry]
	siblings atomic.Int64
	subs     Subscribers     // Deps.Subscribers; nil: none
	liveSubs LiveSubscribers // subs, when their counts are live; else nil

	// mu guards the merge state. Lock order: life, then mu.
	mu     sync.Mutex
	active bool
	mg     *merger
	// topStale: the merge changed since the top-N was last read off it.
	topStale bool
	latest   *pressure.Snapshot
	win      *window
	// seen is each sibling's highest accepted ts (sender's clock, ms),
	// kept after the sibling is forgotten for as long as an envelope that
	// old could still pass the clock window: a captured envelope is never
	// accepted twice. See accept.
	seen map[string]int64
	// ignored is when each instance left out by MaxInstances was last
	// heard from, for cluster_publish_rate_instances_ignored: at most
	// MaxInstances entries, forgotten after StaleAfter like siblings.
	ignored map[string]time.Time
	// Merged mode: the view held in mg (viewID) came from epoch viewEpoch
	// at viewTS (its merging instance's clock) and sums viewInstances
	// instances. fleet holds the fleet's slices once this instance has
	// been the merging instance (nil before); it drains after it steps
	// down.
	viewEpoch, viewTS int64
	viewInstances     int
	fleet             *merger

	// life serialises Start and Close.
	life   sync.Mutex
	cancel context.CancelFunc
	sub    *bus.Subscription
	// subClient is the subscriptions' own client, its connections polled
	// (nil: they share client). Set by Start before the loops start,
	// cleared by Close after they end.
	subClient *redis.Client
	wg        sync.WaitGroup
	// lead is the merging role, owned by the lead loop's goroutine.
	lead leadState
	// epochSeen is the highest epoch of a view accepted, merging is
	// whether this instance is the merging instance.
	epochSeen atomic.Int64
	merging   atomic.Bool
	// Merged mode, for lookups without the lock: whether a merged view is
	// held, and this instance's latest sample.
	viewHeld  atomic.Bool
	localSnap atomic.Pointer[pressure.Snapshot]
	// sent is what this instance's last envelope said (live rates only),
	// which a merged view holds in place of the live rates.
	sent atomic.Pointer[sentRates]

	broadcasts, publishErrors, breakerSkips      atomic.Uint64
	received, parseErrors, outdated, instIgnored atomic.Uint64
	viewsPublished                               atomic.Uint64

	logParse, logPublish, logSkip, logInstances, logClock, logLease logLimit
}

// Stats are counters kept beside the Prometheus metrics, for things
// docs/metrics.md has no metric for, and for tests.
type Stats struct {
	Broadcasts       uint64 // envelopes published (cluster_publish_rate_broadcasts_total)
	PublishErrors    uint64 // publish calls that failed
	BreakerSkips     uint64 // broadcasts skipped while the breaker was open
	Received         uint64 // sibling envelopes accepted (cluster_publish_rate_received_total)
	ParseErrors      uint64 // envelopes dropped: oversize, malformed, unsigned, forged
	Outdated         uint64 // sibling envelopes dropped: ts not newer than the last accepted from the sender, or too far from this clock (a replay)
	InstancesIgnored uint64 // envelopes from new instances past MaxInstances (cluster_publish_rate_ignored_total)
	Instances        int    // fresh siblings in the current view
	// Merged mode.
	Merging        bool   // this instance is the merging instance
	ViewsPublished uint64 // merged views it published
	ViewEpoch      int64  // epoch of the view held (0: none)
}

// New returns an inactive aggregator. It registers an OnSample listener on
// local at once, so RateOf answers this instance's own rates before
// Start and after Close.
func New(opts Options, deps Deps) (*Aggregator, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if deps, err = deps.withDefaults(opts.PublishInterval); err != nil {
		return nil, err
	}
	client, local, now := deps.Client, deps.Local, deps.now()
	a := &Aggregator{
		opts:         opts,
		id:           deps.InstanceID,
		client:       client,
		local:        local,
		m:            deps.Metrics,
		log:          deps.Logger.With("component", "publishrate", "instanceId", deps.InstanceID),
		now:          deps.now,
		breaker:      deps.Breaker,
		maxList:      max(2*opts.TopN, 64),
		signer:       envsign.New(opts.HMACSecret),
		merged:       opts.Mode == ModeMerged,
		sliceChannel: opts.Channel,
		viewChannel:  opts.Channel,
		// One hash tag: both keys in one Redis Cluster slot, for the
		// scripts that touch both.
		leaseKey: "{" + opts.Channel + "}:merger",
		epochKey: "{" + opts.Channel + "}:merger:epoch",
		leaseTTL: 3 * opts.PublishInterval / 2,
		mg:       newMerger(),
		seen:     map[string]int64{},
		ignored:  map[string]time.Time{},
		latest:   local.Snapshot(),
		win:      newWindow(max(8*opts.TopN, 256), now),
	}
	if a.merged {
		a.sliceChannel, a.viewChannel = opts.Channel+":in", opts.Channel+":view"
	}
	a.live, _ = local.(LiveLocal)
	a.sent.Store(&sentRates{})
	a.top.Store(&[]Entry{})
	a.localSnap.Store(a.latest)
	a.subs = deps.Subscribers
	a.liveSubs, _ = deps.Subscribers.(LiveSubscribers)
	a.mu.Lock()
	a.mg.setLocal(a.latest)
	a.mergeLocked(now)
	a.refreshTopLocked()
	a.mu.Unlock()
	local.OnSample(a.onSample)
	return a, nil
}

// gather is how long the subscription lets envelopes gather before
// reading them: a fiftieth of the interval (100ms by default), nothing
// next to how late a slice may arrive, and at 1,000 siblings about twenty
// envelopes per wake-up instead of one. Each wake-up costs the process
// more than the envelopes it reads (the scheduler, and sysmon polling
// for a while after), so fewer is cheaper: measured at 300 and 1,000
// siblings, a fiftieth cost a third less than a hundredth. Its
// connection is polled that often while envelopes come
// (internal/pollconn), and at most every tenth of the interval when they
// do not; over TLS and on a Redis Cluster, whose connections are not
// polled, the subscription waits this long after a wake-up instead
// (bus.SubscriptionConfig.Gather).
func (a *Aggregator) gather() time.Duration { return a.opts.PublishInterval / 50 }

// subscriptionClient returns a client of its own for the subscription,
// whose connections are polled rather than woken by each envelope that
// arrives, or nil when client is not a plain *redis.Client or speaks TLS
// (whose connections pollconn leaves alone: the subscription then needs
// the Gather wait).
func (a *Aggregator) subscriptionClient() *redis.Client {
	c, ok := a.client.(*redis.Client)
	if !ok || c.Options().TLSConfig != nil {
		return nil
	}
	opts := *c.Options()
	dial := opts.Dialer
	poll := pollconn.Poll{Min: a.gather(), Max: a.opts.PublishInterval / 10}
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return pollconn.Wrap(nc, poll), nil
	}
	// The subscription's connection is its own; keep no others.
	opts.MinIdleConns, opts.MaxIdleConns = 0, 0
	return redis.NewClient(&opts)
}

// subscribe starts a subscription to channel, through subClient when
// there is one (its connections gather envelopes themselves), else
// through client with the Gather wait.
func (a *Aggregator) subscribe(channel string, handle func(string)) *bus.Subscription {
	var client redis.UniversalClient = a.client
	gather := a.gather()
	if a.subClient != nil {
		client, gather = a.subClient, 0
	}
	return bus.Subscribe(bus.SubscriptionConfig{
		Client:  client,
		Channel: channel,
		Handle:  handle,
		// We hear our own envelopes every PublishInterval (views every
		// half interval), so a channel silent this long means a dead
		// connection: ping it.
		IdleAfter:  a.opts.StaleAfter + a.opts.PublishInterval,
		MaxBackoff: retryMax,
		Logger:     a.log,
		Gather:     gather,
	})
}

// InstanceID is the id this instance tags its envelopes with.
func (a *Aggregator) InstanceID() string { return a.id }

// Start subscribes to the channel and, once Redis has confirmed the
// subscription, starts the broadcast timer. It returns when Redis has
// confirmed, or when ctx ends first: then the aggregator keeps
// subscribing in the background (retrying while Redis is unreachable)
// and becomes active when Redis answers, and until then its view is this
// instance's own rates. Either way it runs until Close, whatever becomes
// of ctx, and rides out Redis outages on its own; Start returns nil.
// Calling it while started does nothing.
func (a *Aggregator) Start(ctx context.Context) error {
	a.life.Lock()
	if a.sub != nil {
		a.life.Unlock()
		return nil
	}
	handle := a.receive
	if a.merged {
		handle = a.receiveView
	}
	a.subClient = a.subscriptionClient()
	sub := a.subscribe(a.viewChannel, handle)
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel, a.sub = cancel, sub
	active := make(chan struct{})
	a.wg.Add(1)
	go a.activate(lctx, sub, active)
	a.life.Unlock()

	select {
	case <-active:
	case <-lctx.Done(): // Close
	case <-ctx.Done():
		a.log.Info("cluster aggregator: Redis has not confirmed the subscription yet; subscribing in the background", "channel", a.viewChannel)
	}
	return nil
}

// activate waits for Redis to confirm sub, then makes the aggregator
// active and starts its loops, which run until ctx ends (Close); it
// closes active once they have started.
func (a *Aggregator) activate(ctx context.Context, sub *bus.Subscription, active chan<- struct{}) {
	defer a.wg.Done()
	select {
	case <-sub.Ready():
	case <-ctx.Done():
		return
	}
	if ctx.Err() != nil {
		return // closed as Redis answered
	}
	subs := a.subjects()
	now := a.now()
	a.mu.Lock()
	a.active = true
	a.win.reset(now)
	a.setLocalSubsLocked(subs)
	a.mergeLocked(now)
	a.refreshTopLocked()
	a.mu.Unlock()

	a.wg.Add(1)
	go a.tickLoop(ctx)
	if a.merged {
		a.wg.Add(1)
		go a.leadLoop(ctx)
	}
	close(active)
}

// Close stops the broadcast timer and the subscriber, waits for both
// goroutines, and forgets every sibling's slice: the view falls back to
// this instance's own rates. Calling it before Start does nothing; the
// aggregator may be started again. It returns nil.
func (a *Aggregator) Close() error {
	a.life.Lock()
	defer a.life.Unlock()
	if a.sub == nil {
		return nil
	}
	a.cancel()
	a.sub.Close()
	a.wg.Wait() // the lead loop closes its subscription before returning
	if a.subClient != nil {
		a.subClient.Close()
	}
	a.cancel, a.sub, a.subClient = nil, nil, nil

	now := a.now()
	a.mu.Lock()
	a.active = false
	a.mg.dropAll()
	a.viewEpoch, a.viewTS, a.viewInstances = 0, 0, 0
	a.fleet = nil
	clear(a.ignored)
	a.m.ClusterInstancesIgnored.Set(0)
	a.mg.setLocalSubs(nil)
	a.win.reset(now)
	a.mergeLocked(now)
	a.refreshTopLocked()
	a.mu.Unlock()
	return nil
}

// TopPublishers returns the merged cluster-wide top-N topics, by messages
// per second descending (ties: bytes per second descending, then topic).
// The slice is the caller's.
func (a *Aggregator) TopPublishers() []Entry {
	a.mu.Lock()
	a.refreshTopLocked()
	a.mu.Unlock()
	return slices.Clone(*a.top.Load())
}

// RateOf is the cluster-wide messages per second of topic: the sum over
// this instance's own rate and every fresh sibling slice that carries it,
// whether or not it made the merged top-N; 0 when none does. This
// instance's own rate is the live one when the Local is a LiveLocal, else
// its latest sample. Map reads, no allocation: safe on the admission
// path.
//
// In merged mode, while a merged view is held, it is the view's rate (in
// which this instance's share is what its last envelope said) plus what
// its live rate has grown since, or its own rate if that is higher: the
// view carries the fleet's top topics only, and a topic hot here alone
// keeps at least its local rate.
func (a *Aggregator) RateOf(topic string) float64 {
	switch {
	case a.live == nil && a.merged:
		return max(a.mg.rateOf(topic), a.localSnap.Load().RateOf(topic))
	case a.live == nil:
		return a.mg.rateOf(topic)
	}
	live := a.live.RateOf(topic)
	if a.merged && a.viewHeld.Load() {
		return max(live, a.mg.rateOf(topic)+max(0, live-a.sent.Load().topics[topic]))
	}
	return a.mg.othersOf(topic) + live
}

// RateOfUser is RateOf for a user's publish attempts.
func (a *Aggregator) RateOfUser(user string) float64 {
	switch {
	case a.live == nil && a.merged:
		return max(a.mg.rateOfUser(user), a.localSnap.Load().RateOfUser(user))
	case a.live == nil:
		return a.mg.rateOfUser(user)
	}
	live := a.live.RateOfUser(user)
	if a.merged && a.viewHeld.Load() {
		return max(live, a.mg.rateOfUser(user)+max(0, live-a.sent.Load().users[user]))
	}
	return a.mg.othersOfUser(user) + live
}

// sentRates are the messages per second of this instance's last
// envelope, by topic and by user.
type sentRates struct{ topics, users map[string]float64 }

// SubscribersOf is the cluster-wide subscriber count of topic: the local
// count (live with LiveSubscribers, else the list Subjects returned on the
// last tick) plus the "subs" of every fresh sibling.
//
// In merged mode, while a merged view is held, it is the view's count, or
// the live local count if that is higher: the view has this instance's
// count of its last slice in it already.
func (a *Aggregator) SubscribersOf(topic string) int {
	n := a.mg.subscribersOf(topic)
	if a.liveSubs != nil {
		if a.merged && a.viewHeld.Load() {
			return max(n, a.liveSubs.Count(topic))
		}
		n += a.liveSubs.Count(topic)
	}
	return n
}

// Stats returns the aggregator's counters.
func (a *Aggregator) Stats() Stats {
	return Stats{
		Broadcasts:       a.broadcasts.Load(),
		PublishErrors:    a.publishErrors.Load(),
		BreakerSkips:     a.breakerSkips.Load(),
		Received:         a.received.Load(),
		ParseErrors:      a.parseErrors.Load(),
		Outdated:         a.outdated.Load(),
		InstancesIgnored: a.instIgnored.Load(),
		Instances:        int(a.siblings.Load()),
		Merging:          a.merging.Load(),
		ViewsPublished:   a.viewsPublished.Load(),
		ViewEpoch:        a.epochSeen.Load(),
	}
}

// onSample runs on the pressure monitor's sampling goroutine.
func (a *Aggregator) onSample(s *pressure.Snapshot) {
	if s == nil {
		return
	}
	now := a.now()
	a.mu.Lock()
	a.latest = s
	a.localSnap.Store(s)
	a.syncLocalLocked()
	if a.active {
		a.win.add(s, now)
	}
	a.mergeLocked(now)
	a.refreshTopLocked()
	a.forgetSeen(now)
	a.mu.Unlock()
}

// mergeLocked forgets stale siblings and publishes the sibling count; the
// merger has already published the sums. The merged top-N is left for
// refreshTopLocked. It costs what left, whatever the number of siblings
// held. a.mu is held.
func (a *Aggregator) mergeLocked(now time.Time) {
	a.mg.expire(now, a.opts.StaleAfter)
	siblings := len(a.mg.remotes)
	if a.merged {
		a.syncLocalLocked()
		siblings = 0
		held := a.viewHeldLocked()
		if held {
			siblings = max(a.viewInstances-1, 0)
		}
		a.viewHeld.Store(held)
	}
	a.siblings.Store(int64(siblings))
	a.m.ClusterInstances.Set(float64(siblings))
	a.topStale = true
}

// refreshTopLocked reads the merged top-N off the merge, if anything
// changed since, and publishes it to TopPublishers and the
// cluster_topic_publish_* gauges. It runs on every local sample and
// broadcast tick and when TopPublishers is called, not per envelope: at
// O(TopN log topics) it would be the larger part of an envelope's cost,
// for a list nothing on the admission path reads. a.mu is held.
func (a *Aggregator) refreshTopLocked() {
	if !a.topStale {
		return
	}
	a.topStale = false
	top := a.mg.top(a.opts.TopN)
	if slices.Equal(top, *a.top.Load()) {
		return
	}
	a.top.Store(&top)
	rates := make(map[string]float64, len(top))
	bytes := make(map[string]float64, len(top))
	for _, e := range top {
		rates[e.Topic] = e.MessagesPerSec
		bytes[e.Topic] = e.BytesPerSec
	}
	a.m.ClusterTopicRate.Set(rates)
	a.m.ClusterTopicBytes.Set(bytes)
}

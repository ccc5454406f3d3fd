package presence

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/rtserver/rtserver/metrics"
)

// Mode is what a topic keeps: its presence (entries in the store) and/or
// join/leave diffs for its subscribers.
type Mode struct {
	Presence  bool
	JoinLeave bool
}

func (m Mode) any() bool { return m.Presence || m.JoinLeave }

// TrackerDeps are what a Tracker uses beside its configuration. Every
// func may be nil: then that part is off.
type TrackerDeps struct {
	// Store holds the fleet's entries; nil: a MemoryStore of its own.
	Store Store
	// Mode says what topic keeps; nil: nothing (every call is a no-op).
	Mode func(topic string) Mode
	// Send hands the encoded diff of this instance's own changes on topic
	// to the other instances (a bus control message keyed Key(topic)).
	Send func(topic string, data []byte) error
	// Deliver queues a presence notification to this instance's
	// subscribers of topic and returns how many got it.
	Deliver func(topic string, notification []byte) int
	// Interest is told when topic gets this instance's first entry of a
	// JoinLeave topic (true) and loses its last (false): the server
	// declares interest in Key(topic) on the bus meanwhile.
	Interest func(topic string, on bool)
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
}

// MaxBatch is the most entries one store write carries: a refresh of n
// entries costs ceil(n/MaxBatch) round trips.
const MaxBatch = 1000

// writeTimeout bounds one store write; an entry a failed write missed is
// added by the next refresh, and one it failed to remove expires.
const writeTimeout = 2 * time.Second

// Tracker is one instance's side of presence: its connections' entries,
// written to the store by one writer goroutine in batches, refreshed every
// TTL/3, and the coalesced join/leave diffs of its topics. Create it with
// NewTracker, Start it, Close it after the last connection has left.
type Tracker struct {
	cfg   Config
	store Store
	o     TrackerDeps
	m     *metrics.Metrics
	log   *slog.Logger

	mu      sync.Mutex
	local   map[string]map[string]Entry // topic -> client -> entry: this instance's entries
	queue   []Change                    // store writes not yet made
	written chan struct{}               // closed once the queue's current changes are written
	writing chan struct{}               // closed once the write in flight is done (closedChan when none)
	diffs   coalescer
	timers  map[string]*time.Timer // armed diff timers, by topic
	entries int                    // local entries of Presence topics
	closed  bool
	started bool // Start ran: Close waits for the writer only then

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// NewTracker validates cfg and returns a tracker; nothing runs until
// Start.
func NewTracker(cfg Config, opts TrackerDeps) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Tracker{
		cfg:     cfg,
		store:   opts.Store,
		o:       opts,
		m:       opts.Metrics,
		log:     opts.Logger,
		local:   map[string]map[string]Entry{},
		written: make(chan struct{}),
		writing: closedChan,
		diffs:   newCoalescer(cfg.DiffInterval, MaxDiff),
		timers:  map[string]*time.Timer{},
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if t.store == nil {
		t.store = NewMemoryStore()
	}
	if t.m == nil {
		t.m = metrics.NewDiscard()
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	return t, nil
}

// Mode is what topic keeps.
func (t *Tracker) Mode(topic string) Mode {
	if t.o.Mode == nil {
		return Mode{}
	}
	return t.o.Mode(topic)
}

// Start starts the writer goroutine: queued writes, and a refresh of every
// entry each TTL/3. It does no I/O and never fails: the writer retries what
// the store refuses. After Close it starts nothing.
func (t *Tracker) Start(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started || t.closed {
		return nil
	}
	t.started = true
	go t.run()
	return nil
}

// Close sends what is pending (store writes, this instance's own diffs)
// and stops. Call it after every connection has left: their leaves are
// among what it sends. What the store refused is left to expire: Close
// has nothing to report.
func (t *Tracker) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	var topics []string
	for topic, tm := range t.timers {
		tm.Stop()
		topics = append(topics, topic)
	}
	started := t.started
	t.mu.Unlock()
	close(t.stop)
	if started {
		<-t.done
	}
	// The other instances must hear of the leaves now: this instance will
	// not be here to send them later.
	for _, topic := range topics {
		t.fire(topic, true)
	}
	return nil
}

// Update records changes of this instance's connections (joins when they
// subscribe, leaves when they unsubscribe or close) for topics whose Mode
// keeps anything; others are ignored. It returns at once; the channel is
// closed when the store has been written (at once when nothing was
// queued). Writes queued while one is in flight go together in the next.
func (t *Tracker) Update(changes []Change) <-chan struct{} {
	var interest []Change
	t.mu.Lock()
	written := closedChan
	for _, c := range changes {
		mode := t.Mode(c.Topic)
		if !mode.any() || !t.applyLocal(c, mode) {
			continue
		}
		if mode.Presence && !t.closed {
			t.queue = append(t.queue, c)
			written = t.written
		}
		if mode.JoinLeave {
			t.addDiff(c.Topic, []Change{c}, true)
			if len(t.local[c.Topic]) == 0 || (len(t.local[c.Topic]) == 1 && !c.Leave) {
				interest = append(interest, c)
			}
		}
	}
	t.m.PresenceEntries.Set(float64(t.entries))
	t.mu.Unlock()
	if written != closedChan {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
	if t.o.Interest != nil {
		for _, c := range interest {
			t.o.Interest(c.Topic, !c.Leave)
		}
	}
	return written
}

// Written returns a channel closed once every change queued so far has
// been written to the store (or its write failed).
func (t *Tracker) Written() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) > 0 {
		return t.written
	}
	return t.writing
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// applyLocal applies c to the local entries and reports whether it
// changed them (a repeated join or leave does not). Caller holds mu.
func (t *Tracker) applyLocal(c Change, mode Mode) bool {
	es := t.local[c.Topic]
	if c.Leave {
		if _, ok := es[c.Client]; !ok {
			return false
		}
		delete(es, c.Client)
		if len(es) == 0 {
			delete(t.local, c.Topic)
		}
		if mode.Presence {
			t.entries--
		}
		return true
	}
	if _, ok := es[c.Client]; ok {
		return false
	}
	if es == nil {
		es = map[string]Entry{}
		t.local[c.Topic] = es
	}
	es[c.Client] = c.Entry
	if mode.Presence {
		t.entries++
	}
	return true
}

// Receive takes the diff another instance sent for topic (a bus control
// message keyed Key(topic)); it reaches this instance's subscribers with
// the next diff of the topic. data that does not parse is dropped and
// reported false.
func (t *Tracker) Receive(topic string, data []byte) bool {
	var d Diff
	if err := json.Unmarshal(data, &d); err != nil || len(d.Joins)+len(d.Leaves) > MaxDiff {
		return false
	}
	if !t.Mode(topic).JoinLeave {
		return true
	}
	t.mu.Lock()
	if len(t.local[topic]) > 0 {
		t.addDiff(topic, changesOf(topic, d), false)
	}
	t.mu.Unlock()
	return true
}

// Expired takes entries the store removed because their instance stopped
// refreshing them (it died): their leaves are announced as if this
// instance's own, since their instance cannot.
func (t *Tracker) Expired(topic string, gone []Entry) {
	if !t.Mode(topic).JoinLeave {
		return
	}
	t.mu.Lock()
	t.addDiff(topic, changesOf(topic, Diff{Leaves: gone}), true)
	t.mu.Unlock()
}

// addDiff merges changes into topic's diff and arms its timer when it was
// idle. Caller holds mu.
func (t *Tracker) addDiff(topic string, changes []Change, own bool) {
	if t.closed {
		return
	}
	if t.diffs.add(topic, changes, own) {
		t.timers[topic] = time.AfterFunc(0, func() { t.fire(topic, false) })
	}
}

// fire sends topic's pending diff: this instance's own part to the other
// instances, all of it to the local subscribers; then waits an interval
// before the next (final: at Close, once, without re-arming).
func (t *Tracker) fire(topic string, final bool) {
	t.mu.Lock()
	if t.closed && !final {
		t.mu.Unlock()
		return
	}
	all, own, again := t.diffs.take(topic)
	if again && !final {
		t.timers[topic].Reset(t.cfg.DiffInterval)
	} else {
		delete(t.timers, topic)
	}
	t.mu.Unlock()
	if !own.empty() && t.o.Send != nil {
		data, _ := json.Marshal(own)
		if err := t.o.Send(topic, data); err != nil {
			t.log.Warn("presence: diff not sent to the other instances", "topic", topic, "err", err)
		}
	}
	if !all.empty() && t.o.Deliver != nil {
		if n := t.o.Deliver(topic, appendNotification(nil, topic, all)); n > 0 {
			t.m.PresenceDiffsSent.Add(float64(n))
		}
	}
}

// Stats counts topic's entries across the fleet.
func (t *Tracker) Stats(ctx context.Context, topic string) (Stats, error) {
	return t.store.Stats(ctx, topic)
}

// Page lists a page (at most MaxPage) of topic's entries after cursor.
func (t *Tracker) Page(ctx context.Context, topic, cursor string) (Page, error) {
	return t.store.Page(ctx, topic, cursor, MaxPage)
}

// Entries is the number of this instance's entries in presence topics.
func (t *Tracker) Entries() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.entries
}

// run is the writer: it writes queued changes as soon as it can, and
// every TTL/3 refreshes every entry of this instance.
func (t *Tracker) run() {
	defer close(t.done)
	tick := time.NewTicker(t.cfg.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			t.flush()
			return
		case <-t.kick:
			t.flush()
		case <-tick.C:
			t.flush()
			t.refresh()
		}
	}
}

// flush writes the queued changes in one round trip.
func (t *Tracker) flush() {
	t.mu.Lock()
	q, written := t.queue, t.written
	if len(q) == 0 {
		t.mu.Unlock()
		return
	}
	t.queue, t.written, t.writing = nil, make(chan struct{}), written
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		if t.writing == written {
			t.writing = closedChan
		}
		t.mu.Unlock()
		close(written)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := t.store.Apply(ctx, q); err != nil {
		t.log.Warn("presence: store write failed; the next refresh repairs it", "changes", len(q), "err", err)
	}
}

// refresh re-adds every entry of this instance with a new expiry, MaxBatch
// entries per round trip. The writer is the only goroutine that writes, so
// a leave queued after the snapshot is written after it.
func (t *Tracker) refresh() {
	t.mu.Lock()
	all := make([]Change, 0, t.entries)
	for topic, es := range t.local {
		if !t.Mode(topic).Presence {
			continue
		}
		for _, e := range es {
			all = append(all, Change{Topic: topic, Entry: e})
		}
	}
	t.mu.Unlock()
	for len(all) > 0 {
		n := min(len(all), MaxBatch)
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		if err := t.store.Apply(ctx, all[:n]); err != nil {
			t.log.Warn("presence: refresh failed; entries expire unless the next one succeeds", "entries", n, "err", err)
		}
		cancel()
		all = all[n:]
	}
}

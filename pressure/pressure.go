package pressure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtserver/rtserver/metrics"
)

// Reason is the active pressure reason. Priority: MEMORY > BUS >
// PUBLISH_RATE > SUBSCRIBERS > NONE.
type Reason uint8

const (
	None Reason = iota
	Memory
	PublishRate
	Subscribers
	// Bus: the cross-instance bus refused a publish during the last
	// sample interval (its send queue stayed full, or Redis is down).
	Bus
)

// numReasons is the number of Reason values, NONE included.
const numReasons = 5

func (r Reason) String() string {
	switch r {
	case Memory:
		return "MEMORY"
	case PublishRate:
		return "PUBLISH_RATE"
	case Subscribers:
		return "SUBSCRIBERS"
	case Bus:
		return "BUS"
	}
	return "NONE"
}

// ParseReason parses MEMORY, PUBLISH_RATE, SUBSCRIBERS or BUS.
func ParseReason(s string) (Reason, bool) {
	switch s {
	case "MEMORY":
		return Memory, true
	case "PUBLISH_RATE":
		return PublishRate, true
	case "SUBSCRIBERS":
		return Subscribers, true
	case "BUS":
		return Bus, true
	}
	return None, false
}

// TopicRate is one topic's publish rate over the sample interval.
type TopicRate struct {
	Topic          string
	MessagesPerSec float64
	BytesPerSec    float64
}

// UserRate is one user's publish rate over the sample interval.
type UserRate struct {
	User           string
	MessagesPerSec float64
	BytesPerSec    float64
}

// Snapshot is an immutable sample. Never modify one you loaded.
type Snapshot struct {
	At              time.Time
	Reason          Reason
	MemoryRatio     float64 // heap in use / memory limit (0 when no limit is known)
	HeapInUse       uint64  // bytes in heap objects (live + not yet swept); see doc.go
	MemoryLimit     uint64  // GOMEMLIMIT, else Config.MemoryLimitBytes, else cgroup memory.max; 0 = none
	RSS             uint64  // resident set size (Linux /proc/self/statm; 0 elsewhere)
	PublishRate     float64 // messages published per second (local + from the bus)
	BusSheds        int64   // publishes the bus refused in the interval (BUS when > 0)
	Connections     int64
	Subscriptions   int64
	SubscriberRatio float64       // subscriptions / connections (0 with no connections)
	SchedLatencyP99 time.Duration // p99 goroutine scheduling latency over the last interval
	GCCPUFraction   float64       // share of available CPU spent in GC over the last interval
	TopTopics       []TopicRate   // by publish attempts, descending, at most topN
	TopUsers        []UserRate

	// Publish attempts in the interval that could not be attributed to a
	// topic (or user) because Config.maxTrackedKeys distinct names had
	// already been seen in that interval.
	UntrackedTopicAttempts int64
	UntrackedUserAttempts  int64
}

// RateOf is the topic's attempts per second if it is in TopTopics, else 0.
func (s *Snapshot) RateOf(topic string) float64 {
	for i := range s.TopTopics {
		if s.TopTopics[i].Topic == topic {
			return s.TopTopics[i].MessagesPerSec
		}
	}
	return 0
}

// RateOfUser is the user's attempts per second if in TopUsers, else 0.
func (s *Snapshot) RateOfUser(user string) float64 {
	for i := range s.TopUsers {
		if s.TopUsers[i].User == user {
			return s.TopUsers[i].MessagesPerSec
		}
	}
	return 0
}

// Monitor samples pressure. Create it with New; the zero value is not
// usable. Recording and Snapshot are safe from any goroutine.
type Monitor struct {
	snap      atomic.Pointer[Snapshot]
	published atomic.Int64
	busSheds  atomic.Int64
	// The live connection and subscription counts, kept by whoever serves
	// them (AddConnections, AddSubscriptions).
	connections, subscriptions atomic.Int64
	topics                     *table
	users                      *table

	// now is the live bucket's middle (Unix ns), kept by the sampling
	// goroutine every 100 ms while started, so that recording an attempt
	// reads no clock; 0: not started, read the clock.
	now atomic.Int64

	cfg   Config
	log   *slog.Logger
	clock func() time.Time // Deps.now

	// life guards the sampler's start and stop.
	life          sync.Mutex
	stop, stopped chan struct{}
	closed        bool

	// Metric handles, nil when New got nil metrics.
	reasonGauges [numReasons]prometheus.Gauge
	publishRate  prometheus.Gauge
	memoryRatio  prometheus.Gauge
	topicRate    *metrics.TopN

	lmu       sync.Mutex // guards the listener slices (copy on write)
	onReason  []func(old, new Reason)
	onHot     []func(TopicRate, bool)
	onSample  []func(*Snapshot)
	listeners atomic.Pointer[listenerSet]

	// Sampler state, guarded by smu: only one sample runs at a time.
	smu         sync.Mutex
	readRuntime func() runtimeStats // replaced by tests
	last        time.Time
	active      [numReasons]bool  // per reason, with hysteresis
	hot         map[string]uint64 // topics currently hot -> gen of the sample that last saw them
	gen         uint64
	keepTopics  map[string]struct{}
	keepUsers   map[string]struct{}
	buf         []entry
	overflowing bool // the key bound was hit in the last sample
}

type listenerSet struct {
	reason []func(old, new Reason)
	hot    []func(TopicRate, bool)
	sample []func(*Snapshot)
}

// Deps are what a monitor uses beside its configuration.
type Deps struct {
	Metrics *metrics.Metrics // nil: no metrics
	Logger  *slog.Logger     // nil: slog.Default()

	// now stamps samples and measures the interval between them; nil:
	// time.Now. This package's tests step it.
	now func() time.Time
}

// New validates cfg and returns a monitor. It does not start sampling:
// call Start, or Sample.
func New(cfg Config, deps Deps) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, log := deps.Metrics, deps.Logger
	if log == nil {
		log = slog.Default()
	}
	mon := &Monitor{
		topics:     newLiveBytesTable(cfg.maxTrackedKeys),
		users:      newTable(cfg.maxTrackedKeys),
		cfg:        cfg,
		log:        log,
		clock:      deps.now,
		hot:        make(map[string]uint64),
		keepTopics: make(map[string]struct{}),
		keepUsers:  make(map[string]struct{}),
	}
	if mon.clock == nil {
		mon.clock = time.Now
	}
	mon.readRuntime = newRuntimeReader(cfg.MemoryLimitBytes).read
	if m != nil {
		for r := range Reason(numReasons) {
			mon.reasonGauges[r] = m.PressureReason.WithLabelValues(r.String())
		}
		mon.reasonGauges[None].Set(1)
		mon.publishRate = m.PressurePublishRate
		mon.memoryRatio = m.PressureMemoryRatio
		mon.topicRate = m.TopicPublishRate
	}
	mon.last = mon.clock()
	mon.snap.Store(&Snapshot{At: mon.last})
	mon.listeners.Store(&listenerSet{})
	return mon, nil
}

// Snapshot returns the latest sample (one atomic load; never nil).
func (m *Monitor) Snapshot() *Snapshot { return m.snap.Load() }

// RecordAttempt counts a publish attempt that reached the message tier
// (admitted or not), for the top publishers by topic and by user. An empty
// user is counted by topic only. On a topic and user already tracked it is
// two lock-free map lookups and eight atomic adds (the interval's counts
// and the live rings of RateOf), with no clock read while the monitor
// runs (Start), and allocates nothing; bytes below 0 count as 0.
func (m *Monitor) RecordAttempt(topic, user string, bytes int) {
	b := int64(max(bytes, 0))
	tick := tickOf(m.liveNow())
	m.topics.record(topic, b, tick)
	if user != "" {
		m.users.record(user, b, tick)
	}
}

// RecordBusShed counts a publish the cross-instance bus refused, for BUS:
// one atomic add.
func (m *Monitor) RecordBusShed() {
	m.busSheds.Add(1)
}

// AddConnections adds n (negative: takes -n) to the live connection
// count that each sample reads (Snapshot.Connections, SUBSCRIBERS): the
// server adds one per connection it registers and takes it when the
// connection ends. One atomic add.
func (m *Monitor) AddConnections(n int64) { m.connections.Add(n) }

// AddSubscriptions adds n (negative: takes -n) to the live subscription
// count that each sample reads (Snapshot.Subscriptions, SUBSCRIBERS), as
// AddConnections does for connections.
func (m *Monitor) AddSubscriptions(n int64) { m.subscriptions.Add(n) }

// Subscriptions is the live subscription count as added so far, not as
// of the last sample: what a server that counts its subscriptions only
// here reports. One atomic load.
func (m *Monitor) Subscriptions() int64 { return m.subscriptions.Load() }

// RecordPublished counts n messages actually published (locally, or
// arriving from the bus), for PUBLISH_RATE.
func (m *Monitor) RecordPublished(n int) {
	m.published.Add(int64(n))
}

// OnReasonChange registers a listener called after a sample changes the
// reason. Listeners run on the sampling goroutine, must not block, and must
// not call Sample.
func (m *Monitor) OnReasonChange(f func(old, new Reason)) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	m.onReason = append(m.onReason[:len(m.onReason):len(m.onReason)], f)
	m.publishListeners()
}

// OnTopicHot registers a listener called when a topic crosses (hot=true) or
// falls back below (hot=false) a topic threshold. A hot topic stays hot
// until both its message and byte rates are below their thresholds times
// (1-hysteresis); a hot topic that stops publishing is reported with zero
// rates.
func (m *Monitor) OnTopicHot(f func(t TopicRate, hot bool)) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	m.onHot = append(m.onHot[:len(m.onHot):len(m.onHot)], f)
	m.publishListeners()
}

// OnSample registers a listener called with every new snapshot.
func (m *Monitor) OnSample(f func(*Snapshot)) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	m.onSample = append(m.onSample[:len(m.onSample):len(m.onSample)], f)
	m.publishListeners()
}

// publishListeners swaps in an immutable copy of the listener lists, so the
// sampler reads them without a lock. Called with lmu held.
func (m *Monitor) publishListeners() {
	m.listeners.Store(&listenerSet{reason: m.onReason, hot: m.onHot, sample: m.onSample})
}

// Start starts sampling every SampleInterval, on a goroutine of its own,
// until Close. The first sample is one interval after Start, so the first
// rates cover a whole interval. ctx is not kept: sampling needs nothing
// that could keep Start waiting.
func (m *Monitor) Start(context.Context) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.stop != nil {
		return errors.New("pressure: already started")
	}
	m.stop, m.stopped = make(chan struct{}), make(chan struct{})
	m.keepNow()
	go m.run(m.stop, m.stopped)
	return nil
}

// Close stops sampling and waits for the sampler to end. It returns nil;
// closing a monitor that never started does nothing.
func (m *Monitor) Close() error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.stop == nil || m.closed {
		return nil
	}
	m.closed = true
	close(m.stop)
	<-m.stopped
	m.now.Store(0)
	return nil
}

func (m *Monitor) run(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(m.cfg.SampleInterval)
	defer t.Stop()
	live := time.NewTicker(liveBucket)
	defer live.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			m.Sample()
		case <-live.C:
			m.keepNow()
		}
	}
}

// hotEvent is one OnTopicHot notification, queued until after the snapshot
// is stored.
type hotEvent struct {
	t   TopicRate
	hot bool
}

// Sample takes one sample now: it reads the runtime and the counters,
// stores the new snapshot, updates the metrics, then runs the listeners
// (reason change, then topic hot/cold in topic order, then OnSample).
func (m *Monitor) Sample() {
	m.smu.Lock()
	defer m.smu.Unlock()

	now := m.clock()
	elapsed := now.Sub(m.last).Seconds()
	if elapsed <= 0 {
		// A clock that stood still or stepped back: rate over the nominal
		// interval rather than divide by zero.
		elapsed = m.cfg.SampleInterval.Seconds()
	}
	m.last = now

	rt := m.readRuntime()
	conns, subs := m.connections.Load(), m.subscriptions.Load()
	s := &Snapshot{
		At:              now,
		HeapInUse:       rt.HeapInUse,
		MemoryLimit:     rt.MemoryLimit,
		RSS:             rt.RSS,
		PublishRate:     float64(m.published.Swap(0)) / elapsed,
		BusSheds:        m.busSheds.Swap(0),
		Connections:     conns,
		Subscriptions:   subs,
		SchedLatencyP99: rt.SchedP99,
		GCCPUFraction:   rt.GCCPUFraction,
	}
	if rt.MemoryLimit > 0 {
		s.MemoryRatio = float64(rt.HeapInUse) / float64(rt.MemoryLimit)
	}
	if conns > 0 {
		s.SubscriberRatio = float64(subs) / float64(conns)
	}
	s.Reason = m.reason(s)

	var events []hotEvent
	tick := tickOf(now.UnixNano())
	s.TopTopics, s.UntrackedTopicAttempts, events = m.sampleTopics(elapsed, tick)
	s.TopUsers, s.UntrackedUserAttempts = m.sampleUsers(elapsed, tick)

	m.logOverflow(s)
	old := m.snap.Swap(s).Reason
	m.setMetrics(s)
	m.notify(old, s, events)
}

// reason updates the per-reason active flags and returns the highest
// priority active reason.
func (m *Monitor) reason(s *Snapshot) Reason {
	vals := [numReasons]float64{Memory: s.MemoryRatio, PublishRate: s.PublishRate, Subscribers: s.SubscriberRatio}
	thrs := [numReasons]float64{Memory: m.cfg.MemoryHeapUsedRatio, PublishRate: m.cfg.PublishRatePerSec, Subscribers: m.cfg.SubscriberRatio}
	reason := None
	for r := Subscribers; r >= Memory; r-- {
		m.active[r] = m.over(m.active[r], vals[r], thrs[r])
		if m.active[r] {
			reason = r
		}
	}
	// BUS has no threshold and no hysteresis: the bus refusing publishes
	// is itself the signal. It ranks below MEMORY only.
	m.active[Bus] = s.BusSheds > 0
	if m.active[Bus] && reason != Memory {
		reason = Bus
	}
	return reason
}

// over says whether a value is over its threshold, given whether it was
// before: it turns on at >= thr and, once on, turns off only below
// thr*(1-hysteresis). A threshold <= 0 is off.
func (m *Monitor) over(was bool, v, thr float64) bool {
	if thr <= 0 {
		return false
	}
	if was {
		return v >= thr*(1-m.cfg.hysteresis)
	}
	return v >= thr
}

// better orders entries by messages descending, then by key, so that the
// top-N is deterministic.
func better(a, b entry) int {
	if c := cmp.Compare(b.msgs, a.msgs); c != 0 {
		return c
	}
	return cmp.Compare(a.key, b.key)
}

// topEntries sorts the best n of buf to its front and returns them.
func topEntries(buf []entry, n int) []entry {
	slices.SortFunc(buf, better)
	return buf[:min(n, len(buf))]
}

func (m *Monitor) sampleTopics(elapsed float64, tick int64) ([]TopicRate, int64, []hotEvent) {
	var over int64
	m.buf, over = m.topics.drain(m.buf)

	// Hot topics: every topic seen this interval is checked, not only the
	// top-N, since a topic can be hot by bytes with few messages.
	var events []hotEvent
	rateThr, bytesThr := m.cfg.TopicPublishRatePerSec, m.cfg.TopicPublishBytesPerSec
	m.gen++
	for _, e := range m.buf {
		tr := TopicRate{Topic: e.key, MessagesPerSec: float64(e.msgs) / elapsed, BytesPerSec: float64(e.bytes) / elapsed}
		_, was := m.hot[e.key]
		is := m.over(was, tr.MessagesPerSec, rateThr) || m.over(was, tr.BytesPerSec, bytesThr)
		switch {
		case is:
			m.hot[e.key] = m.gen
			if !was {
				events = append(events, hotEvent{t: tr, hot: true})
			}
		case was:
			delete(m.hot, e.key)
			events = append(events, hotEvent{t: tr, hot: false})
		}
	}
	for k, g := range m.hot {
		if g != m.gen {
			// Hot, but published nothing this interval: it has cooled.
			delete(m.hot, k)
			events = append(events, hotEvent{t: TopicRate{Topic: k}, hot: false})
		}
	}
	slices.SortFunc(events, func(a, b hotEvent) int { return cmp.Compare(a.t.Topic, b.t.Topic) })

	top := topEntries(m.buf, m.cfg.TopN)
	out := make([]TopicRate, len(top))
	clear(m.keepTopics)
	for i, e := range top {
		out[i] = TopicRate{Topic: e.key, MessagesPerSec: float64(e.msgs) / elapsed, BytesPerSec: float64(e.bytes) / elapsed}
		m.keepTopics[e.key] = struct{}{}
	}
	// Hot topics keep their counters too, so they stay tracked however
	// many new names arrive.
	for k := range m.hot {
		m.keepTopics[k] = struct{}{}
	}
	m.topics.prune(m.keepTopics, tick)
	clear(m.buf) // drop key references held by the scratch buffer
	return out, over, events
}

func (m *Monitor) sampleUsers(elapsed float64, tick int64) ([]UserRate, int64) {
	var over int64
	m.buf, over = m.users.drain(m.buf)
	top := topEntries(m.buf, m.cfg.TopN)
	out := make([]UserRate, len(top))
	clear(m.keepUsers)
	for i, e := range top {
		out[i] = UserRate{User: e.key, MessagesPerSec: float64(e.msgs) / elapsed, BytesPerSec: float64(e.bytes) / elapsed}
		m.keepUsers[e.key] = struct{}{}
	}
	m.users.prune(m.keepUsers, tick)
	clear(m.buf)
	return out, over
}

// logOverflow says, once per episode rather than once per sample, that the
// key bound is dropping names: top publishers are then incomplete.
func (m *Monitor) logOverflow(s *Snapshot) {
	over := s.UntrackedTopicAttempts > 0 || s.UntrackedUserAttempts > 0
	switch {
	case over && !m.overflowing:
		m.log.Warn("pressure: too many distinct publishers, some are not tracked",
			"maxTrackedKeys", m.cfg.maxTrackedKeys,
			"untrackedTopicAttempts", s.UntrackedTopicAttempts,
			"untrackedUserAttempts", s.UntrackedUserAttempts)
	case !over && m.overflowing:
		m.log.Info("pressure: every publisher is tracked again")
	}
	m.overflowing = over
}

func (m *Monitor) setMetrics(s *Snapshot) {
	if m.publishRate == nil {
		return
	}
	for r, g := range m.reasonGauges {
		if Reason(r) == s.Reason {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
	m.publishRate.Set(s.PublishRate)
	m.memoryRatio.Set(s.MemoryRatio)
	top := make(map[string]float64, len(s.TopTopics))
	for _, t := range s.TopTopics {
		top[t.Topic] = t.MessagesPerSec
	}
	m.topicRate.Set(top)
}

func (m *Monitor) notify(old Reason, s *Snapshot, events []hotEvent) {
	ls := m.listeners.Load()
	if old != s.Reason {
		for _, f := range ls.reason {
			m.safely("OnReasonChange", func() { f(old, s.Reason) })
		}
	}
	for _, e := range events {
		for _, f := range ls.hot {
			m.safely("OnTopicHot", func() { f(e.t, e.hot) })
		}
	}
	for _, f := range ls.sample {
		m.safely("OnSample", func() { f(s) })
	}
}

// safely runs one listener; a panic is logged and does not stop the other
// listeners or the monitor.
func (m *Monitor) safely(kind string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			m.log.Error("pressure: listener panicked", "listener", kind, "panic", fmt.Sprint(v))
		}
	}()
	f()
}

package publishrate

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

// The aggregator is the admission tier's cluster rate source, and the
// pressure monitor is its local source.
var (
	_ message.RateSource = (*Aggregator)(nil)
	_ Local              = (*pressure.Monitor)(nil)
)

// fakeLocal is a pressure source the test drives by hand.
type fakeLocal struct {
	mu   sync.Mutex
	snap *pressure.Snapshot
	fns  []func(*pressure.Snapshot)
}

func newFakeLocal(topics ...pressure.TopicRate) *fakeLocal {
	return &fakeLocal{snap: &pressure.Snapshot{TopTopics: topics}}
}

func (f *fakeLocal) Snapshot() *pressure.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap
}

func (f *fakeLocal) OnSample(fn func(*pressure.Snapshot)) {
	f.mu.Lock()
	f.fns = append(f.fns, fn)
	f.mu.Unlock()
}

// emit publishes a new sample to every listener, like Monitor.Sample.
func (f *fakeLocal) emit(s *pressure.Snapshot) {
	f.mu.Lock()
	f.snap = s
	fns := f.fns
	f.mu.Unlock()
	for _, fn := range fns {
		fn(s)
	}
}

// testEpoch is where every test clock starts. Envelopes made by env carry
// ts offsets from it, so they are within the clock window of a receiver
// on a test clock.
var testEpoch = time.UnixMilli(testEpochMs)

// testEpochMs is testEpoch as an envelope ts; testTS is one ms later.
const (
	testEpochMs = 1_700_000_000_000
	testTS      = testEpochMs + 1
)

var discardLog = slog.New(slog.DiscardHandler)

// deadClient points at a port nobody listens on: tests that never reach
// Redis use it, and a publish through it fails fast.
func deadClient(t testing.TB) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newOffline returns an aggregator that is marked active but has no Redis
// goroutines: tests feed it payloads with receive and call collect.
func newOffline(t testing.TB, local Local, opts Options, deps Deps) *Aggregator {
	t.Helper()
	if deps.Logger == nil {
		deps.Logger = discardLog
	}
	if deps.now == nil {
		deps.now = testkit.NewClock(testEpoch).Now
	}
	if opts.Mode == "" {
		opts.Mode = ModeBroadcast // the tests of broadcast mode name none
	}
	deps.Client, deps.Local = deadClient(t), local
	a, err := New(opts, deps)
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.active = true
	a.win.reset(a.now())
	a.mu.Unlock()
	return a
}

// env marshals an unsigned envelope from id, ts milliseconds after
// testEpoch, with the given slice.
func env(t testing.TB, id string, ts int64, slice ...wireTopic) []byte {
	t.Helper()
	b, err := marshalEnvelope(&envelope{V: 1, InstanceID: id, TS: testEpochMs + ts, Slice: slice, Users: []wireUser{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gatheredMetrics is metrics on a registry of their own, for the tests
// that read the exposition.
func gatheredMetrics(t testing.TB) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "")
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// topicGauge reads a topic-labelled gauge family from the registry.
func topicGauge(t testing.TB, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "topic" {
					out[l.GetValue()] = s.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

func value(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// subjectList is Subscribers whose Subjects is the function (nil: none).
type subjectList func() []SubjectCount

func (f subjectList) Subjects() []SubjectCount {
	if f == nil {
		return nil
	}
	return f()
}

// liveCounts is LiveSubscribers: list answers Subjects, count Count.
type liveCounts struct {
	list  subjectList
	count func(topic string) int
}

func (l liveCounts) Subjects() []SubjectCount { return l.list.Subjects() }
func (l liveCounts) Count(topic string) int   { return l.count(topic) }

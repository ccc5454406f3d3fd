package publishrate

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/envsign"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

// view marshals a merged view from merging instance id, ts milliseconds
// after testEpoch.
func view(t testing.TB, id string, epoch, ts int64, instances int, slice ...wireTopic) string {
	t.Helper()
	b, err := marshalEnvelope(&envelope{V: viewVersion, InstanceID: id, TS: testEpochMs + ts, Epoch: epoch, Instances: instances,
		Slice: slice, Users: []wireUser{{"spread", 30}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMergedViewReplacesOwnRatesAndFencesEpochs(t *testing.T) {
	clk := testkit.NewClock(testEpoch)
	local := newFakeLocal(pressure.TopicRate{Topic: "hot", MessagesPerSec: 50})
	a := newOffline(t, local, Options{Mode: ModeMerged}, Deps{now: clk.Now})
	if got := a.RateOf("hot"); got != 50 {
		t.Fatalf("before any view RateOf = %v, want the own 50", got)
	}

	// The view has this instance's rates in it: they are not added twice.
	a.receiveView(view(t, "M", 5, 10, 3, wireTopic{"hot", 1200, 10, 3}))
	if got, inst := a.RateOf("hot"), a.Stats().Instances; got != 1200 || inst != 2 {
		t.Fatalf("with a view RateOf = %v, instances %d; want 1200 and 2", got, inst)
	}
	local.emit(&pressure.Snapshot{TopTopics: []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 70}}})
	if got := a.RateOf("hot"); got != 1200 {
		t.Fatalf("a local sample changed the merged view: RateOf = %v", got)
	}
	if got := a.RateOfUser("spread"); got != 30 {
		t.Errorf("RateOfUser = %v, want 30", got)
	}
	// A topic hot here alone, not in the fleet's top: its local rate.
	local.emit(&pressure.Snapshot{TopTopics: []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 70}, {Topic: "mine", MessagesPerSec: 40}}})
	if got, hot := a.RateOf("mine"), a.RateOf("hot"); got != 40 || hot != 1200 {
		t.Errorf("RateOf(mine) = %v, RateOf(hot) = %v; want the local 40 and the view's 1200", got, hot)
	}
	if top := a.TopPublishers(); len(top) != 1 || top[0] != (Entry{"hot", 1200, 10, 3}) {
		t.Errorf("TopPublishers = %v", top)
	}

	// A lower epoch (a merger that lost its lease), or the same epoch and
	// not newer, is refused while the view held is fresh.
	for _, v := range []string{
		view(t, "old", 4, 20, 3, wireTopic{"hot", 1, 1, 1}),
		view(t, "M", 5, 10, 3, wireTopic{"hot", 2, 1, 1}),
	} {
		a.receiveView(v)
	}
	if got, st := a.RateOf("hot"), a.Stats(); got != 1200 || st.Outdated != 2 {
		t.Fatalf("after outdated views RateOf = %v, outdated %d; want 1200 and 2", got, st.Outdated)
	}
	a.receiveView(view(t, "N", 6, 15, 4, wireTopic{"hot", 900, 10, 4}))
	if got, st := a.RateOf("hot"), a.Stats(); got != 900 || st.ViewEpoch != 6 || st.Instances != 3 {
		t.Fatalf("a higher epoch: RateOf = %v, %+v", got, st)
	}

	// The view goes stale: this instance's own rates alone again, and
	// then any epoch is taken.
	clk.Advance(DefaultStaleAfter)
	local.emit(&pressure.Snapshot{TopTopics: []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 70}}})
	if got, inst := a.RateOf("hot"), a.Stats().Instances; got != 70 || inst != 0 {
		t.Fatalf("stale view: RateOf = %v, instances %d; want the own 70 and 0", got, inst)
	}
	a.receiveView(view(t, "old", 4, DefaultStaleAfter.Milliseconds(), 2, wireTopic{"hot", 100, 1, 2}))
	if got := a.RateOf("hot"); got != 100 {
		t.Fatalf("after the stale view, a lower epoch: RateOf = %v, want 100", got)
	}
}

func TestViewAndSliceSignaturesDiffer(t *testing.T) {
	secret := []byte("fleet")
	a := newOffline(t, newFakeLocal(), Options{Mode: ModeMerged, HMACSecret: secret}, Deps{})
	// A slice signed by a fleet member is not a view, however it is
	// dressed up: the domains differ.
	b, _ := marshalEnvelope(&envelope{V: viewVersion, InstanceID: "M", TS: testTS, Epoch: 1, Instances: 1}, nil)
	slice := sign(envsign.New(secret), domainOf(envelopeVersion), b)
	a.receiveView(string(slice))
	if st := a.Stats(); st.ParseErrors != 1 || st.ViewEpoch != 0 {
		t.Fatalf("a view signed as a slice: %+v", st)
	}
	good, _ := marshalEnvelope(&envelope{V: viewVersion, InstanceID: "M", TS: testTS, Epoch: 1, Instances: 1}, secret)
	a.receiveView(string(good))
	if st := a.Stats(); st.ViewEpoch != 1 {
		t.Fatalf("a signed view refused: %+v", st)
	}
}

// mergedNode is a node in merged mode with a Redis client of its own, so
// a test can cut it off.
func mergedNode(t *testing.T, srv *redistest.Server, id string, local Local) (node, *redis.Client) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	m := metrics.NewDiscard()
	a, err := New(Options{
		Mode: ModeMerged, PublishInterval: testInterval, StaleAfter: testStale,
		HMACSecret: []byte("fleet"),
	}, Deps{
		Client: c, Local: local, InstanceID: id, Metrics: m, Logger: discardLog,
		Breaker: NewBreaker(3, testInterval, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return node{a, m}, c
}

// merging is the one node that merges, or nil when none or several do.
func merging(nodes ...node) *node {
	var out *node
	for i := range nodes {
		if nodes[i].agg.Stats().Merging {
			if out != nil {
				return nil
			}
			out = &nodes[i]
		}
	}
	return out
}

func TestMergedModeOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	// A user whose rate is spread evenly over the fleet, and a topic hot
	// on two of the three.
	sample := func(hot float64) Local {
		s := newFakeLocal()
		s.snap = &pressure.Snapshot{
			TopTopics: []pressure.TopicRate{{Topic: "hot", MessagesPerSec: hot}},
			TopUsers:  []pressure.UserRate{{User: "spread", MessagesPerSec: 100}},
		}
		if hot == 0 {
			s.snap.TopTopics = nil
		}
		return s
	}
	nodes := []node{}
	clients := map[string]*redis.Client{}
	hots := map[string]float64{"A": 600, "B": 600, "C": 0}
	for _, id := range []string{"A", "B", "C"} {
		nd, c := mergedNode(t, srv, id, sample(hots[id]))
		nodes = append(nodes, nd)
		clients[id] = c
	}
	for _, n := range nodes {
		activate(t, n.agg)
	}
	viewIs := func(hot, users float64, siblings int, ns ...node) func() bool {
		return func() bool {
			for _, n := range ns {
				if n.agg.RateOf("hot") != hot || n.agg.RateOfUser("spread") != users || n.agg.Stats().Instances != siblings {
					return false
				}
			}
			return true
		}
	}
	testkit.Eventually(t, awaitFor, "one merging instance, and every view sums all three", func() bool {
		return merging(nodes...) != nil && viewIs(1200, 300, 2, nodes...)()
	})
	first := merging(nodes...)
	epoch := first.agg.Stats().ViewEpoch
	for _, n := range nodes {
		if st := n.agg.Stats(); st.ParseErrors != 0 {
			t.Errorf("%s: %d parse errors", n.agg.InstanceID(), st.ParseErrors)
		}
	}

	// The merging instance is cut off from Redis (it crashed, as far as
	// the fleet can tell): another takes over once the lease expires,
	// with a higher epoch, and the views sum the two left.
	var rest []node
	wantHot := 0.0
	for _, n := range nodes {
		if n.agg != first.agg {
			rest = append(rest, n)
			wantHot += hots[n.agg.InstanceID()]
		}
	}
	_ = clients[first.agg.InstanceID()].Close()
	testkit.Eventually(t, awaitFor, "another instance merges under a higher epoch; the view sums the two left", func() bool {
		m := merging(rest...)
		return m != nil && m.agg.Stats().ViewEpoch > epoch && viewIs(wantHot, 200, 1, rest...)()
	})
	epoch = merging(rest...).agg.Stats().ViewEpoch

	// Redis restarts empty (a fail-over to a replica that had not got
	// the lease nor the epoch counter): the merging instance loses its
	// lease, an instance claims it under an epoch above every one seen,
	// and the views recover.
	srv.Restart()
	testkit.Eventually(t, awaitFor, "after the restart a merging instance under a higher epoch, and the view right", func() bool {
		m := merging(rest...)
		return m != nil && rest[0].agg.Stats().ViewEpoch > epoch && rest[1].agg.Stats().ViewEpoch > epoch && viewIs(wantHot, 200, 1, rest...)()
	})

	// A clean stop releases the lease: the other takes over.
	m := merging(rest...)
	m.agg.Close()
	var other node
	for _, n := range rest {
		if n.agg != m.agg {
			other = n
		}
	}
	testkit.Eventually(t, awaitFor, "the last instance merges alone", func() bool {
		return other.agg.Stats().Merging && other.agg.Stats().Instances == 0 && other.agg.RateOfUser("spread") == 100
	})
}

func TestMergedSubscribersOfCountsThisInstanceOnce(t *testing.T) {
	live := map[string]int{"room": 5, "quiet": 2}
	a := newOffline(t, newFakeLocal(), Options{Mode: ModeMerged}, Deps{Subscribers: liveCounts{count: func(topic string) int { return live[topic] }}})
	if got := a.SubscribersOf("room"); got != 5 {
		t.Fatalf("before a view SubscribersOf = %d, want the live 5", got)
	}
	b, _ := marshalEnvelope(&envelope{V: viewVersion, InstanceID: "M", TS: testTS, Epoch: 1, Instances: 2,
		Subs: []wireSub{{"room", 12}}}, nil)
	a.receiveView(string(b))
	// The view's 12 has this instance's count in it; "quiet" is not in
	// the view's top and keeps its live count.
	if got, quiet := a.SubscribersOf("room"), a.SubscribersOf("quiet"); got != 12 || quiet != 2 {
		t.Errorf("with a view SubscribersOf(room) = %d, (quiet) = %d; want 12 and 2", got, quiet)
	}
}

package publishrate

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
	"github.com/rtserver/rtserver/pressure"
)

func TestMergeSumsAcrossInstances(t *testing.T) {
	clk := testkit.NewClock(testEpoch)
	m, reg := gatheredMetrics(t)
	local := newFakeLocal(pressure.TopicRate{Topic: "hot", MessagesPerSec: 100, BytesPerSec: 1000})
	a := newOffline(t, local, Options{}, Deps{now: clk.Now, Metrics: m, InstanceID: "self"})

	a.receive(string(env(t, "A", 1, wireTopic{"hot", 600, 6000, 0}, wireTopic{"cold", 1, 10, 0})))
	a.receive(string(env(t, "B", 1, wireTopic{"hot", 600, 6000, 0}, wireTopic{"other", 5, 50, 0})))
	a.receive(string(env(t, "C", 1))) // an empty sibling still counts as an instance

	if got := a.RateOf("hot"); got != 1300 {
		t.Errorf("RateOf(hot) = %v, want 1300", got)
	}
	if got := a.RateOf("nowhere"); got != 0 {
		t.Errorf("RateOf(nowhere) = %v, want 0", got)
	}
	want := []Entry{
		{"hot", 1300, 13000, 3},
		{"other", 5, 50, 1},
		{"cold", 1, 10, 1},
	}
	if got := a.TopPublishers(); !slices.Equal(got, want) {
		t.Errorf("TopPublishers =\n%v\nwant\n%v", got, want)
	}
	if got := value(m.ClusterInstances); got != 3 {
		t.Errorf("cluster_publish_rate_instances = %v, want 3", got)
	}
	if got, want := value(m.ClusterReceived), 3.0; got != want {
		t.Errorf("received = %v, want %v", got, want)
	}
	wantRates := map[string]float64{"hot": 1300, "other": 5, "cold": 1}
	if got := topicGauge(t, reg, "cluster_topic_publish_rate"); !maps.Equal(got, wantRates) {
		t.Errorf("cluster_topic_publish_rate = %v, want %v", got, wantRates)
	}
	if got := topicGauge(t, reg, "cluster_topic_publish_bytes"); got["hot"] != 13000 {
		t.Errorf("cluster_topic_publish_bytes{hot} = %v, want 13000", got["hot"])
	}

	// The own contribution follows the latest local sample.
	local.emit(&pressure.Snapshot{TopTopics: []pressure.TopicRate{{Topic: "hot", MessagesPerSec: 0.5}}})
	if got := a.RateOf("hot"); got != 1200.5 {
		t.Errorf("after a local sample RateOf(hot) = %v, want 1200.5", got)
	}
}

func TestMergeUsersAndSubscribers(t *testing.T) {
	clk := testkit.NewClock(testEpoch)
	local := &fakeLocal{snap: &pressure.Snapshot{TopUsers: []pressure.UserRate{{User: "alice", MessagesPerSec: 7}}}}
	a := newOffline(t, local, Options{}, Deps{now: clk.Now, InstanceID: "self",
		Subscribers: subjectList(func() []SubjectCount { return []SubjectCount{{Topic: "room", Count: 3}} })})
	if _, err := a.collect(clk.Now()); err != nil { // takes the local subjects
		t.Fatal(err)
	}
	b, _ := marshalEnvelope(&envelope{V: 1, InstanceID: "A", TS: testTS,
		Users: []wireUser{{"alice", 10}, {"bob", 2}},
		Subs:  []wireSub{{"room", 4}, {"lobby", 1}},
	}, nil)
	a.receive(string(b))
	for _, c := range []struct {
		give string
		want float64
	}{{"alice", 17}, {"bob", 2}, {"carol", 0}} {
		if got := a.RateOfUser(c.give); got != c.want {
			t.Errorf("RateOfUser(%q) = %v, want %v", c.give, got, c.want)
		}
	}
	for _, c := range []struct {
		give string
		want int
	}{{"room", 7}, {"lobby", 1}, {"none", 0}} {
		if got := a.SubscribersOf(c.give); got != c.want {
			t.Errorf("SubscribersOf(%q) = %v, want %v", c.give, got, c.want)
		}
	}
}

func TestSubscribersOfLiveLocal(t *testing.T) {
	live := map[string]int{"room": 5}
	a := newOffline(t, newFakeLocal(), Options{}, Deps{InstanceID: "self", Subscribers: liveCounts{
		list:  func() []SubjectCount { return []SubjectCount{{Topic: "room", Count: 1000}} }, // not used for the local part
		count: func(topic string) int { return live[topic] },
	}})
	if _, err := a.collect(time.Now()); err != nil {
		t.Fatal(err)
	}
	b, _ := marshalEnvelope(&envelope{V: 1, InstanceID: "A", TS: testTS, Subs: []wireSub{{"room", 2}}}, nil)
	a.receive(string(b))
	if got := a.SubscribersOf("room"); got != 7 {
		t.Errorf("SubscribersOf(room) = %d, want 5 live + 2 remote", got)
	}
}

// Freshness is by the receiver's clock; order is by the sender's ts, and
// a sibling's clock may be off by up to MaxClockSkew.
func TestStalenessByReceiverClock(t *testing.T) {
	const stale = 12 * time.Second
	for _, off := range []time.Duration{0, -4 * time.Second, 4 * time.Second} {
		t.Run(fmt.Sprint("sender clock off by ", off), func(t *testing.T) {
			clk := testkit.NewClock(testEpoch)
			m := metrics.NewDiscard()
			local := newFakeLocal()
			a := newOffline(t, local, Options{StaleAfter: stale, PublishInterval: 5 * time.Second}, Deps{now: clk.Now, Metrics: m})
			ts := off.Milliseconds() // the sender's clock, as an offset from testEpoch
			a.receive(string(env(t, "A", ts, wireTopic{"hot", 600, 1, 0})))
			if a.RateOf("hot") != 600 {
				t.Fatalf("RateOf(hot) = %v after arrival, want 600", a.RateOf("hot"))
			}

			// A newer envelope (by sender ts) refreshes; an older or equal one does not.
			clk.Advance(stale - time.Second)
			last := ts + (stale - time.Second).Milliseconds()
			a.receive(string(env(t, "A", last, wireTopic{"hot", 700, 1, 0})))
			clk.Advance(stale - time.Millisecond)
			a.receive(string(env(t, "A", last, wireTopic{"hot", 1, 1, 0})))
			a.receive(string(env(t, "A", last-5000, wireTopic{"hot", 1, 1, 0})))
			if got := a.Stats().Outdated; got != 2 {
				t.Errorf("Outdated = %d, want 2", got)
			}
			local.emit(&pressure.Snapshot{}) // any merge trigger
			if got := a.RateOf("hot"); got != 700 {
				t.Errorf("just under StaleAfter after the newer arrival: RateOf = %v, want 700", got)
			}
			if got := value(m.ClusterInstances); got != 1 {
				t.Errorf("instances = %v, want 1", got)
			}

			clk.Advance(time.Millisecond)
			local.emit(&pressure.Snapshot{})
			if got := a.RateOf("hot"); got != 0 {
				t.Errorf("StaleAfter after the last arrival: RateOf = %v, want 0", got)
			}
			if got := value(m.ClusterInstances); got != 0 {
				t.Errorf("instances = %v, want 0", got)
			}

			// Forgotten, its last envelope replayed is still old news; a
			// newer one from the sibling brings it back.
			a.receive(string(env(t, "A", last, wireTopic{"hot", 700, 1, 0})))
			if got := a.RateOf("hot"); got != 0 {
				t.Errorf("a replayed envelope of a forgotten sibling was accepted: RateOf = %v", got)
			}
			a.receive(string(env(t, "A", ts+(2*stale).Milliseconds(), wireTopic{"hot", 42, 1, 0})))
			if got := a.RateOf("hot"); got != 42 {
				t.Errorf("after a stale sibling came back: RateOf = %v, want 42", got)
			}
		})
	}
}

// A captured envelope cannot be replayed: not while its sender is
// tracked, not once it was forgotten (the high-water mark outlives it),
// and not once the mark is gone (the ts is then outside the clock window
// of StaleAfter+MaxClockSkew).
func TestReplayedEnvelopesAreDropped(t *testing.T) {
	const stale, skew = 12 * time.Second, 5 * time.Second
	clk := testkit.NewClock(testEpoch)
	local := newFakeLocal()
	a := newOffline(t, local, Options{StaleAfter: stale, PublishInterval: 5 * time.Second, HMACSecret: secret}, Deps{now: clk.Now})
	signed := func(ts int64) []byte {
		b, err := marshalEnvelope(&envelope{V: 1, InstanceID: "A", TS: testEpochMs + ts, Slice: []wireTopic{{"hot", 1e6, 1, 0}}}, secret)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	captured := signed(0)
	a.receive(string(captured))
	if a.RateOf("hot") != 1e6 {
		t.Fatal("the original envelope was not accepted")
	}
	for _, step := range []time.Duration{time.Second, stale, skew - time.Second, time.Second, time.Hour} {
		clk.Advance(step)
		local.emit(&pressure.Snapshot{}) // merge: forgets stale siblings and old marks
		a.receive(string(captured))
		if got := a.RateOf("hot"); got != 0 && clk.Now().Sub(testEpoch) >= stale {
			t.Fatalf("%v after capture: replay accepted, RateOf(hot) = %v", clk.Now().Sub(testEpoch), got)
		}
	}
	a.mu.Lock()
	marks := len(a.seen)
	a.mu.Unlock()
	if marks != 0 {
		t.Errorf("%d high-water marks kept past the clock window", marks)
	}

	// A sender's clock far off either way is dropped (and counted), signed or not.
	for _, ts := range []time.Duration{-1000 * time.Hour, -(stale + skew + time.Second), stale + skew + time.Second, 1000 * time.Hour} {
		before := a.Stats().Outdated
		a.receive(string(signed(clk.Now().Sub(testEpoch).Milliseconds() + ts.Milliseconds())))
		if a.Stats().Outdated != before+1 || a.RateOf("hot") != 0 {
			t.Errorf("sender clock off by %v: accepted", ts)
		}
	}
	// At the edge of the window it is taken.
	a.receive(string(signed(clk.Now().Sub(testEpoch).Milliseconds() - (stale + skew).Milliseconds())))
	if a.RateOf("hot") != 1e6 {
		t.Errorf("sender clock StaleAfter+MaxClockSkew behind: dropped")
	}
}

func TestBroadcastTickExpiresStale(t *testing.T) {
	clk := testkit.NewClock(testEpoch)
	a := newOffline(t, newFakeLocal(), Options{StaleAfter: 3 * time.Second, PublishInterval: time.Second}, Deps{now: clk.Now})
	a.receive(string(env(t, "A", 1, wireTopic{"hot", 1, 1, 0})))
	clk.Advance(3 * time.Second)
	if _, err := a.collect(clk.Now()); err != nil {
		t.Fatal(err)
	}
	if got := a.Stats().Instances; got != 0 {
		t.Errorf("instances after the tick = %d, want 0", got)
	}
	a.mu.Lock()
	n := len(a.mg.remotes)
	a.mu.Unlock()
	if n != 0 {
		t.Errorf("%d stale siblings still held", n)
	}
}

func TestTopNCapAndOrder(t *testing.T) {
	m, reg := gatheredMetrics(t)
	a := newOffline(t, newFakeLocal(), Options{TopN: 5}, Deps{Metrics: m})
	var slice []wireTopic
	for i := range 12 {
		slice = append(slice, wireTopic{fmt.Sprintf("t%02d", i), float64(i), 0, 0})
	}
	// Equal rates: ordered by bytes, then by topic.
	slice = append(slice, wireTopic{"tie-b", 11, 5, 0}, wireTopic{"tie-a", 11, 5, 0}, wireTopic{"tie-c", 11, 9, 0})
	a.receive(string(env(t, "A", 1, slice...)))

	got := a.TopPublishers()
	var names []string
	for _, e := range got {
		names = append(names, e.Topic)
	}
	want := []string{"tie-c", "tie-a", "tie-b", "t11", "t10"}
	if !slices.Equal(names, want) {
		t.Errorf("TopPublishers = %v, want %v", names, want)
	}
	if got := a.RateOf("t03"); got != 3 {
		t.Errorf("RateOf(t03) outside the top-N = %v, want 3", got)
	}
	labels := slices.Sorted(maps.Keys(topicGauge(t, reg, "cluster_topic_publish_rate")))
	if !slices.Equal(labels, slices.Sorted(slices.Values(want))) {
		t.Errorf("gauge labels = %v, want the top-N %v", labels, want)
	}

	// A newer slice without the ties: they leave the top-N and the
	// exposition with the next local sample.
	a.receive(string(env(t, "A", 2, slice[:12]...)))
	a.onSample(&pressure.Snapshot{})
	labels = slices.Sorted(maps.Keys(topicGauge(t, reg, "cluster_topic_publish_rate")))
	if want := []string{"t07", "t08", "t09", "t10", "t11"}; !slices.Equal(labels, want) {
		t.Errorf("gauge labels = %v, want %v", labels, want)
	}
}

func TestMaxInstances(t *testing.T) {
	clk := testkit.NewClock(testEpoch)
	m := metrics.NewDiscard()
	a := newOffline(t, newFakeLocal(), Options{MaxInstances: 2, StaleAfter: 10 * time.Second, PublishInterval: time.Second}, Deps{now: clk.Now, Metrics: m})
	a.receive(string(env(t, "A", 1, wireTopic{"x", 1, 0, 0})))
	clk.Advance(5 * time.Second)
	a.receive(string(env(t, "B", 1, wireTopic{"x", 1, 0, 0})))
	a.receive(string(env(t, "C", 1, wireTopic{"x", 1, 0, 0})))
	a.receive(string(env(t, "C", 2, wireTopic{"x", 1, 0, 0})))
	a.receive(string(env(t, "D", 1, wireTopic{"x", 1, 0, 0})))
	if st := a.Stats(); st.InstancesIgnored != 3 || st.Instances != 2 || a.RateOf("x") != 2 {
		t.Fatalf("stats %+v, RateOf(x) = %v: want C and D ignored", st, a.RateOf("x"))
	}
	if got, want := value(m.ClusterIgnored), 3.0; got != want {
		t.Errorf("cluster_publish_rate_ignored_total = %v, want %v", got, want)
	}
	if got := value(m.ClusterInstancesIgnored); got != 2 {
		t.Errorf("cluster_publish_rate_instances_ignored = %v, want 2 (C and D)", got)
	}
	// A known sibling still updates while the table is full.
	a.receive(string(env(t, "B", 2, wireTopic{"x", 5, 0, 0})))
	if a.RateOf("x") != 6 {
		t.Errorf("RateOf(x) = %v, want 6", a.RateOf("x"))
	}
	clk.Advance(5 * time.Second) // A goes stale and frees its slot
	a.receive(string(env(t, "C", 3, wireTopic{"x", 10, 0, 0})))
	if st := a.Stats(); st.InstancesIgnored != 3 || st.Instances != 2 || a.RateOf("x") != 15 {
		t.Errorf("stats %+v, RateOf(x) = %v: want B and C", st, a.RateOf("x"))
	}
	if got := value(m.ClusterInstancesIgnored); got != 1 {
		t.Errorf("cluster_publish_rate_instances_ignored = %v, want 1 (D) once C is in", got)
	}
	// D falls silent: StaleAfter after it was last heard from, nothing is missing.
	clk.Advance(5 * time.Second)
	a.onSample(&pressure.Snapshot{})
	if got := value(m.ClusterInstancesIgnored); got != 0 {
		t.Errorf("cluster_publish_rate_instances_ignored = %v, want 0 once D is silent", got)
	}
}

// The sibling limit is a config key with a default, validated by name.
func TestMaxInstancesOption(t *testing.T) {
	if got := DefaultOptions().MaxInstances; got != 1024 {
		t.Errorf("default maxInstances = %d, want 1024", got)
	}
	err := Options{MaxInstances: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "publishRate.maxInstances") {
		t.Errorf("Validate(maxInstances -1) = %v, want an error naming publishRate.maxInstances", err)
	}
	a := newOffline(t, newFakeLocal(), Options{MaxInstances: 3000}, Deps{})
	for i := range 3000 {
		a.receive(string(env(t, fmt.Sprint("i", i), 1)))
	}
	if st := a.Stats(); st.Instances != 3000 || st.InstancesIgnored != 0 {
		t.Errorf("maxInstances 3000: stats %+v", st)
	}
}

func TestOwnEnvelopeIgnored(t *testing.T) {
	m := metrics.NewDiscard()
	a := newOffline(t, newFakeLocal(), Options{}, Deps{InstanceID: "me", Metrics: m})
	a.receive(string(env(t, "me", 1, wireTopic{"x", 1, 0, 0})))
	if a.RateOf("x") != 0 || value(m.ClusterReceived) != 0 || value(m.ClusterParseErrors) != 0 || a.Stats().Instances != 0 {
		t.Errorf("own envelope counted: RateOf %v, received %v", a.RateOf("x"), value(m.ClusterReceived))
	}
}

// TestIncrementalMergeMatchesFromScratch: after any sequence of local
// samples, local subscriber lists, sibling envelopes (arriving in or out of
// clock order), drops, expiries and re-sums, every lookup, the top-N and
// the sibling count equal a merge computed from scratch over the
// contributions held, and the keys kept live are exactly the keys in use.
// Rates are dyadic so sums are exact in any order.
func TestIncrementalMergeMatchesFromScratch(t *testing.T) {
	topics := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	users := []string{"u1", "u2", "u3", "u4"}
	topicGen := rapid.SampledFrom(topics)
	userGen := rapid.SampledFrom(users)
	rateGen := rapid.SampledFrom([]float64{0, 0.5, 1, 2, 3, 10, 600})
	idGen := rapid.SampledFrom([]string{"A", "B", "C", "D", "E"})
	const stale = 10 * time.Second
	rapid.Check(t, func(rt *rapid.T) {
		topN := rapid.IntRange(1, 6).Draw(rt, "topN")
		m := newMerger()
		now := testEpoch
		var local *pressure.Snapshot
		var lsubs []SubjectCount
		remotes := map[string]*remote{}

		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				local = &pressure.Snapshot{}
				for _, tp := range rapid.SliceOfDistinct(topicGen, rapid.ID).Draw(rt, "lt") {
					local.TopTopics = append(local.TopTopics, pressure.TopicRate{Topic: tp, MessagesPerSec: rateGen.Draw(rt, "r"), BytesPerSec: rateGen.Draw(rt, "b")})
				}
				for _, u := range rapid.SliceOfDistinct(userGen, rapid.ID).Draw(rt, "lu") {
					local.TopUsers = append(local.TopUsers, pressure.UserRate{User: u, MessagesPerSec: rateGen.Draw(rt, "r")})
				}
				m.setLocal(local)
			case 1:
				lsubs = nil
				for _, tp := range rapid.SliceOf(topicGen).Draw(rt, "ls") { // duplicates allowed locally
					lsubs = append(lsubs, SubjectCount{Topic: tp, Count: rapid.IntRange(-1, 5).Draw(rt, "c")})
				}
				m.setLocalSubs(lsubs)
			case 2:
				// Arrivals are normally in clock order; now and then one
				// is stamped a little earlier than the last.
				arrived := now.Add(-time.Duration(rapid.IntRange(0, 2).Draw(rt, "late")) * time.Second)
				r := &remote{id: idGen.Draw(rt, "id"), arrived: arrived}
				for _, tp := range rapid.SliceOfDistinct(topicGen, rapid.ID).Draw(rt, "rt") {
					r.slice = append(r.slice, wireTopic{tp, rateGen.Draw(rt, "r"), rateGen.Draw(rt, "b"), 0})
				}
				for _, tp := range rapid.SliceOfDistinct(topicGen, rapid.ID).Draw(rt, "rs") {
					r.subs = append(r.subs, wireSub{tp, rapid.IntRange(0, 5).Draw(rt, "c")})
				}
				for _, u := range rapid.SliceOfDistinct(userGen, rapid.ID).Draw(rt, "ru") {
					r.users = append(r.users, wireUser{u, rateGen.Draw(rt, "r")})
				}
				remotes[r.id] = r
				m.put(r)
			case 3:
				id := idGen.Draw(rt, "id")
				delete(remotes, id)
				m.drop(id)
			case 4:
				now = now.Add(time.Duration(rapid.IntRange(0, 12).Draw(rt, "advance")) * time.Second)
				for id, r := range remotes {
					if now.Sub(r.arrived) >= stale {
						delete(remotes, id)
					}
				}
				m.expire(now, stale)
			case 5:
				m.resum()
			}
			want := fromScratch(local, lsubs, remotes)
			checkMerged(rt, step, m, want, topics, users, topN, len(remotes))
		}
	})
}

// merged is a from-scratch merge: every topic and user named by a
// contribution, with its sums.
type merged struct {
	topics map[string]topicSum
	users  map[string]float64
}

type topicSum struct {
	msgs, bytes float64
	n           int // rate contributions
	subs        int
}

func fromScratch(local *pressure.Snapshot, lsubs []SubjectCount, remotes map[string]*remote) merged {
	w := merged{topics: map[string]topicSum{}, users: map[string]float64{}}
	addTopic := func(tp string, msgs, bytes float64) {
		s := w.topics[tp]
		s.msgs, s.bytes, s.n = s.msgs+msgs, s.bytes+bytes, s.n+1
		w.topics[tp] = s
	}
	addSubs := func(tp string, c int) {
		s := w.topics[tp]
		s.subs += c
		w.topics[tp] = s
	}
	if local != nil {
		for _, tr := range local.TopTopics {
			addTopic(tr.Topic, tr.MessagesPerSec, tr.BytesPerSec)
		}
		for _, u := range local.TopUsers {
			w.users[u.User] += u.MessagesPerSec
		}
	}
	for _, s := range lsubs {
		if s.Count > 0 {
			addSubs(s.Topic, s.Count)
		}
	}
	for _, r := range remotes {
		for _, wt := range r.slice {
			addTopic(wt.Topic, wt.MessagesPerSec, wt.BytesPerSec)
		}
		for _, s := range r.subs {
			addSubs(s.Topic, s.Count)
		}
		for _, u := range r.users {
			w.users[u.User] += u.MessagesPerSec
		}
	}
	return w
}

func checkMerged(rt *rapid.T, step int, m *merger, want merged, topics, users []string, topN, siblings int) {
	for _, tp := range append(topics, "absent") {
		s := want.topics[tp]
		if got := m.rateOf(tp); got != s.msgs {
			rt.Fatalf("step %d: rateOf(%s) = %v, want %v", step, tp, got, s.msgs)
		}
		if got := m.subscribersOf(tp); got != s.subs {
			rt.Fatalf("step %d: subscribersOf(%s) = %v, want %v", step, tp, got, s.subs)
		}
		if k := m.topics.lookup(tp); k != nil && math.Float64frombits(k.pubBytes.Load()) != s.bytes {
			rt.Fatalf("step %d: bytes of %s = %v, want %v", step, tp, math.Float64frombits(k.pubBytes.Load()), s.bytes)
		}
	}
	for _, u := range append(users, "absent") {
		if got := m.rateOfUser(u); got != want.users[u] {
			rt.Fatalf("step %d: rateOfUser(%s) = %v, want %v", step, u, got, want.users[u])
		}
	}
	// Live keys are exactly those named, each found in the table under its id.
	for _, c := range []struct {
		ks    *keyset
		named int
	}{{&m.topics, len(want.topics)}, {&m.users, len(want.users)}} {
		live := 0
		for id, k := range c.ks.byID {
			if k == nil {
				continue
			}
			live++
			if int(k.id) != id || c.ks.lookup(k.name) != k || !k.live() {
				rt.Fatalf("step %d: key %q at id %d: id %d, found %v, live %v", step, k.name, id, k.id, c.ks.lookup(k.name) == k, k.live())
			}
		}
		if live != c.named || len(c.ks.free) != len(c.ks.byID)-live {
			rt.Fatalf("step %d: %d keys live (%d ids free of %d), %d named", step, live, len(c.ks.free), len(c.ks.byID), c.named)
		}
	}
	var all []Entry
	for k, s := range want.topics {
		if s.n > 0 {
			all = append(all, Entry{k, s.msgs, s.bytes, s.n})
		}
	}
	slices.SortFunc(all, func(x, y Entry) int {
		if ranksBefore(x.MessagesPerSec, x.BytesPerSec, x.Topic, y.MessagesPerSec, y.BytesPerSec, y.Topic) {
			return -1
		}
		return 1
	})
	if got, wantTop := m.top(topN), all[:min(topN, len(all))]; !slices.Equal(got, wantTop) {
		rt.Fatalf("step %d: top %v, want %v", step, got, wantTop)
	}
	if len(m.remotes) != siblings {
		rt.Fatalf("step %d: siblings %d, want %d", step, len(m.remotes), siblings)
	}
	n := 0
	for r := m.oldest; r != nil; r = r.newer {
		if n++; r.newer != nil && r.newer.arrived.Before(r.arrived) {
			rt.Fatalf("step %d: arrival list out of order", step)
		}
	}
	if n != siblings {
		rt.Fatalf("step %d: arrival list holds %d siblings, want %d", step, n, siblings)
	}
}

// TestTableGrowsAndForgetsDormantKeys: keys churned through the table
// leave it bounded by the live ones, and lookups keep answering through
// every rebuild.
func TestTableGrowsAndForgetsDormantKeys(t *testing.T) {
	m := newMerger()
	for i := range 10_000 {
		r := &remote{id: "A", arrived: testEpoch, slice: []wireTopic{{fmt.Sprint("t", i), 1, 1, 0}, {"steady", 1, 1, 0}}}
		m.put(r)
		if got := m.rateOf("steady"); got != 1 {
			t.Fatalf("after %d envelopes RateOf(steady) = %v", i, got)
		}
		if i > 0 && m.rateOf(fmt.Sprint("t", i-1)) != 0 {
			t.Fatalf("a topic that left still has a rate")
		}
	}
	if size := len(m.topics.tab.Load().slots); size > 4*minTableSize {
		t.Errorf("table of %d slots for 2 live topics", size)
	}
}

func TestLookupsDoNotAllocate(t *testing.T) {
	a := newOffline(t, newFakeLocal(pressure.TopicRate{Topic: "hot", MessagesPerSec: 1}), Options{}, Deps{Subscribers: liveCounts{
		count: func(string) int { return 1 },
	}})
	a.receive(string(env(t, "A", 1, wireTopic{"hot", 1, 1, 0})))
	var sink float64
	for name, f := range map[string]func(){
		"RateOf":        func() { sink += a.RateOf("hot") },
		"RateOfUser":    func() { sink += a.RateOfUser("u") },
		"SubscribersOf": func() { sink += float64(a.SubscribersOf("hot")) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s allocates %v per call", name, n)
		}
	}
	_ = sink
	if n := testing.AllocsPerRun(1000, clusterRuleOnFleet(t)); n != 0 {
		t.Errorf("a cluster rule check against 1,000 siblings allocates %v per call", n)
	}
}

// TestWithPressureMonitor wires the real pressure monitor as Local: its
// samples reach RateOf at once and the broadcast envelope. Both run on
// the bubble's clock.
func TestWithPressureMonitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mon, err := pressure.New(pressure.DefaultConfig(), pressure.Deps{Metrics: metrics.NewDiscard(), Logger: discardLog})
		if err != nil {
			t.Fatal(err)
		}
		a := newOffline(t, mon, Options{}, Deps{now: time.Now, InstanceID: "me"})
		for range 50 {
			mon.RecordAttempt("chat", "alice", 100)
		}
		time.Sleep(time.Second)
		mon.Sample()
		if got := a.RateOf("chat"); got != 50 {
			t.Errorf("RateOf(chat) = %v, want 50", got)
		}
		if got := a.RateOfUser("alice"); got != 50 {
			t.Errorf("RateOfUser(alice) = %v, want 50", got)
		}
		e := sent(t, a, time.Now())
		if len(e.Slice) != 1 || e.Slice[0] != (wireTopic{"chat", 50, 5000, 0}) {
			t.Errorf("slice = %v", e.Slice)
		}
	})
}

// TestLookupsDuringMergeSeeWholeEnvelopes: a reader racing the merge sees
// a topic's sum before or after an envelope, never with the sender's old
// part taken out and the new one not yet in (or the other way round).
func TestLookupsDuringMergeSeeWholeEnvelopes(t *testing.T) {
	m := newMerger()
	m.put(&remote{id: "B", arrived: testEpoch, slice: []wireTopic{{"hot", 10, 0, 0}}})
	m.put(&remote{id: "A", arrived: testEpoch, slice: []wireTopic{{"hot", 200, 0, 0}}})
	done := make(chan struct{})
	bad := make(chan float64, 1)
	go func() {
		defer close(bad)
		for {
			select {
			case <-done:
				return
			default:
			}
			if r := m.rateOf("hot"); r != 110 && r != 210 {
				bad <- r
				return
			}
		}
	}()
	for i := range 20_000 {
		// Fresh topics each time grow the table under the reader, too.
		m.put(&remote{id: "A", arrived: testEpoch, slice: []wireTopic{{"hot", float64(100 * (1 + i%2)), 0, 0}, {fmt.Sprint("churn-", i), 1, 0, 0}}})
	}
	close(done)
	if r, ok := <-bad; ok {
		t.Fatalf("a reader saw RateOf(hot) = %v, not a whole envelope's sum", r)
	}
}

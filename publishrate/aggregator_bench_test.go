package publishrate

import (
	"fmt"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/envsign"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/pressure"
)

// fleetSizes are the sibling counts the scale benchmarks hold.
var fleetSizes = []int{10, 100, 300, 1000}

// siblingEnvelope is sibling i's envelope in round k, shaped like a busy
// instance's: a topic and a user every sibling shares (a hot publisher
// spread over the fleet), and topN-1 of its own of each, plus topN
// subscriber counts. With churn, a fifth of its own topics are new names
// every round.
func siblingEnvelope(i, k, topN int, churn bool) *envelope {
	e := &envelope{V: envelopeVersion, InstanceID: fmt.Sprint("sibling-", i), TS: testEpochMs + int64(k)}
	e.Slice = append(e.Slice, wireTopic{"room:hot", 50, 5000, 0})
	e.Users = append(e.Users, wireUser{"user:hot", 50})
	for j := 1; j < topN; j++ {
		topic := fmt.Sprintf("room:%d-%d", i, j)
		if churn && j%5 == 0 {
			topic = fmt.Sprintf("room:%d-%d-round-%d", i, j, k)
		}
		e.Slice = append(e.Slice, wireTopic{topic, float64(40 - j), float64(4000 - j), 0})
		e.Users = append(e.Users, wireUser{fmt.Sprintf("user:%d-%d", i, j), float64(40 - j)})
	}
	for j := range topN {
		e.Subs = append(e.Subs, wireSub{fmt.Sprintf("room:%d-%d", i, j), 10 + j})
	}
	return e
}

// BenchmarkReceive is one sibling envelope received (decode, validate,
// merge) while n siblings are held, in steady state: envelopes arrive
// round-robin from every sibling, each newer than the last from its
// sender, and the clock moves on so nobody goes stale. The budget is
// <= 50 µs and allocations that do not grow with n.
func BenchmarkReceive(b *testing.B) {
	for _, n := range fleetSizes {
		for _, c := range []struct {
			name   string
			churn  bool
			secret []byte
		}{{"steady", false, nil}, {"churn", true, nil}, {"signed", false, []byte("secret")}} {
			b.Run(fmt.Sprintf("siblings=%d/%s", n, c.name), func(b *testing.B) {
				clk := testkit.NewClock(testEpoch)
				a := newOffline(b, newFakeLocal(), Options{HMACSecret: c.secret, MaxInstances: 2 * n}, Deps{now: clk.Now})
				for i := range n {
					p, _ := marshalEnvelope(siblingEnvelope(i, 0, DefaultTopN, c.churn), c.secret)
					a.receive(string(p))
				}
				if got := a.Stats().Instances; got != n {
					b.Fatalf("%d siblings held, want %d", got, n)
				}
				b.ReportAllocs()
				cpu := meterCPU(b)
				k := 0
				for b.Loop() {
					k++
					b.StopTimer()
					clk.Advance(time.Millisecond)
					p, _ := marshalEnvelope(siblingEnvelope(k%n, k, DefaultTopN, c.churn), c.secret)
					payload := string(p) // as the subscription hands it over
					b.StartTimer()
					cpu.measure(func() { a.receive(payload) })
				}
				b.StopTimer()
				cpu.report()
				if st := a.Stats(); st.Instances != n || st.Outdated != 0 {
					b.Fatalf("stats %+v: want %d siblings and nothing outdated", st, n)
				}
			})
		}
	}
}

// heldMerger is a merger holding n siblings' envelopes of round 0.
func heldMerger(n int, churn bool) *merger {
	m := newMerger()
	for i := range n {
		putEnvelope(m, siblingEnvelope(i, 0, DefaultTopN, churn))
	}
	return m
}

func putEnvelope(m *merger, e *envelope) {
	m.put(&remote{id: e.InstanceID, arrived: testEpoch, slice: e.Slice, users: e.Users, subs: e.Subs})
}

// BenchmarkMergeEnvelope is the merge alone: one decoded envelope replaces
// its sender's previous one while n siblings are held (the top-N is not
// read per envelope: see BenchmarkTopN).
func BenchmarkMergeEnvelope(b *testing.B) {
	for _, n := range fleetSizes {
		b.Run(fmt.Sprintf("siblings=%d", n), func(b *testing.B) {
			m := heldMerger(n, true)
			envs := make([]*envelope, 64)
			for k := range envs {
				envs[k] = siblingEnvelope(k%n, k+1, DefaultTopN, true)
			}
			b.ReportAllocs()
			cpu := meterCPU(b)
			k := 0
			for b.Loop() {
				e := envs[k%len(envs)]
				k++
				cpu.measure(func() { putEnvelope(m, e) })
			}
			cpu.report()
		})
	}
}

// BenchmarkTopN reads the merged top-N off the merge, as every local
// sample, tick and TopPublishers call does.
func BenchmarkTopN(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("siblings=%d", n), func(b *testing.B) {
			m := heldMerger(n, true)
			b.ReportAllocs()
			for b.Loop() {
				_ = m.top(DefaultTopN)
			}
		})
	}
}

// BenchmarkResum is the exact re-sum of every held contribution, once per
// broadcast tick: 100 instances x top 20 is the budget (BENCHMARKS.md) of a full
// merge (<= 100 µs), off the admission path.
func BenchmarkResum(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("siblings=%d", n), func(b *testing.B) {
			m := heldMerger(n, false)
			b.ReportAllocs()
			cpu := meterCPU(b)
			for b.Loop() {
				cpu.measure(m.resum)
			}
			cpu.report()
		})
	}
}

func BenchmarkRateOf(b *testing.B) {
	a := newOffline(b, newFakeLocal(), Options{}, Deps{})
	for i := range 1000 {
		p, _ := marshalEnvelope(siblingEnvelope(i, 0, DefaultTopN, false), nil)
		a.receive(string(p))
	}
	b.ReportAllocs()
	var sink float64
	for b.Loop() {
		sink += a.RateOf("room:hot")
	}
	_ = sink
}

func BenchmarkRateOfParallel(b *testing.B) {
	a := newOffline(b, newFakeLocal(pressure.TopicRate{Topic: "topic-7", MessagesPerSec: 1}), Options{}, Deps{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sink float64
		for pb.Next() {
			sink += a.RateOf("topic-7")
		}
		_ = sink
	})
}

// BenchmarkDecodeEnvelope is the receive path before the merge: size
// check, signature, JSON and validation of one envelope.
func BenchmarkDecodeEnvelope(b *testing.B) {
	for _, secret := range [][]byte{nil, []byte("secret")} {
		b.Run(fmt.Sprintf("signed=%v", secret != nil), func(b *testing.B) {
			b2, _ := marshalEnvelope(siblingEnvelope(1, 1, DefaultTopN, false), secret)
			p := string(b2)
			signer := envsign.New(secret)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			cpu := meterCPU(b)
			for b.Loop() {
				cpu.measure(func() {
					if _, err := decodeEnvelope(p, signer, DefaultMaxEnvelopeBytes, 64); err != nil {
						b.Fatal(err)
					}
				})
			}
			cpu.report()
		})
	}
}

// clusterRuleOnFleet is a clusterTopPublisher check against the real
// aggregator holding 1,000 siblings: the admission path's cost of the
// cluster view (budget in BENCHMARKS.md: <= 40 ns, 0 allocs).
func clusterRuleOnFleet(tb testing.TB) func() { return clusterRuleOn(tb, newFakeLocal()) }

// clusterRuleOn is clusterRuleOnFleet with local as this instance's rates.
func clusterRuleOn(tb testing.TB, local Local) func() {
	a := newOffline(tb, local, Options{}, Deps{})
	for i := range 1000 {
		p, _ := marshalEnvelope(siblingEnvelope(i, 0, DefaultTopN, true), nil)
		a.receive(string(p))
	}
	adm := testkit.Must(message.New(message.Config{}, message.Deps{Rates: a}))
	if err := adm.Register("x", message.Rule{ClusterTopPublisher: &message.ClusterTopPublisher{Threshold: 1e6}}); err != nil {
		tb.Fatal(err)
	}
	c, _ := adm.Class("x")
	call := &message.Call{Method: "publish", Topic: "room:hot"}
	return func() {
		if !c.Check(call).Allowed {
			tb.Fatal("denied")
		}
	}
}

func BenchmarkClusterRuleCheck(b *testing.B) {
	f := clusterRuleOnFleet(b)
	b.ReportAllocs()
	for b.Loop() {
		f()
	}
}

// BenchmarkClusterRuleCheckLive is BenchmarkClusterRuleCheck with the
// pressure monitor as this instance's rates, as the server has them: its
// live rate of the topic is read at every check (a map lookup and the
// topic's ring; the running monitor keeps the clock).
func BenchmarkClusterRuleCheckLive(b *testing.B) {
	mon, err := pressure.New(pressure.Config{SampleInterval: time.Hour}, pressure.Deps{Logger: discardLog})
	if err != nil {
		b.Fatal(err)
	}
	if err := mon.Start(b.Context()); err != nil { // the live clock, as in the server
		b.Fatal(err)
	}
	b.Cleanup(func() { mon.Close() })
	for i := range 200 {
		mon.RecordAttempt(fmt.Sprint("room:", i), "", 10)
	}
	mon.RecordAttempt("room:hot", "", 10)
	f := clusterRuleOn(b, mon)
	b.ReportAllocs()
	for b.Loop() {
		f()
	}
}

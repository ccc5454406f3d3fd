package publishrate

import (
	"fmt"
	"testing"

	"github.com/rtserver/rtserver/pressure"
)

// remotesForBench builds n sibling slices of topN topics and topN users
// each. shared: topics drawn from a pool of 4*topN (a realistic overlap);
// otherwise every instance's topics are distinct (the worst case).
func remotesForBench(n, topN int, shared bool) []*remote {
	rs := make([]*remote, n)
	for i := range rs {
		r := &remote{}
		for j := range topN {
			topic := fmt.Sprintf("instance-%d:topic-%d", i, j)
			if shared {
				topic = fmt.Sprintf("topic-%d", (i+j*7)%(4*topN))
			}
			r.slice = append(r.slice, wireTopic{topic, float64(1000 - j), float64(10000 - j)})
			r.users = append(r.users, wireUser{fmt.Sprintf("user-%d", (i*topN+j)%(8*topN)), float64(100 - j)})
		}
		rs[i] = r
	}
	return rs
}

// BenchmarkMerge measures the merge budget of BENCHMARKS.md: 100 instances
// x top 20, <= 100 µs.
func BenchmarkMerge(b *testing.B) {
	local := &pressure.Snapshot{}
	for j := range 20 {
		local.TopTopics = append(local.TopTopics, pressure.TopicRate{Topic: fmt.Sprintf("topic-%d", j), MessagesPerSec: float64(j)})
	}
	for _, c := range []struct {
		name   string
		shared bool
	}{{"shared-topics", true}, {"distinct-topics", false}} {
		b.Run("100x20/"+c.name, func(b *testing.B) {
			m := newMerger()
			m.setLocal(local)
			for i, r := range remotesForBench(100, 20, c.shared) {
				m.put(fmt.Sprint("i", i), r)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = m.build(20)
			}
		})
	}
}

// BenchmarkReceive is one sibling envelope: decode, validate, re-merge
// (100 siblings held), with and without a signature.
func BenchmarkReceive(b *testing.B) {
	for _, key := range [][]byte{nil, []byte("secret")} {
		b.Run(fmt.Sprintf("signed=%v", key != nil), func(b *testing.B) {
			clk := newFakeClock()
			a := newOffline(b, newFakeLocal(), Options{Now: clk.Now, HMACSecret: key})
			rs := remotesForBench(100, 20, true)
			payloads := make([][]byte, len(rs))
			for i, r := range rs {
				payloads[i], _ = marshalEnvelope(&envelope{V: 1, InstanceID: fmt.Sprint("i", i), TS: 1, Slice: r.slice, Users: r.users}, key)
			}
			for _, p := range payloads {
				a.receive(p)
			}
			b.ReportAllocs()
			ts := int64(2)
			for b.Loop() {
				// A fresh ts each time so the envelope is news.
				e := &envelope{V: 1, InstanceID: "i0", TS: ts, Slice: rs[0].slice, Users: rs[0].users}
				ts++
				b.StopTimer()
				p, _ := marshalEnvelope(e, key)
				b.StartTimer()
				a.receive(p)
			}
		})
	}
}

func BenchmarkRateOf(b *testing.B) {
	a := newOffline(b, newFakeLocal(), Options{})
	for i, r := range remotesForBench(100, 20, true) {
		r.arrived = a.opts.Now()
		a.mg.put(fmt.Sprint("i", i), r)
	}
	a.mergeLocked(a.opts.Now())
	b.ReportAllocs()
	var sink float64
	for b.Loop() {
		sink += a.RateOf("topic-7")
	}
	_ = sink
}

func BenchmarkRateOfParallel(b *testing.B) {
	a := newOffline(b, newFakeLocal(pressure.TopicRate{Topic: "topic-7", MessagesPerSec: 1}), Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sink float64
		for pb.Next() {
			sink += a.RateOf("topic-7")
		}
		_ = sink
	})
}

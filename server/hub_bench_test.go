package server

import (
	"strconv"
	"testing"

	"github.com/rtserver/rtserver/metrics"
)

// The hub's share of a publish, sockets aside: finding the subscribers and
// queueing the shared frame for each (their writer owns the queue, which
// the benchmark empties).
func BenchmarkHubPublish(b *testing.B) {
	for _, subs := range []int{10, 1000} {
		b.Run(strconv.Itoa(subs), func(b *testing.B) {
			s := mustNew(b, Deps{Metrics: metrics.NewDiscard()})
			conns := make([]*conn, subs)
			for i := range conns {
				c := &conn{s: s, queue: make([][]byte, 0, 64)}
				c.writing = true
				conns[i] = c
				s.hub.subscribe(c, "bench")
			}
			data := []byte(`{"rtbts":1234567890,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.hub.publish("bench", data, nil)
				if i++; i%64 == 0 {
					for _, c := range conns {
						c.queue, c.queued = c.queue[:0], 0
					}
				}
			}
		})
	}
}

// A subscription made and ended on a topic that has other subscribers
// (the topic stays in the hub), and on a topic of its own (its first
// subscriber and its last): the hub's share of subscribe and unsubscribe,
// the bus's calls and the subscriber counts included.
func BenchmarkHubSubscribe(b *testing.B) {
	for _, shared := range []bool{true, false} {
		b.Run("shared="+strconv.FormatBool(shared), func(b *testing.B) {
			s := mustNew(b, Deps{Metrics: metrics.NewDiscard()})
			if shared {
				s.hub.subscribe(&conn{s: s}, "bench")
			}
			c := &conn{s: s}
			b.ReportAllocs()
			for b.Loop() {
				s.hub.subscribe(c, "bench")
				s.hub.unsubscribe(c, "bench")
			}
		})
	}
}

package server

import (
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/metrics"
)

// The shared subscriber list a delivery walks is always the topic's
// current set, and a list handed out is never changed afterwards: a
// delivery walking it while subscriptions change sees the set as it was
// when the publish began.
func TestHubSharedListsFollowSubscriptions(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
		conns := make([]*conn, 4)
		for i := range conns {
			conns[i] = &conn{s: s}
		}
		topics := []string{"a", "b"}
		model := map[string]map[*conn]bool{"a": {}, "b": {}}
		type handed struct {
			list, copy []*conn
		}
		var lists []handed
		for range rapid.IntRange(1, 50).Draw(rt, "steps") {
			c := conns[rapid.IntRange(0, len(conns)-1).Draw(rt, "conn")]
			topic := rapid.SampledFrom(topics).Draw(rt, "topic")
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				s.hub.subscribe(c, topic)
				model[topic][c] = true
			case 1:
				s.hub.unsubscribe(c, topic)
				delete(model[topic], c)
			default:
				l := s.hub.subscribers(topic)
				lists = append(lists, handed{l, slices.Clone(l)})
				if len(l) != len(model[topic]) || s.LocalSubscribers(topic) != len(l) {
					rt.Fatalf("%s: list of %d, count %d, want %d", topic, len(l), s.LocalSubscribers(topic), len(model[topic]))
				}
				for _, c := range l {
					if !model[topic][c] {
						rt.Fatalf("%s: list holds a connection not subscribed", topic)
					}
				}
			}
		}
		for _, h := range lists {
			if !slices.Equal(h.list, h.copy) {
				rt.Fatal("a list handed to a delivery changed afterwards")
			}
		}
		var want []bus.TopicCount
		for _, topic := range topics {
			if n := len(model[topic]); n > 0 {
				want = append(want, bus.TopicCount{Topic: topic, Count: n})
			}
		}
		slices.SortStableFunc(want, func(x, y bus.TopicCount) int { return y.Count - x.Count })
		if got := s.Subjects(); !slices.Equal(got, want) {
			rt.Fatalf("Subjects = %v, want %v", got, want)
		}
	})
}

// Deliveries that build and share lists race with subscriptions that
// drop them; -race checks the list is published safely.
func TestHubSharedListsUnderChurn(t *testing.T) {
	s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
	conns := make([]*conn, 8)
	for i := range conns {
		conns[i] = &conn{s: s}
	}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			for range 200 {
				s.hub.subscribe(conns[i], "churn")
				s.hub.unsubscribe(conns[i], "churn")
			}
			s.hub.subscribe(conns[i], "churn")
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 400 {
				for _, c := range s.hub.subscribers("churn") {
					_ = c.s
				}
			}
		})
	}
	wg.Wait()
	if got := len(s.hub.subscribers("churn")); got != len(conns) {
		t.Fatalf("%d subscribers after the churn, want %d", got, len(conns))
	}
	// The per-topic count, told after the hub's lock is released, nets
	// out to the hub's state whatever order the changes landed in.
	if got, subjects := s.LocalSubscribers("churn"), s.Subjects(); got != len(conns) || len(subjects) != 1 || subjects[0].Count != len(conns) {
		t.Fatalf("LocalSubscribers = %d, Subjects = %v after the churn; want %d", got, subjects, len(conns))
	}
}

// Publishes start at a random place in a topic's shared list: no
// subscriber is always written to last.
func TestHubPublishRotatesFirstSubscriber(t *testing.T) {
	s := mustNew(t, Deps{Metrics: metrics.NewDiscard()})
	conns := make([]*conn, 3)
	for i := range conns {
		conns[i] = &conn{s: s}
		s.hub.subscribe(conns[i], "fair")
	}
	first := map[*conn]bool{}
	var held holdSet
	for range 200 {
		s.hub.publish("fair", []byte(`1`), &held)
		if len(held.conns) != len(conns) {
			t.Fatalf("%d connections held, want %d", len(held.conns), len(conns))
		}
		first[held.conns[0]] = true
		// What a flush would do, without sockets.
		for _, c := range conns {
			c.queue, c.queued, c.heldBy = c.queue[:0], 0, nil
		}
		held.conns, held.publishes = held.conns[:0], 0
	}
	if len(first) != len(conns) {
		t.Fatalf("only %d of %d subscribers were ever first in 200 publishes", len(first), len(conns))
	}
}

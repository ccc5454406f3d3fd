package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// seqOf is topic's sequencer, once a subscriber made one.
func seqOf(t *testing.T, s *Server, topic string) *topicSeq {
	t.Helper()
	s.hist.mu.Lock()
	defer s.hist.mu.Unlock()
	q := s.hist.topics[topic]
	if q == nil {
		t.Fatalf("no sequencer for %s", topic)
	}
	return q
}

// Publishers racing on one history topic: every subscriber gets every
// offset once, in order, though the fan-out runs outside the sequencer's
// lock.
func TestHistoryFanoutKeepsOffsetOrderUnderRacingPublishers(t *testing.T) {
	leakcheck.Check(t)
	store := history.NewMemory(history.MemoryOptions{})
	_, url := startServer(t, historyOptions(store, history.Policy{Size: 10000, TTL: time.Minute}))
	const subscribers, publishers, each = 4, 4, 150
	subs := make([]*wstest.Conn, subscribers)
	for i := range subs {
		subs[i] = wstest.Dial(t, url)
		resultPos(t, subs[i].Call("subscribe", `{"topic":"h:race"}`))
	}
	var wg sync.WaitGroup
	for p := range publishers {
		pub := wstest.Dial(t, url)
		wg.Go(func() {
			for i := range each {
				f := pub.Call("publish", fmt.Sprintf(`{"topic":"h:race","data":%d}`, p*each+i))
				if f.Error != nil {
					t.Errorf("publish: %+v", f.Error)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, c := range subs {
		offs, _ := nextMessages(t, c, "h:race", publishers*each)
		for j, o := range offs {
			if o != uint64(j+1) {
				t.Fatalf("subscriber %d: message %d has offset %d", i, j, o)
			}
		}
	}
}

// While one subscriber's send queue is stuck (its lock taken), the
// goroutine fanning out waits on it, and every other publish on the
// topic still returns: the sequencer's lock is not held by the fan-out.
// Once the queue is free, both subscribers get everything in order.
func TestHistoryPublishDoesNotWaitForAStuckFanout(t *testing.T) {
	leakcheck.Check(t)
	store := history.NewMemory(history.MemoryOptions{})
	s, url := startServer(t, historyOptions(store, history.Policy{Size: 1000, TTL: time.Minute}))
	a, b := wstest.Dial(t, url), wstest.Dial(t, url)
	resultPos(t, a.Call("subscribe", `{"topic":"h:stuck"}`))
	resultPos(t, b.Call("subscribe", `{"topic":"h:stuck"}`))
	q := seqOf(t, s, "h:stuck")
	q.mu.Lock()
	stuck := q.audience[0].c
	q.mu.Unlock()

	pol := history.Policy{Size: 1000, TTL: time.Minute}
	publish := func(i int) {
		if _, _, err := store.Publish(context.Background(), history.Publish{Topic: "h:stuck", Data: fmt.Appendf(nil, "%d", i), Policy: pol}); err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	stuck.mu.Lock()
	first := make(chan struct{})
	go func() {
		defer close(first)
		publish(1) // becomes the deliverer, and waits for stuck's queue
	}()
	testkit.Eventually(t, 10*time.Second, "the first publish to be delivering", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.delivering && len(q.out) == 0
	})
	const n = 50
	for i := 2; i <= n; i++ {
		publish(i) // returns: it only puts the message in line
	}
	q.mu.Lock()
	inLine := len(q.out)
	q.mu.Unlock()
	stuck.mu.Unlock()
	<-first
	if inLine != n-1 {
		t.Fatalf("%d messages in line behind the stuck fan-out, want %d", inLine, n-1)
	}
	for _, c := range []*wstest.Conn{a, b} {
		offs, _ := nextMessages(t, c, "h:stuck", n)
		for j, o := range offs {
			if o != uint64(j+1) {
				t.Fatalf("message %d has offset %d", j, o)
			}
		}
	}
}

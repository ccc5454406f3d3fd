package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
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
	var srv *Server
	store := memoryStore(&srv)
	srv, url := startServer(t, historyOptions(store, history.Policy{Size: 10000, TTL: time.Minute}))
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
	var srv *Server
	store := memoryStore(&srv)
	s, url := startServer(t, historyOptions(store, history.Policy{Size: 1000, TTL: time.Minute}))
	srv = s
	a, b := wstest.Dial(t, url), wstest.Dial(t, url)
	resultPos(t, a.Call("subscribe", `{"topic":"h:stuck"}`))
	resultPos(t, b.Call("subscribe", `{"topic":"h:stuck"}`))
	q := seqOf(t, s, "h:stuck")
	q.mu.Lock()
	audience := q.audience
	q.mu.Unlock()
	// The subscribes' results are out; wait for both to go live after them.
	testkit.Eventually(t, 10*time.Second, "both subscriptions to go live", func() bool {
		for _, sb := range audience {
			sb.hs.mu.Lock()
			replaying := sb.hs.cur.Replaying()
			sb.hs.mu.Unlock()
			if replaying {
				return false
			}
		}
		return true
	})
	stuck := audience[0].c

	pol := history.Policy{Size: 1000, TTL: time.Minute}
	publish := func(i int) {
		if _, err := s.hist.publish(context.Background(), "h:stuck", fmt.Appendf(nil, "%d", i), pol, "", nil); err != nil {
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

// positionStore is a store whose topics stand at a position the test
// sets, with messages 1..offset; it counts reads per topic.
type positionStore struct {
	mu     sync.Mutex
	at     map[string]uint64
	checks map[string]int // position-only reads (the periodic check)
	fills  map[string]int // reads of messages
}

func (p *positionStore) Publish(context.Context, history.Publish) (history.Position, bool, error) {
	return history.Position{}, false, history.ErrUnavailable
}

func (p *positionStore) Read(_ context.Context, topic string, after uint64, limit int, _ history.Policy) (history.Position, []history.Message, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.at[topic]
	if limit == 0 {
		p.checks[topic]++
		return history.Position{Epoch: "e", Offset: last}, nil, nil
	}
	p.fills[topic]++
	var out []history.Message
	for o := after + 1; o <= last && len(out) < limit; o++ {
		out = append(out, history.Message{Offset: o, Data: fmt.Appendf(nil, "%d", o)})
	}
	return history.Position{Epoch: "e", Offset: last}, out, nil
}

func (p *positionStore) set(topic string, last uint64) {
	p.mu.Lock()
	p.at[topic] = last
	p.mu.Unlock()
}

func (p *positionStore) counts(topic string) (checks, fills int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checks[topic], p.fills[topic]
}

// The periodic check reads each idle tracked topic's position once per
// interval (per topic, whatever its subscribers), skips a topic that
// delivered since the last tick, and fills an instance that fell behind
// (a lost last message) from the store.
func TestHistoryPeriodicCheckPerTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &positionStore{at: map[string]uint64{}, checks: map[string]int{}, fills: map[string]int{}}
		opts := historyOptions(store, history.Policy{Size: 100, TTL: time.Minute})
		opts.HistoryCheckInterval = 5 * time.Second
		s := mustNew(t, opts)
		h := s.hist
		h.start()
		defer h.close()
		seq := func(topic string) *topicSeq {
			q := h.acquire(topic, history.Policy{Size: 100, TTL: time.Minute})
			q.mu.Lock()
			q.setReady(history.Position{Epoch: "e"})
			q.unlock()
			return q
		}
		idle, busy := seq("h:idle"), seq("h:busy")

		time.Sleep(5*time.Second - time.Millisecond)
		synctest.Wait()
		if c, _ := store.counts("h:idle"); c != 0 {
			t.Fatalf("%d checks before the first interval", c)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if c, _ := store.counts("h:idle"); c != 1 {
			t.Fatalf("%d checks after one interval, want 1", c)
		}

		// busy delivers between ticks: it is not checked; idle is.
		for i := range 3 {
			h.deliverAt("h:busy", []byte("1"), "e", uint64(i+1), nil)
			time.Sleep(5 * time.Second)
			synctest.Wait()
		}
		if c, _ := store.counts("h:idle"); c != 4 {
			t.Fatalf("idle topic checked %d times in 4 intervals, want 4", c)
		}
		if c, _ := store.counts("h:busy"); c != 1 {
			t.Fatalf("busy topic checked %d times, want only the first (before it delivered)", c)
		}

		// idle's last message was lost on the way here: the next check
		// finds the store ahead and fills from it.
		store.set("h:idle", 2)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		idle.mu.Lock()
		last := idle.last
		idle.mu.Unlock()
		if _, f := store.counts("h:idle"); last != 2 || f != 1 {
			t.Fatalf("after the check: at %d with %d fills, want 2 with 1", last, f)
		}
		busy.mu.Lock()
		busyLast := busy.last
		busy.mu.Unlock()
		if busyLast != 3 {
			t.Fatalf("busy topic at %d, want 3", busyLast)
		}
	})
}

package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
)

// recorder collects what a Tracker delivers and sends.
type recorder struct {
	mu        sync.Mutex
	delivered []note
	sent      []note
	interest  map[string]int
}

type note struct {
	at    time.Time
	topic string
	diff  Diff
}

func (r *recorder) options(mode Mode) TrackerDeps {
	r.interest = map[string]int{}
	return TrackerDeps{
		Mode: func(string) Mode { return mode },
		Deliver: func(topic string, frame []byte) int {
			var n struct {
				Method string
				Params struct {
					Topic string
					Diff
				}
			}
			if err := json.Unmarshal(frame, &n); err != nil || n.Method != "presence" || n.Params.Topic != topic {
				panic(fmt.Sprintf("bad notification %s: %v", frame, err))
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.delivered = append(r.delivered, note{time.Now(), topic, n.Params.Diff})
			return 1
		},
		Send: func(topic string, data []byte) error {
			var d Diff
			if err := json.Unmarshal(data, &d); err != nil {
				panic(err)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.sent = append(r.sent, note{time.Now(), topic, d})
			return nil
		},
		Interest: func(topic string, on bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if on {
				r.interest[topic]++
			} else {
				r.interest[topic]--
			}
		},
	}
}

func (r *recorder) take() (delivered, sent []note) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delivered, sent = r.delivered, r.sent
	r.delivered, r.sent = nil, nil
	return delivered, sent
}

func clients(es []Entry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Client)
	}
	return out
}

func TestTrackerCoalescesDiffs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		tr := mustTracker(Config{}, r.options(Mode{Presence: true, JoinLeave: true}))
		tr.Start(context.Background())
		start := time.Now()

		<-tr.Update([]Change{join("room", "i.1", "alice")})
		synctest.Wait()
		d, s := r.take()
		// The first join of a quiet topic goes out at once.
		if len(d) != 1 || fmt.Sprint(clients(d[0].diff.Joins)) != "[i.1]" || !d[0].at.Equal(start) {
			t.Fatalf("delivered %+v", d)
		}
		if len(s) != 1 || fmt.Sprint(clients(s[0].diff.Joins)) != "[i.1]" {
			t.Fatalf("sent %+v", s)
		}
		if r.interest["room"] != 1 {
			t.Fatalf("interest %v", r.interest)
		}

		// Within the interval: two joins, a join and leave that cancel out,
		// and a diff from another instance.
		time.Sleep(100 * time.Millisecond)
		tr.Update([]Change{join("room", "i.2", "bob"), join("room", "i.3", "carol")})
		tr.Update([]Change{join("room", "i.4", "dan")})
		tr.Update([]Change{leave("room", "i.4", "dan")})
		if !tr.Receive("room", []byte(`{"joins":[{"client":"j.1","user":"erin"}],"leaves":[]}`)) {
			t.Fatal("Receive refused a valid diff")
		}
		synctest.Wait()
		if d, _ := r.take(); len(d) != 0 {
			t.Fatalf("delivered within the interval: %+v", d)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		d, s = r.take()
		if len(d) != 1 || !d[0].at.Equal(start.Add(time.Second)) ||
			fmt.Sprint(clients(d[0].diff.Joins)) != "[i.2 i.3 j.1]" || len(d[0].diff.Leaves) != 0 {
			t.Fatalf("delivered %+v", d)
		}
		// Only this instance's own changes go to the others.
		if len(s) != 1 || fmt.Sprint(clients(s[0].diff.Joins)) != "[i.2 i.3]" {
			t.Fatalf("sent %+v", s)
		}

		// A leave just before Close is sent at Close: the instance will
		// not be there later.
		tr.Update([]Change{leave("room", "i.2", "bob"), leave("room", "i.1", "alice"), leave("room", "i.3", "carol")})
		tr.Close()
		_, s = r.take()
		if len(s) != 1 || fmt.Sprint(clients(s[0].diff.Leaves)) != "[i.1 i.2 i.3]" {
			t.Fatalf("sent at close %+v", s)
		}
		if r.interest["room"] != 0 {
			t.Fatalf("interest %v after every entry left", r.interest)
		}
	})
}

// TestTrackerMassReconnect: 1,000 clients of one room closed by a drain
// and reconnected over 3 seconds: subscribers get at most one notification
// per interval, each within MaxDiff, and every old id leaves once and every
// new one joins once.
func TestTrackerMassReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		tr := mustTracker(Config{}, r.options(Mode{Presence: true, JoinLeave: true}))
		tr.Start(context.Background())
		defer tr.Close()
		for i := range 1000 {
			tr.Update([]Change{join("room", fmt.Sprintf("old.%04d", i), fmt.Sprint("u", i))})
		}
		time.Sleep(10 * time.Second)
		r.take()
		start := time.Now()
		for i := range 1000 {
			tr.Update([]Change{leave("room", fmt.Sprintf("old.%04d", i), fmt.Sprint("u", i))})
			time.Sleep(time.Millisecond)
			tr.Update([]Change{join("room", fmt.Sprintf("new.%04d", i), fmt.Sprint("u", i))})
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(10 * time.Second)
		d, _ := r.take()
		joins, leaves := map[string]int{}, map[string]int{}
		for i, n := range d {
			if i > 0 && n.at.Sub(d[i-1].at) < time.Second {
				t.Fatalf("notifications %v apart", n.at.Sub(d[i-1].at))
			}
			if len(n.diff.Joins)+len(n.diff.Leaves) > MaxDiff {
				t.Fatalf("a notification of %d entries", len(n.diff.Joins)+len(n.diff.Leaves))
			}
			for _, e := range n.diff.Joins {
				joins[e.Client]++
			}
			for _, e := range n.diff.Leaves {
				leaves[e.Client]++
			}
		}
		if len(joins) != 1000 || len(leaves) != 1000 {
			t.Fatalf("%d joins and %d leaves announced", len(joins), len(leaves))
		}
		for c, n := range joins {
			if n != 1 {
				t.Fatalf("%s joined %d times", c, n)
			}
		}
		for c, n := range leaves {
			if n != 1 {
				t.Fatalf("%s left %d times", c, n)
			}
		}
		// 3s of churn: a notification per second at most, plus the first.
		secs := d[len(d)-1].at.Sub(start).Seconds()
		if float64(len(d)) > secs+1 {
			t.Fatalf("%d notifications over %.1fs", len(d), secs)
		}
		t.Logf("mass reconnect of 1,000: %d notifications per subscriber over %.1fs", len(d), secs)
		if tr.Entries() != 1000 {
			t.Fatalf("%d entries", tr.Entries())
		}
	})
}

// countingStore counts Apply calls and the entries they carry.
type countingStore struct {
	*MemoryStore
	mu      sync.Mutex
	applies int
	sizes   []int
}

func (s *countingStore) take() (applies int, sizes []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	applies, sizes = s.applies, s.sizes
	s.applies, s.sizes = 0, nil
	return applies, sizes
}

func (s *countingStore) Apply(ctx context.Context, cs []Change) error {
	s.mu.Lock()
	s.applies++
	s.sizes = append(s.sizes, len(cs))
	s.mu.Unlock()
	return s.MemoryStore.Apply(ctx, cs)
}

// TestTrackerRefreshIsBatched: 10,000 entries over 100 topics are
// refreshed every ttl/3 with at most one write per 1,000 entries, and
// joins queued while a write is in flight go in one write.
func TestTrackerRefreshIsBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &countingStore{MemoryStore: NewMemoryStore()}
		tr := mustTracker(Config{TTL: 30 * time.Second}, TrackerDeps{
			Store: store,
			Mode:  func(string) Mode { return Mode{Presence: true} },
		})
		var cs []Change
		for i := range 10000 {
			cs = append(cs, join(fmt.Sprint("room:", i%100), fmt.Sprint("i.", i), "u"))
		}
		// Queued before the writer runs: one write for all.
		for _, c := range cs {
			tr.Update([]Change{c})
		}
		tr.Start(context.Background())
		defer tr.Close()
		synctest.Wait()
		if applies, sizes := store.take(); applies != 1 || sizes[0] != 10000 {
			t.Fatalf("%d writes of %v entries for 10,000 queued joins", applies, sizes)
		}
		time.Sleep(10*time.Second + time.Millisecond) // one refresh period
		synctest.Wait()
		applies, sizes := store.take()
		if applies != 10 {
			t.Fatalf("refresh of 10,000 entries took %d writes (%v)", applies, sizes)
		}
		for _, n := range sizes {
			if n > MaxBatch {
				t.Fatalf("a write of %d entries", n)
			}
		}
		if st, _ := store.Stats(context.Background(), "room:7"); st.Clients != 100 {
			t.Fatalf("%+v", st)
		}
	})
}

// roundTrips counts what a go-redis client sends: pipelines and single
// commands, each one round trip.
type roundTrips struct {
	mu sync.Mutex
	n  int
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *roundTrips) take() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	h.n = 0
	return n
}

// TestRedisRoundTrips: against a real Redis, a subscribe is one round
// trip, a close that leaves 5 topics is one, and a refresh of 10,000
// entries is 10.
func TestRedisRoundTrips(t *testing.T) {
	s := newRedisStore(t, storeOptions{})
	var h roundTrips
	s.client.AddHook(&h)
	tr := mustTracker(Config{}, TrackerDeps{Store: s, Mode: func(string) Mode { return Mode{Presence: true} }})
	tr.Start(context.Background())
	defer tr.Close()
	mustApply(t, s, join("warm", "w.1", "")) // load the script
	h.take()

	<-tr.Update([]Change{join("room:0", "a.1", "alice")})
	if n := h.take(); n != 1 {
		t.Fatalf("a subscribe took %d round trips", n)
	}
	var joins, leaves []Change
	for i := range 5 {
		joins = append(joins, join(fmt.Sprint("room:", i), "b.1", "bob"))
		leaves = append(leaves, leave(fmt.Sprint("room:", i), "b.1", "bob"))
	}
	<-tr.Update(joins)
	h.take()
	<-tr.Update(leaves)
	if n := h.take(); n != 1 {
		t.Fatalf("a close leaving 5 topics took %d round trips", n)
	}

	var many []Change
	for i := range 10000 {
		many = append(many, join(fmt.Sprint("big:", i%10), fmt.Sprint("c.", i), fmt.Sprint("u", i%100)))
	}
	<-tr.Update(many)
	h.take()
	tr.refresh()
	entries := tr.Entries() // 10,001: alice is still in room:0
	if n := h.take(); n > (entries+MaxBatch-1)/MaxBatch {
		t.Fatalf("a refresh of %d entries took %d round trips", entries, n)
	}
	if st := mustStats(t, s, "big:3"); st.Clients != 1000 || st.Users != 10 {
		t.Fatalf("%+v", st)
	}
}

// A tracker that was never started closes at once: a server shut down
// before it started must not hang on a writer that never ran.
func TestCloseWithoutStart(t *testing.T) {
	tr := mustTracker(Config{}, TrackerDeps{Store: NewMemoryStore(), Mode: func(string) Mode { return Mode{Presence: true} }})
	done := make(chan struct{})
	go func() { tr.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // only stops a broken test from hanging
		t.Fatal("Close of a tracker never started did not return")
	}
	tr.Start(context.Background()) // after Close: a no-op, not a writer nobody stops
	tr.Close()
}

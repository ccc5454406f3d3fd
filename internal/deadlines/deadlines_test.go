package deadlines

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"
)

type item struct {
	id int
	h  Handle
}

func handleOf(x *item) *Handle { return &x.h }

// log records what fired and when, in the bubble's fake time since start.
type log struct {
	mu    sync.Mutex
	start time.Time
	fired map[int][]time.Duration
}

func (l *log) fire(x *item) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fired[x.id] = append(l.fired[x.id], time.Since(l.start))
}

func (l *log) snapshot() map[int][]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int][]time.Duration, len(l.fired))
	for id, at := range l.fired {
		out[id] = slices.Clone(at)
	}
	return out
}

// bubbleT hides the deadline of a *testing.T from rapid, which would ask
// for it inside the bubble (where it panics) and falls back to its own.
type bubbleT struct{ *testing.T }

func (bubbleT) Deadline() (time.Time, bool) { return time.Time{}, false }

// TestEveryDeadlineFiresOnceProperty drives random schedules, moves,
// cancels and waits over a few items, in fake time, against a model:
// after every step each item has fired exactly at the times the model
// says (its deadline rounded up to the resolution, once per schedule that
// was neither moved nor cancelled before it came), Cancel reports what
// the model expects, and Len is the number of pending deadlines.
func TestEveryDeadlineFiresOnceProperty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rapid.Check(bubbleT{t}, func(rt *rapid.T) {
			res := time.Duration(rapid.SampledFrom([]int{0, 1, 7}).Draw(rt, "resolutionMs")) * time.Millisecond
			l := &log{start: time.Now(), fired: map[int][]time.Duration{}}
			h := New(res, handleOf, l.fire)
			defer h.Stop()
			items := make([]*item, rapid.IntRange(1, 6).Draw(rt, "items"))
			for i := range items {
				items[i] = &item{id: i}
			}
			pending := map[int]time.Duration{} // id -> when it must fire
			want := map[int][]time.Duration{}
			roundUp := func(at time.Duration) time.Duration {
				if res == 0 {
					return at
				}
				return (at + res - 1) / res * res
			}
			for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
				now := time.Since(l.start)
				switch op := rapid.SampledFrom([]string{"after", "after", "cancel", "sleep", "sleep"}).Draw(rt, "op"); op {
				case "after":
					i := rapid.IntRange(0, len(items)-1).Draw(rt, "item")
					d := time.Duration(rapid.IntRange(-2, 30).Draw(rt, "ms")) * time.Millisecond
					h.After(items[i], d)
					pending[i] = roundUp(now + max(d, 0))
				case "cancel":
					i := rapid.IntRange(0, len(items)-1).Draw(rt, "item")
					_, had := pending[i]
					if got := h.Cancel(items[i]); got != had {
						rt.Fatalf("step %d: Cancel(%d) = %v, want %v", step, i, got, had)
					}
					delete(pending, i)
				case "sleep":
					time.Sleep(time.Duration(rapid.IntRange(0, 20).Draw(rt, "sleepMs")) * time.Millisecond)
				}
				synctest.Wait() // every callback due by now has run (a deadline already due fires at once)
				now = time.Since(l.start)
				for i, at := range pending {
					if at <= now {
						want[i] = append(want[i], at)
						delete(pending, i)
					}
				}
				if got := l.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
					rt.Fatalf("step %d at %v: fired %v, want %v (pending %v)", step, now, got, want, pending)
				}
				if h.Len() != len(pending) {
					rt.Fatalf("step %d: Len %d, want %d", step, h.Len(), len(pending))
				}
			}
		})
	})
}

// A callback may schedule its own item again (a periodic step) and cancel
// others; Stop silences everything, and After does nothing afterwards.
func TestFireReschedulesAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var ticks []time.Duration
		other := &item{id: 2}
		var h *Heap[*item]
		h = New(0, handleOf, func(x *item) {
			if x.id == 2 {
				t.Error("the cancelled item fired")
				return
			}
			mu.Lock()
			ticks = append(ticks, time.Since(start))
			mu.Unlock()
			h.Cancel(other)
			h.After(x, 10*time.Millisecond)
		})
		periodic := &item{id: 1}
		h.After(periodic, 10*time.Millisecond)
		h.After(other, 15*time.Millisecond)
		time.Sleep(35 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		if want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}; !slices.Equal(ticks, want) {
			t.Errorf("periodic item fired at %v, want %v", ticks, want)
		}
		mu.Unlock()
		h.Stop()
		if h.Len() != 0 || periodic.h.Scheduled() {
			t.Errorf("after Stop: Len %d, periodic scheduled %v", h.Len(), periodic.h.Scheduled())
		}
		h.After(periodic, time.Millisecond)
		time.Sleep(time.Hour)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(ticks) != 3 || h.Len() != 0 {
			t.Errorf("after Stop: %d ticks, Len %d; want 3 and 0", len(ticks), h.Len())
		}
	})
}

// Many items due within one resolution fire in one timer round, none
// before it.
func TestResolutionBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var fired []int
		h := New(100*time.Millisecond, handleOf, func(x *item) {
			mu.Lock()
			fired = append(fired, x.id)
			mu.Unlock()
		})
		defer h.Stop()
		for i, d := range []int{90, 10, 50, 30} {
			h.After(&item{id: i}, time.Duration(d)*time.Millisecond)
		}
		count := func() int {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return len(fired)
		}
		time.Sleep(99 * time.Millisecond)
		if n := count(); n != 0 {
			t.Fatalf("%d fired before the 100ms round", n)
		}
		time.Sleep(time.Millisecond)
		if n := count(); n != 4 {
			t.Fatalf("%d fired in the 100ms round, want all 4", n)
		}
	})
}

// The heap holds no item once it has fired or been cancelled, and a
// crowd's array goes when the crowd does.
func TestHeapLetsGo(t *testing.T) {
	h := New(0, handleOf, func(*item) {})
	defer h.Stop()
	items := make([]*item, 1000)
	for i := range items {
		items[i] = &item{id: i}
		h.After(items[i], time.Hour)
	}
	for _, x := range items {
		if !h.Cancel(x) {
			t.Fatalf("Cancel(%d) = false", x.id)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.entries) != 0 || h.entries != nil {
		t.Fatalf("after cancelling all: %d entries, cap %d", len(h.entries), cap(h.entries))
	}
}

// Schedules, moves and cancels from many goroutines at once, while the
// timer fires (run with -race): no item fires more often than it was
// scheduled, and once everything due has come the heap is empty.
func TestConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const workers, perWorker, ops = 8, 8, 200
		var mu sync.Mutex
		fired := map[int]int{}
		h := New(time.Millisecond, handleOf, func(x *item) {
			mu.Lock()
			fired[x.id]++
			mu.Unlock()
		})
		defer h.Stop()
		scheduled := make([]int, workers*perWorker)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				items := make([]*item, perWorker)
				for i := range items {
					items[i] = &item{id: w*perWorker + i}
				}
				for k := range ops {
					x := items[(k*7+w)%perWorker]
					if k%3 == 2 {
						h.Cancel(x)
					} else {
						h.After(x, time.Duration(k%5)*time.Millisecond)
						scheduled[x.id]++
					}
					if k%4 == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := h.Len(); n != 0 {
			t.Fatalf("%d deadlines pending after everything came", n)
		}
		mu.Lock()
		defer mu.Unlock()
		for id, n := range fired {
			if n > scheduled[id] {
				t.Errorf("item %d fired %d times, scheduled %d", id, n, scheduled[id])
			}
		}
	})
}

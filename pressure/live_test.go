package pressure

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"
)

type event struct {
	ns int64
	n  uint64
}

// countIn is the count of the events in [from, to].
func countIn(evs []event, from, to int64) float64 {
	var c float64
	for _, e := range evs {
		if e.ns >= from && e.ns <= to {
			c += float64(e.n)
		}
	}
	return c
}

// On any timeline, a live rate read at any moment lies between the count
// of the last nine whole buckets plus the current one and that count plus
// the whole oldest bucket: it is the true count of the last second give
// or take that bucket, the one it counts in proportion.
func TestRingIsASlidingWindow(t *testing.T) {
	b := int64(liveBucket)
	rapid.Check(t, func(t *rapid.T) {
		var r ring
		now := rapid.Int64Range(0, 1<<62).Draw(t, "start")
		var evs []event
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			// Gaps mostly within a bucket, sometimes past the window.
			now += rapid.OneOf(rapid.Int64Range(0, b), rapid.Int64Range(0, 3*int64(time.Second))).Draw(t, "gap")
			if rapid.Bool().Draw(t, "record") {
				n := rapid.Uint64Range(1, 5).Draw(t, "n")
				r.add(tickOf(now), n)
				evs = append(evs, event{now, n})
				continue
			}
			got := r.sum(now)
			tick := tickOf(now)
			lower := countIn(evs, (tick-int64(liveBuckets)+1)*b, now)
			upper := countIn(evs, (tick-int64(liveBuckets))*b, now)
			exact := countIn(evs, now-int64(LiveWindow)+1, now)
			const eps = 1e-9
			if got < lower-eps || got > upper+eps {
				t.Fatalf("at %d: sum %v outside [%v, %v]", now, got, lower, upper)
			}
			if d := got - exact; d > upper-lower+eps || -d > upper-lower+eps {
				t.Fatalf("at %d: sum %v, true count of the last second %v, off by more than the oldest bucket (%v)", now, got, exact, upper-lower)
			}
		}
	})
}

// A steady rate reads as itself once the window is full, and nothing once
// the window has passed, also where the slots' 32-bit ticks wrap.
func TestRingSteadyRateAndDecay(t *testing.T) {
	for _, start := range []int64{int64(1_700_000_000) * int64(time.Second), (1<<32 - 15) * int64(liveBucket)} {
		t.Run(fmt.Sprint(start), func(t *testing.T) { steadyRateAndDecay(t, start) })
	}
}

func steadyRateAndDecay(t *testing.T, start int64) {
	var r ring
	step := int64(time.Second) / 150 // 150 a second
	var ns int64
	for ns = start; ns < start+int64(3*time.Second); ns += step {
		r.add(tickOf(ns), 1)
	}
	if got := r.sum(ns); got < 149 || got > 151 {
		t.Fatalf("steady 150/s reads %v", got)
	}
	if got := r.sum(ns + int64(LiveWindow+liveBucket)); got != 0 {
		t.Fatalf("a window after the last attempt reads %v", got)
	}
	if r.recent(tickOf(ns + int64(LiveWindow+liveBucket))) {
		t.Fatal("recent after the window has passed")
	}
}

// An add older than the bucket a slot holds (a recorder that stalled past
// the window) is dropped rather than wiping newer counts.
func TestRingDropsStaleAdds(t *testing.T) {
	var r ring
	r.add(100, 7)
	r.add(100-int64(liveSlots), 1) // same slot, an older bucket
	if got := r.sum(100 * int64(liveBucket)); got != 7 {
		t.Fatalf("sum = %v, want 7", got)
	}
}

// Concurrent recorders on one key lose nothing.
func TestRingConcurrentAdds(t *testing.T) {
	var r ring
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				r.add(int64(500+i%3), 1)
			}
		}()
	}
	wg.Wait()
	if got := r.sum(503 * int64(liveBucket)); got != 4000 {
		t.Fatalf("sum = %v, want 4000", got)
	}
}

// Through the monitor, on an injected clock: RateOfUser and RateOf are
// current between samples, LiveTop ranks by them, and a user who stops
// leaves the window one second later.
func TestMonitorLiveRates(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	m := mustNew(Config{SampleInterval: time.Hour}, Deps{now: func() time.Time { return now }})
	for range 50 { // 150/s for a third of a second
		m.RecordAttempt("room", "abuser", 10)
		now = now.Add(time.Second / 150)
	}
	m.RecordAttempt("room", "quiet", 10)
	if got := m.RateOfUser("abuser"); got != 50 {
		t.Fatalf("abuser after 50 attempts in a third of a second: %v/s, want 50 (the last second's count)", got)
	}
	if got := m.RateOf("room"); got != 51 {
		t.Fatalf("room: %v/s, want 51", got)
	}
	topics, users := m.LiveTop(1)
	if len(topics) != 1 || topics[0].Topic != "room" || topics[0].BytesPerSec != 510 {
		t.Fatalf("LiveTop topics = %+v", topics)
	}
	if len(users) != 1 || users[0].User != "abuser" {
		t.Fatalf("LiveTop users = %+v, want the abuser alone", users)
	}
	if got := m.RateOfUser("nobody"); got != 0 {
		t.Fatalf("untracked user: %v", got)
	}
	now = now.Add(LiveWindow + liveBucket)
	if got := m.RateOfUser("abuser"); got != 0 {
		t.Fatalf("a window after stopping: %v/s", got)
	}
}

// Users churn: however many pass through, the monitor holds at most
// MaxTrackedKeys of them, and none once they have been idle for a window
// and a sample.
func TestLiveRatesMemoryIsBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	m := mustNew(Config{SampleInterval: 200 * time.Millisecond, maxTrackedKeys: 100, TopN: 5}, Deps{now: func() time.Time { return now }})
	for i := range 5000 {
		m.RecordAttempt("t", fmt.Sprint("u", i), 1)
		if i%50 == 0 {
			now = now.Add(20 * time.Millisecond)
			m.Sample()
		}
		if n := m.users.n.Load(); n > 100 {
			t.Fatalf("%d users held, bound 100", n)
		}
	}
	for range 10 {
		now = now.Add(200 * time.Millisecond)
		m.Sample()
	}
	if n := m.users.n.Load(); n != 0 {
		t.Fatalf("%d users still held after every one went idle", n)
	}
}

// A running monitor keeps the live clock itself (every bucket, on its
// sampling goroutine): rates follow the clock without a read of it per
// attempt, lag it by less than a bucket, and Close hands back to
// Config.Now.
func TestRunningMonitorKeepsTheLiveClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(Config{SampleInterval: time.Hour}, Deps{})
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		for range 150 { // 150/s for a second
			m.RecordAttempt("room", "abuser", 1)
			time.Sleep(time.Second / 150)
		}
		synctest.Wait()
		if got := m.RateOfUser("abuser"); got < 140 || got > 150 {
			t.Fatalf("after a second at 150/s: %v/s", got)
		}
		time.Sleep(LiveWindow + liveBucket)
		synctest.Wait()
		if got := m.RateOfUser("abuser"); got != 0 {
			t.Fatalf("a window after the last attempt: %v/s", got)
		}
		m.Close()
		if m.now.Load() != 0 {
			t.Fatal("Close left the live clock set")
		}
	})
}

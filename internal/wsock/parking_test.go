package wsock

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// Parking against a model, over any interleaving of the owner's steps
// (Begin, then Settle with the arming's outcome) and wake-ups: exactly
// one goroutine owns the work unless it is parked; a wake-up of a parked
// one starts exactly one; a wake-up while arming is never lost (Settle
// then says carry on); a wake-up while one runs starts none.
func TestParkingModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var p Parking
		alive := 1          // goroutines doing the owner's work
		arming := false     // the live one is between Begin and Settle
		wokeArming := false // a Wake came while it was
		parked := false
		check := func() {
			if alive > 1 {
				t.Fatalf("%d goroutines own the work", alive)
			}
			if (alive == 0) != parked {
				t.Fatalf("%d goroutines, parked %v", alive, parked)
			}
			if p.Parked() != parked {
				t.Fatalf("Parked() %v, model %v", p.Parked(), parked)
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"begin": func(t *rapid.T) {
				if alive == 0 || arming {
					t.Skip("no running owner")
				}
				p.Begin()
				arming, wokeArming = true, false
				check()
			},
			"settle": func(t *rapid.T) {
				if !arming {
					t.Skip("not arming")
				}
				armed := rapid.Bool().Draw(t, "armed")
				got := p.Settle(armed)
				if want := armed && !wokeArming; got != want {
					t.Fatalf("Settle(%v) after a wake-up while arming %v: %v, want %v", armed, wokeArming, got, want)
				}
				arming = false
				if got {
					alive, parked = 0, true
				}
				check()
			},
			"wake": func(t *rapid.T) {
				got := p.Wake()
				if got != parked {
					t.Fatalf("Wake while parked %v: start %v", parked, got)
				}
				if got {
					alive, parked = 1, false
				}
				if arming {
					wokeArming = true
				}
				check()
			},
			"": func(t *rapid.T) { check() },
		})
	})
}

// Wake-ups from many goroutines race an owner that parks again as soon as
// it runs: never two owners at once, and every park but the last is
// resumed by exactly one of them.
//
// An owner gives the work up just before Settle, not after it: once Settle
// has parked, a Wake may start the next owner before the old goroutine
// runs another instruction, so a count taken back after Settle would see
// two owners that never worked at once. When Settle says carry on, no Wake
// can have started anyone (the state was arming or woken throughout), and
// the goroutine takes the work back.
func TestParkingRacingWakes(t *testing.T) {
	leakcheck.Check(t)
	const wakers, wakes = 4, 5000
	var (
		p         Parking
		owners    atomic.Int32 // goroutines that hold the work now
		parks     atomic.Int32
		resumed   atomic.Int32
		wakersWG  sync.WaitGroup
		resumedWG sync.WaitGroup // the goroutines wake-ups started
	)
	take := func() {
		if n := owners.Add(1); n != 1 {
			t.Errorf("%d goroutines own the work", n)
		}
	}
	own := func() {
		take()
		for {
			p.Begin()
			runtime.Gosched() // let wake-ups land while arming
			owners.Add(-1)
			if p.Settle(true) {
				parks.Add(1)
				return
			}
			take()
		}
	}
	own() // the first park comes before any wake-up
	for range wakers {
		wakersWG.Go(func() {
			for i := range wakes {
				// Every other wake-up waits for a park first, so that
				// wakers on different cores find the same park together.
				for i%2 == 0 && !p.Parked() {
					runtime.Gosched()
				}
				if p.Wake() {
					resumed.Add(1)
					resumedWG.Go(own)
				}
				runtime.Gosched()
			}
		})
	}
	wakersWG.Wait()
	resumedWG.Wait() // no more wake-ups: the last owner has parked for good
	if !p.Parked() {
		t.Fatal("every owner returned, but the work is not parked")
	}
	if got, want := parks.Load(), resumed.Load()+1; got != want {
		t.Fatalf("%d parks, %d resumes: want one more park than resumes", got, resumed.Load())
	}
	if resumed.Load() == 0 {
		t.Fatal("no wake-up found the owner parked: the race was not exercised")
	}
}

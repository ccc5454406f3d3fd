package wsock

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"
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
func TestParkingRacingWakes(t *testing.T) {
	const wakers, wakes = 4, 5000
	var (
		p       Parking
		owners  atomic.Int32
		parks   atomic.Int32
		resumed atomic.Int32
		wg      sync.WaitGroup
	)
	own := func() {
		if owners.Add(1) != 1 {
			t.Error("two goroutines own the work")
		}
		for {
			p.Begin()
			runtime.Gosched() // let wake-ups land while arming
			if p.Settle(true) {
				owners.Add(-1)
				parks.Add(1)
				return
			}
		}
	}
	go own()
	for !p.Parked() { // the first park comes before any wake-up
		runtime.Gosched()
	}
	for range wakers {
		wg.Go(func() {
			for range wakes {
				if p.Wake() {
					resumed.Add(1)
					go own()
				}
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	// No more wake-ups: the owner parks for good.
	for !p.Parked() || owners.Load() != 0 {
		runtime.Gosched()
	}
	if got, want := parks.Load(), resumed.Load()+1; got != want {
		t.Fatalf("%d parks, %d resumes: want one more park than resumes", got, resumed.Load())
	}
	if resumed.Load() == 0 {
		t.Fatal("no wake-up found the owner parked: the race was not exercised")
	}
}

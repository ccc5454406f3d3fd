package server

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestLifeContextEnds(t *testing.T) {
	var x lifeContext
	if x.Err() != nil {
		t.Fatal("Err before end")
	}
	if _, ok := x.Deadline(); ok {
		t.Fatal("a deadline")
	}
	early := x.Done()
	select {
	case <-early:
		t.Fatal("done before end")
	default:
	}
	x.end()
	x.end() // once
	<-early
	<-x.Done()
	if x.Err() != context.Canceled {
		t.Fatalf("Err %v", x.Err())
	}

	// Done asked for the first time after the end is closed too.
	var y lifeContext
	y.end()
	<-y.Done()
}

// Contexts derived from it end with it, through AfterFunc; a derived
// context cancelled first unregisters itself.
func TestLifeContextDerived(t *testing.T) {
	var x lifeContext
	child, cancel := context.WithTimeout(&x, time.Hour)
	other, cancelOther := context.WithCancel(&x)
	cancelOther()
	<-other.Done()
	x.mu.Lock()
	n := len(x.after)
	x.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d callbacks registered, want 1 (the cancelled child unregistered)", n)
	}
	x.end()
	<-child.Done()
	if child.Err() != context.Canceled {
		t.Fatalf("child Err %v", child.Err())
	}
	cancel()
}

func TestLifeContextAfterFunc(t *testing.T) {
	var x lifeContext
	ran := make(chan int, 3)
	stop1 := x.AfterFunc(func() { ran <- 1 })
	_ = x.AfterFunc(func() { ran <- 2 })
	if !stop1() {
		t.Fatal("stop before the end: false")
	}
	if stop1() {
		t.Fatal("second stop: true")
	}
	x.end()
	if got := <-ran; got != 2 {
		t.Fatalf("ran %d, want 2", got)
	}
	stop3 := x.AfterFunc(func() { ran <- 3 }) // after the end: at once
	if got := <-ran; got != 3 {
		t.Fatalf("ran %d, want 3", got)
	}
	if stop3() {
		t.Fatal("stop after it started: true")
	}
	select {
	case got := <-ran:
		t.Fatalf("ran %d again", got)
	default:
	}
}

// Registering, stopping and ending from many goroutines: every callback
// that was not stopped runs exactly once.
func TestLifeContextConcurrent(t *testing.T) {
	for range 50 {
		var x lifeContext
		var mu sync.Mutex
		runs := map[int]int{}
		var kept sync.WaitGroup
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				kept.Add(1)
				stop := x.AfterFunc(func() {
					mu.Lock()
					runs[i]++
					mu.Unlock()
					kept.Done()
				})
				if i%2 == 0 && stop() {
					kept.Done() // stopped before it ran: it never will
				}
			})
		}
		wg.Go(x.end)
		wg.Wait()
		kept.Wait()
		for i, n := range runs {
			if n != 1 {
				t.Fatalf("callback %d ran %d times", i, n)
			}
		}
	}
}

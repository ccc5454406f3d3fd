package handshake

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

type outcome struct {
	id int
	ok bool
	at time.Duration
	w  *httptest.ResponseRecorder
	tk *Ticket
}

// start runs Admit in a goroutine and reports on out.
func start(g *Gate, ctx context.Context, id int, t0 time.Time, out chan<- outcome) {
	r := upgradeReq("203.0.113.1:1").WithContext(ctx)
	go func() {
		tk, w, ok := admit(g, r)
		out <- outcome{id: id, ok: ok, at: time.Since(t0), w: w, tk: tk}
	}()
}

// arrive starts upgrades from..from+n-1 one after another, each parked
// (passed or queued) before the next starts: arrival order = queue order.
// Call it inside a synctest bubble.
func arrive(g *Gate, ctx context.Context, from, n int, t0 time.Time, out chan<- outcome) {
	for i := range n {
		start(g, ctx, from+i, t0, out)
		synctest.Wait()
	}
}

func drainOutcomes(out chan outcome) []outcome {
	var got []outcome
	for {
		select {
		case o := <-out:
			got = append(got, o)
		default:
			return got
		}
	}
}

func pacingConfig(budget int, tick, wait time.Duration) Config {
	cfg := DefaultConfig()
	cfg.PerTickBudget, cfg.Tick, cfg.MaxQueueWait = budget, tick, wait
	return cfg
}

func TestPacingFIFOPerTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, m := newGate(t, pacingConfig(2, 10*time.Millisecond, time.Second))
		t0 := time.Now()
		out := make(chan outcome, 16)
		arrive(g, t.Context(), 0, 5, t0, out)
		got := drainOutcomes(out)
		if len(got) != 2 || g.QueueDepth() != 3 || testutil.ToFloat64(m.HandshakeQueueDepth) != 3 {
			t.Fatalf("at t0: %d through, queue %d; want 2 and 3", len(got), g.QueueDepth())
		}
		if g.Inflight() != 5 || g.Open() != 5 {
			t.Fatalf("waiters must hold their slots: inflight %d open %d", g.Inflight(), g.Open())
		}
		// Budget 2 makes two sub-steps per tick (at 0 and 5ms into it):
		// the queue gets one token at each, never both at the boundary.
		var order []int
		for _, step := range []struct {
			sleep time.Duration
			want  int
		}{{10 * time.Millisecond, 1}, {5 * time.Millisecond, 1}, {5 * time.Millisecond, 1}} {
			time.Sleep(step.sleep)
			synctest.Wait()
			batch := drainOutcomes(out)
			if len(batch) != step.want {
				t.Fatalf("at %v: %d through, want %d", time.Since(t0), len(batch), step.want)
			}
			for _, o := range batch {
				order = append(order, o.id)
			}
			got = append(got, batch...)
		}
		if len(order) != 3 || order[0] != 2 || order[1] != 3 || order[2] != 4 {
			t.Fatalf("release order %v, want FIFO 2, 3, 4", order)
		}
		for _, o := range got {
			if !o.ok {
				t.Fatalf("upgrade %d rejected", o.id)
			}
			o.tk.HandshakeDone(true)
			o.tk.Close()
		}
		assertIdle(t, g, m)
	})
}

func TestPacingQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, m := newGate(t, pacingConfig(1, 10*time.Millisecond, 15*time.Millisecond))
		t0 := time.Now()
		out := make(chan outcome, 16)
		arrive(g, t.Context(), 0, 3, t0, out)
		time.Sleep(time.Second)
		synctest.Wait()
		got := drainOutcomes(out)
		if len(got) != 3 {
			t.Fatalf("%d outcomes", len(got))
		}
		for _, o := range got {
			switch o.id {
			case 0, 1:
				if !o.ok || o.at != time.Duration(o.id)*10*time.Millisecond {
					t.Fatalf("upgrade %d: ok=%v at %v", o.id, o.ok, o.at)
				}
				o.tk.Close()
			case 2:
				if o.ok || o.at != 15*time.Millisecond {
					t.Fatalf("third upgrade: ok=%v at %v; want rejected at the 15ms deadline", o.ok, o.at)
				}
				checkShed(t, o.w.Code, o.w.Header(), o.w.Body.Bytes(), http.StatusServiceUnavailable, "OVERLOADED")
			}
		}
		if rejected(m, "queue_timeout") != 1 {
			t.Fatal("queue_timeout not counted")
		}
		assertIdle(t, g, m)
	})
}

func TestPacingQueueBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1 per 10ms with a 30ms wait: at most 3 waiters could ever be
		// served in time, so a 4th waiter is refused at once.
		cfg := pacingConfig(1, 10*time.Millisecond, 30*time.Millisecond)
		cfg.MaxConcurrent = 0
		g, m := newGate(t, cfg)
		t0 := time.Now()
		out := make(chan outcome, 16)
		arrive(g, t.Context(), 0, 5, t0, out)
		got := drainOutcomes(out)
		if len(got) != 2 || got[0].id != 0 || !got[0].ok || got[1].id != 4 || got[1].ok || got[1].at != 0 {
			t.Fatalf("at t0 got %+v; want #0 admitted and #4 refused at once", got)
		}
		if rejected(m, "queue_timeout") != 1 || g.QueueDepth() != 3 {
			t.Fatalf("queue_timeout %v depth %d", rejected(m, "queue_timeout"), g.QueueDepth())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		for _, o := range append(got, drainOutcomes(out)...) {
			if o.ok {
				o.tk.Close()
			}
		}
		assertIdle(t, g, m)
	})
}

func TestPacingClientGoneFreesSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, m := newGate(t, pacingConfig(1, 10*time.Millisecond, time.Second))
		t0 := time.Now()
		out := make(chan outcome, 16)
		start(g, t.Context(), 0, t0, out)
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		start(g, ctx, 1, t0, out)
		synctest.Wait()
		start(g, t.Context(), 2, t0, out)
		synctest.Wait()
		first := drainOutcomes(out)
		if len(first) != 1 || g.QueueDepth() != 2 {
			t.Fatalf("setup: %d through, queue %d", len(first), g.QueueDepth())
		}
		cancel() // client 1 hangs up while queued
		synctest.Wait()
		gone := drainOutcomes(out)
		if len(gone) != 1 || gone[0].id != 1 || gone[0].ok {
			t.Fatalf("after cancel: %+v", gone)
		}
		if gone[0].w.Body.Len() != 0 || gone[0].w.Header().Get("Retry-After") != "" {
			t.Fatal("a client that went away was answered")
		}
		if g.QueueDepth() != 1 || g.Inflight() != 2 || g.Open() != 2 {
			t.Fatalf("queue %d inflight %d open %d after the abort; want 1, 2, 2", g.QueueDepth(), g.Inflight(), g.Open())
		}
		// The next tick goes to client 2: the abandoned place was skipped.
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		next := drainOutcomes(out)
		if len(next) != 1 || next[0].id != 2 || !next[0].ok {
			t.Fatalf("next tick: %+v", next)
		}
		first[0].tk.Close()
		next[0].tk.Close()
		assertIdle(t, g, m)
	})
}

func TestDrainingRejectsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, m := newGate(t, pacingConfig(1, time.Second, 10*time.Second))
		t0 := time.Now()
		out := make(chan outcome, 16)
		arrive(g, t.Context(), 0, 4, t0, out)
		first := drainOutcomes(out)
		g.SetDraining(true)
		synctest.Wait()
		got := drainOutcomes(out)
		if len(first) != 1 || len(got) != 3 {
			t.Fatalf("%d through, %d drained; want 1 and 3", len(first), len(got))
		}
		for _, o := range got {
			if o.ok || o.at != 0 {
				t.Fatalf("waiter %d: ok=%v at %v", o.id, o.ok, o.at)
			}
			checkShed(t, o.w.Code, o.w.Header(), o.w.Body.Bytes(), http.StatusServiceUnavailable, "OVERLOADED")
		}
		if rejected(m, "draining") != 3 {
			t.Fatalf("draining rejections %v", rejected(m, "draining"))
		}
		first[0].tk.Close()
		assertIdle(t, g, m)
	})
}

// TestIdleGateRunsNoTimer: with nobody waiting no timer is armed, and the
// one armed for waiters stops once the queue empties.
func TestIdleGateRunsNoTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, m := newGate(t, pacingConfig(1, 10*time.Millisecond, time.Second))
		out := make(chan outcome, 4)
		for i := range 3 {
			start(g, t.Context(), i, time.Now(), out)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		for _, o := range drainOutcomes(out) {
			o.tk.Close()
		}
		g.pacer.mu.Lock()
		armed := g.pacer.armed
		g.pacer.mu.Unlock()
		if armed {
			t.Fatal("pacing timer still armed with an empty queue")
		}
		assertIdle(t, g, m)
	})
}

// stepsOf is the stepped release as docs/handshake.md states it, computed
// here independently of the pacer: S sub-steps per tick, sub-step j
// starting ceil(j*tick/S) into the window, and at most
// ceil(budget*(j+1)/S) tokens of the window used by its end.
func stepsOf(budget int, tick time.Duration) (s int, start func(j int) time.Duration, limit func(j int) int) {
	s = min(budget, 16)
	start = func(j int) time.Duration { return (time.Duration(j)*tick + time.Duration(s) - 1) / time.Duration(s) }
	limit = func(j int) int { return (budget*(j+1) + s - 1) / s }
	return s, start, limit
}

// TestPacingStepsFullQueue: with two ticks' worth of upgrades waiting,
// each window releases its budget in S steps, ceil(budget/S) at most per
// step, exactly at the sub-step starts, in FIFO order, and exactly budget
// per window. The first budget arrivals, on an idle pacer, pass at once.
func TestPacingStepsFullQueue(t *testing.T) {
	for _, tc := range []struct {
		budget int
		tick   time.Duration
	}{
		{50, 10 * time.Millisecond}, // S = 16: 3 or 4 every 625µs
		{20, 10 * time.Millisecond}, // S = 16: 1 or 2 per step
		{3, 10 * time.Millisecond},  // S = 3: one per step, steps rounded up to the ns
		{1, 10 * time.Millisecond},  // S = 1: the boundary only
	} {
		t.Run(fmt.Sprintf("budget %d per %v", tc.budget, tc.tick), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := pacingConfig(tc.budget, tc.tick, time.Second)
				cfg.MaxConcurrent = 0
				g, m := newGate(t, cfg)
				t0 := time.Now()
				n := 3 * tc.budget
				out := make(chan outcome, n)
				arrive(g, t.Context(), 0, n, t0, out)
				var got []outcome
				first := drainOutcomes(out)
				for _, o := range first {
					if !o.ok || o.at != 0 || o.id >= tc.budget {
						t.Fatalf("at t0: upgrade %d ok=%v at %v; want the first %d through at once", o.id, o.ok, o.at, tc.budget)
					}
				}
				if len(first) != tc.budget {
					t.Fatalf("at t0: %d through, want %d", len(first), tc.budget)
				}
				got = append(got, first...)

				s, stepStart, limit := stepsOf(tc.budget, tc.tick)
				next := tc.budget // the id the queue must release next
				for w := 1; w <= 2; w++ {
					base := time.Duration(w) * tc.tick
					inWindow := 0
					for j := range s {
						// Look in the middle of sub-step j: its grants came at its start.
						at := base + stepStart(j)
						time.Sleep(at + (stepStart(j+1)-stepStart(j))/2 - time.Since(t0))
						synctest.Wait()
						batch := drainOutcomes(out)
						want := limit(j)
						if j > 0 {
							want -= limit(j - 1)
						}
						if len(batch) != want || want > (tc.budget+s-1)/s {
							t.Fatalf("window %d step %d: %d released, want %d", w, j, len(batch), want)
						}
						ids := map[int]bool{}
						for _, o := range batch {
							if !o.ok || o.at != at {
								t.Fatalf("window %d step %d: upgrade %d ok=%v at %v, want granted at %v", w, j, o.id, o.ok, o.at, at)
							}
							ids[o.id] = true
						}
						for range batch {
							if !ids[next] {
								t.Fatalf("window %d step %d: released %v, want FIFO from %d", w, j, ids, next)
							}
							next++
						}
						inWindow += len(batch)
						got = append(got, batch...)
					}
					if inWindow != tc.budget {
						t.Fatalf("window %d released %d, want %d", w, inWindow, tc.budget)
					}
				}
				for _, o := range got {
					o.tk.HandshakeDone(true)
					o.tk.Close()
				}
				if len(got) != n || pacerArmed(g) {
					t.Fatalf("%d of %d through; timer armed %v", len(got), n, pacerArmed(g))
				}
				assertIdle(t, g, m)
			})
		})
	}
}

func pacerArmed(g *Gate) bool {
	g.pacer.mu.Lock()
	defer g.pacer.mu.Unlock()
	return g.pacer.armed
}

// TestPacingInstantPathUnstepped: an arrival that finds the queue empty
// takes any token left in the current window at once, wherever in the
// window it is; those tokens count against the window, so the window never
// lets more than budget through.
func TestPacingInstantPathUnstepped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 50
		g, m := newGate(t, pacingConfig(budget, 10*time.Millisecond, time.Second))
		t0 := time.Now()
		out := make(chan outcome, budget+1)
		expect := func(when string, want int, at time.Duration) []outcome {
			t.Helper()
			got := drainOutcomes(out)
			if len(got) != want {
				t.Fatalf("%s: %d through, want %d", when, len(got), want)
			}
			for _, o := range got {
				if !o.ok || o.at != at {
					t.Fatalf("%s: upgrade %d ok=%v at %v, want through at %v", when, o.id, o.ok, o.at, at)
				}
			}
			return got
		}
		// An idle pacer in the middle of a window (sub-step 4 of 16):
		// the whole budget passes at once, the next waits for the window.
		time.Sleep(3 * time.Millisecond)
		arrive(g, t.Context(), 0, budget+1, t0, out)
		got := expect("burst at 3ms", budget, 3*time.Millisecond)
		time.Sleep(10*time.Millisecond + time.Microsecond - time.Since(t0))
		synctest.Wait()
		got = append(got, expect("window 1 starts", 1, 10*time.Millisecond)...)
		// The queue is empty again: a later burst takes the 49 tokens left
		// of window 1 at once, past the sub-step cap, and the 50th waits
		// for window 2.
		time.Sleep(11*time.Millisecond - time.Since(t0))
		arrive(g, t.Context(), 100, budget, t0, out)
		got = append(got, expect("burst at 11ms", budget-1, 11*time.Millisecond)...)
		if g.QueueDepth() != 1 {
			t.Fatalf("queue %d, want the 50th waiting", g.QueueDepth())
		}
		time.Sleep(20*time.Millisecond + time.Microsecond - time.Since(t0))
		synctest.Wait()
		got = append(got, expect("window 2 starts", 1, 20*time.Millisecond)...)
		for _, o := range got {
			o.tk.Close()
		}
		assertIdle(t, g, m)
	})
}

// TestPacingExpiryBetweenSteps: a waiter whose deadline falls between two
// sub-steps is refused at its deadline, not at the next step, and the
// waiter behind it gets the next step's token.
func TestPacingExpiryBetweenSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Budget 2 per 10ms: sub-steps at 0 and 5ms of each window.
		g, m := newGate(t, pacingConfig(2, 10*time.Millisecond, 12*time.Millisecond))
		t0 := time.Now()
		out := make(chan outcome, 8)
		arrive(g, t.Context(), 0, 4, t0, out) // #0, #1 through at once; #2, #3 wait until 12ms at most
		time.Sleep(4 * time.Millisecond)
		start(g, t.Context(), 4, t0, out) // waits until 16ms at most
		time.Sleep(time.Second)
		synctest.Wait()
		want := map[int]struct {
			ok bool
			at time.Duration
		}{
			0: {true, 0}, 1: {true, 0},
			2: {true, 10 * time.Millisecond},  // window 1, step 0
			3: {false, 12 * time.Millisecond}, // its deadline, between the steps
			4: {true, 15 * time.Millisecond},  // window 1, step 1
		}
		got := drainOutcomes(out)
		if len(got) != len(want) {
			t.Fatalf("%d outcomes, want %d", len(got), len(want))
		}
		for _, o := range got {
			if w := want[o.id]; o.ok != w.ok || o.at != w.at {
				t.Fatalf("upgrade %d: ok=%v at %v; want ok=%v at %v", o.id, o.ok, o.at, w.ok, w.at)
			}
			if o.ok {
				o.tk.Close()
			} else {
				checkShed(t, o.w.Code, o.w.Header(), o.w.Body.Bytes(), http.StatusServiceUnavailable, "OVERLOADED")
			}
		}
		if rejected(m, "queue_timeout") != 1 {
			t.Fatalf("queue_timeout %v, want 1", rejected(m, "queue_timeout"))
		}
		assertIdle(t, g, m)
	})
}

package message

import (
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// leaseModel tracks, per Call, what the server has done with its lease.
// Releases from a "disconnect" run on their own goroutine, so whether they
// have happened yet is not known until they are joined: the model keeps a
// lower bound (leases certainly held) and an upper bound (leases possibly
// held) on the in-flight count.
type leaseModel struct {
	call     *Call
	leased   bool // Check allowed and no Release issued yet
	inFlight bool // Check allowed and no Release known to have completed
	pending  sync.WaitGroup
	// racing counts disconnect goroutines not yet joined. While one runs, a
	// synchronous Release may return before the count drops: the goroutine
	// may have won the swap and not yet given the slot back.
	racing int
}

// TestExactlyOnceRelease drives random interleavings of Check, handler
// return, handler panic (recovered, then Release), disconnect (Release from
// another goroutine, racing the others) and double Release over several
// Calls sharing a Concurrency{Max: k} class. It checks that in flight never
// passes k, that every Check decision is what the bounds allow, that the
// count is exact whenever no Release is in doubt, and that it ends at 0.
func TestExactlyOnceRelease(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		k := rapid.IntRange(1, 4).Draw(rt, "k")
		n := rapid.IntRange(1, 6).Draw(rt, "calls")
		a := newAdmission(Deps{})
		if err := a.Register("c", Rule{Concurrency: &Concurrency{Max: k}}); err != nil {
			rt.Fatal(err)
		}
		c, _ := a.Class("c")
		ms := make([]*leaseModel, n)
		for i := range ms {
			ms[i] = &leaseModel{call: &Call{ConnID: uint64(i)}}
		}
		bounds := func() (certain, possible int64) {
			for _, m := range ms {
				if m.leased {
					certain++
				}
				if m.inFlight {
					possible++
				}
			}
			return
		}
		invariant := func(step string) {
			got := c.InFlight()
			certain, possible := bounds()
			if got < certain || got > possible || got > int64(k) || got < 0 {
				rt.Fatalf("after %s: in flight %d, want within [%d, %d] and <= %d", step, got, certain, possible, k)
			}
		}
		join := func(m *leaseModel) {
			m.pending.Wait()
			m.racing = 0
			if !m.leased {
				m.inFlight = false
			}
		}
		released := func(m *leaseModel) {
			m.leased = false
			if m.racing == 0 {
				m.inFlight = false
			}
		}
		release := func(m *leaseModel) { m.call.Release(); released(m) }

		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			m := ms[rapid.IntRange(0, n-1).Draw(rt, "call")]
			switch op := rapid.SampledFrom([]string{"check", "return", "panic", "disconnect", "double", "join"}).Draw(rt, "op"); op {
			case "check":
				// The owner reuses a Call only after every releaser of its
				// previous call is done (Call's documented contract).
				join(m)
				if m.leased {
					panicked := func() (p bool) {
						defer func() { p = recover() == errLeaseHeld }()
						c.Check(m.call)
						return false
					}()
					if !panicked {
						rt.Fatal("Check on a Call holding a lease did not panic")
					}
					break
				}
				certain, possible := bounds()
				d := c.Check(m.call)
				if d.Allowed && certain >= int64(k) {
					rt.Fatalf("allowed with %d leases certainly held, cap %d", certain, k)
				}
				if !d.Allowed && possible < int64(k) {
					rt.Fatalf("denied with at most %d leases held, cap %d", possible, k)
				}
				if d.Allowed != m.call.Holding() {
					rt.Fatalf("Allowed = %v but Holding = %v", d.Allowed, m.call.Holding())
				}
				m.leased, m.inFlight = d.Allowed, d.Allowed
			case "return":
				release(m)
			case "panic":
				func() {
					defer func() {
						_ = recover()
						m.call.Release()
					}()
					panic("handler bug")
				}()
				released(m)
			case "disconnect":
				call := m.call
				m.pending.Go(call.Release)
				m.racing++
				m.leased = false // inFlight stays possible until joined
			case "double":
				m.call.Release()
				release(m)
			case "join":
				join(m)
			}
			invariant("op")
		}

		for _, m := range ms {
			join(m)
		}
		// With every releaser joined nothing is in doubt: the count is exact.
		certain, _ := bounds()
		if got := c.InFlight(); got != certain {
			rt.Fatalf("in flight %d with every release joined, want exactly %d", got, certain)
		}
		for _, m := range ms {
			release(m)
		}
		if got := c.InFlight(); got != 0 {
			rt.Fatalf("in flight %d at the end, want 0", got)
		}
	})
}

// Many goroutines check and release at once, and every lease is released
// by several goroutines let go together (handler return, recovered panic,
// connection teardown racing), so a release that is not a single atomic
// step would show as a count below zero or off at the end.
func TestReleaseConcurrentStress(t *testing.T) {
	const k, workers, rounds, releasers = 3, 4, 300, 4
	a := newAdmission(Deps{})
	c := mustRegister(t, a, "c", Rule{Concurrency: &Concurrency{Max: k}})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var call Call
			for range rounds {
				if !c.Check(&call).Allowed {
					continue
				}
				if n := c.InFlight(); n > k || n < 1 {
					t.Errorf("in flight %d with a lease held, cap %d", n, k)
				}
				start := make(chan struct{})
				var all sync.WaitGroup
				for range releasers {
					all.Go(func() {
						<-start
						call.Release()
					})
				}
				close(start)
				all.Wait()
				if n := c.InFlight(); n < 0 {
					t.Errorf("in flight %d: a lease was released twice", n)
				}
			}
		})
	}
	wg.Wait()
	if n := c.InFlight(); n != 0 {
		t.Fatalf("in flight %d at the end, want 0", n)
	}
}

// TestReleaseWithThenRelease pins the pattern the adapters use: report the
// outcome on failure, and a deferred Release afterwards does nothing more.
func TestReleaseWithThenRelease(t *testing.T) {
	a := newAdmission(Deps{})
	c := mustRegister(t, a, "c", Rule{Concurrency: &Concurrency{Max: 1}})
	call := &Call{}
	if !c.Check(call).Allowed {
		t.Fatal("first call denied")
	}
	call.ReleaseWith(Dropped)
	call.Release()
	call.ReleaseWith(Completed)
	if got := c.InFlight(); got != 0 {
		t.Fatalf("in flight after three releases = %d, want 0", got)
	}
	if !c.Check(call).Allowed {
		t.Fatal("slot not given back")
	}
	call.Release()
}

package handshake

import (
	"context"
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
		for i := range 5 {
			start(g, t.Context(), i, t0, out)
			synctest.Wait() // arrival order = queue order
		}
		got := drainOutcomes(out)
		if len(got) != 2 || g.QueueDepth() != 3 || testutil.ToFloat64(m.HandshakeQueueDepth) != 3 {
			t.Fatalf("at t0: %d through, queue %d; want 2 and 3", len(got), g.QueueDepth())
		}
		if g.Inflight() != 5 || g.Open() != 5 {
			t.Fatalf("waiters must hold their slots: inflight %d open %d", g.Inflight(), g.Open())
		}
		var order []int
		for _, step := range []struct {
			sleep time.Duration
			want  int
		}{{10 * time.Millisecond, 2}, {10 * time.Millisecond, 1}} {
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
		if len(order) != 3 || order[len(order)-1] != 4 || !(order[0] == 2 || order[0] == 3) {
			t.Fatalf("release order %v, want FIFO (2,3 then 4)", order)
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
		for i := range 3 {
			start(g, t.Context(), i, t0, out)
			synctest.Wait()
		}
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
		for i := range 5 {
			start(g, t.Context(), i, t0, out)
			synctest.Wait()
		}
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
		for i := range 4 {
			start(g, t.Context(), i, t0, out)
			synctest.Wait()
		}
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

package handshake

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
)

// watchGoroutines counts goroutines watching a served request's socket
// for its client leaving (one per request whose Done was asked for).
func watchGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("wsock.(*goneContext).start.func"))
}

// Upgrades the door serves wait in the pacing queue without a goroutine
// each watching their client: the pacer looks at them all now and then.
// A queued client that leaves is dropped, its slots freed once, and it
// is not answered or counted as a rejection; the others keep their
// places.
func TestQueuedClientsLeavingFreeTheirSlotsWithoutWatches(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the door watches sockets on Linux only")
	}
	leakcheck.Check(t)
	cfg := DefaultConfig()
	cfg.PerTickBudget = 1
	cfg.Tick = time.Hour
	cfg.MaxQueueWait = 10 * time.Hour // ten ticks: the queue holds ten
	e := startDoorWith(t, cfg, 10*time.Second, maxPeekers, true)
	hold := make(chan struct{})
	e.hold.Store(&hold)
	a := e.raw(t)
	write(t, a, upgradeHead)
	<-e.admitd // a took the tick's token

	const n, leave = 8, 3
	queued := make([]net.Conn, n)
	for i := range queued {
		queued[i] = e.raw(t)
		write(t, queued[i], upgradeHead)
	}
	testkit.Eventually(t, 10*time.Second, func() string {
		return fmt.Sprintf("queue %d, want %d", e.g.QueueDepth(), n)
	}, func() bool { return e.g.QueueDepth() == n })
	if w := watchGoroutines(); w != 0 {
		t.Fatalf("%d goroutines watch the queued clients, want 0", w)
	}

	for _, c := range queued[:leave] {
		c.Close()
	}
	// A leaver is out of the queue first, then its goroutine frees its
	// slots.
	testkit.Eventually(t, 10*time.Second, func() string {
		return fmt.Sprintf("queue %d, open %d, inflight %d after %d left; want %d, %d, %d",
			e.g.QueueDepth(), e.g.Open(), e.g.Inflight(), leave, n-leave, 1+n-leave, 1+n-leave)
	}, func() bool {
		return e.g.QueueDepth() == n-leave && e.g.Open() == 1+n-leave && e.g.Inflight() == 1+n-leave
	})
	if got := rejected(e.m, metrics.RejectQueueTimeout) + rejected(e.m, metrics.RejectDraining); got != 0 {
		t.Fatalf("%v rejections counted for clients that left", got)
	}

	// The rest are still queued, in order: draining refuses each of them.
	e.g.SetDraining(true)
	for _, c := range queued[leave:] {
		if resp, _ := readHead(t, c); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a queued upgrade got %d when the gate drained, want 503", resp.StatusCode)
		}
	}
	if got := rejected(e.m, metrics.RejectDraining); got != n-leave {
		t.Fatalf("draining rejections %v, want %d", got, n-leave)
	}
	// Each slot was freed once: the admitted upgrade's alone are held.
	testkit.Eventually(t, 10*time.Second, func() string {
		return fmt.Sprintf("open %d inflight %d, want 1 and 1", e.g.Open(), e.g.Inflight())
	}, func() bool { return e.g.Open() == 1 && e.g.Inflight() == 1 })
	close(hold)
	if resp, _ := readHead(t, a); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("the admitted upgrade got %d", resp.StatusCode)
	}
	a.Close()
	<-e.ended
	testkit.Eventually(t, 10*time.Second, "slots still held", func() bool { return e.g.Open() == 0 && e.g.Inflight() == 0 })
	assertIdle(t, e.g, e.m)
}

// probeCtx is a request context that can tell its client has gone
// (as a door-served request's can).
type probeCtx struct {
	context.Context
	gone  atomic.Bool
	asked atomic.Int32
}

func (c *probeCtx) Gone() bool {
	c.asked.Add(1)
	return c.gone.Load()
}

// The pacer asks a waiter whose context can tell whether its client has
// gone only once it has waited a probe period: one served within it is
// never asked. One found gone is dropped, its slots freed, unanswered and
// uncounted; the tick then goes to the next in line.
func TestPacingProbesWaitersForLeavingClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, m := newGate(t, pacingConfig(1, time.Second, 10*time.Second))
		t0 := time.Now()
		out := make(chan outcome, 16)
		start(g, t.Context(), 0, t0, out)
		synctest.Wait()
		leaver, stayer := &probeCtx{Context: t.Context()}, &probeCtx{Context: t.Context()}
		start(g, leaver, 1, t0, out)
		synctest.Wait()
		start(g, stayer, 2, t0, out)
		synctest.Wait()
		first := drainOutcomes(out)
		if len(first) != 1 || g.QueueDepth() != 2 {
			t.Fatalf("setup: %d through, queue %d", len(first), g.QueueDepth())
		}
		time.Sleep(time.Duration(probeEvery) / 2)
		synctest.Wait()
		if n := leaver.asked.Load() + stayer.asked.Load(); n != 0 {
			t.Fatalf("asked %d times within the first period", n)
		}
		leaver.gone.Store(true)
		time.Sleep(2 * time.Duration(probeEvery))
		synctest.Wait()
		gone := drainOutcomes(out)
		if len(gone) != 1 || gone[0].id != 1 || gone[0].ok || gone[0].w.Body.Len() != 0 {
			t.Fatalf("after the client left: %+v", gone)
		}
		if g.QueueDepth() != 1 || g.Inflight() != 2 || g.Open() != 2 {
			t.Fatalf("queue %d inflight %d open %d; want 1, 2, 2", g.QueueDepth(), g.Inflight(), g.Open())
		}
		if stayer.asked.Load() == 0 {
			t.Fatal("the other waiter was never asked")
		}
		if got := rejected(m, metrics.RejectQueueTimeout); got != 0 {
			t.Fatalf("queue_timeout %v for a client that left", got)
		}
		time.Sleep(time.Second) // the next tick goes to the one left
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

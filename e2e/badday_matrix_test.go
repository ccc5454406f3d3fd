package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rtserver/rtserver/client"
	"github.com/rtserver/rtserver/internal/faultproxy"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// readiness polls /readyz until stopped and keeps each change.
type readiness struct {
	mu    sync.Mutex
	codes []int       // each change of status
	at    []time.Time // when it was seen
	stop  chan struct{}
	done  chan struct{}
}

func watchReady(p *proc) *readiness {
	r := &readiness{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			code := p.status("/readyz")
			r.mu.Lock()
			if n := len(r.codes); n == 0 || r.codes[n-1] != code {
				r.codes, r.at = append(r.codes, code), append(r.at, time.Now())
			}
			r.mu.Unlock()
			select {
			case <-t.C:
			case <-r.stop:
				return
			}
		}
	}()
	return r
}

// unready counts the changes to not-ready since index from.
func (r *readiness) unready(from int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for i := from; i < len(r.codes); i++ {
		if r.codes[i] != 200 {
			n++
		}
	}
	return n
}

func (r *readiness) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.codes)
}

func (r *readiness) close() {
	close(r.stop)
	<-r.done
}

// TestBadDayMatrix runs the short bad days through the binary, with a
// fault proxy between the instance and a real redis-server, history on:
// Redis black-holed for a few seconds, Redis answering 200 ms late, and
// Redis restarted empty. For each: /readyz is not ready only while Redis
// is really unreachable (never while it is merely slow), every publish
// acknowledged with a position reaches the subscriber (a Go client) or is
// reported lost (OnRecovery false), and the instance stops on SIGTERM.
// Times are logged, not asserted.
func TestBadDayMatrix(t *testing.T) {
	for _, bad := range []string{"blackhole", "slow", "restart-empty"} {
		t.Run(bad, func(t *testing.T) {
			leakcheck.Check(t)
			r := redistest.Start(t)
			px := faultproxy.Start(t, r.Addr)
			p := start(t, fleetConfig("redis://"+px.Addr(), historyConfig(10000, "5m", "drain: {duration: 1s}\n")))
			ready := watchReady(p)
			defer ready.close()

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var mu sync.Mutex
			got := map[string]bool{}
			lostReported := 0
			opts := client.DefaultOptions()
			opts.MinBackoff = 50 * time.Millisecond
			opts.OnRecovery = func(_ string, recovered bool, _ string) {
				if !recovered {
					mu.Lock()
					lostReported++
					mu.Unlock()
				}
			}
			sub, err := client.Dial(ctx, p.WS(), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if _, err := sub.Subscribe(ctx, "room:bad", func(_ string, data json.RawMessage) {
				mu.Lock()
				got[string(data)] = true
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}

			// One publisher, one publish at a time, through the bad day.
			pub := wstest.Dial(t, p.WS())
			var acked []string
			n := 0
			publish := func() {
				n++
				d := strconv.Itoa(n)
				if f := pub.Call("publish", `{"topic":"room:bad","data":`+d+`}`); f.Error == nil {
					acked = append(acked, d)
				}
			}
			for range 20 {
				publish()
			}
			mark := ready.len()
			began := time.Now()
			switch bad {
			case "blackhole":
				px.BlackHole(true)
				testkit.Eventually(t, 30*time.Second, "/readyz 503", func() bool { publish(); return ready.unready(mark) > 0 })
				for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
					publish() // the hole lasts a few seconds, publishes refused meanwhile
				}
				px.BlackHole(false)
			case "slow":
				px.Delay(200 * time.Millisecond)
				for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
					publish()
				}
				px.Delay(0)
			case "restart-empty":
				r.Stop()
				testkit.Eventually(t, 30*time.Second, "/readyz 503", func() bool { publish(); return ready.unready(mark) > 0 })
				r.Restart()
			}
			healed := time.Now()
			testkit.Eventually(t, 30*time.Second, "/readyz 200", func() bool { return p.status("/readyz") == 200 })
			backIn := time.Since(healed)
			for range 20 {
				publish()
			}
			flips := ready.unready(mark)
			if bad == "slow" && flips != 0 {
				t.Errorf("/readyz went not-ready %d times while Redis only answered slowly", flips)
			}
			// Every acknowledged publish arrives, or its loss is reported.
			last := acked[len(acked)-1]
			testkit.Eventually(t, 30*time.Second, "the last acknowledged publish delivered", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return got[last]
			})
			mu.Lock()
			var missing []string
			for _, d := range acked {
				if !got[d] {
					missing = append(missing, d)
				}
			}
			reported := lostReported
			mu.Unlock()
			if len(missing) > 0 && reported == 0 {
				t.Errorf("acknowledged publishes %v never delivered, and no loss reported", missing)
			}
			// A client that never answers the close handshake would hold the
			// stop for the close timeout: the publisher reads no more.
			_ = pub.WS.CloseNow()
			stop := time.Now()
			p.signal(syscall.SIGTERM)
			if code := p.exitCode(30 * time.Second); code != 0 {
				t.Errorf("exit code %d after SIGTERM", code)
			}
			t.Logf("%s: %d publishes, %d acknowledged, %d of them not delivered (losses reported: %d); /readyz not ready %d times in %v; ready %v after the fault ended; stopped %v after SIGTERM",
				bad, n, len(acked), len(missing), reported, flips, healed.Sub(began).Round(time.Millisecond), backIn.Round(time.Millisecond), time.Since(stop).Round(time.Millisecond))
		})
	}
}

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

// TestBadDayMatrix runs the short bad days through the binary: three
// instances of a fleet, history and presence on, with a fault proxy
// between them and a real redis-server: Redis black-holed for a few
// seconds, Redis answering 200 ms late, and Redis restarted empty. A Go
// client subscribed on each of the two instances that do not publish,
// one publisher on the first. For each: /readyz is not ready only while
// Redis is really unreachable (never while it is merely slow), every
// publish acknowledged with a position reaches both subscribers or is
// reported lost (OnRecovery false), and each instance stops on SIGTERM.
// Times are logged, not asserted. The long variants are
// scripts/bad-days.sh (docs/operations.md, "Bad days").
func TestBadDayMatrix(t *testing.T) {
	for _, bad := range []string{"blackhole", "slow", "restart-empty"} {
		t.Run(bad, func(t *testing.T) {
			leakcheck.Check(t)
			r := redistest.Start(t)
			px := faultproxy.Start(t, r.Addr)
			cfg := fleetConfig("redis://"+px.Addr(), historyConfig(10000, "5m", "    - {pattern: \"lobby:*\", subscribe: [any], publish: [any], presence: true, joinLeave: true}\ndrain: {duration: 1s}\n"))
			fleet := []*proc{start(t, cfg), start(t, cfg), start(t, cfg)}
			var ready []*readiness
			for _, p := range fleet {
				w := watchReady(p)
				defer w.close()
				ready = append(ready, w)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var subs []*badSub
			for _, p := range fleet[1:] {
				subs = append(subs, subscribeBad(ctx, t, p, "room:bad", "lobby:bad"))
			}

			// One publisher, one publish at a time, through the bad day.
			pub := wstest.Dial(t, fleet[0].WS())
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
			marks := make([]int, len(ready))
			for i, w := range ready {
				marks[i] = w.len()
			}
			unready := func() (n int) {
				for i, w := range ready {
					n += w.unready(marks[i])
				}
				return n
			}
			allUnready := func() bool {
				for i, w := range ready {
					if w.unready(marks[i]) == 0 {
						return false
					}
				}
				return true
			}
			began := time.Now()
			switch bad {
			case "blackhole":
				px.BlackHole(true)
				testkit.Eventually(t, 30*time.Second, "/readyz 503 on every instance", func() bool { publish(); return allUnready() })
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
				testkit.Eventually(t, 30*time.Second, "/readyz 503 on every instance", func() bool { publish(); return allUnready() })
				r.Restart()
			}
			healed := time.Now()
			testkit.Eventually(t, 30*time.Second, "/readyz 200 on every instance", func() bool {
				for _, p := range fleet {
					if p.status("/readyz") != 200 {
						return false
					}
				}
				return true
			})
			backIn := time.Since(healed)
			for range 20 {
				publish()
			}
			flips := unready()
			if bad == "slow" && flips != 0 {
				t.Errorf("/readyz went not-ready %d times while Redis only answered slowly", flips)
			}
			// Every acknowledged publish arrives, or its loss is reported.
			var missing, reported int
			for i, s := range subs {
				m, rep := s.check(t, acked)
				if m > 0 && rep == 0 {
					t.Errorf("subscriber %d: %d acknowledged publishes never delivered, and no loss reported", i, m)
				}
				missing, reported = missing+m, reported+rep
			}
			// A client that never answers the close handshake: the
			// publisher reads no more.
			_ = pub.WS.CloseNow()
			stop := time.Now()
			for _, p := range fleet {
				p.signal(syscall.SIGTERM)
			}
			for _, p := range fleet {
				if code := p.exitCode(30 * time.Second); code != 0 {
					t.Errorf("exit code %d after SIGTERM", code)
				}
			}
			t.Logf("%s, 3 instances: %d publishes, %d acknowledged, %d deliveries missing over 2 subscribers (losses reported: %d); /readyz not ready %d times over the fleet in %v; every instance ready %v after the fault ended; all stopped %v after SIGTERM",
				bad, n, len(acked), missing, reported, flips, healed.Sub(began).Round(time.Millisecond), backIn.Round(time.Millisecond), time.Since(stop).Round(time.Millisecond))
		})
	}
}

// badSub is a Go client subscribed to a history topic (and present in a
// presence topic) that keeps what it got and counts the losses it was
// told of.
type badSub struct {
	topic    string
	mu       sync.Mutex
	got      map[string]bool
	lost     int // OnRecovery false
	recovers int // OnRecovery true
}

func subscribeBad(ctx context.Context, t *testing.T, p *proc, topic, presenceTopic string) *badSub {
	t.Helper()
	s := &badSub{topic: topic, got: map[string]bool{}}
	opts := client.DefaultOptions()
	opts.MinBackoff = 50 * time.Millisecond
	opts.OnRecovery = func(_ string, recovered bool, _ string) {
		s.mu.Lock()
		if recovered {
			s.recovers++
		} else {
			s.lost++
		}
		s.mu.Unlock()
	}
	c, err := client.Dial(ctx, p.WS(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Subscribe(ctx, topic, func(_ string, data json.RawMessage) {
		s.mu.Lock()
		s.got[string(data)] = true
		s.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if presenceTopic != "" {
		if _, err := c.Subscribe(ctx, presenceTopic, func(string, json.RawMessage) {}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// check waits for the last of acked and returns how many of acked never
// arrived and how many losses were reported.
func (s *badSub) check(t *testing.T, acked []string) (missing, reported int) {
	t.Helper()
	last := acked[len(acked)-1]
	testkit.Eventually(t, 30*time.Second, "the last acknowledged publish delivered", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.got[last]
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range acked {
		if !s.got[d] {
			missing++
		}
	}
	return missing, s.lost
}

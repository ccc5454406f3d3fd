package handshake

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rtserver/rtserver/metrics"
	"pgregory.net/rapid"
)

// model of one ticket, as the test expects the gate to see it.
type tState int

const (
	tIdle     tState = iota // holds nothing
	tPending                // Admit running (queued for pacing): holds in-flight + slot
	tInflight               // admitted, handshake not done: in-flight + slot
	tOpen                   // HandshakeDone(true): slot + connections_open
)

type propTicket struct {
	tk     Ticket
	state  tState
	cancel context.CancelFunc
}

type admitResult struct {
	i  int
	ok bool
}

// TestExactlyOnceProperty drives random sequences of admits (that pass,
// or hit the caps, the per-IP rate, a bad Origin, a bad token, the pacing
// queue, draining), client aborts while queued, failed and successful
// handshakes, closes, and repeated calls, across several tickets. After
// every step the gate's counters equal the model's; at the end, with every
// ticket closed, nothing is held and every gauge is zero.
func TestExactlyOnceProperty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// rapid asks a *testing.T for its deadline, which panics inside a
		// bubble; wrapped, it falls back to its own default.
		rapid.Check(bubbleT{t}, func(rt *rapid.T) {
			secret := []byte("property-test-secret-0123456789")
			cfg := authed()
			cfg.MaxConnections = rapid.IntRange(0, 5).Draw(rt, "maxConnections")
			cfg.MaxConcurrent = rapid.IntRange(0, 4).Draw(rt, "maxConcurrent")
			cfg.PerTickBudget = rapid.IntRange(0, 2).Draw(rt, "budget")
			cfg.Tick = 10 * time.Millisecond
			cfg.MaxQueueWait = time.Duration(rapid.IntRange(0, 50).Draw(rt, "waitMs")) * time.Millisecond
			cfg.PerIP.Limit = rapid.IntRange(0, 3).Draw(rt, "perIP")
			cfg.PerIP.Per = 100 * time.Millisecond
			cfg.AllowNoOrigin = true
			if rapid.Bool().Draw(rt, "auth") {
				cfg.JWT.HMACSecret = secret
			}
			g, m := newGate(rt, cfg)
			goodTok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u"}).SignedString(secret)
			if err != nil {
				rt.Fatal(err)
			}

			const nTickets = 6
			tickets := make([]*propTicket, nTickets)
			for i := range tickets {
				tickets[i] = &propTicket{}
			}
			results := make(chan admitResult, nTickets)
			defer func() { // on failure too: no goroutine may outlive the bubble
				for _, pt := range tickets {
					if pt.cancel != nil {
						pt.cancel()
					}
				}
				synctest.Wait()
			}()

			collect := func() {
				synctest.Wait() // every Admit has finished or is parked in the queue
				for {
					select {
					case res := <-results:
						pt := tickets[res.i]
						pt.cancel()
						if res.ok {
							pt.state = tInflight
						} else {
							pt.state = tIdle
						}
					default:
						return
					}
				}
			}
			check := func(step string) {
				var inflight, slots, open int64
				for _, pt := range tickets {
					switch pt.state {
					case tPending, tInflight:
						inflight++
						slots++
					case tOpen:
						slots++
						open++
					}
				}
				if g.Inflight() != inflight || g.Open() != slots {
					rt.Fatalf("after %s: gate inflight %d open %d, model %d %d", step, g.Inflight(), g.Open(), inflight, slots)
				}
				if gi, go_ := testutil.ToFloat64(m.HandshakeInflight), testutil.ToFloat64(m.ConnectionsOpen); gi != float64(inflight) || go_ != float64(open) {
					rt.Fatalf("after %s: gauges inflight %v open %v, model %d %d", step, gi, go_, inflight, open)
				}
				if cfg.MaxConnections > 0 && slots > int64(cfg.MaxConnections) {
					rt.Fatalf("after %s: %d slots held, cap %d", step, slots, cfg.MaxConnections)
				}
				if cfg.MaxConcurrent > 0 && inflight > int64(cfg.MaxConcurrent) {
					rt.Fatalf("after %s: %d in flight, cap %d", step, inflight, cfg.MaxConcurrent)
				}
			}

			steps := rapid.IntRange(1, 60).Draw(rt, "steps")
			for s := range steps {
				i := rapid.IntRange(0, nTickets-1).Draw(rt, "ticket")
				pt := tickets[i]
				op := rapid.SampledFrom([]string{"admit", "admit", "admit", "done-ok", "done-fail", "close", "abort", "sleep", "drain"}).Draw(rt, "op")
				switch op {
				case "admit":
					if pt.state != tIdle {
						break // a ticket is admitted once at a time (reuse is tested separately)
					}
					r := upgradeReq(fmt.Sprintf("203.0.113.%d:1", rapid.IntRange(1, 2).Draw(rt, "ip")))
					switch rapid.IntRange(0, 3).Draw(rt, "variant") {
					case 1:
						r.Header.Set("Origin", "https://evil.example.net")
					case 2:
						r.Header.Set("Authorization", "Bearer not-a-token")
					default:
						r.Header.Set("Authorization", "Bearer "+goodTok)
					}
					ctx, cancel := context.WithCancel(context.Background())
					pt.cancel = cancel
					pt.state = tPending
					r = r.WithContext(ctx)
					go func() {
						var w discardWriter
						ok := g.Admit(&w, r, &pt.tk)
						results <- admitResult{i, ok}
					}()
				case "done-ok":
					if pt.state == tPending {
						break
					}
					pt.tk.HandshakeDone(true)
					if pt.state == tInflight {
						pt.state = tOpen
					}
				case "done-fail":
					if pt.state == tPending {
						break
					}
					pt.tk.HandshakeDone(false)
					if pt.state == tInflight {
						pt.state = tIdle
					}
				case "close":
					if pt.state == tPending {
						break
					}
					pt.tk.Close()
					pt.state = tIdle
				case "abort":
					if pt.state == tPending {
						pt.cancel() // the client hangs up while queued
					}
				case "sleep":
					time.Sleep(time.Duration(rapid.IntRange(1, 30).Draw(rt, "sleepMs")) * time.Millisecond)
				case "drain":
					g.SetDraining(rapid.Bool().Draw(rt, "draining"))
				}
				collect()
				check(fmt.Sprintf("step %d (%s on ticket %d)", s, op, i))
			}

			// Wind down: abort whatever waits, close everything.
			for _, pt := range tickets {
				if pt.state == tPending {
					pt.cancel()
				}
			}
			collect()
			for _, pt := range tickets {
				pt.tk.Close()
				pt.tk.Close()
				pt.tk.HandshakeDone(true)
				pt.state = tIdle
			}
			check("close all")
			assertIdle(rt, g, m)
		})
	})
}

type bubbleT struct{ *testing.T }

// discardWriter is an http.ResponseWriter that drops everything; it is
// not an http.Hijacker, so close-mode rejections would fail (the property
// test runs in HTTP mode).
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// pacerRec is one waiter of TestPacerStepsProperty: when it arrived, when
// and how wait answered it.
type pacerRec struct {
	arrived, at int64
	why         string
	done        bool
	cancel      context.CancelFunc
}

// TestPacerStepsProperty drives the pacer alone with random budgets, odd
// tick lengths and waits, bursts of arrivals, sleeps and client aborts,
// and records when each waiter was answered. Then:
//   - no aligned tick window grants more than budget (the documented
//     guarantee);
//   - the stepped release: a queued waiter granted at T, counted with the
//     grants of T's window before T and the other queued grants at T,
//     stays within the cap of T's sub-step, and at most ceil(budget/S)
//     queued waiters are granted at one instant;
//   - FIFO: when a queued waiter is granted, every earlier arrival has had
//     its answer;
//   - nobody waits past its deadline, and a waiter refused after waiting
//     is refused exactly at its deadline.
func TestPacerStepsProperty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rapid.Check(bubbleT{t}, func(rt *rapid.T) {
			budget := rapid.IntRange(1, 24).Draw(rt, "budget")
			tick := rapid.Int64Range(1_000, 10_000_000).Draw(rt, "tickNs")
			wait := rapid.Int64Range(0, 3*tick).Draw(rt, "waitNs")
			cfg := pacingConfig(budget, time.Duration(tick), time.Duration(wait))
			cfg.MaxConcurrent = rapid.SampledFrom([]int{0, 0, 5}).Draw(rt, "maxConcurrent")
			t0 := time.Now()
			clock := func() int64 { return int64(time.Since(t0)) }
			p := newPacer(&cfg, clock, metrics.NewDiscard())

			var (
				mu   sync.Mutex
				recs []*pacerRec
			)
			defer func() { // on failure too: no goroutine may outlive the bubble
				for _, r := range recs {
					r.cancel()
				}
				synctest.Wait()
			}()
			pending := func() []int {
				mu.Lock()
				defer mu.Unlock()
				var ids []int
				for i, r := range recs {
					if !r.done {
						ids = append(ids, i)
					}
				}
				return ids
			}

			steps := rapid.IntRange(1, 20).Draw(rt, "steps")
			for range steps {
				switch rapid.SampledFrom([]string{"arrive", "arrive", "sleep", "sleep", "abort"}).Draw(rt, "op") {
				case "arrive":
					for range rapid.IntRange(1, budget+2).Draw(rt, "burst") {
						ctx, cancel := context.WithCancel(context.Background())
						r := &pacerRec{arrived: clock(), cancel: cancel}
						recs = append(recs, r)
						go func() {
							why := p.wait(ctx)
							at := clock()
							mu.Lock()
							r.at, r.why, r.done = at, why, true
							mu.Unlock()
						}()
						synctest.Wait() // arrival order = queue order
					}
				case "sleep":
					time.Sleep(time.Duration(rapid.Int64Range(0, 2*tick).Draw(rt, "sleepNs")))
				case "abort":
					if ids := pending(); len(ids) > 0 {
						recs[rapid.SampledFrom(ids).Draw(rt, "victim")].cancel()
					}
				}
				synctest.Wait()
			}
			time.Sleep(time.Duration(wait + tick))
			synctest.Wait()
			if ids := pending(); len(ids) > 0 {
				rt.Fatalf("waiters %v still unanswered past every deadline", ids)
			}

			s := int64(min(budget, 16))
			window := func(at int64) int64 { return floorDiv(at, tick) }
			limit := func(at int64) int { // cap of at's sub-step
				j := (at - window(at)*tick) * s / tick
				return int((int64(budget)*(j+1) + s - 1) / s)
			}
			perWindow := map[int64]int{}
			queuedAt := map[int64]int{}
			for _, r := range recs {
				if r.why == "" {
					perWindow[window(r.at)]++
					if r.at > r.arrived {
						queuedAt[r.at]++
					}
				}
			}
			for w, n := range perWindow {
				if n > budget {
					rt.Fatalf("window %d granted %d, budget %d", w, n, budget)
				}
			}
			for at, n := range queuedAt {
				before := 0
				for _, r := range recs {
					if r.why == "" && window(r.at) == window(at) && r.at < at {
						before++
					}
				}
				if before+n > limit(at) || n > (budget+int(s)-1)/int(s) {
					rt.Fatalf("at %dns: %d queued granted after %d in the window; sub-step cap %d, step size %d",
						at, n, before, limit(at), (budget+int(s)-1)/int(s))
				}
			}
			for i, r := range recs {
				if r.at > r.arrived+wait {
					rt.Fatalf("waiter %d answered %q at %d, past its deadline %d", i, r.why, r.at, r.arrived+wait)
				}
				switch r.why {
				case "":
					if r.at > r.arrived {
						for k := range i {
							if recs[k].at > r.at {
								rt.Fatalf("waiter %d granted at %d before earlier waiter %d was answered (at %d)", i, r.at, k, recs[k].at)
							}
						}
					}
				case metrics.RejectQueueTimeout:
					if r.at != r.arrived && r.at != r.arrived+wait {
						rt.Fatalf("waiter %d refused at %d, neither at arrival %d nor at its deadline", i, r.at, r.arrived)
					}
				case reasonGone:
				default:
					rt.Fatalf("waiter %d: unexpected answer %q", i, r.why)
				}
			}
		})
	})
}

package handshake

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
			cfg := DefaultConfig()
			cfg.MaxConnections = rapid.IntRange(0, 5).Draw(rt, "maxConnections")
			cfg.MaxConcurrent = rapid.IntRange(0, 4).Draw(rt, "maxConcurrent")
			cfg.PerTickBudget = rapid.IntRange(0, 2).Draw(rt, "budget")
			cfg.Tick = 10 * time.Millisecond
			cfg.MaxQueueWait = time.Duration(rapid.IntRange(0, 50).Draw(rt, "waitMs")) * time.Millisecond
			cfg.PerIPLimit = rapid.IntRange(0, 3).Draw(rt, "perIP")
			cfg.PerIPPer = 100 * time.Millisecond
			cfg.AllowNoOrigin = true
			if rapid.Bool().Draw(rt, "auth") {
				cfg.JWTHMACSecret = secret
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

package admithttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/message/admithttp"
)

// ctlKey carries a request's control block into the test handler.
type ctlKey struct{}

type action int

const (
	actReturn action = iota
	actPanic
)

// live is one request the model knows about.
type live struct {
	act       chan action
	cancel    context.CancelFunc
	done      chan struct{} // ServeHTTP returned (or its panic was caught)
	cancelled bool
	held      bool // the model's view: this request holds a lease
}

// TestExactlyOnceReleaseProperty drives random interleavings of request
// start, handler return, handler panic and client cancel over several
// requests sharing a Concurrency{Max: k} class, with and without
// ReleaseWhenClientGone. After every step the class's in-flight count is
// exactly the model's, and the releases that happened are exactly the ones
// the step implies, with the right outcome; at the end nothing is held and
// every admitted request was released once.
func TestExactlyOnceReleaseProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		k := rapid.IntRange(1, 3).Draw(rt, "k")
		onGone := rapid.Bool().Draw(rt, "releaseWhenClientGone")
		a := testkit.Must(message.New(message.Config{}, message.Deps{}))
		if err := a.Register("c", message.Rule{Concurrency: &message.Concurrency{Max: k}}); err != nil {
			rt.Fatal(err)
		}
		c, _ := a.Class("c")
		releases := make(chan message.Outcome, 1024)
		opts := []admithttp.Option{admithttp.OnReleased(func(o message.Outcome) { releases <- o })}
		if onGone {
			opts = append(opts, admithttp.ReleaseWhenClientGone())
		}
		entered := make(chan struct{})
		h := admithttp.Middleware(c, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l := r.Context().Value(ctlKey{}).(*live)
			entered <- struct{}{}
			if <-l.act == actPanic {
				panic(http.ErrAbortHandler)
			}
		}))

		var reqs []*live
		held := func() (n int64) {
			for _, l := range reqs {
				if l.held {
					n++
				}
			}
			return n
		}
		// expect checks the releases since the last step, then in flight.
		expect := func(step string, want ...message.Outcome) {
			for _, w := range want {
				select {
				case got := <-releases:
					if got != w {
						rt.Fatalf("%s: released as %v, want %v", step, got, w)
					}
				case <-time.After(10 * time.Second): // a bound on a hang, not a timing assertion
					rt.Fatalf("%s: no release (want %v)", step, w)
				}
			}
			select {
			case o := <-releases:
				rt.Fatalf("%s: an extra release (%v)", step, o)
			default:
			}
			if got := c.InFlight(); got != held() {
				rt.Fatalf("%s: in flight %d, model %d", step, got, held())
			}
		}
		start := func() {
			ctx, cancel := context.WithCancel(context.Background())
			l := &live{act: make(chan action), cancel: cancel, done: make(chan struct{})}
			ctx = context.WithValue(ctx, ctlKey{}, l)
			rec := httptest.NewRecorder()
			go func() {
				defer close(l.done)
				defer func() { _ = recover() }()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			}()
			want := held() < int64(k)
			select {
			case <-entered:
				if !want {
					rt.Fatalf("admitted with %d of %d held", held(), k)
				}
				l.held = true
				reqs = append(reqs, l)
			case <-l.done:
				if want {
					rt.Fatalf("shed (%d) with %d of %d held", rec.Code, held(), k)
				}
				if rec.Code != http.StatusServiceUnavailable {
					rt.Fatalf("shed with status %d", rec.Code)
				}
				cancel()
			}
			expect("start")
		}
		end := func(i int, act action) {
			l := reqs[i]
			reqs = append(reqs[:i], reqs[i+1:]...)
			l.act <- act
			<-l.done
			l.cancel()
			var want []message.Outcome
			if l.held {
				o := message.Completed
				if act == actPanic || l.cancelled {
					o = message.Dropped
				}
				want = append(want, o)
			}
			l.held = false
			expect("end", want...)
		}

		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for range steps {
			switch op := rapid.IntRange(0, 3).Draw(rt, "op"); {
			case op == 0 || len(reqs) == 0:
				start()
			case op == 1:
				end(rapid.IntRange(0, len(reqs)-1).Draw(rt, "i"), actReturn)
			case op == 2:
				end(rapid.IntRange(0, len(reqs)-1).Draw(rt, "i"), actPanic)
			default:
				l := reqs[rapid.IntRange(0, len(reqs)-1).Draw(rt, "i")]
				if l.cancelled {
					continue
				}
				l.cancelled = true
				l.cancel()
				if onGone && l.held {
					l.held = false
					expect("cancel", message.Dropped)
				} else {
					expect("cancel")
				}
			}
		}
		for len(reqs) > 0 {
			end(0, actReturn)
		}
		if n := c.InFlight(); n != 0 {
			rt.Fatalf("in flight %d at the end", n)
		}
	})
}

package publishrate

import (
	"context"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
)

func TestConsecutiveBreaker(t *testing.T) {
	clk := testkit.NewClock(testEpoch)
	b := NewBreaker(3, 10*time.Second, clk.Now)
	step := func(what string, wantAllow bool) {
		t.Helper()
		if got := b.Allow(); got != wantAllow {
			t.Fatalf("%s: Allow = %v, want %v", what, got, wantAllow)
		}
	}
	step("fresh", true)
	b.Failure()
	b.Failure()
	b.Success() // a success resets the run
	b.Failure()
	b.Failure()
	step("two consecutive failures", true)
	b.Failure()
	step("three consecutive failures", false)
	if !b.Open() {
		t.Fatal("Open = false after tripping")
	}
	clk.Advance(10*time.Second - 1)
	step("cooling down", false)
	clk.Advance(1)
	step("probe after the cool-down", true)
	step("second caller while the probe is out", false)
	b.Failure()
	step("failed probe reopens", false)
	clk.Advance(10 * time.Second)
	step("next probe", true)
	b.Success()
	step("closed after a good probe", true)
	step("closed", true)
	if b.Open() {
		t.Fatal("Open = true after a good probe")
	}
}

// fakeBreaker records what the aggregator tells it.
type fakeBreaker struct {
	allow               bool
	successes, failures int
}

func (f *fakeBreaker) Allow() bool { return f.allow }
func (f *fakeBreaker) Success()    { f.successes++ }
func (f *fakeBreaker) Failure()    { f.failures++ }

func TestBroadcastThroughBreaker(t *testing.T) {
	m := metrics.NewDiscard()
	br := &fakeBreaker{allow: false}
	a := newOffline(t, newFakeLocal(), Options{}, Deps{Breaker: br, Metrics: m})

	a.broadcast(context.Background())
	if st := a.Stats(); st.BreakerSkips != 1 || st.PublishErrors != 0 || br.failures != 0 || value(m.ClusterBroadcasts) != 0 {
		t.Fatalf("open breaker: stats %+v, breaker %+v", st, br)
	}

	br.allow = true // the client points at a closed port: the publish fails
	a.broadcast(context.Background())
	if st := a.Stats(); st.PublishErrors != 1 || br.failures != 1 || br.successes != 0 || value(m.ClusterBroadcasts) != 0 {
		t.Fatalf("failed publish: stats %+v, breaker %+v", st, br)
	}

	// A broadcast cut short by Close is not Redis's fault.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.broadcast(ctx)
	if br.failures != 1 {
		t.Errorf("cancelled publish counted as a breaker failure")
	}
}

package clusterrate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/metrics"
)

// TestFleetCeilingOnRedis: three instances (three Admissions, each with
// its own Ceilings on one real redis-server) whose adaptive limits differ
// (30, 60, 90) converge on one fleet ceiling, the median 60, each applying
// a third of it; with Redis down each falls back to its own limit and
// counts it; when Redis is back they converge again.
func TestFleetCeilingOnRedis(t *testing.T) {
	s := redistest.Start(t)
	type instance struct {
		a *message.Admission
		c *message.Class
		m *metrics.Metrics
	}
	var fleet []instance
	for i, own := range []int{30, 60, 90} {
		m := metrics.NewDiscard()
		a := testkit.Must(message.New(message.Config{}, withClock(message.Deps{Metrics: m, Ceilings: testkit.Must(NewCeilings(Config{}, Deps{Client: client(t, s), InstanceID: fmt.Sprint("i", i)}))}, newClock().Now)))
		c := register(t, a, "llm", message.Rule{AdaptiveConcurrency: &message.AdaptiveConcurrency{Min: own, Max: 1000, Scope: "cluster"}})
		call := &message.Call{}
		for range 25 { // the first no-load probe: 25 calls
			c.Check(call)
			call.Release()
		}
		fleet = append(fleet, instance{a, c, m})
	}
	share := func() {
		for _, in := range fleet {
			in.a.ShareCeilings(context.Background(), time.Second)
		}
		// Once every instance has shared, each sees all three.
		for _, in := range fleet {
			in.a.ShareCeilings(context.Background(), time.Second)
		}
	}
	share()
	for i, in := range fleet {
		if got := in.c.ConcurrencyLimit(); got != 20 {
			t.Fatalf("instance %d: limit %d, want the median 60 / 3 = 20", i, got)
		}
	}
	s.Stop()
	for i, in := range fleet {
		in.a.ShareCeilings(context.Background(), 200*time.Millisecond)
		if got, want := in.c.ConcurrencyLimit(), int64(30*(i+1)); got != want {
			t.Fatalf("instance %d with Redis down: limit %d, want its own %d", i, got, want)
		}
		if n := testutil.ToFloat64(in.m.AdmissionCeilingFallbacks.WithLabelValues("llm")); n != 1 {
			t.Fatalf("instance %d: %v fallbacks counted, want 1", i, n)
		}
	}
	s.Restart()
	share()
	for i, in := range fleet {
		if got := in.c.ConcurrencyLimit(); got != 20 {
			t.Fatalf("instance %d after Redis came back: limit %d, want 20", i, got)
		}
	}
}

package clusterrate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/ratelimit"
)

// failOnError is a SharedLimiter that fails the test on any error (which
// the class would otherwise decide by its fail policy, silently).
type failOnError struct {
	t *testing.T
	l *Limiter
}

func (s failOnError) AllowShared(ctx context.Context, key string, now time.Time, limits []message.SharedLimit, results []ratelimit.Result) error {
	err := s.l.AllowShared(ctx, key, now, limits, results)
	if err != nil {
		s.t.Errorf("AllowShared %s: %v", key, err)
	}
	return err
}

// TestClassOnRedisCluster: a class with rate and cost fused, through a
// preloaded limiter on a real 3-node Redis Cluster, with the default
// timeout: no check fails (a cold first check could outlast it; Preload is
// what the node does at start).
func TestClassOnRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { rc.Close() })
	l := mustLimiter(Config{}, Deps{Client: rc})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	a := testkit.Must(message.New(message.Config{}, withClock(message.Deps{Shared: failOnError{t, l}}, clk.Now)))
	c := register(t, a, "g", message.Rule{
		Rate: &message.Rate{Limit: 3, Per: time.Minute, Scope: "cluster"},
		Cost: &message.Cost{Budget: 1000, Per: time.Minute, Of: "bytes", Scope: "cluster"},
	})
	for u := range 30 {
		user := fmt.Sprintf("user-%d", u)
		for i := range 4 {
			d := c.Check(&message.Call{User: user, Bytes: 10})
			if d.Allowed != (i < 3) {
				t.Fatalf("%s call %d: %+v", user, i, d)
			}
		}
	}
}

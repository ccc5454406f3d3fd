package bus

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

// TestSubscriptionGatherLosesNothing: with Gather, what arrives while the
// loop waits is handed over afterwards, every message, in order; Close
// during a wait returns without waiting it out.
func TestSubscriptionGatherLosesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	var mu sync.Mutex
	var got []string
	sub := Subscribe(SubscriptionConfig{
		Client: c, Channel: "gather", Gather: time.Hour, // one wait, for the rest of the test
		Handle: func(p string) { mu.Lock(); got = append(got, p); mu.Unlock() },
	})
	t.Cleanup(sub.Close)
	<-sub.Ready()
	ctx := context.Background()
	if err := c.Publish(ctx, "gather", "first").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the first message, which starts the wait", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1
	})
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprint(i))
		if err := c.Publish(ctx, "gather", want[i]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(got) != 1 {
		t.Errorf("%d messages handed over during the wait, want none", len(got)-1)
	}
	mu.Unlock()
	sub.Close() // returns at once, not after the hour

	// A short wait hands over everything, in order.
	got = nil
	sub2 := Subscribe(SubscriptionConfig{
		Client: c, Channel: "gather", Gather: 20 * time.Millisecond,
		Handle: func(p string) { mu.Lock(); got = append(got, p); mu.Unlock() },
	})
	t.Cleanup(sub2.Close)
	<-sub2.Ready()
	for _, p := range want {
		if err := c.Publish(ctx, "gather", p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "every message, in order", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(got, want)
	})
}

package publishrate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

// Whoever can write Redis keys can write the merger's lease and its epoch
// counter. A lease value that is not a valid signed claim (garbage with
// no TTL, an unsigned claim, a claim signed with another key, one whose
// time is long past) is ignored and overwritten, so the fleet still gets
// a merger; a counter that is not a number counts as absent. Before, a
// lease key set without a TTL stopped every claim for good, and a
// non-numeric counter failed every claim script.
func TestForgedLeaseAndCorruptEpochFailSafe(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, c := range []struct {
		name, lease, epoch string
		ttl                time.Duration
	}{
		{"garbage without a TTL", "attacker", "", 0},
		{"unsigned claim with a TTL", strconv.FormatInt(time.Now().Add(time.Second).UnixMilli(), 10) + " X -", "", time.Hour},
		{"claim signed with another key", strconv.FormatInt(time.Now().Add(time.Second).UnixMilli(), 10) + " X " + "00112233", "", time.Hour},
		{"non-numeric counter", "", "not a number", 0},
		{"float counter", "", "1e300", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			nd, client := mergedNode(t, srv, "A", newFakeLocal())
			if c.lease != "" {
				if err := client.Set(ctx, nd.agg.leaseKey, c.lease, c.ttl).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if c.epoch != "" {
				if err := client.Set(ctx, nd.agg.epochKey, c.epoch, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			activate(t, nd.agg)
			testkit.Eventually(t, awaitFor, "A merges despite the forged lease or counter", func() bool {
				return nd.agg.Stats().Merging
			})
			v, _ := client.Get(ctx, nd.agg.leaseKey).Result()
			pttl, _ := client.PTTL(ctx, nd.agg.leaseKey).Result()
			if !nd.agg.leaseValid(v, pttl.Milliseconds(), time.Now()) {
				t.Errorf("the lease holds %q (pttl %s), not A's claim", v, pttl)
			}
			if e, err := client.Get(ctx, nd.agg.epochKey).Int64(); err != nil || e < 1 {
				t.Errorf("epoch counter %d, %v", e, err)
			}
			_ = nd.agg.Close()
			client.Del(ctx, nd.agg.leaseKey, nd.agg.epochKey)
		})
	}
}

// A valid claim of another instance is respected: only one merges.
func TestValidLeaseIsNotOverwritten(t *testing.T) {
	srv := redistest.Start(t)
	a, _ := mergedNode(t, srv, "A", newFakeLocal())
	b, _ := mergedNode(t, srv, "B", newFakeLocal())
	activate(t, a.agg)
	testkit.Eventually(t, awaitFor, "A merges", func() bool { return a.agg.Stats().Merging })
	activate(t, b.agg)
	// B's lead loop claims every half interval; after its first views it
	// has run a claim against A's valid lease several times.
	testkit.Eventually(t, awaitFor, "B hears A's views", func() bool { return b.agg.Stats().ViewEpoch > 0 })
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		epoch, _, err := b.agg.claim(ctx, time.Now(), b.agg.leaseTTL.Milliseconds())
		cancel()
		if err != nil || epoch != 0 {
			t.Fatalf("B claimed over A's valid lease: epoch %d, %v", epoch, err)
		}
	}
	if !a.agg.Stats().Merging || b.agg.Stats().Merging {
		t.Fatalf("merging: A %v, B %v", a.agg.Stats().Merging, b.agg.Stats().Merging)
	}
}

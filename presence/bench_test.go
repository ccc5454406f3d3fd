package presence

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/testkit"
)

// fill adds n entries to topic (client ids shaped like the server's: a
// 16-hex instance id and a connection number; 8-character users, one per
// 2 connections) in writes of MaxBatch.
func fill(b testing.TB, s Store, topic string, n int) []Change {
	var all []Change
	for i := range n {
		all = append(all, join(topic, fmt.Sprintf("%016x.%d", i/5000, 1000000+i), fmt.Sprintf("user%04d", i/2)))
	}
	for rest := all; len(rest) > 0; {
		k := min(len(rest), MaxBatch)
		mustApply(b, s, rest[:k]...)
		rest = rest[k:]
	}
	return all
}

// BenchmarkRedisStats100k: presenceStats on a topic of 100,000 entries
// against a local redis-server; reports p50 and p99 latency.
func BenchmarkRedisStats100k(b *testing.B) {
	s := newRedisStore(b, storeOptions{})
	fill(b, s, "room:big", 100000)
	ctx := context.Background()
	mustStats(b, s, "room:big") // warm: script cached, connection open
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		st, err := s.Stats(ctx, "room:big")
		lat = append(lat, time.Since(t0))
		if err != nil || st.Clients != 100000 {
			b.Fatalf("%+v %v", st, err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}

// BenchmarkRedisRefresh10k: one refresh of 10,000 entries of one instance
// over 100 topics: round trips and this process's CPU per refresh (the
// share of a core is that over the refresh period, ttl/3).
func BenchmarkRedisRefresh10k(b *testing.B) {
	s := newRedisStore(b, storeOptions{})
	var h roundTrips
	s.client.AddHook(&h)
	tr := mustTracker(Config{}, TrackerDeps{Store: s, Mode: func(string) Mode { return Mode{Presence: true} }})
	var cs []Change
	for i := range 10000 {
		cs = append(cs, join(fmt.Sprint("room:", i%100), fmt.Sprintf("%016x.%d", 7, i), fmt.Sprintf("user%04d", i)))
	}
	tr.Update(cs)
	tr.flush()
	h.take()
	cpu0 := testkit.ProcessCPU()
	for b.Loop() {
		tr.refresh()
	}
	cpu := testkit.ProcessCPU() - cpu0
	b.ReportMetric(float64(h.take())/float64(b.N), "round-trips/op")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(100*cpu.Seconds()/float64(b.N)/(DefaultTTL/3).Seconds(), "%core@ttl60s")
}

// BenchmarkRedisSubscribeRoundTrips: one subscribe, and one close of a
// connection in 5 presence topics, through a Tracker.
func BenchmarkRedisSubscribeRoundTrips(b *testing.B) {
	s := newRedisStore(b, storeOptions{})
	var h roundTrips
	s.client.AddHook(&h)
	tr := mustTracker(Config{}, TrackerDeps{Store: s, Mode: func(string) Mode { return Mode{Presence: true} }})
	tr.Start(context.Background())
	defer tr.Close()
	<-tr.Update([]Change{join("warm", "w.1", "")})
	h.take()
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprint("c.", i)
		<-tr.Update([]Change{join("room:1", id, "u")})
		var leaves []Change
		for k := range 5 {
			leaves = append(leaves, leave(fmt.Sprint("room:", k), id, "u"))
		}
		<-tr.Update(leaves)
	}
	b.ReportMetric(float64(h.take())/float64(b.N), "round-trips/op")
}

// TestRedisMemoryPerEntry reports what an entry costs in Redis (MEMORY
// USAGE of a topic's three keys over 100,000 entries), for
// docs/operations.md. It asserts only a loose ceiling.
func TestRedisMemoryPerEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 100,000 entries")
	}
	s := newRedisStore(t, storeOptions{})
	const n = 100000
	fill(t, s, "room:big", n)
	var total int64
	for _, k := range s.keys("room:big") {
		v, err := s.client.Do(context.Background(), "MEMORY", "USAGE", k, "SAMPLES", "0").Int64()
		if err != nil {
			t.Fatal(err)
		}
		total += v
	}
	per := float64(total) / n
	t.Logf("Redis memory per entry: %.0f bytes (client id %d bytes, user 8 bytes, one user per 2 entries)", per, len(fmt.Sprintf("%016x.%d", 0, 1000000)))
	if per > 1024 {
		t.Fatalf("%.0f bytes per entry", per)
	}
}

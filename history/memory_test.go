package history

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rtserver/rtserver/internal/testkit"
)

var ctx = context.Background()

func publish(t *testing.T, s Store, topic string, pol Policy, data string) Position {
	t.Helper()
	pos, _, err := s.Publish(ctx, Publish{Topic: topic, Data: []byte(data), Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

func offsets(ms []Message) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.Offset)
	}
	return out
}

// The store reads time.Now: its tests run in a synctest bubble, whose
// clock moves only when every goroutine of it waits (time.Sleep here).

func TestMemoryKeepsSizeAndTTL(t *testing.T) { synctest.Test(t, testMemoryKeepsSizeAndTTL) }

func testMemoryKeepsSizeAndTTL(t *testing.T) {
	m := testkit.Must(NewMemory(Config{}, MemoryDeps{}))
	pol := Policy{Size: 3, TTL: time.Minute}
	empty, _, _ := m.Read(ctx, "t", 0, 10, pol)
	if empty.Offset != 0 || empty.Epoch == "" {
		t.Fatalf("an empty topic's position: %+v", empty)
	}
	for i := range 5 {
		pos := publish(t, m, "t", pol, fmt.Sprint(i))
		if pos.Offset != uint64(i+1) || pos.Epoch != empty.Epoch {
			t.Fatalf("publish %d: %+v", i, pos)
		}
	}
	pos, ms, _ := m.Read(ctx, "t", 0, 10, pol)
	if pos.Offset != 5 || fmt.Sprint(offsets(ms)) != "[3 4 5]" {
		t.Fatalf("after 5 of size 3: %+v %v", pos, offsets(ms))
	}
	_, ms, _ = m.Read(ctx, "t", 3, 1, pol)
	if fmt.Sprint(offsets(ms)) != "[4]" {
		t.Fatalf("after 3, limit 1: %v", offsets(ms))
	}
	time.Sleep(30 * time.Second)
	publish(t, m, "t", pol, "6")
	time.Sleep(31 * time.Second)
	pos, ms, _ = m.Read(ctx, "t", 0, 10, pol)
	if pos.Offset != 6 || fmt.Sprint(offsets(ms)) != "[6]" {
		t.Fatalf("past the ttl of 3..5: %+v %v", pos, offsets(ms))
	}
	time.Sleep(time.Minute)
	pos, ms, _ = m.Read(ctx, "t", 0, 10, pol)
	if pos.Offset != 6 || pos.Epoch != empty.Epoch || len(ms) != 0 {
		t.Fatalf("every message expired: the position stays: %+v %v", pos, offsets(ms))
	}
}

func TestMemoryByteCapEvictsLeastRecentlyPublished(t *testing.T) {
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	m := testkit.Must(NewMemory(Config{MemoryMaxBytes: 4096}, MemoryDeps{Evicted: evicted}))
	pol := Policy{Size: 100, TTL: time.Hour}
	first := publish(t, m, "old", pol, `"x"`)
	data := fmt.Sprintf("%q", make([]byte, 100))
	for i := range 100 {
		publish(t, m, fmt.Sprint("t", i%10), pol, data)
		if b := m.Bytes(); b > 4096+1024 {
			t.Fatalf("store holds %d bytes, cap 4096", b)
		}
	}
	if testutil.ToFloat64(evicted) == 0 {
		t.Fatal("nothing evicted")
	}
	pos, _, _ := m.Read(ctx, "old", 0, 10, pol)
	if pos.Epoch == first.Epoch || pos.Offset != 0 {
		t.Fatalf("an evicted topic keeps its position: %+v, was %+v", pos, first)
	}
}

func TestMemoryIdempotencyKey(t *testing.T) { synctest.Test(t, testMemoryIdempotencyKey) }

func testMemoryIdempotencyKey(t *testing.T) {
	var delivered []uint64
	m := testkit.Must(NewMemory(Config{IdempotencyTTL: time.Minute}, MemoryDeps{Deliver: func(_, _ string, msg Message) { delivered = append(delivered, msg.Offset) }}))
	pol := Policy{Size: 10, TTL: time.Hour}
	p := Publish{Topic: "t", Data: []byte(`1`), Policy: pol, IdempotencyKey: "u:k"}
	a, dup, _ := m.Publish(ctx, p)
	b, dup2, _ := m.Publish(ctx, p)
	if dup || !dup2 || a != b {
		t.Fatalf("first %+v %v, again %+v %v", a, dup, b, dup2)
	}
	time.Sleep(2 * time.Minute)
	publish(t, m, "t", pol, "2") // sweeps the expired key
	c, dup3, _ := m.Publish(ctx, p)
	if dup3 || c.Offset != 3 {
		t.Fatalf("after the key's ttl: %+v %v", c, dup3)
	}
	if fmt.Sprint(delivered) != "[1 2 3]" {
		t.Fatalf("delivered %v", delivered)
	}
}

func TestMemoryDeliversInOffsetOrderUnderRacingPublishers(t *testing.T) {
	var mu sync.Mutex
	var got []uint64
	m := testkit.Must(NewMemory(Config{}, MemoryDeps{Deliver: func(_, _ string, msg Message) { mu.Lock(); got = append(got, msg.Offset); mu.Unlock() }}))
	pol := Policy{Size: 1000, TTL: time.Hour}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				publish(t, m, "t", pol, "1")
			}
		})
	}
	wg.Wait()
	for i, o := range got {
		if o != uint64(i+1) {
			t.Fatalf("delivery %d has offset %d", i, o)
		}
	}
}

// Reads of topics nobody published to keep nothing: 150,000 of them (one
// client's two seconds) leave the store empty, and the next publish has
// nothing to evict. Before, each read created an accounted stream and
// the next publish swept 100,000 of them at once under the store's lock.
func TestMemoryReadsOfMadeUpTopicsKeepNothing(t *testing.T) {
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	m := testkit.Must(NewMemory(Config{MemoryMaxBytes: 8 << 20}, MemoryDeps{Evicted: evicted}))
	pol := Policy{Size: 100, TTL: time.Hour}
	for i := range 150_000 {
		pos, ms, err := m.Read(ctx, fmt.Sprint("room:made-up-", i), 0, 100, pol)
		if err != nil || pos.Offset != 0 || pos.Epoch == "" || len(ms) != 0 {
			t.Fatalf("read %d: %+v %v %v", i, pos, ms, err)
		}
	}
	m.mu.Lock()
	streams := len(m.topics)
	m.mu.Unlock()
	if streams != 0 || m.Bytes() != 0 {
		t.Fatalf("after 150,000 reads of made-up topics: %d streams, %d bytes", streams, m.Bytes())
	}
	publish(t, m, "room:real", pol, `"x"`)
	if n := testutil.ToFloat64(evicted); n != 0 {
		t.Fatalf("the publish after the reads evicted %v streams", n)
	}
}

// A subscriber of an empty topic still recovers its first messages: the
// position a read answers is the one the first publish continues. And a
// topic that lost its stream answers another epoch, from a read or a
// publish alike.
func TestMemoryEmptyTopicPositionIsTheFirstPublishes(t *testing.T) {
	m := testkit.Must(NewMemory(Config{MemoryMaxBytes: 1024}, MemoryDeps{}))
	pol := Policy{Size: 10, TTL: time.Hour}
	for i := range 200 {
		topic := fmt.Sprint("t", i)
		before, _, _ := m.Read(ctx, topic, 0, 10, pol)
		pos := publish(t, m, topic, pol, `"x"`) // the cap evicts older topics as it goes
		if pos.Epoch != before.Epoch || pos.Offset != 1 {
			t.Fatalf("%s: read %+v, then published at %+v", topic, before, pos)
		}
		_, ms, _ := m.Read(ctx, topic, before.Offset, 10, pol)
		if fmt.Sprint(offsets(ms)) != "[1]" {
			t.Fatalf("%s: recovery from the empty position got %v", topic, offsets(ms))
		}
	}
	// Every topic but the newest few was evicted: each answers a new epoch.
	seen := map[string]bool{}
	for i := range 150 {
		topic := fmt.Sprint("t", i)
		pos, _, _ := m.Read(ctx, topic, 0, 10, pol)
		again := publish(t, m, topic, pol, `"y"`)
		if again.Offset == 1 && again.Epoch == pos.Epoch {
			seen[topic] = true
		}
	}
	if len(seen) == 0 {
		t.Fatal("no evicted topic started over")
	}
}

// One publish's sweep removes a bounded number of streams: at most what
// the publish added, in streams' overhead, plus the two it ages.
func TestMemorySweepIsBoundedByThePublish(t *testing.T) {
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	const capBytes = 1 << 20
	m := testkit.Must(NewMemory(Config{MemoryMaxBytes: capBytes}, MemoryDeps{Evicted: evicted}))
	pol := Policy{Size: 1, TTL: time.Hour}
	for i := 0; m.Bytes() < capBytes-512; i++ {
		publish(t, m, fmt.Sprint("s", i), pol, `1`)
	}
	for _, size := range []int{10, 1000, 64 << 10} {
		before := testutil.ToFloat64(evicted)
		data := fmt.Sprintf("%q", make([]byte, size))
		publish(t, m, fmt.Sprint("big", size), pol, data)
		n := testutil.ToFloat64(evicted) - before
		bound := float64((len(data)+msgOverhead+streamOverhead+16)/streamOverhead + 2)
		if n > bound {
			t.Fatalf("a publish of %d bytes evicted %v streams, bound %v", len(data), n, bound)
		}
		if m.Bytes() > capBytes {
			t.Fatalf("store holds %d bytes, cap %d", m.Bytes(), capBytes)
		}
	}
}

package pressure

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// Run with -cpu 1,2 to compare one goroutine against two: ns/op under
// RunParallel should stay in the same range, not collapse, as goroutines
// are added.

// running is a monitor started as the server starts it (so the live
// clock is kept for RecordAttempt), closed when the benchmark ends.
func running(b *testing.B) *Monitor {
	mon := mustNew(Config{SampleInterval: time.Hour}, Deps{})
	if err := mon.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mon.Close() })
	return mon
}

func BenchmarkRecordAttempt(b *testing.B) {
	mon := running(b)
	mon.RecordAttempt("chat:room-7", "alice", 128)
	b.ReportAllocs()
	for b.Loop() {
		mon.RecordAttempt("chat:room-7", "alice", 128)
	}
}

func BenchmarkRecordAttemptNoUser(b *testing.B) {
	mon := running(b)
	mon.RecordAttempt("chat:room-7", "", 128)
	b.ReportAllocs()
	for b.Loop() {
		mon.RecordAttempt("chat:room-7", "", 128)
	}
}

// Every goroutine hammers the same topic and user: the worst case, since
// the counters themselves are shared.
func BenchmarkRecordAttemptParallelSameTopic(b *testing.B) {
	mon := running(b)
	mon.RecordAttempt("chat:room-7", "alice", 128)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mon.RecordAttempt("chat:room-7", "alice", 128)
		}
	})
}

// Each goroutine publishes on its own topics (and as its own user), as
// most real traffic does: sharding should keep them from contending.
func BenchmarkRecordAttemptParallelDistinctTopics(b *testing.B) {
	mon := mustNew(Config{}, Deps{})
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := next.Add(1)
		topics := make([]string, 16)
		for i := range topics {
			topics[i] = fmt.Sprintf("room:%d:%d", g, i)
			mon.RecordAttempt(topics[i], "", 0)
		}
		user := fmt.Sprintf("user%d", g)
		i := 0
		for pb.Next() {
			mon.RecordAttempt(topics[i&15], user, 128)
			i++
		}
	})
}

func BenchmarkRecordPublishedParallel(b *testing.B) {
	mon := mustNew(Config{}, Deps{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mon.RecordPublished(1)
		}
	})
}

func BenchmarkSnapshot(b *testing.B) {
	mon := mustNew(Config{}, Deps{})
	mon.Sample()
	b.ReportAllocs()
	var sink *Snapshot
	for b.Loop() {
		sink = mon.Snapshot()
	}
	_ = sink
}

func BenchmarkSnapshotParallel(b *testing.B) {
	mon := mustNew(Config{}, Deps{})
	mon.Sample()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var r Reason
		for pb.Next() {
			r |= mon.Snapshot().Reason
		}
		_ = r
	})
}

// Sample with 10,000 tracked topics: the sampler's cost per interval,
// off the admission path.
func BenchmarkSample10kTopics(b *testing.B) {
	now := time.Unix(0, 0)
	mon := mustNew(Config{}, Deps{now: func() time.Time { return now }})
	topics := make([]string, 10000)
	for i := range topics {
		topics[i] = fmt.Sprintf("topic:%d", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i, t := range topics {
			mon.RecordAttempt(t, "", i)
		}
		now = now.Add(time.Second)
		b.StartTimer()
		mon.Sample()
	}
}

// A new name each call (under the bound): the slow path.
func BenchmarkRecordAttemptNewTopic(b *testing.B) {
	mon := mustNew(Config{maxTrackedKeys: 1 << 30}, Deps{})
	topics := make([]string, 1<<16)
	for i := range topics {
		topics[i] = fmt.Sprintf("topic:%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(topics) {
			b.StopTimer()
			mon.Sample() // prunes them all
			i = 0
			b.StartTimer()
		}
		mon.RecordAttempt(topics[i], "", 1)
		i++
	}
}

// A new name each call past the bound: what a flood of names costs.
func BenchmarkRecordAttemptOverBound(b *testing.B) {
	mon := mustNew(Config{maxTrackedKeys: 1}, Deps{})
	mon.RecordAttempt("first", "", 1)
	topics := make([]string, 1024)
	for i := range topics {
		topics[i] = fmt.Sprintf("topic:%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		mon.RecordAttempt(topics[i&1023], "", 1)
		i++
	}
}

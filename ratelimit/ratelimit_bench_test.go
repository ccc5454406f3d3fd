package ratelimit

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func BenchmarkKeyedAllowExisting(b *testing.B) {
	k := NewKeyed(100, time.Second, 0)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		k.Allow("203.0.113.7", now)
	}
}

func BenchmarkKeyedAllowParallel(b *testing.B) {
	k := NewKeyed(100, time.Second, 0)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
		k.Allow(keys[i], time.Now())
	}
	now := time.Now()
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 97
		for pb.Next() {
			k.Allow(keys[i&1023], now)
			i++
		}
	})
}

// BenchmarkKeyedAllowEvicting inserts a new key every time into a full
// store: the cost of a key flood (one clone of the key per op).
func BenchmarkKeyedAllowEvicting(b *testing.B) {
	k := NewKeyed(100, time.Second, 4096)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	now := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k.Allow(keys[i&(1<<16-1)], now)
		i++
	}
}

func BenchmarkGCRAAllow(b *testing.B) {
	g := NewGCRA(100, time.Second)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		g.Allow(now)
	}
}

// BenchmarkWindowAllow is a key at its steady state: one event allowed and
// one expired per call (limit 100 per second, an event every 10ms).
func BenchmarkWindowAllow(b *testing.B) {
	w := NewWindow(100, time.Second, 0)
	now := time.Now()
	for i := range 100 {
		w.Allow("203.0.113.7", now.Add(time.Duration(i)*10*time.Millisecond))
	}
	t := now.Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		w.Allow("203.0.113.7", t)
		t = t.Add(10 * time.Millisecond)
	}
}

func BenchmarkKeyedAllowN(b *testing.B) {
	k := NewKeyed(1_000_000, time.Minute, 0)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		k.AllowN("203.0.113.7", 1, now)
	}
}

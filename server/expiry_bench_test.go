package server

import (
	"testing"
	"time"
)

// BenchmarkTokenExpiryWatch is what a connection whose token has an exp
// costs to watch (allocations: the watch alone; its deadline waits in the
// server's shared heap) and to stop. Connections without exp pay nothing.
func BenchmarkTokenExpiryWatch(b *testing.B) {
	exp := time.Now().Add(time.Hour)
	h := newExpiryHeap()
	defer h.Stop()
	b.ReportAllocs()
	for b.Loop() {
		e := newTokenExpiry(h, exp, 30*time.Second, time.Now, func(time.Duration) {}, func() {})
		e.stop()
	}
}

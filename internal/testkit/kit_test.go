package testkit

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEventually(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	Eventually(t, 10*time.Second, "three increments", func() bool { return n.Load() == 3 })

	f := &fakeT{TB: t}
	Eventually(f, 0, "a condition that never holds", func() bool { return false })
	if !strings.Contains(f.failed, "a condition that never holds") {
		t.Fatalf("failure %q does not say what it waited for", f.failed)
	}
	f = &fakeT{TB: t}
	Eventually(f, 0, func() string { return "described late" }, func() bool { return false })
	if !strings.Contains(f.failed, "described late") {
		t.Fatalf("failure %q does not use the description func", f.failed)
	}
}

func TestLogBuffer(t *testing.T) {
	var b LogBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Fatalf("%d bytes, want 800", got)
	}
}

func TestClock(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(start)
	c.Advance(time.Second)
	if got := c.Now(); !got.Equal(start.Add(time.Second)) || got.Location() != time.UTC {
		t.Fatalf("after Advance: %v", got)
	}
	c.Set(start)
	if c.Now() != start {
		t.Fatalf("after Set: %v", c.Now())
	}
}

package publishrate

import (
	"runtime"
	"testing"
	"time"
)

// cpuMeter adds up the thread CPU time of the measured calls of one
// benchmark and reports it per op as cpu-ns/op.
type cpuMeter struct {
	b     *testing.B
	total time.Duration
}

// meterCPU locks the benchmark's goroutine to its thread, so the thread's
// clock is the goroutine's, until the benchmark ends.
func meterCPU(b *testing.B) *cpuMeter {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	return &cpuMeter{b: b}
}

func (c *cpuMeter) measure(f func()) {
	t0 := threadCPU()
	f()
	c.total += threadCPU() - t0
}

func (c *cpuMeter) report() {
	if c.b.N > 0 {
		c.b.ReportMetric(float64(c.total.Nanoseconds())/float64(c.b.N), "cpu-ns/op")
	}
}

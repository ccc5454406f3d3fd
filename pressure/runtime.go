package pressure

import (
	"bytes"
	"math"
	"os"
	"path"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// runtimeStats is what the monitor reads from the Go runtime and the OS at
// each sample. Tests replace the reader to fake memory pressure.
type runtimeStats struct {
	HeapInUse     uint64
	MemoryLimit   uint64 // 0: no limit known
	RSS           uint64
	SchedP99      time.Duration
	GCCPUFraction float64
}

// The runtime/metrics we read. Heap in use is
// /memory/classes/heap/objects:bytes (live objects plus dead ones not yet
// swept, the same quantity as MemStats.HeapAlloc and Node's heapUsed) rather
// than /gc/heap/live:bytes: the live figure is only refreshed at the end of
// each GC, so without GOMEMLIMIT the heap can grow to twice the live size
// (GOGC=100) and be OOM-killed while the live ratio still looks safe. With
// GOMEMLIMIT set, the GC keeps this figure under the limit, so a ratio near
// 1 means the GC is working hard to stay there. Committed-but-free heap
// (heap/free, heap/unused) is deliberately not counted.
const (
	metricHeapObjects = "/memory/classes/heap/objects:bytes"
	metricSched       = "/sched/latencies:seconds"
	metricGCCPU       = "/cpu/classes/gc/total:cpu-seconds"
	metricTotalCPU    = "/cpu/classes/total:cpu-seconds"
)

// runtimeReader reads runtimeStats. Not safe for concurrent use: the
// monitor calls it only with its sample lock held. It keeps the previous
// cumulative readings so that the scheduling-latency p99 and the GC CPU
// fraction describe the last interval, not the life of the process.
type runtimeReader struct {
	cfgLimit  uint64
	samples   []rtmetrics.Sample
	prevSched []uint64
	prevGC    float64
	prevTotal float64
}

func newRuntimeReader(cfgLimit uint64) *runtimeReader {
	return &runtimeReader{
		cfgLimit: cfgLimit,
		samples: []rtmetrics.Sample{
			{Name: metricHeapObjects},
			{Name: metricSched},
			{Name: metricGCCPU},
			{Name: metricTotalCPU},
		},
	}
}

func (r *runtimeReader) read() runtimeStats {
	rtmetrics.Read(r.samples)
	var st runtimeStats
	if v := r.samples[0].Value; v.Kind() == rtmetrics.KindUint64 {
		st.HeapInUse = v.Uint64()
	}
	if v := r.samples[1].Value; v.Kind() == rtmetrics.KindFloat64Histogram {
		h := v.Float64Histogram()
		st.SchedP99 = r.schedP99(h.Counts, h.Buckets)
	}
	if g, t := r.samples[2].Value, r.samples[3].Value; g.Kind() == rtmetrics.KindFloat64 && t.Kind() == rtmetrics.KindFloat64 {
		gc, total := g.Float64(), t.Float64()
		if dt := total - r.prevTotal; dt > 0 {
			st.GCCPUFraction = (gc - r.prevGC) / dt
		}
		r.prevGC, r.prevTotal = gc, total
	}
	st.MemoryLimit = memoryLimit(debug.SetMemoryLimit(-1), r.cfgLimit, cgroupMemoryMax)
	st.RSS = readRSS()
	return st
}

// schedP99 is the p99 of the scheduling latencies recorded since the
// previous call (the delta of the cumulative histogram). The runtime reuses
// the histogram's slices between reads, so the previous counts are copied.
func (r *runtimeReader) schedP99(counts []uint64, buckets []float64) time.Duration {
	if len(r.prevSched) != len(counts) {
		r.prevSched = make([]uint64, len(counts))
	}
	delta := make([]uint64, len(counts))
	for i, c := range counts {
		delta[i] = c - r.prevSched[i]
	}
	copy(r.prevSched, counts)
	return histP99(delta, buckets)
}

// histP99 returns the upper bound of the bucket holding the 99th percentile
// (the lower bound when that bucket is unbounded above), so the figure is
// "p99 is at most this", with the runtime's bucket resolution. 0 when the
// histogram is empty.
func histP99(counts []uint64, buckets []float64) time.Duration {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 || len(buckets) != len(counts)+1 {
		return 0
	}
	// The rank of the p99 sample, 1-based, rounded up.
	rank := (total*99 + 99) / 100
	var cum uint64
	for i, c := range counts {
		cum += c
		if cum >= rank {
			v := buckets[i+1]
			if math.IsInf(v, 1) {
				v = buckets[i]
			}
			if math.IsInf(v, 0) || v < 0 {
				return 0
			}
			return time.Duration(v * float64(time.Second))
		}
	}
	return 0
}

// memoryLimit picks the limit the memory ratio is taken against: GOMEMLIMIT
// when set (math.MaxInt64 means unset), else the configured
// memoryLimitBytes, else the cgroup v2 memory.max, else 0 (no limit known:
// the ratio is 0 and MEMORY never fires).
func memoryLimit(gomemlimit int64, cfg uint64, cgroup func() uint64) uint64 {
	if gomemlimit > 0 && gomemlimit != math.MaxInt64 {
		return uint64(gomemlimit)
	}
	if cfg > 0 {
		return cfg
	}
	if cgroup != nil {
		return cgroup()
	}
	return 0
}

// cgroupRoot is where the cgroup v2 hierarchy is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupMemoryMax is the tightest memory.max on the path from this
// process's cgroup up to the root (a parent's limit binds its children), or
// 0 when none is set, the host uses cgroup v1, or this is not Linux.
func cgroupMemoryMax() uint64 {
	rel := "/"
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		if p, ok := parseCgroupV2Path(b); ok {
			rel = p
		}
	}
	var limit uint64
	for p := path.Clean(rel); ; p = path.Dir(p) {
		if b, err := os.ReadFile(path.Join(cgroupRoot, p, "memory.max")); err == nil {
			if v, ok := parseMemoryMax(b); ok && (limit == 0 || v < limit) {
				limit = v
			}
		}
		if p == "/" || p == "." {
			break
		}
	}
	return limit
}

// parseCgroupV2Path finds the unified-hierarchy line ("0::/path") in
// /proc/self/cgroup.
func parseCgroupV2Path(b []byte) (string, bool) {
	for line := range bytes.Lines(b) {
		if p, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("0::")); ok && len(p) > 0 && p[0] == '/' {
			return string(p), true
		}
	}
	return "", false
}

// parseMemoryMax parses a cgroup v2 memory.max file: a byte count, or "max"
// for no limit (reported as not ok).
func parseMemoryMax(b []byte) (uint64, bool) {
	s := strings.TrimSpace(string(b))
	if s == "" || s == "max" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, false
	}
	return v, true
}

// readRSS is the resident set size from /proc/self/statm (Linux); 0
// elsewhere or on error.
func readRSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	return parseStatm(b, uint64(os.Getpagesize()))
}

// parseStatm reads the second field of /proc/self/statm (resident pages).
func parseStatm(b []byte, pageSize uint64) uint64 {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * pageSize
}

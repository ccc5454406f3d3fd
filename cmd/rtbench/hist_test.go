package main

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestBucketRangeContainsItsValues(t *testing.T) {
	for _, v := range []int64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 1 << 20, 123456789, maxValue} {
		i := bucketOf(v)
		lo, hi := bucketRange(i)
		if v < lo || v > hi {
			t.Errorf("value %d in bucket %d = [%d, %d]", v, i, lo, hi)
		}
		if v >= 1<<subBits && float64(hi-lo+1)/float64(lo) > 1.0/(1<<subBits) {
			t.Errorf("bucket %d = [%d, %d] is wider than 1/%d of its lower bound", i, lo, hi, 1<<subBits)
		}
	}
}

func TestBucketsTileTheLine(t *testing.T) {
	// Consecutive buckets meet exactly: no value falls between two.
	prevHi := int64(-1)
	for i := 0; i <= bucketOf(maxValue); i++ {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d = [%d, %d] but bucketOf gives %d and %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		prevHi = hi
	}
}

func TestQuantileExact(t *testing.T) {
	tests := []struct {
		give []int64
		q    float64
		want int64
	}{
		{nil, 0.5, 0},
		{[]int64{7}, 0.99, 7},
		{[]int64{5, 1, 4, 2, 3}, 0.5, 3},     // rank ceil(2.5) = 3
		{[]int64{5, 1, 4, 2, 3}, 0.2, 1},     // rank 1
		{[]int64{5, 1, 4, 2, 3}, 0.21, 2},    // rank ceil(1.05) = 2
		{[]int64{5, 1, 4, 2, 3}, 1, 5},       // the maximum
		{[]int64{10, 20, 30, 40}, 0.99, 40},  // rank 4
		{[]int64{10, 20, 30, 40}, 0.001, 10}, // rank clamps to 1
		{[]int64{1, 1, 1, 100}, 0.75, 1},     // ties
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
	}
	for _, tt := range tests {
		if got := quantileExact(append([]int64(nil), tt.give...), tt.q); got != tt.want {
			t.Errorf("quantileExact(%v, %v) = %d, want %d", tt.give, tt.q, got, tt.want)
		}
	}
}

// The histogram's quantiles are the exact nearest-rank quantiles to within
// half a bucket (1/128 relative), and its count, min and max are exact.
func TestHistMatchesExactQuantiles(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vs := rapid.SliceOfN(rapid.Int64Range(0, int64(10*time.Second)), 1, 500).Draw(t, "values")
		q := rapid.Float64Range(0.001, 1).Draw(t, "q")
		var h hist
		for _, v := range vs {
			h.RecordNs(v)
		}
		want := quantileExact(append([]int64(nil), vs...), q)
		got := int64(h.Quantile(q))
		tol := want/(2<<subBits) + 1
		if got < want-tol || got > want+tol {
			t.Fatalf("quantile %v: hist %d, exact %d (tolerance %d)", q, got, want, tol)
		}
		if h.Count() != uint64(len(vs)) {
			t.Fatalf("count %d, want %d", h.Count(), len(vs))
		}
		if int64(h.Max()) != quantileExact(vs, 1) || h.min != vs[0] {
			t.Fatalf("max %d min %d, want %d %d", h.Max(), h.min, vs[len(vs)-1], vs[0])
		}
	})
}

// Merging per-goroutine histograms is the same as recording into one.
func TestHistMerge(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.SliceOf(rapid.Int64Range(0, 1<<35)).Draw(t, "a")
		b := rapid.SliceOf(rapid.Int64Range(0, 1<<35)).Draw(t, "b")
		var ha, hb, all hist
		for _, v := range a {
			ha.RecordNs(v)
			all.RecordNs(v)
		}
		for _, v := range b {
			hb.RecordNs(v)
			all.RecordNs(v)
		}
		ha.Merge(&hb)
		for _, q := range []float64{0.5, 0.9, 0.99, 1} {
			if ha.Quantile(q) != all.Quantile(q) {
				t.Fatalf("q %v: merged %v, recorded together %v", q, ha.Quantile(q), all.Quantile(q))
			}
		}
		if ha.Count() != all.Count() || ha.Max() != all.Max() || ha.min != all.min {
			t.Fatalf("merged %+v vs %+v", ha.Summary(), all.Summary())
		}
	})
}

func TestHistClampsAndEmpty(t *testing.T) {
	var h hist
	if h.Quantile(0.99) != 0 || h.Summary().N != 0 {
		t.Fatal("empty histogram is not zero")
	}
	h.RecordNs(-5)
	h.RecordNs(1 << 62)
	if h.min != 0 || h.max != maxValue {
		t.Fatalf("min %d max %d, want 0 and %d", h.min, h.max, maxValue)
	}
}

func TestOpenCountPeak(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		give [][2]int
		want int
	}{
		{"none", nil, 0},
		{"disjoint", [][2]int{{0, 10}, {20, 30}}, 1},
		{"touching ends do not overlap", [][2]int{{0, 10}, {10, 20}}, 1},
		{"nested", [][2]int{{0, 100}, {10, 20}, {15, 30}}, 3},
		{"staggered", [][2]int{{0, 10}, {5, 15}, {12, 20}, {14, 16}}, 3},
	}
	for _, tt := range tests {
		var o openCount
		for _, iv := range tt.give {
			o.add(at(iv[0]), at(iv[1]))
		}
		if got := o.peak(); got != tt.want {
			t.Errorf("%s: peak %d, want %d", tt.name, got, tt.want)
		}
	}
}

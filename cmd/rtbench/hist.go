package main

import (
	"math"
	"math/bits"
	"sort"
	"time"
)

// subBits sets the histogram's precision: values below 2^subBits ns are
// exact, larger ones fall in buckets 2^subBits to a power of two, so a
// bucket is at most 1/64 of its lower bound wide and its midpoint is within
// 1/128 of any value in it.
const subBits = 6

// maxValue caps recorded values (about 18 minutes); longer latencies are
// recorded as maxValue, which no bounded mode can reach.
const maxValue = int64(1)<<40 - 1

// hist is a log-linear latency histogram in nanoseconds. The zero value is
// empty and ready. It is not safe for concurrent use: each goroutine keeps
// its own and they are merged at the end.
type hist struct {
	counts   []uint64 // grown on demand to the highest bucket seen
	n        uint64
	min, max int64
	sum      float64
}

func bucketOf(v int64) int {
	if v < 1<<subBits {
		return int(v)
	}
	s := bits.Len64(uint64(v)) - subBits - 1
	mant := v >> s // in [2^subBits, 2^(subBits+1))
	return 1<<subBits + s<<subBits + int(mant-1<<subBits)
}

// bucketRange is the inclusive range of values in bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < 1<<subBits {
		return int64(i), int64(i)
	}
	s := (i - 1<<subBits) >> subBits
	mant := int64(i-1<<subBits-s<<subBits) + 1<<subBits
	return mant << s, (mant+1)<<s - 1
}

func (h *hist) Record(d time.Duration) { h.RecordNs(int64(d)) }

func (h *hist) RecordNs(v int64) {
	if v < 0 {
		v = 0
	}
	if v > maxValue {
		v = maxValue
	}
	i := bucketOf(v)
	if i >= len(h.counts) {
		grown := make([]uint64, i+1+i/4)
		copy(grown, h.counts)
		h.counts = grown
	}
	h.counts[i]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

func (h *hist) Merge(o *hist) {
	if o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		grown := make([]uint64, len(o.counts))
		copy(grown, h.counts)
		h.counts = grown
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

func (h *hist) Count() uint64 { return h.n }

// Quantile is the nearest-rank q-quantile (0 < q <= 1): the smallest
// recorded value with at least ceil(q*n) values at or below it, to within
// the bucket precision. Empty: 0.
func (h *hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := nearestRank(q, h.n)
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			lo, hi := bucketRange(i)
			v := lo + (hi-lo)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

func (h *hist) Max() time.Duration { return time.Duration(h.max) }

func (h *hist) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// nearestRank is ceil(q*n) clamped to [1, n].
func nearestRank(q float64, n uint64) uint64 {
	r := uint64(math.Ceil(q * float64(n)))
	if r < 1 {
		r = 1
	}
	if r > n {
		r = n
	}
	return r
}

// quantileExact is the nearest-rank q-quantile of vs (sorted in place);
// the reference the histogram is tested against.
func quantileExact(vs []int64, q float64) int64 {
	if len(vs) == 0 {
		return 0
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs[nearestRank(q, uint64(len(vs)))-1]
}

// latency is a histogram summary for reports, in milliseconds.
type latency struct {
	N    uint64  `json:"n"`
	P50  float64 `json:"p50Ms"`
	P90  float64 `json:"p90Ms"`
	P99  float64 `json:"p99Ms"`
	P999 float64 `json:"p999Ms"`
	Max  float64 `json:"maxMs"`
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func (h *hist) Summary() latency {
	return latency{
		N:    h.n,
		P50:  ms(h.Quantile(0.50)),
		P90:  ms(h.Quantile(0.90)),
		P99:  ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)),
		Max:  ms(h.Max()),
	}
}

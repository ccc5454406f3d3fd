package pressure

import (
	"cmp"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestMemoryLimitOrder(t *testing.T) {
	cgroup := func() uint64 { return 300 }
	tests := []struct {
		name       string
		gomemlimit int64
		cfg        uint64
		cgroup     func() uint64
		want       uint64
	}{
		{"GOMEMLIMIT wins", 100, 200, cgroup, 100},
		{"config when GOMEMLIMIT unset", math.MaxInt64, 200, cgroup, 200},
		{"cgroup when both unset", math.MaxInt64, 0, cgroup, 300},
		{"nothing known", math.MaxInt64, 0, func() uint64 { return 0 }, 0},
		{"no cgroup reader", math.MaxInt64, 0, nil, 0},
	}
	for _, tt := range tests {
		if got := memoryLimit(tt.gomemlimit, tt.cfg, tt.cgroup); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestParseMemoryMax(t *testing.T) {
	tests := []struct {
		give   string
		want   uint64
		wantOK bool
	}{
		{"max\n", 0, false},
		{"536870912\n", 536870912, true},
		{"", 0, false},
		{"0\n", 0, false},
		{"garbage", 0, false},
		{"-1", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseMemoryMax([]byte(tt.give))
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseMemoryMax(%q) = %d, %v, want %d, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseCgroupV2Path(t *testing.T) {
	tests := []struct {
		give   string
		want   string
		wantOK bool
	}{
		{"0::/\n", "/", true},
		{"0::/system.slice/rtserver.service\n", "/system.slice/rtserver.service", true},
		{"12:memory:/docker/abc\n11:cpu:/docker/abc\n", "", false}, // cgroup v1
		{"1:name=systemd:/x\n0::/kubepods/pod1/c1", "/kubepods/pod1/c1", true},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := parseCgroupV2Path([]byte(tt.give))
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseCgroupV2Path(%q) = %q, %v, want %q, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseStatm(t *testing.T) {
	tests := []struct {
		give string
		want uint64
	}{
		{"1000 250 100 10 0 300 0\n", 250 * 4096},
		{"1000\n", 0},
		{"", 0},
		{"1 x 3", 0},
	}
	for _, tt := range tests {
		if got := parseStatm([]byte(tt.give), 4096); got != tt.want {
			t.Errorf("parseStatm(%q) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestHistP99(t *testing.T) {
	inf := math.Inf(1)
	buckets := []float64{math.Inf(-1), 0.001, 0.002, 0.004, inf}
	tests := []struct {
		name   string
		counts []uint64
		want   time.Duration
	}{
		{"empty", []uint64{0, 0, 0, 0}, 0},
		{"all in one bucket", []uint64{0, 100, 0, 0}, 2 * time.Millisecond},
		{"99 fast, 1 slow: p99 is fast", []uint64{0, 99, 0, 1}, 2 * time.Millisecond},
		{"98 fast, 2 slow: p99 is slow", []uint64{0, 98, 0, 2}, 4 * time.Millisecond},
		{"tail bucket unbounded: its lower bound", []uint64{0, 0, 0, 5}, 4 * time.Millisecond},
		{"only the -Inf bucket", []uint64{7, 0, 0, 0}, time.Millisecond},
	}
	for _, tt := range tests {
		if got := histP99(tt.counts, buckets); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
	if got := histP99([]uint64{1}, []float64{1}); got != 0 {
		t.Errorf("mismatched buckets: got %v", got)
	}
}

func TestSchedP99IsDelta(t *testing.T) {
	r := &runtimeReader{}
	buckets := []float64{0, 0.001, 0.002, math.Inf(1)}
	// Cumulative: 1000 slow samples in the past...
	if got := r.schedP99([]uint64{0, 0, 1000}, buckets); got != 2*time.Millisecond {
		t.Fatalf("first read p99 = %v", got)
	}
	// ...then 100 fast ones: the interval's p99 is fast, however many slow
	// ones the process saw before.
	if got := r.schedP99([]uint64{100, 0, 1000}, buckets); got != time.Millisecond {
		t.Fatalf("delta p99 = %v, want 1ms", got)
	}
	if got := r.schedP99([]uint64{100, 0, 1000}, buckets); got != 0 {
		t.Fatalf("no new samples: p99 = %v, want 0", got)
	}
}

// The top-N of a sample is the brute-force answer: every topic's count,
// sorted by messages descending then name, cut at N.
func TestTopNProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		topN := rapid.IntRange(1, 8).Draw(t, "topN")
		h := newHarness(t, Config{TopN: topN})
		counts := rapid.MapOf(rapid.StringMatching(`[a-f]{1,3}`), rapid.IntRange(1, 20)).Draw(t, "counts")
		var want []TopicRate
		for topic, n := range counts {
			for range n {
				h.mon.RecordAttempt(topic, "", 3)
			}
			want = append(want, TopicRate{topic, float64(n), float64(3 * n)})
		}
		slices.SortFunc(want, func(a, b TopicRate) int {
			if c := cmp.Compare(b.MessagesPerSec, a.MessagesPerSec); c != 0 {
				return c
			}
			return cmp.Compare(a.Topic, b.Topic)
		})
		want = want[:min(topN, len(want))]
		got := h.step(time.Second).TopTopics
		if !slices.Equal(got, want) {
			t.Fatalf("TopTopics = %v, want %v", got, want)
		}
	})
}

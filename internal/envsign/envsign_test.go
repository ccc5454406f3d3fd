package envsign

import (
	"testing"
	"time"
)

// A MAC made under one domain never verifies under another, nor under
// another key; the string and byte paths agree.
func TestDomainsAndKeysSeparate(t *testing.T) {
	s, other := New([]byte("fleet secret")), New([]byte("other secret"))
	msg := []byte(`{"v":1,"instanceId":"a","ts":1}`)
	for _, d := range []Domain{BusMessage, BusControl, RateSlice, RateView} {
		mac := string(s.AppendMAC(nil, d, msg))
		if !Equal(s.MAC(d, string(msg)), mac) {
			t.Errorf("%s: MAC and AppendMAC disagree", d)
		}
		if Equal(other.MAC(d, string(msg)), mac) {
			t.Errorf("%s: another key verifies", d)
		}
		for _, d2 := range []Domain{BusMessage, BusControl, RateSlice, RateView} {
			if d2 != d && Equal(s.MAC(d2, string(msg)), mac) {
				t.Errorf("a %s MAC verifies as %s", d, d2)
			}
		}
	}
	if New(nil) != nil {
		t.Error("New(nil) is not nil: an empty key must mean unsigned")
	}
}

func TestFreshIsTheWindowBothWays(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, tt := range []struct {
		give time.Duration
		want bool
	}{
		{0, true}, {Window, true}, {-Window, true},
		{Window + time.Millisecond, false}, {-Window - time.Millisecond, false},
	} {
		if got := Fresh(now, now.Add(tt.give).UnixMilli()); got != tt.want {
			t.Errorf("stamp at now%+v: fresh %v, want %v", tt.give, got, tt.want)
		}
	}
}

// BenchmarkMAC is the cost of checking a received 2 KB payload; it
// allocates nothing once the pool is warm.
func BenchmarkMAC(b *testing.B) {
	s := New([]byte("fleet secret"))
	msg := string(make([]byte, 2000))
	b.ReportAllocs()
	for b.Loop() {
		s.MAC(BusMessage, msg)
	}
}

package main

import (
	"bytes"
	"strconv"
	"testing"
)

func TestPayload(t *testing.T) {
	for _, size := range []int{0, 10, 100, 1000} {
		b := payload(123456789, size)
		if size > 40 && len(b) != size {
			t.Errorf("size %d: payload is %d bytes", size, len(b))
		}
		var got []int64
		if n := scanTimestamps(b, func(ts int64) { got = append(got, ts) }); n != 1 || got[0] != 123456789 {
			t.Errorf("size %d: scan found %v", size, got)
		}
	}
}

// The publishers render into buffers they reuse: what they append is
// what payload and request return.
func TestAppendPayloadAndRequest(t *testing.T) {
	prefix := []byte(`{"topic":"t","data":`)
	for _, size := range []int{0, 50, 100, 1000} {
		b := appendPayload(append([]byte(nil), prefix...), 987654321, size)
		if want := append(append([]byte(nil), prefix...), payload(987654321, size)...); !bytes.Equal(b, want) {
			t.Errorf("size %d: appended %q, want %q", size, b, want)
		}
		r := appendRequest([]byte("xy"), 42, "publish", b)
		if want := append([]byte("xy"), request(42, "publish", b)...); !bytes.Equal(r, want) {
			t.Errorf("size %d: appended request %q, want %q", size, r, want)
		}
	}
}

func TestScanTimestamps(t *testing.T) {
	one := `{"jsonrpc":"2.0","method":"message","params":{"topic":"a","data":` + string(payload(5, 50)) + `}}`
	two := `{"jsonrpc":"2.0","method":"message","params":{"topic":"a","data":` + string(payload(17, 50)) + `}}`
	tests := []struct {
		give string
		want []int64
	}{
		{one, []int64{5}},
		{"[" + one + "," + two + "]", []int64{5, 17}},
		{`{"id":3,"result":{}}`, nil},
		{`{"rtbts":}`, nil},
		{`"rtbts":"rtbts":42`, []int64{42}},
		{`rtbts":5,x"rtbts":6`, []int64{6}}, // the key's tail alone is not the key
	}
	for _, tt := range tests {
		var got []int64
		n := scanTimestamps([]byte(tt.give), func(ts int64) { got = append(got, ts) })
		if n != len(tt.want) || len(got) != len(tt.want) {
			t.Errorf("scan %q = %v, want %v", tt.give, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("scan %q = %v, want %v", tt.give, got, tt.want)
			}
		}
	}
}

// Server frames are untrusted bytes: the scanner must not panic, and it
// reports exactly the markers followed by a digit.
func FuzzScanTimestamps(f *testing.F) {
	f.Add([]byte(`[{"params":{"data":{"rtbts":12,"pad":"x"}}},{"params":{"data":{"rtbts":7}}}]`))
	f.Add([]byte(`"rtbts":`))
	f.Add([]byte(`"rtbts":99999999999999999999999`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := scanTimestamps(b, func(int64) {})
		want := 0
		for rest := b; ; {
			i := bytes.Index(rest, []byte(tsKey))
			if i < 0 {
				break
			}
			rest = rest[i+len(tsKey):]
			if len(rest) > 0 && rest[0] >= '0' && rest[0] <= '9' {
				want++
			}
		}
		if n != want {
			t.Fatalf("scan %q found %d, want %d", strconv.Quote(string(b)), n, want)
		}
	})
}

func TestTopicOf(t *testing.T) {
	tests := []struct {
		own     bool
		j       int
		id      uint64
		want    int
		comment string
	}{
		{false, 0, 0, 0, "round-robin starts at the publisher's own topic"},
		{false, 1, 0, 1, ""},
		{false, 1, 2, 0, "and wraps"},
		{true, 1, 0, 1, "own topic"},
		{true, 1, 7, 1, "always"},
		{true, 4, 7, 1, "publisher j mod T"},
	}
	for _, tt := range tests {
		if got := topicOf(fanoutConfig{T: 3, OwnTopics: tt.own}, tt.j, tt.id); got != tt.want {
			t.Errorf("topicOf(own %v, j %d, id %d) = %d, want %d (%s)", tt.own, tt.j, tt.id, got, tt.want, tt.comment)
		}
	}
}

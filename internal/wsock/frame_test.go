package wsock

import (
	"bytes"
	"testing"
)

// FrameEnd finds the end of the frame a byte belongs to, over whole
// frames of every header size, masked or not.
func TestFrameEnd(t *testing.T) {
	var b []byte
	var ends []int
	for _, n := range []int{0, 5, 125, 126, 65535, 65536} {
		b = append(AppendTextHeader(b, n), bytes.Repeat([]byte{'x'}, n)...)
		ends = append(ends, len(b))
	}
	masked := []byte{PongHead, 0x80 | 3, 1, 2, 3, 4, 'a', 'b', 'c'}
	b = append(b, masked...)
	ends = append(ends, len(b))
	start := 0
	for _, end := range ends {
		for _, n := range []int{start + 1, (start + end + 1) / 2, end} {
			if got := FrameEnd(b, n); got != end {
				t.Fatalf("FrameEnd(b, %d) = %d, want %d", n, got, end)
			}
		}
		start = end
	}
	if got := FrameEnd(b, 0); got != 0 {
		t.Fatalf("FrameEnd(b, 0) = %d, want 0", got)
	}
	if got := FrameEnd(b[:20], 10); got != 20 {
		t.Fatalf("FrameEnd of a cut frame = %d, want the end of b", got)
	}
}

// Whatever bytes, FrameEnd stays within b and past n.
func FuzzFrameEnd(f *testing.F) {
	f.Add([]byte{TextHead, 126, 0, 1}, 2)
	f.Add(CloseFrame(1001, "x"), 1)
	f.Add([]byte("0\xff\xeb0000000"), 7) // a 64-bit length with a mask key, cut short
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > len(b) {
			return
		}
		if e := FrameEnd(b, n); e < n || e > len(b) {
			t.Fatalf("FrameEnd(%x, %d) = %d", b, n, e)
		}
	})
}

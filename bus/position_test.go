package bus

import "testing"

func TestSplitPosition(t *testing.T) {
	epoch, off, rest, ok := splitPosition("\x04ab12 42 \x01env")
	if !ok || epoch != "ab12" || off != 42 || rest != "\x01env" {
		t.Fatalf("got %q %d %q %v", epoch, off, rest, ok)
	}
	for _, give := range []string{"", "\x04", "\x04 1 x", "\x04e 0 x", "\x04e x x", "\x04e 1", "\x01e 1 x",
		"\x04e 99999999999999999999 x", "\x04" + string(make([]byte, 40)) + " 1 x"} {
		if _, _, _, ok := splitPosition(give); ok {
			t.Errorf("splitPosition(%q) accepted", give)
		}
	}
}

func FuzzSplitPosition(f *testing.F) {
	f.Add("\x04ab12 42 \x01env")
	f.Add("\x04e 1 ")
	f.Fuzz(func(t *testing.T, p string) {
		epoch, off, rest, ok := splitPosition(p)
		if !ok {
			return
		}
		if off == 0 || epoch == "" || len(epoch) > MaxEpochLen || len(rest) >= len(p) {
			t.Fatalf("accepted %q as %q %d %q", p, epoch, off, rest)
		}
	})
}

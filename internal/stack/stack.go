package stack

// Grow makes the calling goroutine's stack at least 8 KiB, in one step.
func Grow() { _ = frame(0) }

// frame needs a 5 KiB frame: calling it grows a 2 KiB stack to 8 KiB
// at once. The index keeps the array from being optimised away.
//
//go:noinline
func frame(i int) byte {
	var b [5 << 10]byte
	return b[i]
}

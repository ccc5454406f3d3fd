package stack

import (
	"testing"
	"unsafe"
)

// After Grow a goroutine can go as deep as Grow did without its stack
// moving (a move changes where its locals are); without Grow the same
// call moves a new goroutine's stack.
func TestGrowGrowsOnce(t *testing.T) {
	moved := func(grow bool) bool {
		done := make(chan bool)
		go func() {
			if grow {
				Grow()
			}
			var x byte
			before := uintptr(unsafe.Pointer(&x))
			_ = frame(1)
			done <- uintptr(unsafe.Pointer(&x)) != before
		}()
		return <-done
	}
	if !moved(false) {
		t.Fatal("a new goroutine's stack did not move for a 5 KiB frame: the test shows nothing")
	}
	if moved(true) {
		t.Fatal("the stack moved after Grow")
	}
}

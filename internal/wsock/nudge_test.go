package wsock

import (
	"testing"
	"unsafe"
)

// After GrowStack a goroutine can go as deep as Grow did without its stack
// moving (a move changes where its locals are); without GrowStack the same
// call moves a new goroutine's stack.
func TestGrowStackGrowsOnce(t *testing.T) {
	moved := func(grow bool) bool {
		done := make(chan bool)
		go func() {
			if grow {
				GrowStack()
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
		t.Fatal("the stack moved after GrowStack")
	}
}

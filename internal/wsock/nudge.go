package wsock

import "runtime"

// GrowStack makes the calling goroutine's stack at least 8 KiB, in one
// step, ahead of deep work.
//
// A goroutine starts with a 2 KiB stack, and each time a call goes deeper
// than the stack allows, the runtime copies the whole stack into one twice
// the size and walks every frame to fix pointers. For a short piece of
// deep work (an upgrade's accept, a close handshake) that repeated copying
// costs a tenth of the work; growing once, while the stack is still
// shallow, costs little. Connections keep their small stacks otherwise:
// only goroutines about to do such work, or to end, call GrowStack.
func GrowStack() { _ = frame(0) }

// frame needs a 5 KiB frame: calling it grows a 2 KiB stack to 8 KiB
// at once. The index keeps the array from being optimised away.
//
//go:noinline
func frame(i int) byte {
	var b [5 << 10]byte
	return b[i]
}

// Yield puts the calling goroutine behind the others that are ready to
// run: a newcomer's work (a young connection's first input, a shed at the
// door) then runs after that of connections already established, not
// ahead of it. runtime.Gosched moves it to the back of the global run
// queue, behind goroutines the poller readied into the local ones.
func Yield() { runtime.Gosched() }

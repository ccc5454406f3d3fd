// Package stack grows a goroutine's stack ahead of deep work.
//
// A goroutine starts with a 2 KiB stack, and each time a call goes deeper
// than the stack allows, the runtime copies the whole stack into one twice
// the size and walks every frame to fix pointers. For a short piece of
// deep work (an upgrade's accept, a close handshake) that repeated copying
// costs a tenth of the work; growing once, while the stack is still
// shallow, costs little. Connections keep their small stacks otherwise:
// only goroutines about to do such work, or to end, call Grow.
package stack

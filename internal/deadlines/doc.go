// Package deadlines runs many per-item deadlines on one timer: a min-heap
// of (when, item) under one mutex, and a single time.AfterFunc set for the
// earliest. It exists so that a server holding tens of thousands of idle
// connections does not keep a runtime timer (and its closure) alive for
// each connection's keepalive ping and token expiry.
//
// It owns the ordering and the firing; what a deadline means belongs to
// the caller, which keeps each item's place in the heap in a Handle inside
// the item, so the heap needs no map and an item costs it one entry.
//
// Invariants: a scheduled deadline fires exactly once, never before its
// time (rounded up to the heap's resolution), unless it is cancelled or
// moved first; Cancel reporting true means that schedule will not fire.
// fire runs on the timer's goroutine with no lock of the heap held, so it
// may schedule or cancel any item, itself included; it must not block, as
// every other due item waits for it. Lock order: a caller's own locks
// before the heap's, never the reverse (the heap calls out only unlocked).
package deadlines

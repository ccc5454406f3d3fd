package deadlines

import (
	"sync"
	"time"
)

// Handle is an item's place in a Heap. Each item that can be scheduled
// holds one (its zero value: not scheduled) and gives the heap a pointer
// to it; the heap alone reads and writes it, under its lock.
type Handle struct {
	i int32 // index in the heap + 1; 0: not scheduled
}

// Scheduled reports whether the item has a deadline pending. It reads
// without the heap's lock: use it only where the heap is quiet (tests).
func (h *Handle) Scheduled() bool { return h.i != 0 }

// Heap holds the pending deadlines of items of type T.
type Heap[T any] struct {
	handle     func(T) *Handle
	fire       func(T)
	resolution int64     // nanoseconds deadlines are rounded up to; 0: exact
	base       time.Time // deadlines are nanoseconds since base (monotonic)

	mu      sync.Mutex
	entries []entry[T]
	timer   *time.Timer
	armed   bool // timer is set, to fire at timerAt
	timerAt int64
	stopped bool
	due     []T // fired in the last round: reused by the next
}

type entry[T any] struct {
	at   int64
	item T
}

// New returns an empty heap. handle gives an item's Handle; fire runs
// when an item's deadline comes (see the package doc for what it may do).
// With resolution > 0 deadlines are rounded up to a multiple of it, so
// items due close together fire in one timer round: the timer then fires
// at most once per resolution however many items there are.
func New[T any](resolution time.Duration, handle func(T) *Handle, fire func(T)) *Heap[T] {
	return &Heap[T]{handle: handle, fire: fire, resolution: int64(max(resolution, 0)), base: time.Now()}
}

// After schedules x to fire d from now, replacing the deadline it had, if
// any. After Stop it does nothing.
func (h *Heap[T]) After(x T, d time.Duration) {
	at := int64(time.Since(h.base) + max(d, 0))
	if r := h.resolution; r > 0 {
		at = (at + r - 1) / r * r
	}
	hd := h.handle(x)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if hd.i != 0 {
		i := int(hd.i - 1)
		old := h.entries[i].at
		h.entries[i].at = at
		if at < old {
			h.up(i)
		} else {
			h.down(i)
		}
	} else {
		h.entries = append(h.entries, entry[T]{at: at, item: x})
		i := len(h.entries) - 1
		hd.i = int32(i + 1)
		h.up(i)
	}
	h.armLocked()
}

// Cancel removes x's deadline. It reports whether there was one: false
// means x was not scheduled, or its deadline has come and fire runs (or
// ran) for it.
func (h *Heap[T]) Cancel(x T) bool {
	hd := h.handle(x)
	h.mu.Lock()
	defer h.mu.Unlock()
	if hd.i == 0 {
		return false
	}
	h.removeLocked(int(hd.i - 1))
	return true
}

// Len is how many deadlines are pending.
func (h *Heap[T]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.entries)
}

// Stop cancels every pending deadline and the timer; later calls to After
// do nothing. A round already firing finishes.
func (h *Heap[T]) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for i := range h.entries {
		h.handle(h.entries[i].item).i = 0
	}
	h.entries = nil
	if h.timer != nil {
		h.timer.Stop()
	}
	h.armed = false
}

// armLocked sets the timer for the earliest deadline when it is not set
// already for that time or earlier. A timer set too early (the earliest
// was cancelled or moved later) fires, finds nothing due and re-arms.
func (h *Heap[T]) armLocked() {
	if len(h.entries) == 0 {
		return
	}
	at := h.entries[0].at
	if h.armed && h.timerAt <= at {
		return
	}
	d := time.Duration(at) - time.Since(h.base)
	if h.timer == nil {
		h.timer = time.AfterFunc(d, h.run)
	} else {
		h.timer.Reset(d)
	}
	h.armed, h.timerAt = true, at
}

// run is the timer's callback: it takes every item whose deadline has
// come, re-arms for the next, and fires them, unlocked, in deadline order
// (items rounded to the same time in any order).
func (h *Heap[T]) run() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	now := int64(time.Since(h.base))
	due := h.due[:0]
	h.due = nil // a round running meanwhile (a Reset timer) makes its own
	for len(h.entries) > 0 && h.entries[0].at <= now {
		due = append(due, h.entries[0].item)
		h.removeLocked(0)
	}
	h.armed = false
	h.armLocked()
	h.mu.Unlock()

	for i, x := range due {
		h.fire(x)
		var zero T
		due[i] = zero // hold no item past its firing
	}
	h.mu.Lock()
	if cap(due) <= 1024 { // a burst's slice is not kept for ever
		h.due = due[:0]
	}
	h.mu.Unlock()
}

// removeLocked takes out entry i.
func (h *Heap[T]) removeLocked(i int) {
	h.handle(h.entries[i].item).i = 0
	last := len(h.entries) - 1
	if i != last {
		h.entries[i] = h.entries[last]
		h.handle(h.entries[i].item).i = int32(i + 1)
	}
	var zero entry[T]
	h.entries[last] = zero
	h.entries = h.entries[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
	if len(h.entries) == 0 && cap(h.entries) > 64 {
		h.entries = nil // a departed crowd's array goes with it
	}
}

func (h *Heap[T]) swap(i, j int) {
	h.entries[i], h.entries[j] = h.entries[j], h.entries[i]
	h.handle(h.entries[i].item).i = int32(i + 1)
	h.handle(h.entries[j].item).i = int32(j + 1)
}

func (h *Heap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.entries[p].at <= h.entries[i].at {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *Heap[T]) down(i int) {
	n := len(h.entries)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.entries[r].at < h.entries[l].at {
			m = r
		}
		if h.entries[i].at <= h.entries[m].at {
			return
		}
		h.swap(i, m)
		i = m
	}
}

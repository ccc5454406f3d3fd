// Package bufpool pools the bytes.Buffers that frames and request bodies
// are built in, so steady traffic allocates none.
package bufpool

import (
	"bytes"
	"sync"
)

// maxKept is the largest buffer returned to the pool: one huge message
// must not pin its memory forever.
const maxKept = 256 << 10

var pool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Get returns an empty buffer.
func Get() *bytes.Buffer { return pool.Get().(*bytes.Buffer) }

// Put returns b to the pool unless it grew past maxKept. b must not be
// used afterwards.
func Put(b *bytes.Buffer) {
	if b.Cap() > maxKept {
		return
	}
	b.Reset()
	pool.Put(b)
}

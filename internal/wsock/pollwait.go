package wsock

import (
	"os"
	"runtime"
	"sync"
	"syscall"
)

// Waiting for the scheduler to poll the network.
//
// Go's scheduler looks for network input only when a processor runs out
// of goroutines to run (and, failing that, from its monitor thread at most
// every 10 ms). A server whose processors never run dry, because a storm
// of newcomers keeps goroutines runnable, finds the input of its
// established connections late: runtime.Gosched moves a goroutine to the
// back of the run queue, but the queue never empties and the poll never
// comes. AwaitPoll takes the newcomer off the run queue until a poll has
// happened instead: the processor runs dry as soon as the work already
// runnable is done, polls, and finds the established connections' input
// together with the newcomers' release.
//
// The poll is observed with a pipe that the runtime's poller watches: one
// byte written, and a wait for its readiness, which only a poll reports.
// One caller at a time waits at the pipe; the others wait for it
// (pollBarrier), so one poll releases everyone who came meanwhile and a
// crowd of callers costs one byte per poll, never a wait each.

// AwaitPoll returns once the Go scheduler has polled the network since
// the call (a caller that comes while another waits at the pipe goes
// when that one does). Where the
// pipe cannot be watched (other systems, Portable mode, no descriptors
// left) it is runtime.Gosched.
func AwaitPoll() {
	p := pollPipe()
	if p == nil {
		runtime.Gosched()
		return
	}
	b := &barrier
	b.mu.Lock()
	if b.polling {
		gen := b.gen
		for b.gen == gen {
			b.cond.Wait()
		}
		b.mu.Unlock()
		return
	}
	b.polling = true
	b.mu.Unlock()
	p.await()
	b.mu.Lock()
	b.gen++
	b.polling = false
	b.mu.Unlock()
	b.cond.Broadcast()
}

// pollBarrier lets the callers of AwaitPoll that came while one of them
// waits at the pipe go when it does. A sync.Cond, not a channel: callers
// may sit in different synctest bubbles, and a channel belongs to one.
type pollBarrier struct {
	mu      sync.Mutex
	cond    sync.Cond
	gen     uint64 // polls seen
	polling bool   // a caller waits at the pipe
}

var barrier pollBarrier

func init() { barrier.cond.L = &barrier.mu }

type pipe struct {
	rc syscall.RawConn // read end, watched by the runtime poller
	w  *os.File
}

var (
	pipeOnce sync.Once
	thePipe  *pipe
)

// await writes a byte into the pipe, waits until the poller reports it
// readable, and takes the byte back. One caller at a time.
func (p *pipe) await() {
	one := [1]byte{1}
	waited := false
	err := p.rc.Read(func(fd uintptr) bool {
		if !waited {
			// Read has cleared the readiness it knew of: the wait below
			// ends with the poll that reports this byte.
			waited = true
			if _, err := p.w.Write(one[:]); err != nil {
				return true
			}
			return false
		}
		var b [16]byte
		n, _ := syscall.Read(int(fd), b[:])
		return n > 0
	})
	if err != nil {
		runtime.Gosched()
	}
}

// pollPipe is the process's pipe for AwaitPoll; nil where there is none.
func pollPipe() *pipe {
	if !native || portable.Load() {
		return nil
	}
	pipeOnce.Do(func() {
		r, w, err := os.Pipe()
		if err != nil {
			return
		}
		rc, err := r.SyscallConn()
		if err != nil {
			r.Close()
			w.Close()
			return
		}
		thePipe = &pipe{rc: rc, w: w}
	})
	return thePipe
}

package wsock

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rtserver/rtserver/internal/leakcheck"
)

// Callers of AwaitPoll all come through, even while the
// only processor never runs dry (the runtime's monitor then polls), and
// the established connection's input that arrived meanwhile is read.
func TestAwaitPollLetsEveryoneThroughOnABusyProcessor(t *testing.T) {
	leakcheck.Check(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	server, client := pair(t)

	var stop atomic.Bool
	var spinners sync.WaitGroup
	for range 4 { // keep the run queue from emptying
		spinners.Add(1)
		go func() {
			defer spinners.Done()
			for !stop.Load() {
				runtime.Gosched()
			}
		}()
	}
	read := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := server.Read(b[:])
		read <- err
	}()

	var callers sync.WaitGroup
	for range 20 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			AwaitPoll()
		}()
	}
	if _, err := client.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	callers.Wait()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	spinners.Wait()
}

// Where the pipe is not watched (Portable mode, other systems) AwaitPoll
// is a plain yield.
func TestAwaitPollPortable(t *testing.T) {
	defer Portable(true)()
	if pollPipe() != nil {
		t.Fatal("a poll pipe in portable mode")
	}
	AwaitPoll()
}

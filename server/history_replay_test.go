package server

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rtserver/rtserver/history"
	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/wstest"
)

// pageStore holds messages 1..last of every topic and hands each read of
// messages out as a fresh page (as the Redis store does), telling the
// test when the garbage collector has taken a page back. Before it
// answers a read, it makes sure the page it answered before is gone.
type pageStore struct {
	last uint64

	mu       sync.Mutex
	released []chan struct{} // per page read, closed when it is collected
	held     []int           // pages still reachable when the next was read
}

func (p *pageStore) Publish(context.Context, history.Publish) (history.Position, bool, error) {
	return history.Position{}, false, history.ErrUnavailable
}

func (p *pageStore) Read(_ context.Context, _ string, after uint64, limit int, _ history.Policy) (history.Position, []history.Message, error) {
	pos := history.Position{Epoch: "e", Offset: p.last}
	if limit == 0 || after >= p.last {
		return pos, nil, nil
	}
	p.mu.Lock()
	k := len(p.released)
	p.mu.Unlock()
	if k > 0 && !p.collected(k-1) {
		p.mu.Lock()
		p.held = append(p.held, k-1)
		p.mu.Unlock()
	}
	page := make([]history.Message, 0, limit)
	for o := after + 1; o <= p.last && len(page) < limit; o++ {
		page = append(page, history.Message{Offset: o, Data: fmt.Appendf(nil, "%d", o)})
	}
	done := make(chan struct{})
	runtime.AddCleanup(&page[0], func(ch chan struct{}) { close(ch) }, done)
	p.mu.Lock()
	p.released = append(p.released, done)
	p.mu.Unlock()
	return pos, page, nil
}

// collected runs the garbage collector until page k is taken back, and
// reports false if it still is not after many cycles (something holds it).
func (p *pageStore) collected(k int) bool {
	p.mu.Lock()
	done := p.released[k]
	p.mu.Unlock()
	for range 50 {
		runtime.GC()
		select {
		case <-done:
			return true
		default:
		}
		runtime.Gosched() // cleanups run on a goroutine of their own
	}
	return false
}

// A recovery holds no page of its replay once the page is queued: not
// its first page (read by the subscribe, while the replay runs on), and
// not the previous page while it reads the next. In a storm of
// recoveries each waiting on the store, a page held each is most of the
// server's memory.
func TestHistoryReplayHoldsNoPageItQueued(t *testing.T) {
	leakcheck.Check(t)
	store := &pageStore{last: 3*replayPage + 7}
	_, url := startServer(t, historyOptions(store, history.Policy{Size: 1000, TTL: time.Minute}))
	c := wstest.Dial(t, url)
	r := resultPos(t, c.Call("subscribe", `{"topic":"h:pages","recover":true,"since":{"epoch":"e","offset":0}}`))
	if r.Recovered == nil || !*r.Recovered || r.Offset != store.last {
		t.Fatalf("recover: %+v", r)
	}
	offs, _ := nextMessages(t, c, "h:pages", int(store.last))
	for i, o := range offs {
		if o != uint64(i+1) {
			t.Fatalf("replayed %d at %d", o, i)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.released) != 4 {
		t.Fatalf("%d pages read, want 4", len(store.released))
	}
	if len(store.held) > 0 {
		t.Fatalf("pages %v still held while the next was read", store.held)
	}
}

package e2e

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
	"github.com/rtserver/rtserver/protocol"
)

// Hostile batch frames, each 64,001 bytes or just under the read limit.
var (
	// oversizeBatch is 32,000 tiny elements: the old server answered each
	// with its own -32600, one 2.56 MB answer (40x).
	oversizeBatch = "[" + strings.Repeat("0,", 31999) + "0]"
	// echoBatch is 100 invalid requests, each with a 600-byte id the
	// answer must echo: the largest answer a frame of errors can ask for.
	echoBatch = "[" + strings.TrimSuffix(strings.Repeat(`{"id":"`+strings.Repeat("i", 600)+`"},`, protocol.MaxBatch), ",") + "]"
)

// maxAnswer is the bound docs/protocol.md gives for the answer to one
// frame of built-ins and errors: the frame's size plus 512 bytes per
// request.
func maxAnswer(frame string) int { return len(frame) + 512*protocol.MaxBatch }

// 200 clients that never read their answers each send hostile batch
// frames. Answers are bounded per frame, invalid elements count toward
// the 1008 one by one, and every answer waits in the client's bounded
// send queue: the server's heap grows by less than 64 MiB. (The old
// server went from 2 MB to 605 MB with one oversize frame per client.)
func TestHostileBatchesDoNotAmplify(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, "handshake: {perTickBudget: 0}\n")

	heapBefore := p.metric("go_memstats_heap_sys_bytes")
	const clients = 200
	conns := make([]*wstest.Conn, clients)
	for i := range conns {
		conns[i] = wstest.Dial(t, p.WS())
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An oversize frame, then one of 100 invalid requests, which
			// passes the repeated-invalid limit: 1008.
			for _, f := range []string{oversizeBatch, echoBatch} {
				if !c.TrySend(f) {
					failed.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d clients could not send their frames", n)
	}
	// HeapSys is the largest the heap has been: reading it after the fact
	// catches any peak, and a server that amplifies fails on its heap at
	// the first scrape rather than on the wait.
	const budget = 64 << 20
	var growth float64
	testkit.Eventually(t, 3*time.Minute, "every hostile client closed with 1008", func() bool {
		m, ok := p.tryMetrics() // a busy server (-race, a loaded machine) may be slow to answer
		if !ok {
			return false
		}
		if growth = m["go_memstats_heap_sys_bytes"] - heapBefore; growth >= budget {
			t.Fatalf("heap grew by %.0f MiB, at least the %d MiB budget", growth/(1<<20), budget>>20)
		}
		return m[`protocol_errors_total{code="1008"}`] >= clients
	})
	t.Logf("heap grew by %.1f MiB", growth/(1<<20))

	// A client that reads: each answer is one frame within the bound.
	reader := wstest.Dial(t, p.WS())
	reader.Send(oversizeBatch)
	var f wstest.Frame
	if b := reader.RecvRaw(); len(b) > 512 || json.Unmarshal(b, &f) != nil || f.Error == nil || f.Error.Code != protocol.CodeInvalidRequest {
		t.Fatalf("oversize batch answered with %d bytes, want one -32600 object", len(b))
	}
	reader.Send(echoBatch)
	b := reader.RecvRaw()
	var answers []json.RawMessage
	if err := json.Unmarshal(b, &answers); err != nil || len(answers) != protocol.MaxBatch {
		t.Fatalf("100 invalid requests: %d answers (%v)", len(answers), err)
	}
	if len(b) > maxAnswer(echoBatch) {
		t.Fatalf("answer of %d bytes to a %d-byte frame, over the documented %d", len(b), len(echoBatch), maxAnswer(echoBatch))
	}

}

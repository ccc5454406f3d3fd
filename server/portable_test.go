package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

// With limits.portableSockets on (as on a system without the descriptor
// calls) connections have no descriptor: data frames go through net.Conn from a writer
// goroutine, nothing is held for a flush, and the read loop waits inside
// the WebSocket library. The same behaviour is asked of that path.
func TestWithoutDescriptorCalls(t *testing.T) {
	withPortable(t)
	for name, test := range map[string]func(*testing.T){
		"every message size round-trips": TestEveryMessageSizeRoundTrips,
		"large and queued messages":      TestLargeAndQueuedMessagesArriveIntact,
		"a stalled reader gets 1013":     TestStalledReaderGets1013OnceItReadsAgain,
		"shutdown says 1001":             TestShutdownSays1001AndDoesNotWaitForAStalledClient,
		"drain notifies, then 1012":      TestDrainNotifiesThenCloses1012,
		"unread replies close with 1013": TestUnreadRepliesClose1013,
	} {
		t.Run(name, test)
	}
}

// With limits.portableSockets on there is no poller: an idle connection
// keeps its read goroutine, waiting inside the WebSocket library.
func TestWithoutDescriptorCallsIdleKeepsAGoroutine(t *testing.T) {
	withPortable(t)
	leakcheck.Check(t)
	s, url := startServer(t, Deps{})
	const n = 10
	for range n {
		c := wstest.Dial(t, url)
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"idle"}`))
	}
	testkit.Eventually(t, 10*time.Second, func() string {
		return fmt.Sprintf("%d server goroutines for %d idle connections, want one each", serverGoroutines(), n)
	}, func() bool { return serverGoroutines() == n })
	if p, k := parkedConns(s), s.poller.known(); p != 0 || k != 0 {
		t.Fatalf("%d connections parked, %d known to a poller, want none", p, k)
	}
}

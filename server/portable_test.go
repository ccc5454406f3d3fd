package server

import (
	"testing"

	"github.com/rtserver/rtserver/internal/wsock"
)

// On a system without the descriptor calls (wsock.Portable) connections
// have no descriptor: data frames go through net.Conn from a writer
// goroutine, nothing is held for a flush, and the read loop waits inside
// the WebSocket library. The same behaviour is asked of that path.
func TestWithoutDescriptorCalls(t *testing.T) {
	t.Cleanup(wsock.Portable(true))
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

package handshake

import (
	"testing"

	"github.com/rtserver/rtserver/internal/wsock"
)

// On a system without the descriptor calls (wsock.Portable) the door
// cannot read a request head without waiting, so a goroutine reads it,
// and a queued upgrade's client is never seen to leave. Shedding, serving
// and upgrading must behave the same.
func TestDoorWithoutDescriptorCalls(t *testing.T) {
	t.Cleanup(wsock.Portable(true))
	for name, test := range map[string]func(*testing.T){
		"sheds over the cap, serves health": TestDoorShedsOverCapAndServesHealth,
		"a silent client blocks no one":     TestDoorSilentClientDoesNotBlockOthers,
		"hands on after the peek deadline":  TestDoorHandsOnAfterPeekDeadlineWithBytesIntact,
		"split requests":                    TestDoorSplitRequests,
		"upgrades without net/http":         TestServingDoorUpgradesWithoutNetHTTP,
		"keeps early bytes":                 TestServingDoorKeepsEarlyBytes,
		"a refusal is a complete response":  TestServingDoorRefusalIsACompleteResponse,
	} {
		t.Run(name, test)
	}
}

package metrics_test

import (
	"slices"
	"testing"

	"github.com/rtserver/rtserver/bus"
	"github.com/rtserver/rtserver/metrics"
)

// TestBusDropReasonsAreTheBusOnes: the labels pre-created at zero are
// exactly those the bus counts drops with, so no reason appears only
// after its first drop and no pre-created series is one nothing counts.
func TestBusDropReasonsAreTheBusOnes(t *testing.T) {
	counted := []string{bus.DropDegraded, bus.DropQueueFull, bus.DropSlowRecv, bus.DropOversize, bus.DropMalformed, bus.DropBadTopic, bus.DropNoticeOverflow}
	if !slices.Equal(counted, metrics.BusDropReasons) {
		t.Errorf("metrics.BusDropReasons = %q, the bus counts %q", metrics.BusDropReasons, counted)
	}
}

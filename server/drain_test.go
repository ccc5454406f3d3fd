package server

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/metrics"
)

// TestDrainCutsOffASilentClientWhenTheDrainEnds: a client that completed
// its upgrade and then never reads nor answers gets its draining notice
// and 1012 (its socket takes them), and the wait for its answer is bound
// by what is left of drain.duration, not the close handshake's own bound
// (5 s): the drain ends, and its socket is closed.
func TestDrainCutsOffASilentClientWhenTheDrainEnds(t *testing.T) {
	for _, portable := range []bool{false, true} {
		t.Run(map[bool]string{false: "fast", true: "portable"}[portable], func(t *testing.T) {
			leakcheck.Check(t)
			if portable {
				withPortable(t)
			}
			s, url := startServer(t, Deps{Metrics: metrics.NewDiscard()})
			waits := make(chan time.Duration, 1)
			s.closeWaitHook = func(d time.Duration) { waits <- d }
			c := rawDial(t, url)
			testkit.Eventually(t, time.Minute, "the connection registered", func() bool { return len(s.snapshotConns()) == 1 })

			const d = 300 * time.Millisecond
			drained := make(chan struct{})
			go func() {
				s.Drain(context.Background(), d)
				close(drained)
			}()
			if w := <-waits; w > d {
				t.Errorf("the wait for the client's answer was bound by %v, over drain.duration %v", w, d)
			}
			<-drained
			// What its socket took: the draining notice, then 1012; then
			// the server's end of the socket is closed.
			var codes []uint16
			for {
				head, p, err := c.read()
				if err != nil {
					break
				}
				if head == 0x88 && len(p) >= 2 {
					codes = append(codes, binary.BigEndian.Uint16(p))
				}
			}
			if len(codes) != 1 || codes[0] != 1012 {
				t.Errorf("close frames %v, want one 1012", codes)
			}
		})
	}
}

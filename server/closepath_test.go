package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/testkit"
)

// A client that leaves with a close frame while its connection is parked
// (at once after the upgrade, after many pings that each wake it and
// park it again, with subscriptions to drop or without) gets the answer, then the
// end of the stream (a FIN: not a reset), and its connection ends: it is
// no longer counted, nor known to the poller. On the fast path the close
// of a connection without subscriptions is taken on the poller's
// goroutine (conn.Wake), any other by a read goroutine. Both ways an
// upgrade is made: by the door and wsock, and by net/http and the
// WebSocket library.
func TestParkedClientCloseIsAnsweredThenEnds(t *testing.T) {
	leakcheck.Check(t)
	t.Run("door", parkedClientCloseIsAnsweredThenEnds)
	t.Run("net/http", func(t *testing.T) {
		withNetHTTP(t)
		parkedClientCloseIsAnsweredThenEnds(t)
	})
}

func parkedClientCloseIsAnsweredThenEnds(t *testing.T) {
	for _, tc := range []struct {
		pings     int
		subscribe bool
	}{{0, false}, {50, false}, {1, true}, {50, true}} {
		t.Run(fmt.Sprintf("pings=%d,subscribed=%v", tc.pings, tc.subscribe), func(t *testing.T) {
			s, url := startServer(t, Deps{})
			c := rawDial(t, url)
			awaitParked := func() {
				if !portableRun {
					testkit.Eventually(t, 10*time.Second, "the connection parks", func() bool { return parkedConns(s) == 1 })
				}
			}
			if tc.subscribe {
				c.send(frame(0x81, []byte(`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"a"},"id":1}`), false))
				c.expectText(`"id":1`)
			}
			// A ping wakes the connection; once it is answered (only a
			// control frame came) the connection parks again at once.
			for i := range tc.pings {
				c.send(frame(0x89, []byte{byte(i)}, false))
				if head, p := c.next(); head != 0x8A || len(p) != 1 || p[0] != byte(i) {
					t.Fatalf("ping %d answered %#x % x", i, head, p)
				}
				awaitParked()
			}
			awaitParked()
			c.send(frame(0x88, binary.BigEndian.AppendUint16(nil, 4000), false)) // no reason
			head, p, err := c.read()
			if err != nil || head != 0x88 || len(p) != 2 || binary.BigEndian.Uint16(p) != 4000 {
				t.Fatalf("the server answered %#x % x, %v; want its close 4000", head, p, err)
			}
			if _, _, err := c.read(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the answer the client read %v; want the end", err)
			}
			testkit.Eventually(t, 10*time.Second, "the connection ends", func() bool {
				open, _ := s.Counts()
				return open == 0 && s.poller.known() == 0
			})
		})
	}
}
